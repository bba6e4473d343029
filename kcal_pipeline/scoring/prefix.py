"""Fast CLM scoring for candidate sets: every option of one (subject, template) shares a prefix.

The statements "The capital of France is Paris." / "... is Lyon." / "... is Nice." all begin with
the same tokens up to the object slot. `score_clm_shared_prefix` runs each such prefix once (several
prefixes per forward call, right padded, `use_cache=True`), then runs only the suffix tokens of every
member against the prefix's KV cache, selected per member along the batch dimension. The scores are
those of `score_clm` (the plain path) up to float rounding (≤ 1e-4 on fp32, enforced by
tests/test_prefix_scoring.py).

Rules that keep it exact:

* The full text is tokenized once and only that tokenization is used: the prefix is a slice of the
  full token sequence, never the tokenization of the text before the object, because byte-level BPE
  can merge across the slot boundary ("[X][Y]" → "I" + "celand").
* A statement's prefix is [start] + its tokens before the first token overlapping the object span;
  statements with the same prefix form a group. Identical token sequences are scored once.
* The logit at the last prefix position (from the prefix pass) predicts each member's first suffix
  token; suffix positions get explicit position ids (prefix length + offset) and an attention mask
  that hides the prefix's right padding.
* Both passes are padded to at least `MIN_ROWS` positions, like the plain path, so the CPU kernels
  take the same path as there (see clm.py).

Statements that gain nothing fall back to the plain path: a group of one (after deduplication), an
object at the very start (the prefix would be the start token alone), an empty or token-less object
span, or no token after the prefix.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.scoring.clm import (
    MIN_ROWS, SCHEMA, Span, _frame, _overlaps, _target_logprobs, _token_logprobs,
    encode_inputs, token_roles,
)

if TYPE_CHECKING:
    from kcal_pipeline.models import LoadedModel

MIN_PREFIX = 2  # [start] + at least one token; a start-token-only prefix saves nothing


def score_clm_shared_prefix(loaded: LoadedModel, texts: Sequence[str], subject_spans: Sequence[Span],
                            object_spans: Sequence[Span], batch_size: int | None = None,
                            progress: Callable[[int, int], None] | None = None) -> pl.DataFrame:
    """Same contract, schema and row order as `score_clm`; shares prefix computation between options.

    batch_size bounds the member rows of one suffix pass (a call also runs its groups' prefixes).
    progress(done, total) counts distinct token sequences scored.
    """
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    _, subject_spans, object_spans, batch_size, ids, offsets = enc

    # Deduplicate identical token sequences. Duplicates may carry different object spans; any split
    # point gives the same log-probs of the same tokens, so the longest prefix among them is taken.
    unique: dict[tuple[int, ...], int] = {}
    which = [unique.setdefault(tuple(seq), len(unique)) for seq in ids]
    useqs: list[list[int]] = [list(s) for s in unique]
    ulimit = [0] * len(useqs)
    for i, u in enumerate(which):
        ulimit[u] = max(ulimit[u], prefix_length(offsets[i], object_spans[i]))

    groups: dict[tuple[int, ...], list[int]] = {}
    plain: list[int] = []
    for u, (seq, p) in enumerate(zip(useqs, ulimit)):
        # p counts the start token; a usable prefix leaves at least one suffix token
        if p >= MIN_PREFIX and p <= len(seq):
            groups.setdefault(tuple(seq[:p - 1]), []).append(u)
        else:
            plain.append(u)
    shared = []
    for members in groups.values():
        (shared if len(members) > 1 else plain).append(members if len(members) > 1 else members[0])

    total, done = len(useqs), 0
    out: list[np.ndarray] = [None] * len(useqs)  # type: ignore[list-item]

    def report(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    for call in _plan_calls(shared, useqs, ulimit, batch_size):
        members = [u for _, group in call for u in group]
        lps = _score_call(loaded, call, useqs)
        if lps is None:  # the model's cache cannot be selected per member: plain path
            plain.extend(members)
            continue
        for u, lp in zip(members, lps):
            out[u] = lp
        report(len(members))
    if plain:
        lps = _token_logprobs(loaded, [useqs[u] for u in plain], batch_size, None)
        for u, lp in zip(plain, lps):
            out[u] = lp
        report(len(plain))

    logprobs = [out[u] for u in which]
    roles = [np.array(token_roles(off, s, o), dtype=np.int8)
             for off, s, o in zip(offsets, subject_spans, object_spans)]
    return _frame(logprobs, roles)


def prefix_length(offsets: Sequence[Span], object_span: Span) -> int:
    """Tokens of [start] + text before the first token that overlaps the object; 0 if none does."""
    for t, off in enumerate(offsets):
        if _overlaps(tuple(off), tuple(object_span)):
            return t + 1
    return 0


def _plan_calls(groups: list[list[int]], seqs: list[list[int]], limits: list[int],
                batch_size: int) -> list[list[tuple[int, list[int]]]]:
    """Calls of (prefix length, members): groups split into ≤ batch_size members, bucketed by
    prefix then suffix length, filled up to batch_size member rows per call."""
    pieces = []
    for members in groups:
        members = sorted(members, key=lambda u: len(seqs[u]), reverse=True)
        p = limits[members[0]]
        for k in range(0, len(members), batch_size):
            chunk = members[k:k + batch_size]
            pieces.append((p, max(len(seqs[u]) for u in chunk) + 1 - p, chunk))
    pieces.sort(key=lambda x: (x[0], x[1]), reverse=True)
    calls, current, rows = [], [], 0
    for p, _, chunk in pieces:
        if current and rows + len(chunk) > batch_size:
            calls.append(current)
            current, rows = [], 0
        current.append((p, chunk))
        rows += len(chunk)
    if current:
        calls.append(current)
    return calls


def _score_call(loaded: LoadedModel, call: list[tuple[int, list[int]]],
                seqs: list[list[int]]) -> list[np.ndarray] | None:
    """One prefix pass for the call's groups, one suffix pass for all their members.

    Returns log P(x_t | start, x_<t) for every token of every member, in call order, or None when
    the model returns no cache that can be selected along the batch dimension.
    """
    device, start = loaded.device, loaded.start_token_id
    full = {u: [start] + seqs[u] for _, members in call for u in members}
    # --- prefix pass: row g = [start] + shared tokens of group g, right padded
    plen = [p for p, _ in call]
    width_p = max(max(plen), -(-MIN_ROWS // len(call)))
    pre_ids = torch.full((len(call), width_p), start, dtype=torch.long)
    pre_mask = torch.zeros((len(call), width_p), dtype=torch.long)
    for g, (p, members) in enumerate(call):
        pre_ids[g, :p] = torch.tensor(full[members[0]][:p], dtype=torch.long)
        pre_mask[g, :p] = 1
    # --- suffix rows: member m of group g continues its group's prefix
    rows = [(g, u) for g, (_, members) in enumerate(call) for u in members]
    slen = [len(full[u]) - plen[g] for g, u in rows]
    width_s = max(max(slen), -(-MIN_ROWS // len(rows)))
    suf_ids = torch.full((len(rows), width_s), start, dtype=torch.long)
    suf_mask = torch.zeros((len(rows), width_s), dtype=torch.long)
    for r, ((g, u), n) in enumerate(zip(rows, slen)):
        suf_ids[r, :n] = torch.tensor(full[u][plen[g]:], dtype=torch.long)
        suf_mask[r, :n] = 1
    group_of = torch.tensor([g for g, _ in rows], dtype=torch.long)
    positions = torch.tensor(plen, dtype=torch.long)[group_of, None] + torch.arange(width_s)[None, :]
    mask = torch.cat([pre_mask[group_of], suf_mask], dim=1)
    with torch.inference_mode():
        pre = loaded.model(input_ids=pre_ids.to(device), attention_mask=pre_mask.to(device), use_cache=True)
        cache = pre.past_key_values
        if not hasattr(cache, "batch_select_indices"):
            return None
        cache.batch_select_indices(group_of.to(device))
        suf_logits = loaded.model(input_ids=suf_ids.to(device), attention_mask=mask.to(device),
                                  position_ids=positions.to(device), past_key_values=cache,
                                  use_cache=True).logits
        pre_logits = pre.logits
        # tokens 1..p-1 of each prefix, shared by its members
        pre_lp = _target_logprobs(pre_logits[:, :-1], pre_ids[:, 1:].to(device)).cpu().numpy()
        # the last prefix position predicts each member's first suffix token
        last = torch.tensor([plen[g] - 1 for g, _ in rows], dtype=torch.long, device=device)
        first = _target_logprobs(pre_logits[group_of.to(device), last][:, None],
                                 suf_ids[:, :1].to(device)).cpu().numpy()
        suf_lp = _target_logprobs(suf_logits[:, :-1], suf_ids[:, 1:].to(device)).cpu().numpy()
    return [np.concatenate([pre_lp[g, :plen[g] - 1], first[r], suf_lp[r, :slen[r] - 1]])
            for r, (g, _) in enumerate(rows)]
