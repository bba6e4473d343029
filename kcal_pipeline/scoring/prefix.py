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
  per loaded model on a probe set against the plain path; a model that fails (e.g. one whose
  attention kernel ignores custom masks, or whose positions come from the padding mask) is scored
  with the plain path instead, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.scoring.batching import map_batches
from kcal_pipeline.scoring.clm import (
    SCHEMA,
    Span,
    _frame,
    _token_logprobs,
    encode_inputs,
    log_normaliser,
    token_roles,
)

if TYPE_CHECKING:
    from kcal_pipeline.scoring.models.loading import LoadedModel

log = logging.getLogger(__name__)

ROW_TOKENS = 256  # trie nodes per packed row: long enough to hold many candidate sets
TOKENS_PER_ROW_OF_BATCH = 32  # a call's node budget is batch_size × this (32 → 1024 ≈ 4 rows)
PROBE_ATOL = 1e-4


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
) -> pl.DataFrame:
    """Same contract, schema and row order as `score_clm`; computes each shared prefix once.

    batch_size scales the nodes computed per forward call (batch_size × 32, at least one row), so
    the entry's batch size bounds memory like on the plain path. progress(done, total) counts
    distinct token sequences scored.
    """
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    _, subject_spans, object_spans, batch_size, ids, offsets = enc
    if not isinstance(row_tokens, int) or row_tokens < 2:
        raise ValueError(f"row_tokens must be an integer >= 2, got {row_tokens!r}")
    unique: dict[tuple[int, ...], int] = {}
    which = [unique.setdefault(tuple(seq), len(unique)) for seq in ids]
    useqs = list(unique)
    if packing_supported(loaded):
        out = _score_packed(loaded, useqs, batch_size, row_tokens, progress)
    else:
        out = _token_logprobs(loaded, [list(s) for s in useqs], batch_size, progress)
    roles = [
        np.array(token_roles(off, s, o), dtype=np.int8)
        for off, s, o in zip(offsets, subject_spans, object_spans, strict=True)
    ]
    return _frame([out[u] for u in which], roles)


def pack_rows(seqs: Sequence[Sequence[int]], start_token: int, row_tokens: int) -> list[_Row]:
    """Sequences in lexicographic order, so each one's longest shared prefix within a row is the one
    it shares with its predecessor; a row is closed when the next sequence would overflow it."""
    rows: list[_Row] = []
    row, prev, path = None, (), []
    for u in sorted(range(len(seqs)), key=lambda i: tuple(seqs[i])):
        seq = seqs[u]
        lcp = _common_prefix(prev, seq) if row is not None else 0
        if row is None or (len(row.tokens) + len(seq) - lcp > row_tokens and row.members):
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
    batch_size: int,
    row_tokens: int,
    progress: Callable[[int, int], None] | None,
) -> list[np.ndarray]:
    rows = pack_rows(seqs, loaded.start_token_id, row_tokens)
    rows.sort(key=lambda r: len(r.tokens), reverse=True)  # similar widths share a call
    budget = max(batch_size * TOKENS_PER_ROW_OF_BATCH, len(rows[0].tokens))
    out: list[np.ndarray] = [None] * len(seqs)  # type: ignore[list-item]
    done = [0]
    for call in _plan_calls(rows, budget):
        for row, lps in zip(
            call, map_batches(call, len(call), lambda b: _forward_rows(loaded, b)), strict=True
        ):
            for (u, _), lp in zip(row.members, lps, strict=True):
                out[u] = lp
            done[0] += len(row.members)
        if progress is not None:
            progress(done[0], len(seqs))
    return out


def _plan_calls(rows: list[_Row], budget: int) -> list[list[_Row]]:
    """Consecutive rows (longest first) while rows × width stays within the node budget."""
    calls, current = [], []
    for row in rows:
        width = len(current[0].tokens) if current else len(row.tokens)
        if current and (len(current) + 1) * width > budget:
            calls.append(current)
            current = []
        current.append(row)
    if current:
        calls.append(current)
    return calls


def _forward_rows(loaded: LoadedModel, rows: list[_Row]) -> list[list[np.ndarray]]:
    """One forward pass over packed rows; per row, per member, log P(x_t | start, x_<t)."""
    dtype = next(loaded.model.parameters()).dtype
    width = max(len(r.tokens) for r in rows)
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
    with torch.inference_mode():
        logits = loaded.model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            use_cache=False,
        ).logits
        keys = torch.tensor(rr, device=device) * width + torch.tensor(pp, device=device)
        parent_keys, inverse = torch.unique(keys, return_inverse=True)
        flat = logits.reshape(-1, logits.shape[-1])
        norm = log_normaliser(flat[parent_keys])
        picked = flat[keys, torch.tensor(tt, device=device)].double() - norm[inverse]
    picked = picked.cpu().numpy()
    pieces = iter(np.split(picked, spans[1:]))  # one piece per member, in row order
    return [[next(pieces) for _ in row.members] for row in rows]


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
_support: dict[int, bool] = {}


def packing_supported(loaded: LoadedModel) -> bool:
    """Does this model give plain-path scores on packed rows? Checked once per loaded model."""
    key = id(loaded.model)
    if key not in _support and any(m.training for m in loaded.model.modules()):
        return False  # dropout on: the probe would not be comparable; decide (and cache) in eval mode
    if key not in _support:
        ids = [loaded.tokenizer(t, add_special_tokens=False)["input_ids"] for t in _PROBE]
        plain = _token_logprobs(loaded, ids, len(ids), None)
        try:
            packed = _score_packed(loaded, [tuple(s) for s in ids], len(ids), ROW_TOKENS, None)
            diff = max(float(np.abs(a - b).max()) for a, b in zip(plain, packed, strict=True))
        except Exception as exc:
            log.warning("prefix packing unavailable for %s (%s); using the plain path", loaded.key, exc)
            diff = float("inf")
        else:
            if diff > PROBE_ATOL:
                log.warning(
                    "prefix packing differs from the plain path for %s (max |Δ| %.2g); using the plain path",
                    loaded.key,
                    diff,
                )
        _support[key] = diff <= PROBE_ATOL
    return _support[key]
