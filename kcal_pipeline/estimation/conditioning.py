"""Which templates an answer-conditional estimator reads (METHODS §2: SCA, SNCA, Token).

Those estimators need log P(answer | question), and a causal LM's `ll_answer_sum` is the answer's
log-probability given the text *before* it. That is conditioned on the question only where the
subject slot comes before the object slot: for "[Y] received [X]." the answer opens the sentence
and its score ignores the question entirely. Text after the answer never changes it (causal
attention), so only the order of the two slots matters.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.dataset.templates import OBJECT_SLOT, SUBJECT_SLOT
from kcal_pipeline.estimation.cube import OptionScoreCube

NO_ANSWER_CONDITIONAL = "no answer-conditional templates (the answer slot comes first, or no templates table)"
QUESTION_KIND = "question"  # question-answer templates, the answer last (core/options.TEMPLATE_KINDS)


def subject_before_object(text: str) -> bool:
    """Whether the answer slot [Y] follows the subject slot [X], so the answer sees the question."""
    return text.index(SUBJECT_SLOT) < text.index(OBJECT_SLOT)


def answer_conditional_templates(cube: OptionScoreCube) -> np.ndarray:
    """Indices (on the cube's template axis, ascending) of the templates whose `ll_answer_sum` is
    log P(answer | question): the question templates when the cube has any (MACE), else the
    curated templates whose answer comes after the subject. Empty when there are none, or when the
    cube was built without the templates table (kinds and texts unknown): an estimator that needs
    them should then be skipped with that reason rather than read an unconditioned score.
    """
    kinds = cube.template_kinds
    questions = np.flatnonzero(kinds == QUESTION_KIND)
    if questions.size or cube.template_texts is None:
        return questions.astype(np.int64)
    return np.array(
        [
            t
            for t, (kind, text) in enumerate(zip(kinds, cube.template_texts, strict=True))
            if kind == "curated" and subject_before_object(text)
        ],
        dtype=np.int64,
    )


def require_answer_conditional(cube: OptionScoreCube, reduction: str) -> str | None:
    """The registry requirement of an estimator that reads log P(answer | question)."""
    return None if answer_conditional_templates(cube).size else NO_ANSWER_CONDITIONAL
