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

Cost is one forward row per token. Rows are built lazily per chunk of at most batch_size (never
all copies at once), in statements of decreasing length so a chunk pads little, and a statement
that occurs several times (same token ids) is scored once. Right padding with an attention mask
leaves every real position unchanged, so chunking does not change scores beyond float rounding.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.scoring.batching import map_batches
from kcal_pipeline.scoring.clm import SCHEMA, Span, _frame, _target_logprobs, encode_inputs, token_roles

if TYPE_CHECKING:
    from kcal_pipeline.models import LoadedModel

VARIANTS = ("original", "within_word_l2r")

Job = tuple[int, int]  # (unique statement, index of the scored token in it)


@dataclass(frozen=True)
class _Statement:
    """A tokenized statement: ids with special tokens, the positions scored, word id per position."""

    ids: tuple[int, ...]
    positions: tuple[int, ...]
    words: tuple[int | None, ...]


def score_mlm(loaded: LoadedModel, texts: Sequence[str], subject_spans: Sequence[Span],
              object_spans: Sequence[Span], variant: str = "original", batch_size: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> pl.DataFrame:
    """One row per text, in input order, with exactly score_clm's columns (clm.SCHEMA).

    token_logprobs are the PLL terms of the statement's own tokens (no special tokens). batch_size
    bounds the rows of one forward pass (masked copies, not statements). progress(done, total)
    counts input statements whose every token has been scored.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if getattr(loaded, "kind", None) != "mlm":
        raise ValueError(f"score_mlm needs a masked LM, got model {loaded.key!r} of kind "
                         f"{getattr(loaded, 'kind', None)!r} (use score_clm)")
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    texts, subject_spans, object_spans, batch_size, _, _ = enc
    statements, offsets, unique_of = _encode(loaded.tokenizer, texts)
    logprobs = _pll(loaded, statements, unique_of, variant, batch_size, progress)
    roles = [np.array(token_roles(off, s, o), dtype=np.int8)
             for off, s, o in zip(offsets, subject_spans, object_spans)]
    return _frame([logprobs[u] for u in unique_of], roles)


def _encode(tokenizer, texts: list[str]) -> tuple[list[_Statement], list[list[Span]], list[int]]:
    """Unique statements, each text's scored-token offsets, and each text's unique statement.

    Offsets stay per text: two texts can share token ids (e.g. differing only in spacing) but
    not character positions.
    """
    encoded = tokenizer(texts, add_special_tokens=True, return_offsets_mapping=True,
                        return_special_tokens_mask=True)
    statements: list[_Statement] = []
    seen: dict[_Statement, int] = {}
    offsets, unique_of = [], []
    for i, text in enumerate(texts):
        special = encoded["special_tokens_mask"][i]
        positions = tuple(p for p, s in enumerate(special) if not s)
        if not positions:
            raise ValueError(f"text #{i} has no tokens to score (all are special tokens): {text!r}")
        stmt = _Statement(tuple(encoded["input_ids"][i]), positions, tuple(encoded.word_ids(i)))
        unique_of.append(seen.setdefault(stmt, len(statements)))
        if unique_of[-1] == len(statements):
            statements.append(stmt)
        offsets.append([tuple(encoded["offset_mapping"][i][p]) for p in positions])
    return statements, offsets, unique_of


def _pll(loaded: LoadedModel, statements: list[_Statement], unique_of: list[int], variant: str,
         batch_size: int, progress: Callable[[int, int], None] | None) -> list[np.ndarray]:
    """PLL terms per unique statement; jobs run longest statement first, in bounded chunks."""
    order = sorted(range(len(statements)), key=lambda u: len(statements[u].ids), reverse=True)
    jobs: list[Job] = [(u, k) for u in order for k in range(len(statements[u].positions))]
    report = None if progress is None else _statement_progress(progress, statements, order, unique_of)
    scores = map_batches(jobs, batch_size, lambda chunk: _score_chunk(loaded, statements, chunk, variant),
                         progress=report)
    out = [np.empty(len(s.positions), dtype=np.float64) for s in statements]
    for (u, k), lp in zip(jobs, scores):
        out[u][k] = lp
    return out


def _statement_progress(progress: Callable[[int, int], None], statements: list[_Statement],
                        order: list[int], unique_of: list[int]) -> Callable[[int, int], None]:
    """Turn map_batches' (rows done, rows) into (input statements done, input statements)."""
    copies = np.bincount(unique_of, minlength=len(statements))
    row_ends = list(accumulate(len(statements[u].positions) for u in order))
    texts_done = [0, *accumulate(int(copies[u]) for u in order)]
    return lambda rows, _: progress(texts_done[bisect_right(row_ends, rows)], len(unique_of))


def _masked_positions(stmt: _Statement, k: int, variant: str) -> list[int]:
    """The target position, plus (within_word_l2r) the following scored tokens of its word."""
    p = stmt.positions[k]
    masked = [p]
    if variant == "within_word_l2r" and stmt.words[p] is not None:
        for q in stmt.positions[k + 1:]:
            if stmt.words[q] != stmt.words[p]:
                break  # a word's tokens are contiguous: the first other word ends it
            masked.append(q)
    return masked


def _score_chunk(loaded: LoadedModel, statements: list[_Statement], chunk: list[Job],
                 variant: str) -> list[float]:
    """One forward pass over the chunk's masked copies (right-padded); log P(target) per row."""
    tokenizer = loaded.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.mask_token_id
    width = max(len(statements[u].ids) for u, _ in chunk)
    input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    where, targets = [], []
    for row, (u, k) in enumerate(chunk):
        stmt = statements[u]
        input_ids[row, :len(stmt.ids)] = torch.tensor(stmt.ids, dtype=torch.long)
        mask[row, :len(stmt.ids)] = 1
        input_ids[row, _masked_positions(stmt, k, variant)] = tokenizer.mask_token_id
        where.append(stmt.positions[k])
        targets.append(stmt.ids[stmt.positions[k]])
    device = loaded.device
    with torch.inference_mode():
        logits = loaded.model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
        at_target = logits[torch.arange(len(chunk), device=device), torch.tensor(where, device=device)]
        picked = _target_logprobs(at_target, torch.tensor(targets, device=device))
    return picked.cpu().tolist()
