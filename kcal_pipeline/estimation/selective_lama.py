"""Selective-LAMA confidence functions (Yoshikawa & Okazaki 2023; METHODS §2), adapted to closed sets.

Every function keeps the Base prediction ŷ = argmax_o ℓ_t(o) under the reduction (ties to the
lowest option index) and only changes how confident it is, so that they can be compared on the
same answers. The paper ranks answers of an open vocabulary; here the answer space is the
instance's options, so Reranking's K is the instance's option count (it varies) and Gap is taken
between the two best options. Token, Sent, Gap, Reranking and TemplateDiff are scores (higher =
more confident), not probabilities: they feed ranking metrics, never calibration ones.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.estimation.conditioning import answer_conditional_templates, require_answer_conditional
from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import option_probabilities, top_option
from kcal_pipeline.estimation.registry import Estimate, register

PAPER = "Yoshikawa & Okazaki 2023"
# TemplateDiff and the dropout passes exist for the summed scores only (scoring/subject_mask.py,
# scoring/stochastic.py keep ll_sum and ll_answer_sum).
SUMMED = ("sum", "answer_sum")
# Reranking's second scoring rule: the other length treatment of the same tokens.
SECOND_RULE = {"sum": "mean", "mean": "sum", "answer_sum": "answer_mean", "answer_mean": "answer_sum"}


def at_option(values: np.ndarray, option: np.ndarray) -> np.ndarray:
    """values[..., option] per cell: one option index per [I, T] cell of a [I, T, O] array."""
    return np.take_along_axis(values, option[..., None], axis=-1)[..., 0]


def base_prediction(cube: OptionScoreCube, reduction: str) -> np.ndarray:
    """ŷ [I, T]: argmax of the reduction's log-likelihoods, ties to the lowest option index."""
    return cube.ll(reduction).argmax(axis=-1)


@register(
    "token",
    label="Token",
    family="selective_lama",
    output_kind="score",
    reductions=ALL_REDUCTIONS,
    needs=("ll_answer_sum",),
    requires=require_answer_conditional,
    paper=PAPER,
)
def token(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = ℓ_answer_sum,t(ŷ): log p of the predicted option's answer tokens. Only where that is
    conditioned on the subject (the answer comes after it, conditioning.py): elsewhere it is the
    answer's prior, so those rows are not written."""
    predicted = base_prediction(cube, reduction)
    rows = np.zeros(cube.shape[:2], dtype=bool)
    rows[:, answer_conditional_templates(cube)] = True
    return Estimate(predicted, at_option(cube.scores["ll_answer_sum"], predicted), rows=rows)


@register(
    "sent",
    label="Sent",
    family="selective_lama",
    output_kind="score",
    reductions=ALL_REDUCTIONS,
    needs=("ll_mean",),
    paper=PAPER,
)
def sent(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = ℓ_mean,t(ŷ): the length-normalised log-likelihood of the predicted statement."""
    predicted = base_prediction(cube, reduction)
    return Estimate(predicted, at_option(cube.scores["ll_mean"], predicted))


@register(
    "gap",
    label="Gap",
    family="selective_lama",
    output_kind="score",
    reductions=ALL_REDUCTIONS,
    paper=PAPER,
)
def gap(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = ℓ_t(ŷ) − ℓ_t(runner-up) = log p_[1] − log p_[2]; 0 on a tie; +inf with one option (no
    runner-up: nothing could be confused with the answer)."""
    ll = cube.ll(reduction)
    predicted = ll.argmax(axis=-1)
    if ll.shape[-1] == 1:
        return Estimate(predicted, np.full(cube.shape[:2], np.inf))
    second, first = np.moveaxis(np.partition(ll, -2, axis=-1)[..., -2:], -1, 0)
    confidence = np.subtract(first, second, out=np.full_like(first, np.inf), where=np.isfinite(second))
    return Estimate(predicted, confidence)


def _has_second_rule(cube: OptionScoreCube, reduction: str) -> str | None:
    column = REDUCTIONS[SECOND_RULE[reduction]]
    return None if column in cube.scores else f"no {column} scores (Reranking's second rule)"


@register(
    "reranking",
    label="Reranking",
    family="selective_lama",
    output_kind="score",
    reductions=ALL_REDUCTIONS,
    requires=_has_second_rule,
    paper=PAPER,
)
def reranking(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = log2(K_i / rank of ŷ under the second rule), K_i = the instance's option count; the rule
    is sum ↔ mean (answer_sum ↔ answer_mean). Rank = 1 + the valid options the second rule scores
    strictly higher, so tied options share the better rank. 0 when ŷ comes last of K."""
    predicted = base_prediction(cube, reduction)
    other = cube.ll(SECOND_RULE[reduction])
    above = (other > at_option(other, predicted)[..., None]) & cube.valid
    rank = 1 + above.sum(axis=-1)
    return Estimate(predicted, np.log2(cube.n_options[:, None] / rank))


@register(
    "template_diff",
    label="TemplateDiff",
    family="selective_lama",
    output_kind="score",
    reductions=SUMMED,
    needs=("{ll}_masked",),
    paper=PAPER,
)
def template_diff(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = p_t(ŷ) − p_t^masked(ŷ), p^masked = softmax of the subject-masked statements' scores: how
    much of the confidence the subject adds over the template and the options alone (∈ [−1, 1])."""
    ll = cube.ll(reduction)
    predicted, p_top = top_option(ll, option_probabilities(ll))
    masked = option_probabilities(cube.scores[f"{REDUCTIONS[reduction]}_masked"])
    return Estimate(predicted, p_top - at_option(masked, predicted))


def dropout_probabilities(cube: OptionScoreCube, reduction: str, predicted: np.ndarray) -> np.ndarray:
    """p_m(ŷ) [I, T, M]: ŷ's probability in each stochastic pass m, softmax over the options of that
    pass (the [I, T, O, M] pass scores, −inf padded)."""
    passes = np.moveaxis(cube.scores[f"{REDUCTIONS[reduction]}_dropout"], -1, -2)  # [I, T, M, O]
    p = option_probabilities(passes)
    return np.take_along_axis(p, predicted[..., None, None], axis=-1)[..., 0]


@register(
    "dropout_mean",
    label="DropoutMean",
    family="selective_lama",
    output_kind="probability",
    reductions=SUMMED,
    needs=("{ll}_dropout",),
    paper=PAPER,
)
def dropout_mean(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = mean_m p_m(ŷ) over the M dropout passes; ŷ from the deterministic (dropout-off) scores."""
    predicted = base_prediction(cube, reduction)
    return Estimate(predicted, dropout_probabilities(cube, reduction, predicted).mean(axis=-1))


@register(
    "dropout_var",
    label="DropoutVar",
    family="selective_lama",
    output_kind="score",
    reductions=SUMMED,
    needs=("{ll}_dropout",),
    paper=PAPER,
)
def dropout_var(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = −Var_m p_m(ŷ) (population variance, ddof 0): the less the passes disagree, the more
    confident; ≤ 0, and 0 when every pass gives ŷ the same probability."""
    predicted = base_prediction(cube, reduction)
    return Estimate(predicted, -dropout_probabilities(cube, reduction, predicted).var(axis=-1))
