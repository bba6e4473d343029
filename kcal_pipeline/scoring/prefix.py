"""Fast CLM scoring for candidate sets: shared prefixes are computed once (prefix-tree packing).

The statements "The capital of France is Paris." / "... is Lyon." / "... is Nice." share every
token before the object slot, and statements of one template share the words before the subject.
`score_clm_shared_prefix` puts all distinct token sequences into a prefix tree (trie) and packs the
trees into rows of about `ROW_TOKENS` tokens. One forward pass per batch of rows computes every trie
node once, with

* an attention mask that lets each node see exactly its ancestors (its own statement's earlier
  tokens, which the options of a candidate set share) — the KV-cache trick of "encode the prefix
  once, score the suffixes against it", for many prefixes and all their suffixes in one call;
* position ids equal to the node's depth, so each token sits where it sits in its own statement.

A node's logits predict each of its children, so log P(x_t | start, x_<t) is read at the parent of
x_t's node. The scores are those of `score_clm` (the plain path) up to float rounding (≤ 1e-4 on
fp32, enforced by tests/test_prefix_scoring.py).

Why packing rather than one prefix pass plus one suffix pass per group: on CPU, small matrices
waste most of the FLOPs; packed rows keep every matrix multiply large, need no cache copies, and
share more than the text before the object (the template's opening words too). Identical statements
are one trie path, so deduplication is free.

Rules that keep it exact:

* The full text is tokenized once and only that tokenization is used (byte-level BPE can merge
  across the slot boundary, so the tokens of "the text before the object" are not a prefix of the
  statement's tokens in general).
* The model must honour a custom 4D attention mask and explicit position ids. That is checked once
  per loaded model on a probe set, in the model's dtype, against a float32 reference
  (`packing_decision`, recorded in the model cache for later processes); a model that fails (e.g.
  one whose attention kernel ignores custom masks, or whose positions come from the padding mask) is
  scored with the plain path instead, with a warning. Calls are filled up to the model's token
  budget (budget.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.core.storage import write_text_atomic
from kcal_pipeline.scoring.batching import map_budgeted
from kcal_pipeline.scoring.budget import POSITIONS_PER_STATEMENT, TokenBudget, budget_for
from kcal_pipeline.scoring.clm import (
    MIN_ROWS,
    SCHEMA,
    Span,
    _frame,
    _token_logprobs,
    check_context_ends,
    encode_inputs,
    log_normaliser,
    roles_of,
)
from kcal_pipeline.scoring.loaded_model import loaded_through
from kcal_pipeline.scoring.precision import matmul_precision

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

log = logging.getLogger(__name__)

ROW_TOKENS = 256  # trie nodes per packed row: long enough to hold many candidate sets
PACKED = "packed"  # this path's name for its token budget (budget.budget_for)
PROBE_ATOL = 1e-4  # float32: packed and plain agree to this (GEMM rounding only)
PACKING_FACTOR = 1.5  # half precision: packed may be at most this much further from float32 than plain
PACKING_CHECK_VERSION = 1  # raise when _check_packing measures differently: recorded checks then lapse


@dataclass
class _Row:
    """One packed row: trie nodes in depth-first order, node 0 the start token."""

    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    members: list[tuple[int, list[int]]] = field(default_factory=list)  # (sequence, its node path)

    def add(self, seq: Sequence[int], lcp: int, path: list[int]) -> list[int]:
        """Append the nodes of seq beyond its first lcp tokens (shared with path); its node path."""
        path = path[:lcp]
        for tok in seq[lcp:]:
            parent = path[-1] if path else 0
            self.tokens.append(tok)
            self.parents.append(parent)
            self.depths.append(self.depths[parent] + 1)
            path.append(len(self.tokens) - 1)
        return path


def score_clm_shared_prefix(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    row_tokens: int = ROW_TOKENS,
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Same contract, schema and row order as `score_clm`; computes each shared prefix once.

    batch_size: a fixed budget of batch_size × 32 trie nodes per forward call (at least one row);
    None (the pipeline's way): the model's token budget (budget.py). progress(done, total) counts
    distinct token sequences scored. context_ends: as score_clm's. A context is an ordinary prefix
    here: the options (and templates) that share it share its trie nodes, computed once.
    """
    if not isinstance(row_tokens, int) or row_tokens < 2:
        raise ValueError(f"row_tokens must be an integer >= 2, got {row_tokens!r}")

    def score(useqs: list[tuple[int, ...]], batch_size: int | None) -> list[np.ndarray]:
        if packing_supported(loaded):
            return _score_packed(loaded, useqs, batch_size, row_tokens, progress)
        return _token_logprobs(loaded, [list(s) for s in useqs], batch_size, progress)

    return score_distinct(loaded, texts, subject_spans, object_spans, batch_size, context_ends, score)


def score_distinct(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None,
    context_ends: Sequence[int] | None,
    score: Callable[[list[tuple[int, ...]], int | None], list[np.ndarray]],
) -> pl.DataFrame:
    """The sharing scorers' frame (this path's and llama.cpp's): inputs checked and tokenized once,
    each distinct token sequence scored once by score(sequences, batch_size), in input order."""
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    texts, subject_spans, object_spans, batch_size, ids, offsets = enc
    ends = check_context_ends(context_ends, texts, subject_spans, object_spans)
    unique: dict[tuple[int, ...], int] = {}
    which = [unique.setdefault(tuple(seq), len(unique)) for seq in ids]
    out = score(list(unique), batch_size)
    return _frame([out[u] for u in which], roles_of(offsets, subject_spans, object_spans, ends))


def pack_rows(
    seqs: Sequence[Sequence[int]], start_token: int, row_tokens: int, max_members: int | None = None
) -> list[_Row]:
    """Sequences in lexicographic order, so each one's longest shared prefix within a row is the one
    it shares with its predecessor; a row is closed when the next sequence would overflow it (or,
    with max_members, when it holds that many sequences: llama.cpp's limit, native.py)."""
    rows: list[_Row] = []
    row, prev, path = None, (), []
    for u in sorted(range(len(seqs)), key=lambda i: tuple(seqs[i])):
        seq = seqs[u]
        lcp = _common_prefix(prev, seq) if row is not None else 0
        full = row is not None and (
            len(row.tokens) + len(seq) - lcp > row_tokens
            or (max_members is not None and len(row.members) >= max_members)
        )
        if row is None or (full and row.members):
            row = _Row(tokens=[start_token])
            rows.append(row)
            lcp = 0
        path = row.add(seq, lcp, path)
        row.members.append((u, list(path)))
        prev = seq
    return rows


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _score_packed(
    loaded: LoadedModel,
    seqs: list[tuple[int, ...]],
    batch_size: int | None,
    row_tokens: int,
    progress: Callable[[int, int], None] | None,
) -> list[np.ndarray]:
    rows = pack_rows(seqs, loaded.start_token_id, row_tokens)
    rows.sort(key=lambda r: len(r.tokens), reverse=True)  # similar widths share a call
    if batch_size is None:
        budget = budget_for(loaded, PACKED, row_width=max(row_tokens, len(rows[0].tokens)))
    else:
        origin = f"batch size {batch_size} × {POSITIONS_PER_STATEMENT}"
        budget = TokenBudget.fixed(batch_size * POSITIONS_PER_STATEMENT, origin)
    before = np.cumsum([0] + [len(r.members) for r in rows])  # sequences in the rows before row i
    nodes = lambda row: len(row.tokens)  # noqa: E731
    report = None if progress is None else (lambda done, _total: progress(int(before[done]), len(seqs)))
    scored = map_budgeted(rows, nodes, nodes, budget, lambda b: _forward_rows(loaded, b), report)
    out: list[np.ndarray] = [None] * len(seqs)  # type: ignore[list-item]
    for row, lps in zip(rows, scored, strict=True):
        for (u, _), lp in zip(row.members, lps, strict=True):
            out[u] = lp
    return out


def _forward_rows(loaded: LoadedModel, rows: list[_Row]) -> list[list[np.ndarray]]:
    """One forward pass over packed rows; per row, per member, log P(x_t | start, x_<t)."""
    dtype = next(loaded.model.parameters()).dtype
    # at least MIN_ROWS positions, as the plain path: a call of one short row (the last of a set)
    # would take a small-matrix GEMM kernel and move first-token log-probs by ~1e-4 (clm.MIN_ROWS)
    width = max(max(len(r.tokens) for r in rows), -(-MIN_ROWS // len(rows)))
    input_ids = torch.full((len(rows), width), loaded.start_token_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    allowed = torch.zeros((len(rows), 1, width, width), dtype=torch.bool)
    idx = torch.arange(width)
    allowed[:, 0, idx, idx] = True  # padding attends to itself only (no empty softmax rows)
    for b, row in enumerate(rows):
        n = len(row.tokens)
        input_ids[b, :n] = torch.tensor(row.tokens, dtype=torch.long)
        positions[b, :n] = torch.tensor(row.depths, dtype=torch.long)
        allowed[b, 0, :n, :n] = torch.from_numpy(_ancestor_matrix(row.parents))
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    # gather targets: each member token is read at its parent's logits
    rr, pp, tt, spans = [], [], [], []
    for b, row in enumerate(rows):
        for _, path in row.members:
            parents = [0, *path[:-1]]
            spans.append(len(rr))
            rr += [b] * len(path)
            pp += parents
            tt += [row.tokens[n] for n in path]
    device = loaded.device
    keys = torch.tensor(rr, device=device) * width + torch.tensor(pp, device=device)
    parent_keys, inverse = torch.unique(keys, return_inverse=True)
    targets = torch.tensor(tt, device=device)
    with torch.inference_mode(), matmul_precision(loaded), _head_at(loaded.model, parent_keys) as only:
        logits = loaded.model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            use_cache=False,
        ).logits
        flat = logits.reshape(-1, logits.shape[-1])
        if only:  # the LM head ran at the parents only: row i of flat is parent_keys[i]
            picked = flat[inverse, targets].double() - log_normaliser(flat)[inverse]
        else:
            picked = flat[keys, targets].double() - log_normaliser(flat[parent_keys])[inverse]
    picked = picked.cpu().numpy()
    pieces = iter(np.split(picked, spans[1:]))  # one piece per member, in row order
    return [[next(pieces) for _ in row.members] for row in rows]


HEAD_AT_PARENTS = True  # off: project every position (the tests compare the two)


@contextlib.contextmanager
def _head_at(model, keep: torch.Tensor) -> Iterator[bool]:
    """Project onto the vocabulary only at `keep` (flat row × width indices: the nodes some score is
    read at) — not at padding, nor at leaves, which are a statement's last token and predict
    nothing. A pre-hook hands the LM head those hidden states alone, so whatever the model does to
    the logits after it (a soft cap, a scale) still applies. Yields whether it did: not with fewer
    than MIN_ROWS positions (the small-matrix GEMM kernel, clm.MIN_ROWS) or without a separate head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not HEAD_AT_PARENTS or head is None or len(keep) < MIN_ROWS:
        yield False
        return

    owner = threading.get_ident()  # a forward of the same model in another thread is left alone

    def only_kept(_module, args):
        if threading.get_ident() != owner:
            return None
        hidden = args[0]
        return (hidden.reshape(-1, hidden.shape[-1])[keep], *args[1:])

    handle = head.register_forward_pre_hook(only_kept)
    try:
        yield True
    finally:
        handle.remove()


def _ancestor_matrix(parents: Sequence[int]) -> np.ndarray:
    """m[i, j] = node j is node i or one of its ancestors (parents precede children)."""
    n = len(parents)
    m = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            m[i] = m[p]
        m[i, i] = True
    return m


_PROBE = [
    "The capital of France is Paris.",
    "The capital of France is Lyon.",
    "The capital of Côte d'Ivoire is Yamoussoukro.",
    "Paris is the capital of France.",
    "The capital",
    "Zürich is in Switzerland.",
]


@dataclass(frozen=True)
class PackingDecision:
    """Whether a loaded model scores on packed rows, and the evidence (per-token |Δ log-prob| on the
    probe set against a float32 reference, max and mean, for the packed and the plain path)."""

    used: bool
    dtype: str
    reference: str
    packed_max: float = float("nan")
    packed_mean: float = float("nan")
    plain_max: float = float("nan")
    plain_mean: float = float("nan")
    reason: str = ""
    recorded: str = ""  # the record this decision was read from ('' when checked in this process)

    def describe(self) -> str:
        verdict = "prefix packing on" if self.used else "plain path (prefix packing off)"
        if self.reason and np.isnan(self.packed_max):
            return f"{verdict}: {self.reason}{self._source()}"
        evidence = (
            f"{self.dtype}, |Δ| per token against {self.reference}: packed max {self.packed_max:.2g} "
            f"mean {self.packed_mean:.2g}, plain max {self.plain_max:.2g} mean {self.plain_mean:.2g}"
        )
        return f"{verdict} ({evidence}{'; ' + self.reason if self.reason else ''}){self._source()}"

    def _source(self) -> str:
        return f" [checked earlier: {Path(self.recorded).name}]" if self.recorded else ""


def accept_packing(packed: tuple[float, float], plain: tuple[float, float]) -> tuple[bool, str]:
    """The rule, on (max, mean) |Δ| against the float32 reference: packing is no worse than the plain
    path, within PACKING_FACTOR (rounding in half precision differs with the matrix shapes), or
    within PROBE_ATOL outright (float32, where the plain path is the reference itself).

    A model that ignores the tree mask or the position ids is off by whole nats (mean Δ 5–70× the
    plain path's in bfloat16), far outside the factor; honest packing measured 0.97–1.2×.
    """
    for what, p, q in (("max", packed[0], plain[0]), ("mean", packed[1], plain[1])):
        limit = max(PROBE_ATOL, PACKING_FACTOR * q)
        if not p <= limit:
            rule = f"max of {PROBE_ATOL:g} and {PACKING_FACTOR} × plain"
            return False, f"packed {what} |Δ| {p:.2g} > {limit:.2g} ({rule})"
    return True, ""


# By the model object itself, weakly: an id() key could hand a freed model's decision to a new
# model that happens to get its address (a bench that converts one model to several dtypes).
_decisions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_decide = threading.Lock()


def packing_supported(loaded: LoadedModel) -> bool:
    """Does this model give plain-path scores on packed rows (up to its dtype's rounding)?"""
    return packing_decision(loaded).used


def packing_decision(loaded: LoadedModel) -> PackingDecision:
    """Checked once per loaded model on the probe set; logged, and kept for the partitions' metadata.

    Packed and plain are compared against a float32 reference: the plain path itself for a float32
    model (TF32 off), else the same weights upcast to float32 in place (exact: bfloat16 and float16
    values are float32 values) and cast back bit for bit afterwards. A half-precision model never
    met the old rule (packed = plain to 1e-4) and silently took the 3× slower plain path on GPUs.
    """
    dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
    if any(m.training for m in loaded.model.modules()):
        # dropout on: not comparable; decided (and cached) in eval mode
        return PackingDecision(False, dtype, "", reason="model in training mode (dropout)")
    key = loaded.model
    with _decide:
        if key not in _decisions:
            record = _record(loaded, dtype)
            decision = _read_record(*record) if record else None
            if decision is None:
                decision = _check_packing(loaded, dtype)
                if record:
                    _write_record(*record, decision)
            _decisions[key] = decision
            (log.info if decision.used else log.warning)("%s: %s", loaded.key, decision.describe())
        return _decisions[key]


def _record(loaded: LoadedModel, dtype: str) -> tuple[Path, dict] | None:
    """Where the check of a model exactly as load_model returned it is recorded, and everything its
    outcome depends on: the weights (revision), the model class and config, the attention kernel,
    dtype, device, TF32, torch and transformers, the probe and the rule. A new process then reads
    the decision (~2 s of three probe passes on two CPUs, and no float32 upcast of a large model on
    a GPU) instead of checking again; a change in any of these checks again. None for any other model
    (a copy, a converted or hand-built model): it is checked in every process."""
    folder = loaded_through(loaded)
    if folder is None:
        return None
    import transformers

    model = loaded.model
    device = next(model.parameters()).device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    config = model.config
    key = {
        "check": PACKING_CHECK_VERSION,
        "probe": _PROBE,
        "row_tokens": ROW_TOKENS,
        "rule": [PROBE_ATOL, PACKING_FACTOR],
        "revision": loaded.revision,
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "config": hashlib.sha256(config.to_json_string(use_diff=False).encode()).hexdigest(),
        "attention": str(getattr(config, "_attn_implementation", None)),
        "dtype": dtype,
        "device": f"{device.type} {name}".strip(),
        "tf32": loaded.tf32,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return folder / "packing-checks" / f"{loaded.key}-{digest}.json", key


def _read_record(path: Path, key: dict) -> PackingDecision | None:
    """The recorded decision, or None (absent, unreadable, or for other conditions: check again)."""
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text("utf-8"))
        if stored["key"] != key:
            raise ValueError("its key differs from this model's")
        return PackingDecision(**stored["decision"], recorded=str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("packing check record %s unusable (%s); checking again", path, exc)
        return None


def _write_record(path: Path, key: dict, decision: PackingDecision) -> None:
    fields = {f.name: getattr(decision, f.name) for f in dataclasses.fields(decision) if f.name != "recorded"}
    try:  # NaN (no evidence) is written as JSON's NaN, which json reads back
        write_text_atomic(path, json.dumps({"key": key, "decision": fields}, indent=1, sort_keys=True))
    except OSError as exc:  # a read-only cache: the next process checks again
        log.warning("packing check not recorded (%s: %s)", path, exc)


def _check_packing(loaded: LoadedModel, dtype: str) -> PackingDecision:
    ids = [loaded.tokenizer(t, add_special_tokens=False)["input_ids"] for t in _PROBE]
    plain = _token_logprobs(loaded, ids, len(ids), None)
    try:
        packed = _score_packed(loaded, [tuple(s) for s in ids], len(ids), ROW_TOKENS, None)
    except Exception as exc:
        return PackingDecision(False, dtype, "", reason=f"packed rows failed: {type(exc).__name__}: {exc}")
    try:
        with _in_float32(loaded.model) as upcast:  # and TF32 off: a true float32 reference
            reference = _token_logprobs(dataclasses.replace(loaded, tf32=False), ids, len(ids), None)
    except Exception as exc:  # e.g. no room to upcast a large model to float32
        return PackingDecision(
            False, dtype, "", reason=f"no float32 reference ({type(exc).__name__}: {exc}); plain path"
        )
    where = f"the same weights in float32 ({upcast})" if upcast else "the float32 plain path (TF32 off)"
    packed_err, plain_err = _errors(packed, reference), _errors(plain, reference)
    used, reason = accept_packing(packed_err, plain_err)
    return PackingDecision(used, dtype, where, *packed_err, *plain_err, reason=reason)


def _errors(scores: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    diff = np.concatenate([np.abs(a - b) for a, b in zip(scores, reference, strict=True)])
    return float(diff.max()), float(diff.mean())


@contextlib.contextmanager
def _in_float32(model) -> Iterator[str]:
    """The model's floating tensors in float32 for the block, then exactly as before (dtype by
    tensor: a float32 buffer of a bfloat16 model stays float32). Yields what was upcast ('' if none)."""
    tensors = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    original = [t.dtype for t in tensors]
    upcast = sorted({str(d).removeprefix("torch.") for d in original if d != torch.float32})
    try:
        for t in tensors:
            t.data = t.data.float()
        yield ", ".join(f"from {d}" for d in upcast)
    finally:
        for t, dtype in zip(tensors, original, strict=True):
            t.data = t.data.to(dtype)
