"""Statements with the subject replaced by a neutral placeholder (METHODS.md §2, TemplateDiff).

TemplateDiff = p(ŷ | statement) − p(ŷ | the same statement with the subject masked): how much of
the confidence comes from the subject rather than from the template and the object alone. The
masked statements are scored like any other (same scorer, same spans), so `mask_subjects` returns
a statements frame with `text` and the four span columns replaced.

Span arithmetic: the subject [s0, s1) becomes the placeholder [s0, s0 + len(placeholder)); an
object that ends at or before s0 keeps its span, one that starts at or after s1 moves by
len(placeholder) − (s1 − s0). Overlapping (non-empty) spans are an error. Spans count characters
(Python str indices), as everywhere in kcal.

Capitalisation rule: the placeholder's first character is upper-cased when the subject starts a
sentence, i.e. when the text before it - ignoring whitespace and opening quotes/brackets - is empty
or ends with '.', '!' or '?' ("[X] is in [Y]." → "Something is in Paris."). Anywhere else the
placeholder is used as given; it is never lower-cased (so "It" stays "It"). An abbreviation
before the subject ("St. [X]") would count as a sentence end; no curated template has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from kcal_pipeline.scoring.models.loading import LoadedModel

Span = tuple[int, int]

DEFAULT_PLACEHOLDER = "something"
# Scorer columns kept for the masked statements -> output column.
MASKED_COLUMNS = {"ll_sum": "ll_sum_masked", "ll_answer_sum": "ll_answer_sum_masked"}
SPAN_COLUMNS = ["subject_start", "subject_end", "object_start", "object_end"]
_SENTENCE_END = ".!?"
_OPENERS = "\"'“‘«([{¿¡"


def starts_sentence(text: str, position: int) -> bool:
    """True when `position` begins a sentence (see the module's capitalisation rule)."""
    before = text[:position].rstrip().rstrip(_OPENERS).rstrip()
    return before == "" or before[-1] in _SENTENCE_END


def check_placeholder(placeholder: str) -> None:
    if not isinstance(placeholder, str) or not placeholder.strip():
        raise ValueError(f"placeholder must be a non-empty string, got placeholder={placeholder!r}")


def _check_span(name: str, span: Span, text: str) -> tuple[int, int]:
    try:
        start, end = (int(x) for x in span)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (start, end), got {span!r}") from None
    if not 0 <= start <= end <= len(text):
        raise ValueError(
            f"{name} must satisfy 0 <= start <= end <= {len(text)} (the text's length), "
            f"got {span!r} in {text!r}"
        )
    return start, end


def mask_subject(
    text: str, subject_span: Span, object_span: Span, placeholder: str = DEFAULT_PLACEHOLDER
) -> tuple[str, Span, Span]:
    """(masked text, placeholder span, object span in the masked text)."""
    check_placeholder(placeholder)
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {text!r}")
    s0, s1 = _check_span("subject_span", subject_span, text)
    o0, o1 = _check_span("object_span", object_span, text)
    if s0 == s1:
        raise ValueError(f"subject_span {subject_span!r} is empty in {text!r}: there is no subject to mask")
    if o0 < s1 and s0 < o1 and o0 < o1:
        raise ValueError(f"subject_span {subject_span!r} and object_span {object_span!r} overlap in {text!r}")
    word = placeholder[0].upper() + placeholder[1:] if starts_sentence(text, s0) else placeholder
    masked = text[:s0] + word + text[s1:]
    shift = len(word) - (s1 - s0)
    obj = (o0 + shift, o1 + shift) if o0 >= s1 else (o0, o1)
    return masked, (s0, s0 + len(word)), obj


def mask_subjects(statements: pl.DataFrame, placeholder: str = DEFAULT_PLACEHOLDER) -> pl.DataFrame:
    """The statements frame with `text` and the four span columns of the subject-masked statements
    (same rows, order, other columns and dtypes)."""
    check_placeholder(placeholder)
    missing = [c for c in ["text", *SPAN_COLUMNS] if c not in statements.columns]
    if missing:
        raise ValueError(f"statements frame lacks column(s) {missing}; has {statements.columns}")
    rows = []
    for i, (text, *spans) in enumerate(statements.select("text", *SPAN_COLUMNS).iter_rows()):
        try:
            rows.append(mask_subject(text, (spans[0], spans[1]), (spans[2], spans[3]), placeholder))
        except ValueError as exc:
            where = (
                f"statement_id {statements['statement_id'][i]!r}"
                if "statement_id" in statements.columns
                else f"row {i}"
            )
            raise ValueError(f"{where}: {exc}") from None
    columns = {
        "text": [r[0] for r in rows],
        "subject_start": [r[1][0] for r in rows],
        "subject_end": [r[1][1] for r in rows],
        "object_start": [r[2][0] for r in rows],
        "object_end": [r[2][1] for r in rows],
    }
    return statements.with_columns(
        pl.Series(name, values, dtype=statements.schema[name]) for name, values in columns.items()
    )


def subject_masked_scores(
    loaded: LoadedModel,
    statements: pl.DataFrame,
    placeholder: str = DEFAULT_PLACEHOLDER,
    scorer: Callable[..., pl.DataFrame] | None = None,
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """Scores of the subject-masked statements, one row per statement in input order: columns
    `ll_sum_masked` and `ll_answer_sum_masked` (Float64), ready to append to statement_scores."""
    if scorer is None:  # imported here so the span helpers above need no torch
        from kcal_pipeline.scoring.clm import score_clm as scorer
    masked = mask_subjects(statements, placeholder)
    scores = scorer(
        loaded,
        masked["text"].to_list(),
        list(zip(masked["subject_start"], masked["subject_end"], strict=True)),
        list(zip(masked["object_start"], masked["object_end"], strict=True)),
        batch_size=batch_size,
        progress=progress,
    )
    return scores.select([pl.col(c).cast(pl.Float64).alias(out) for c, out in MASKED_COLUMNS.items()])
