"""Causal-LM scoring (METHODS.md §1): log P(statement) with a start token, per-token roles, reductions.

The start token is prepended so the statement's *first* token is scored too (log P(x_1 | start)).
A statement may open with a context (demonstrations, a passage: `context_ends`, the character
where the statement proper begins): its tokens are in the same forward pass, after the start
token, so the statement is conditioned on them (log P(x_1 | start, context)), but they are
conditioned on, never scored: no reduction counts them, and token_logprobs / token_roles keep the
statement's own tokens only (so n_tokens = len(token_logprobs) and ll_sum = their sum for every
statement, and masked LMs, which never score context tokens, fill the same columns alike).
Statements are batched by length to minimise padding; right padding plus an attention mask leaves
every real position's logits unchanged (causal attention never looks right), so batched scores
equal one-at-a-time scores up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.scoring.batching import map_batches, map_budgeted
from kcal_pipeline.scoring.budget import budget_for
from kcal_pipeline.scoring.precision import matmul_precision

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

ROLE_TEMPLATE, ROLE_SUBJECT, ROLE_OBJECT = 0, 1, 2
# A token of the context a statement is conditioned on: in the input, in no reduction (module doc).
ROLE_CONTEXT = 3
PLAIN = "plain"  # this path's name for its token budget (budget.budget_for)

Span = tuple[int, int]

# CPU GEMM kernels switch algorithm for matrices with few rows (rows = batch × length; below 4 here),
# and at the start token SmolLM2 carries ~2e4-magnitude activations that later layers cancel, so
# that switch alone moves a first-token log-prob by ~3e-4. Tiny batches are padded to MIN_ROWS
# positions so every statement takes the same kernel path and no score depends on its batch.
MIN_ROWS = 16

SCHEMA = {
    "n_tokens": pl.Int32,
    "ll_sum": pl.Float64,
    "ll_mean": pl.Float64,
    "ll_answer_sum": pl.Float64,
    "ll_answer_mean": pl.Float64,
    "token_logprobs": pl.List(pl.Float32),
    "token_roles": pl.List(pl.Int8),
}


def token_roles(
    offsets: Sequence[Span], subject_span: Span, object_span: Span, context_end: int = 0
) -> list[int]:
    """Role of each token from its character range.

    Overlap rather than containment, because byte-level BPE glues the preceding space onto a word
    (" Paris" starts one character before the object). Object wins over subject, so a token that
    straddles adjacent slots counts toward the answer. A token that starts before and ends at or
    before `context_end` is context; one that straddles it carries statement text, so it is scored.
    """
    return [
        ROLE_CONTEXT
        if o[0] < context_end and o[1] <= context_end
        else ROLE_OBJECT
        if _overlaps(o, object_span)
        else ROLE_SUBJECT
        if _overlaps(o, subject_span)
        else ROLE_TEMPLATE
        for o in offsets
    ]


def _overlaps(a: Span, b: Span) -> bool:
    """Half-open ranges; empty ranges overlap nothing."""
    return a[0] < a[1] and b[0] < b[1] and a[0] < b[1] and b[0] < a[1]


def score_clm(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """One row per text, in input order: token count, Sum/Mean/Sum(A)/Mean(A) and per-token detail.

    Means over zero tokens (an empty object span) are null rather than NaN. batch_size: statements
    per forward call; None (the pipeline's way): the model's token budget (budget.py).
    context_ends: per text, where its context ends (0 = none; see the module docstring).
    """
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    texts, subject_spans, object_spans, batch_size, ids, offsets = enc
    ends = check_context_ends(context_ends, texts, subject_spans, object_spans)
    logprobs = _token_logprobs(loaded, ids, batch_size, progress)
    return _frame(logprobs, roles_of(offsets, subject_spans, object_spans, ends))


def roles_of(
    offsets: Sequence[Sequence[Span]],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    context_ends: Sequence[int],
) -> list[np.ndarray]:
    """token_roles of every text, as int8 arrays."""
    return [
        np.array(token_roles(off, s, o, c), dtype=np.int8)
        for off, s, o, c in zip(offsets, subject_spans, object_spans, context_ends, strict=True)
    ]


def check_context_ends(
    context_ends: Sequence[int] | None,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
) -> list[int]:
    """The context ends as ints (all 0 when None). Each must lie in its text and before its
    subject and object (non-empty spans): the context is what the statement proper follows."""
    if context_ends is None:
        return [0] * len(texts)
    ends = list(context_ends)
    if len(ends) != len(texts):
        raise ValueError(f"context_ends must have one entry per text ({len(texts)}), got {len(ends)}")
    for i, (end, text, *spans) in enumerate(zip(ends, texts, subject_spans, object_spans, strict=True)):
        if end is None:
            ends[i] = end = 0
        if isinstance(end, bool) or not isinstance(end, (int, np.integer)) or not 0 <= end <= len(text):
            raise ValueError(
                f"context_end #{i} must be an integer in [0, {len(text)}] (the text's length), got {end!r}"
            )
        if end and not text[end:].strip():
            raise ValueError(f"context_end #{i} = {end} leaves no statement after the context in {text!r}")
        for name, (start, stop) in zip(("subject_span", "object_span"), spans, strict=True):
            if start < stop and start < end:
                raise ValueError(
                    f"context_end #{i} = {end} is after the start of {name} {(start, stop)!r}: the "
                    f"context must end before the statement's subject and object in {text!r}"
                )
        ends[i] = int(end)
    return ends


def encode_inputs(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None,
):
    """Validated inputs and their tokenization (ids, character offsets), shared by every CLM
    scorer; None for empty input."""
    texts, subject_spans, object_spans, batch_size = validate_inputs(
        loaded, texts, subject_spans, object_spans, batch_size
    )
    if not texts:
        return None
    encoded = loaded.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    for i, seq in enumerate(ids):
        if not seq:
            raise ValueError(f"text #{i} has no tokens: {texts[i]!r}")
    return texts, subject_spans, object_spans, batch_size, ids, offsets


def validate_inputs(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None,
):
    """Every scorer's checks: equal lengths, strings, spans inside their text, a positive batch
    size or None (the scorer's default). Returns the inputs as lists and the batch size."""
    texts, subject_spans, object_spans = list(texts), list(subject_spans), list(object_spans)
    _check_inputs(texts, subject_spans, object_spans)
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return texts, subject_spans, object_spans, batch_size


def _check_inputs(texts: list, subject_spans: list, object_spans: list) -> None:
    if not len(texts) == len(subject_spans) == len(object_spans):
        raise ValueError(
            f"texts, subject_spans and object_spans must have equal lengths, got "
            f"{len(texts)}, {len(subject_spans)}, {len(object_spans)}"
        )
    for i, (text, *spans) in enumerate(zip(texts, subject_spans, object_spans, strict=True)):
        if not isinstance(text, str):
            raise ValueError(f"text #{i} must be a string, got {text!r}")
        for name, span in zip(("subject_span", "object_span"), spans, strict=True):
            if (
                len(span) != 2
                or not all(isinstance(x, (int, np.integer)) for x in span)
                or not 0 <= span[0] <= span[1] <= len(text)
            ):
                raise ValueError(
                    f"{name} #{i} must be (start, end) with 0 <= start <= end <= "
                    f"{len(text)} (the text's length), got {span!r}"
                )


def _token_logprobs(
    loaded: LoadedModel,
    ids: list[list[int]],
    batch_size: int | None,
    progress: Callable[[int, int], None] | None,
) -> list[np.ndarray]:
    """Score in batches of similar length (longest first, stable), then restore input order.

    batch_size: that many statements per call; None: as many as the model's token budget holds
    (budget.py). A batch that runs out of GPU memory is halved and retried (batching.py)."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    run = lambda batch: _score_batch(loaded, [ids[i] for i in batch])  # noqa: E731
    if batch_size is not None:
        scored = map_batches(order, batch_size, run, progress)
    else:
        width = lambda i: len(ids[i]) + 1  # noqa: E731  (the start token)
        budget = budget_for(loaded, PLAIN, row_width=width(order[0]) if order else 1)
        scored = map_budgeted(order, width, width, budget, run, progress)
    out: list[np.ndarray] = [None] * len(ids)  # type: ignore[list-item]
    for i, lp in zip(order, scored, strict=True):
        out[i] = lp
    return out


def _score_batch(loaded: LoadedModel, seqs: list[list[int]]) -> list[np.ndarray]:
    """log P(x_t | start, x_<t) for every real token of each sequence (right-padded batch)."""
    width = max(1 + max(len(s) for s in seqs), -(-MIN_ROWS // len(seqs)))
    input_ids = torch.full((len(seqs), width), loaded.start_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        input_ids[row, 1 : len(seq) + 1] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq) + 1] = 1
    input_ids, mask = input_ids.to(loaded.device), mask.to(loaded.device)
    with torch.inference_mode(), matmul_precision(loaded):
        logits = loaded.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        picked = _target_logprobs(logits[:, :-1], input_ids[:, 1:]).cpu().numpy()
    return [picked[row, : len(seq)] for row, seq in enumerate(seqs)]


def _target_logprobs(logits, targets):
    """log_softmax at the targets, as logit − log-normaliser (see log_normaliser)."""
    return logits.gather(-1, targets[..., None]).squeeze(-1).double() - log_normaliser(logits)


NORMALISER_ROWS = 32  # positions per step: a 32 × vocabulary float32 temporary stays in cache


def log_normaliser(logits):
    """log Σ exp(logits) over the vocabulary, as float64, for every position.

    Each exponential (after subtracting the row maximum) and their sum are float32 — torch sums a
    row in cascaded blocks, so the sum's rounding does not drift one way (−5e-8 per position on
    average, ≤ 5e-7, against a float64 logsumexp of SmolLM2's logits) — and only log and max are
    joined in float64, where float32 would round the result to its ulp (1e-6 at ~16 nats). Rows
    go in small steps, in place, so the temporary stays in cache: 3× faster than the float64 sum
    this replaced (issue 31; bench/README.md). A sequential float32 accumulation, as
    torch.log_softmax's, is what drifts (−8e-6 per token in the bench).
    """
    flat = logits.reshape(-1, logits.shape[-1])
    out = []
    for rows in flat.split(NORMALISER_ROWS):
        top = rows.amax(-1, keepdim=True)
        total = (rows - top).exp_().sum(-1)
        out.append(top.squeeze(-1).double() + total.double().log())
    return (
        torch.cat(out).reshape(logits.shape[:-1])
        if out
        else torch.zeros(logits.shape[:-1], dtype=torch.float64)
    )


def _frame(logprobs: list[np.ndarray], roles: list[np.ndarray]) -> pl.DataFrame:
    """The reductions over each statement's own tokens: context positions are dropped first."""
    kept = [r != ROLE_CONTEXT for r in roles]
    logprobs = [lp[k] for lp, k in zip(logprobs, kept, strict=True)]
    roles = [r[k] for r, k in zip(roles, kept, strict=True)]
    n = [len(lp) for lp in logprobs]
    ll_sum = [float(lp.sum()) for lp in logprobs]
    answer = [lp[r == ROLE_OBJECT] for lp, r in zip(logprobs, roles, strict=True)]
    ans_sum = [float(a.sum()) for a in answer]
    return pl.DataFrame(
        {
            "n_tokens": n,
            "ll_sum": ll_sum,
            "ll_mean": [s / k for s, k in zip(ll_sum, n, strict=True)],
            "ll_answer_sum": ans_sum,
            "ll_answer_mean": [s / len(a) if len(a) else None for s, a in zip(ans_sum, answer, strict=True)],
            "token_logprobs": [lp.astype(np.float32).tolist() for lp in logprobs],
            "token_roles": [r.tolist() for r in roles],
        },
        schema=SCHEMA,
    )
