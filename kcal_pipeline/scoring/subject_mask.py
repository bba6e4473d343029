"""Statements with the subject masked (METHODS.md §2, TemplateDiff).

TemplateDiff = p(ŷ | statement) − p(ŷ | the same statement with the subject masked): how much of
the confidence comes from the subject rather than from the template and the object alone. How the
subject is masked follows the model's kind:
- masked LMs: by mask tokens, as Selective-LAMA does - one mask token per token the subject has in
  the statement (tokenized in context), in every masked copy, never scored (mlm.py, "Subject
  masking"). `placeholder` is not used.
- causal LMs: a causal LM has no mask token, so by a neutral placeholder (default "something"): the
  placeholder statements are scored like any other (same scorer, same spans), so `mask_subjects`
  returns a statements frame with `text` and the four span columns replaced.
Each row records the choice: `subject_mask_method` ("mask_tokens" / "placeholder") and
`subject_mask_text`, what stands in the subject's place - the mask tokens separated by single
spaces ("[MASK] [MASK]": the count is len(string_split(subject_mask_text, ' '))) or the placeholder
as it appears in the statement ("Something" at a sentence start).

Span arithmetic: the subject [s0, s1) becomes the placeholder [s0, s0 + len(placeholder)); an
object that ends at or before s0 keeps its span, one that starts at or after s1 moves by
len(placeholder) − (s1 − s0). Overlapping (non-empty) spans are an error. Spans count characters
(Python str indices), as everywhere in kcal.

Capitalisation rule: the placeholder's first character is upper-cased when the subject starts a
sentence, i.e. when the text before it - ignoring whitespace and opening quotes/brackets - is empty
or ends with '.', '!' or '?' ("[X] is in [Y]." → "Something is in Paris."). Anywhere else the
placeholder is used as given; it is never lower-cased (so "It" stays "It"). An abbreviation
before the subject ("St. [X]") would count as a sentence end; no curated template has one. A
statement with a context (statements.context_end > 0: demonstrations before it) is judged on its
own text, so its placeholder is capitalised as the same statement's without the context; the
context is left alone, stays before the statement and keeps its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.dataset.instances.context import CONTEXT_COLUMN  # where a statement's context ends

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

Span = tuple[int, int]

DEFAULT_PLACEHOLDER = "something"
# Scorer columns kept for the masked statements -> output column.
MASKED_COLUMNS = {"ll_sum": "ll_sum_masked", "ll_answer_sum": "ll_answer_sum_masked"}
METHOD_MASK_TOKENS, METHOD_PLACEHOLDER = "mask_tokens", "placeholder"
SCHEMA = {
    **dict.fromkeys(MASKED_COLUMNS.values(), pl.Float64),
    "subject_mask_method": pl.String,
    "subject_mask_text": pl.String,
}
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


def check_maskable(text: str, subject_span: Span, object_span: Span) -> tuple[Span, Span]:
    """The spans as ints, if the subject can be masked: a non-empty subject span that does not
    overlap the object, both inside the text."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {text!r}")
    s0, s1 = _check_span("subject_span", subject_span, text)
    o0, o1 = _check_span("object_span", object_span, text)
    if s0 == s1:
        raise ValueError(f"subject_span {subject_span!r} is empty in {text!r}: there is no subject to mask")
    if o0 < s1 and s0 < o1 and o0 < o1:
        raise ValueError(f"subject_span {subject_span!r} and object_span {object_span!r} overlap in {text!r}")
    return (s0, s1), (o0, o1)


def mask_subject(
    text: str,
    subject_span: Span,
    object_span: Span,
    placeholder: str = DEFAULT_PLACEHOLDER,
    context_end: int = 0,
) -> tuple[str, Span, Span]:
    """(masked text, placeholder span, object span in the masked text). The text before
    `context_end` (a context the statement follows) does not count for the capitalisation."""
    check_placeholder(placeholder)
    (s0, s1), (o0, o1) = check_maskable(text, subject_span, object_span)
    context_end = min(context_end or 0, s0)
    opens = starts_sentence(text[context_end:], s0 - context_end)
    word = placeholder[0].upper() + placeholder[1:] if opens else placeholder
    masked = text[:s0] + word + text[s1:]
    shift = len(word) - (s1 - s0)
    obj = (o0 + shift, o1 + shift) if o0 >= s1 else (o0, o1)
    return masked, (s0, s0 + len(word)), obj


def mask_subjects(statements: pl.DataFrame, placeholder: str = DEFAULT_PLACEHOLDER) -> pl.DataFrame:
    """The statements frame with `text` and the four span columns of the subject-masked statements
    (same rows, order, other columns and dtypes)."""
    check_placeholder(placeholder)
    ends = iter(context_ends_of(statements) or [0] * statements.height)
    rows = _per_row(statements, lambda text, s, o: mask_subject(text, s, o, placeholder, next(ends)))
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


def context_ends_of(statements: pl.DataFrame) -> list[int] | None:
    """The statements' context ends (nulls as 0), or None when the frame has no context_end
    column or no statement has a context: a scorer then runs exactly as without contexts."""
    if CONTEXT_COLUMN not in statements.columns:
        return None
    ends = statements[CONTEXT_COLUMN].fill_null(0).cast(pl.Int64)
    return ends.to_list() if (ends != 0).any() else None


def _per_row(statements: pl.DataFrame, fn: Callable[[str, Span, Span], Any]) -> list[Any]:
    """fn(text, subject_span, object_span) for every row; an error names the statement."""
    missing = [c for c in ["text", *SPAN_COLUMNS] if c not in statements.columns]
    if missing:
        raise ValueError(f"statements frame lacks column(s) {missing}; has {statements.columns}")
    rows = []
    for i, (text, *spans) in enumerate(statements.select("text", *SPAN_COLUMNS).iter_rows()):
        try:
            rows.append(fn(text, (spans[0], spans[1]), (spans[2], spans[3])))
        except ValueError as exc:
            where = (
                f"statement_id {statements['statement_id'][i]!r}"
                if "statement_id" in statements.columns
                else f"row {i}"
            )
            raise ValueError(f"{where}: {exc}") from None
    return rows


def subject_masked_scores(
    loaded: LoadedModel,
    statements: pl.DataFrame,
    placeholder: str = DEFAULT_PLACEHOLDER,
    scorer: Callable[..., pl.DataFrame] | None = None,
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """Scores of the subject-masked statements, one row per statement in input order, ready to
    append to statement_scores: `ll_sum_masked`, `ll_answer_sum_masked` (Float64) and the record
    `subject_mask_method`, `subject_mask_text` (see the module docstring).

    `scorer` is the model's scorer (engine.scorer_for); a masked LM's must take mask_subject=True
    (mlm.score_mlm does). `placeholder` applies to causal LMs only.
    """
    # imported here so the span helpers above need no torch
    from kcal_pipeline.scoring.mlm import score_mlm, subject_token_counts

    masked_lm = getattr(loaded, "kind", "clm") == "mlm"
    ends = context_ends_of(statements)
    context = {} if ends is None else {"context_ends": ends}
    if scorer is None:
        from kcal_pipeline.scoring.clm import score_clm

        variant = ScoringOptions.model_fields["mlm_variant"].default
        scorer = (lambda *a, **k: score_mlm(*a, variant=variant, **k)) if masked_lm else score_clm
    if masked_lm:
        spans = _per_row(statements, check_maskable)
        subjects, objects = [s for s, _ in spans], [o for _, o in spans]
        texts = statements["text"].to_list()
        scores = scorer(
            loaded,
            texts,
            subjects,
            objects,
            mask_subject=True,
            batch_size=batch_size,
            progress=progress,
            **context,
        )
        mask = loaded.tokenizer.mask_token
        record = {
            "subject_mask_method": [METHOD_MASK_TOKENS] * len(texts),
            "subject_mask_text": [
                " ".join([mask] * n) for n in subject_token_counts(loaded.tokenizer, texts, subjects, objects)
            ],
        }
    else:
        masked = mask_subjects(statements, placeholder)
        scores = scorer(
            loaded,
            masked["text"].to_list(),
            list(zip(masked["subject_start"], masked["subject_end"], strict=True)),
            list(zip(masked["object_start"], masked["object_end"], strict=True)),
            batch_size=batch_size,
            progress=progress,
            **context,
        )
        record = {
            "subject_mask_method": [METHOD_PLACEHOLDER] * masked.height,
            "subject_mask_text": [
                text[start:end]
                for text, start, end in masked.select("text", "subject_start", "subject_end").iter_rows()
            ],
        }
    return scores.select(
        [pl.col(c).cast(pl.Float64).alias(out) for c, out in MASKED_COLUMNS.items()]
    ).with_columns(pl.Series(name, values, dtype=SCHEMA[name]) for name, values in record.items())
