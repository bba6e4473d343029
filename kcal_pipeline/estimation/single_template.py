"""Estimators from one template's option distribution (METHODS §2): Base and Margin.

p_t = softmax over the options of one (instance, template); padded options have ll = −inf and so
probability 0. The prediction is the argmax, ties going to the lowest option index (np.argmax
returns the first maximum).
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.estimation.cube import OptionScoreCube
from kcal_pipeline.estimation.registry import Estimate, register

SEED_PAPERS = "Kissling et al.; Tinner 2024"


def option_probabilities(ll: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; shifting by the max keeps exp() from overflowing. Rows with no
    valid option (all −inf) come out as zeros instead of NaN."""
    top = ll.max(axis=-1, keepdims=True)
    z = np.exp(ll - np.where(np.isfinite(top), top, 0.0))
    total = z.sum(axis=-1, keepdims=True)
    return np.divide(z, total, out=np.zeros_like(z), where=total > 0)


def _top(ll: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    predicted = ll.argmax(axis=-1)
    return predicted, np.take_along_axis(p, predicted[..., None], axis=-1)[..., 0]


@register("base", label="Base", family="single_template", in_summary=True, paper=SEED_PAPERS)
def base(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = max_o p_t(o)."""
    ll = cube.ll(reduction)
    p = option_probabilities(ll)
    return Estimate(*_top(ll, p))


@register("margin", label="Margin", family="single_template", in_summary=True, paper=SEED_PAPERS)
def margin(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = p_[1] − p_[2]; with one option the runner-up is a padded 0, so Margin = Base (= 1)."""
    ll = cube.ll(reduction)
    p = option_probabilities(ll)
    predicted, _ = _top(ll, p)
    if p.shape[-1] == 1:
        return Estimate(predicted, p[..., 0])
    second, first = np.moveaxis(np.partition(p, -2, axis=-1)[..., -2:], -1, 0)
    return Estimate(predicted, first - second)
