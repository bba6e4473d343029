"""Masked-LM scoring (METHODS.md §1): pseudo-log-likelihood with per-token roles and reductions.

PLL = Σ_t log P(x_t | x_\\t): each of the statement's tokens is replaced by the mask token in its own
copy of the statement and scored there (Salazar et al. 2020). Variant within_word_l2r (Kauf &
Ivanova 2023) also masks the *later* tokens of the same word, so a word's first piece is not
predicted from its own remaining pieces.

Definitions follow lm-pub-quiz 0.3.3 / minicons 0.3.39, so scores agree with theirs:
- the statement is encoded with the tokenizer's special tokens ([CLS] … [SEP], <s> … </s>); those
  are in the input but never masked or scored, and neither is any other token the tokenizer marks
  special (special_tokens_mask);
- a "word" is the fast tokenizer's word_ids(): one word per pre-tokenizer piece, so for BERT
  punctuation is a word of its own ("d'Ivoire" is d / ' / Ivoire) and for byte-level BPE the leading
  space belongs to the word;
- within_word_l2r masks, besides t, the scored tokens right after t that share its word.
The only intended difference: the softmax normaliser is taken in float64 (clm._target_logprobs),
which moves a score by far less than 1e-4.

Subject masking (mask_subject=True; TemplateDiff, METHODS.md §2, as Selective-LAMA masks the subject
of a masked LM): the statement is tokenized as it is, and every token of the subject *in this
statement* - a non-special token whose character range overlaps the subject span and not the object
span, clm.token_roles' rule - is replaced by the mask token, so the subject becomes exactly as many
mask tokens as it has in context. Those masks are in the input of every masked copy and are never
scored themselves (they are no text): the PLL is over the template and object tokens, each given the
rest with the subject masked. With within_word_l2r a word's later pieces are masked as usual.

Cost is one forward row per token. Rows are built lazily per chunk of at most batch_size (never
all copies at once), in statements of decreasing length so a chunk pads little, and a statement
that occurs several times (same token ids) is scored once. Right padding with an attention mask
leaves every real position unchanged, so chunking does not change scores beyond float rounding.
Only one position per row is scored, so the vocabulary projection runs on that position alone
(_logits_at): the encoder's work is unchanged, the projection's and the logits' shrink by the
statement length.

The per-token bookkeeping is flat numpy arrays over every scored token of every unique statement
("slots", statement after statement), so building a chunk is a few array operations, not a loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.core.options import MLM_VARIANTS
from kcal_pipeline.scoring.batching import map_batches
from kcal_pipeline.scoring.clm import (
    MIN_ROWS,
    ROLE_SUBJECT,
    SCHEMA,
    Span,
    _frame,
    _target_logprobs,
    check_context_ends,
    roles_of,
    token_roles,
    validate_inputs,
)
from kcal_pipeline.scoring.precision import matmul_precision

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

VARIANTS = MLM_VARIANTS


@dataclass(frozen=True)
class _Statements:
    """The unique statements, flat. Statement u's token ids are ids[id_start[u]:id_start[u] + length[u]];
    its scored tokens are the slots slot_start[u] … slot_start[u + 1] - 1, and slot j scores position
    position[j] (token id target[j]) of statement stmt[j], masking positions position[j:j + masked[j]]."""

    ids: np.ndarray  # int64, every unique statement's ids (special tokens included), concatenated
    id_start: np.ndarray  # int64 [n]
    length: np.ndarray  # int64 [n]
    slot_start: np.ndarray  # int64 [n + 1]
    stmt: np.ndarray  # int64 [slots]
    position: np.ndarray  # int64 [slots]
    target: np.ndarray  # int64 [slots]
    masked: np.ndarray  # int64 [slots]: 1, or (within_word_l2r) the slot's run to the end of its word


def score_mlm(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    variant: str = "original",
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    mask_subject: bool = False,
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """One row per text, in input order, with exactly score_clm's columns (clm.SCHEMA).

    token_logprobs are the PLL terms of the statement's own tokens (no special tokens). batch_size
    bounds the rows of one forward pass (masked copies, not statements). progress(done, total)
    counts input statements whose every token has been scored. mask_subject: the subject's tokens
    are mask tokens throughout and are not scored (see the module's "Subject masking"), so
    n_tokens, token_logprobs and token_roles cover the template and object tokens only.
    context_ends (as clm.score_clm's): the context's tokens are in the input of every masked copy,
    never masked and never scored, so the PLL is over the statement's own tokens given the context.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if getattr(loaded, "kind", None) != "mlm":
        raise ValueError(
            f"score_mlm needs a masked LM, got model {loaded.key!r} of kind "
            f"{getattr(loaded, 'kind', None)!r} (use score_clm)"
        )
    # clm's checks without its tokenization (_encode tokenizes once, with special tokens)
    texts, subject_spans, object_spans, batch_size = validate_inputs(
        loaded, texts, subject_spans, object_spans, batch_size
    )
    batch_size = loaded.batch_size if batch_size is None else batch_size  # masked rows per call
    if not texts:
        return pl.DataFrame(schema=SCHEMA)
    ends = check_context_ends(context_ends, texts, subject_spans, object_spans)
    masked = subject_spans if mask_subject else None
    statements, offsets, unique_of = _encode(loaded.tokenizer, texts, variant, masked, object_spans, ends)
    logprobs = _pll(loaded, statements, unique_of, batch_size, progress)
    roles = roles_of(offsets, subject_spans, object_spans, ends)
    return _frame([logprobs[u] for u in unique_of], roles)


def subject_token_positions(
    offsets: Sequence[Span], special: Sequence[int], subject_span: Span, object_span: Span
) -> list[int]:
    """Positions of the subject's tokens in one encoded statement: non-special tokens whose role is
    subject (clm.token_roles: overlapping the subject span, and not the object span)."""
    roles = token_roles([tuple(o) for o in offsets], subject_span, object_span)
    return [p for p, (s, r) in enumerate(zip(special, roles, strict=True)) if not s and r == ROLE_SUBJECT]


def subject_token_counts(
    tokenizer, texts: Sequence[str], subject_spans: Sequence[Span], object_spans: Sequence[Span]
) -> list[int]:
    """How many mask tokens replace each text's subject under mask_subject=True."""
    encoded = _tokenize(tokenizer, list(texts))
    return [
        len(subject_token_positions(encoded["offset_mapping"][i], encoded["special_tokens_mask"][i], s, o))
        for i, (s, o) in enumerate(zip(subject_spans, object_spans, strict=True))
    ]


def _tokenize(tokenizer, texts: list[str]):
    return tokenizer(
        texts, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True
    )


def _encode(
    tokenizer,
    texts: list[str],
    variant: str,
    masked_subjects: list[Span] | None = None,
    object_spans: list[Span] | None = None,
    context_ends: list[int] | None = None,
) -> tuple[_Statements, list[list[Span]], list[int]]:
    """Unique statements, each text's scored-token offsets, and each text's unique statement.

    Offsets stay per text: two texts can share token ids (e.g. differing only in spacing) but
    not character positions. With masked_subjects (and object_spans), each text's subject tokens
    become the mask token and leave the scored positions. With context_ends, each text's context
    tokens (clm.token_roles: starting before and ending at or before its end) stay in the input
    and leave the scored positions.
    """
    encoded = _tokenize(tokenizer, texts)
    all_ids, all_special, all_offsets = (
        encoded["input_ids"],
        encoded["special_tokens_mask"],
        encoded["offset_mapping"],
    )
    mask_id = tokenizer.mask_token_id
    if masked_subjects is not None and mask_id is None:
        raise ValueError(f"{type(tokenizer).__name__} has no mask token: cannot mask the subject")
    seen: dict[tuple, int] = {}
    unique: list[tuple[list[int], list[int], list[int | None]]] = []
    offsets, unique_of, bare = [], [], []
    for i in range(len(texts)):
        ids, special = all_ids[i], all_special[i]
        hidden: set[int] = set()
        if masked_subjects is not None:
            hidden = set(
                subject_token_positions(all_offsets[i], special, masked_subjects[i], object_spans[i])
            )
            ids = [mask_id if p in hidden else t for p, t in enumerate(ids)]
        end = context_ends[i] if context_ends else 0
        context = {p for p, (a, b) in enumerate(all_offsets[i]) if a < end and b <= end}
        positions = [p for p, s in enumerate(special) if not s and p not in hidden and p not in context]
        if not positions:
            if hidden:
                raise ValueError(
                    f"text #{i} has no tokens left to score once its subject is masked: {texts[i]!r}"
                )
            bare.append(i)
            continue
        words = encoded.word_ids(i)
        u = seen.setdefault((tuple(ids), tuple(positions), tuple(words)), len(unique))
        if u == len(unique):
            unique.append((ids, positions, words))
        unique_of.append(u)
        text_offsets = all_offsets[i]
        offsets.append([tuple(text_offsets[p]) for p in positions])
    if bare:
        for i in bare:  # the first text without any token is reported as clm.encode_inputs would
            if not tokenizer(texts[i], add_special_tokens=False)["input_ids"]:
                raise ValueError(f"text #{i} has no tokens: {texts[i]!r}")
        i = bare[0]
        raise ValueError(f"text #{i} has no tokens to score (all are special tokens): {texts[i]!r}")
    return _flatten(unique, variant), offsets, unique_of


def _flatten(unique: list[tuple[list[int], list[int], list[int | None]]], variant: str) -> _Statements:
    length = np.fromiter((len(ids) for ids, _, _ in unique), dtype=np.int64, count=len(unique))
    n_slots = np.fromiter((len(pos) for _, pos, _ in unique), dtype=np.int64, count=len(unique))
    id_start = np.concatenate(([0], np.cumsum(length)[:-1])).astype(np.int64)
    slot_start = np.concatenate(([0], np.cumsum(n_slots))).astype(np.int64)
    ids = np.fromiter((t for s, _, _ in unique for t in s), dtype=np.int64, count=int(length.sum()))
    stmt = np.repeat(np.arange(len(unique), dtype=np.int64), n_slots)
    position = np.fromiter(
        (p for _, pos, _ in unique for p in pos), dtype=np.int64, count=int(slot_start[-1])
    )
    target = ids[id_start[stmt] + position]
    masked = np.ones(len(position), dtype=np.int64)
    if variant == "within_word_l2r":
        # Runs of consecutive scored tokens of one word (word ids ≥ 0; a token without a word, -1,
        # is a run of its own); a slot masks itself and the rest of its run. A word's tokens are
        # contiguous, so the first token of another word ends the run.
        word = np.fromiter(
            (-1 if words[p] is None else words[p] for _, pos, words in unique for p in pos),
            dtype=np.int64,
            count=len(position),
        )
        starts = np.ones(len(word), dtype=bool)
        starts[1:] = (word[1:] != word[:-1]) | (word[1:] < 0) | (stmt[1:] != stmt[:-1])
        first = np.flatnonzero(starts)
        end = np.append(first[1:], len(word))[np.cumsum(starts) - 1]
        masked = end - np.arange(len(word))
    return _Statements(ids, id_start, length, slot_start, stmt, position, target, masked)


def _pll(
    loaded: LoadedModel,
    st: _Statements,
    unique_of: list[int],
    batch_size: int,
    progress: Callable[[int, int], None] | None,
) -> list[np.ndarray]:
    """PLL terms per unique statement; jobs (slots) run longest statement first, in bounded chunks."""
    order = np.argsort(-st.length, kind="stable")
    n_slots = np.diff(st.slot_start)
    jobs = np.concatenate(
        [np.arange(st.slot_start[u], st.slot_start[u + 1]) for u in order]
    )  # slots, in that order
    report = None if progress is None else _statement_progress(progress, n_slots, order, unique_of)
    tokenizer = loaded.tokenizer
    mask_id = tokenizer.mask_token_id  # a slow property on HF tokenizers: read once
    pad = tokenizer.pad_token_id
    pad = mask_id if pad is None else pad
    scores = map_batches(
        range(len(jobs)),
        batch_size,
        lambda chunk: _score_chunk(loaded, st, jobs[chunk[0] : chunk[-1] + 1], mask_id, pad),
        progress=report,
    )
    flat = np.empty(len(jobs), dtype=np.float64)
    flat[jobs] = scores
    return np.split(flat, st.slot_start[1:-1])


def _statement_progress(
    progress: Callable[[int, int], None], n_slots: np.ndarray, order: np.ndarray, unique_of: list[int]
) -> Callable[[int, int], None]:
    """Turn map_batches' (rows done, rows) into (input statements done, input statements)."""
    copies = np.bincount(unique_of, minlength=len(n_slots))
    row_ends = np.cumsum(n_slots[order])
    texts_done = np.concatenate(([0], np.cumsum(copies[order])))
    return lambda rows, _: progress(
        int(texts_done[np.searchsorted(row_ends, rows, side="right")]), len(unique_of)
    )


def _score_chunk(
    loaded: LoadedModel, st: _Statements, slots: np.ndarray, mask_id: int, pad: int
) -> list[float]:
    """One forward pass over the slots' masked copies (right-padded); log P(target) per row."""
    rows = len(slots)
    u = st.stmt[slots]
    length = st.length[u]
    columns = np.arange(int(length.max()))
    real = columns < length[:, None]
    input_ids = np.where(real, st.ids.take(st.id_start[u][:, None] + columns, mode="clip"), pad)
    # row r masks position[slots[r] + i] for i < masked[slots[r]]
    n_masked = st.masked[slots]
    row_of = np.repeat(np.arange(rows), n_masked)
    offset = np.arange(len(row_of)) - np.repeat(np.cumsum(n_masked) - n_masked, n_masked)
    input_ids[row_of, st.position[np.repeat(slots, n_masked) + offset]] = mask_id
    device = loaded.device
    where = torch.from_numpy(st.position[slots]).to(device)
    with torch.inference_mode(), matmul_precision(loaded):
        at_target = _logits_at(
            loaded.model,
            torch.from_numpy(input_ids).to(device),
            torch.from_numpy(real.astype(np.int64)).to(device),
            where,
        )
        picked = _target_logprobs(at_target, torch.from_numpy(st.target[slots]).to(device))
    return picked.cpu().tolist()


def _logits_at(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, where: torch.Tensor
) -> torch.Tensor:
    """The logits at position where[r] of each row r, [rows, vocabulary].

    The vocabulary projection (get_output_embeddings(), e.g. BERT's cls.predictions.decoder) gets
    only those positions' hidden states: an MLM head works position by position, so their logits
    are the same, and the projection — rows × length × vocabulary, the largest matrix product of a
    small encoder with a large vocabulary — and the logits shrink to one position per row. The
    positions are padded to clm.MIN_ROWS so the product takes the same kernel path whatever the
    chunk's size. The hook acts only in this thread (a model may be shared by threads). A model
    whose projection is not such a module, or does not see [rows, length, hidden] states once, is
    run whole and indexed afterwards.
    """
    rows = torch.arange(len(where), device=where.device)
    kept_rows = max(len(where), MIN_ROWS)
    try:
        projection = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        projection = None
    if isinstance(projection, torch.nn.Module):
        thread, calls, restricted = threading.get_ident(), [], []

        def at_targets(_module, args, kwargs):
            if threading.get_ident() != thread:
                return None
            calls.append(True)
            hidden = args[0] if args else None
            if len(calls) > 1 or not isinstance(hidden, torch.Tensor) or hidden.shape[:-1] != input_ids.shape:
                return None
            restricted.append(True)
            kept = hidden[rows, where.to(hidden.device)]
            if len(kept) < kept_rows:
                kept = torch.cat([kept, kept.new_zeros(kept_rows - len(kept), kept.shape[-1])])
            return (kept[:, None], *args[1:]), kwargs

        handle = projection.register_forward_pre_hook(at_targets, with_kwargs=True)
        try:
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        finally:
            handle.remove()
        if restricted:
            if len(calls) == 1 and tuple(logits.shape[:2]) == (kept_rows, 1):
                return logits[: len(where), 0]
            # the projection ran more than once, or its output is not one position per row: run whole
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return logits[rows, where]
