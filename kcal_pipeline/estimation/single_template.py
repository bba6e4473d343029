"""Estimators from one template's option distribution (METHODS §2): Base, Margin and entropy.

p_t = softmax over the options of one (instance, template); padded options have ll = −inf and so
probability 0. The prediction is the argmax, ties going to the lowest option index (np.argmax
returns the first maximum). Every one runs under all four reductions (Kissling et al. App. B).
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import option_probabilities, top_option, top_two_gap
from kcal_pipeline.estimation.registry import BASELINE, Estimate, register

SEED_PAPERS = "Kissling et al.; Tinner 2024"
# "sum" first: the report's summary reads an estimator's first reduction (reporting/html.py).


@register(
    BASELINE,
    label="Base",
    family="single_template",
    reductions=ALL_REDUCTIONS,
    in_summary=True,
    main=True,
    baseline=True,
    family_line=True,
    paper=SEED_PAPERS,
)
def base(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = max_o p_t(o)."""
    ll = cube.ll(reduction)
    p = option_probabilities(ll)
    return Estimate(*top_option(ll, p))


@register(
    "margin",
    label="Margin",
    family="single_template",
    reductions=ALL_REDUCTIONS,
    in_summary=True,
    main=True,
    paper=SEED_PAPERS,
)
def margin(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = p_[1] − p_[2]; with one option the runner-up is a padded 0, so Margin = Base (= 1)."""
    ll = cube.ll(reduction)
    p = option_probabilities(ll)
    return Estimate(ll.argmax(axis=-1), top_two_gap(p))


@register(
    "entropy",
    label="Entropy",
    family="single_template",
    reductions=ALL_REDUCTIONS,
    main=True,
    paper="Shannon entropy normalised by log|O| (METHODS §2)",
)
def entropy(cube: OptionScoreCube, reduction: str) -> Estimate:
    """C = 1 − H(p_t)/log|O_it|, |O_it| the options scored in that (instance, template): 1 when all
    mass is on one option, 0 when it is uniform, whatever the option count. One option: H = 0 and
    log 1 = 0, so C = 1 by definition (as Base and Margin). Clipped to [0, 1] against rounding."""
    ll = cube.ll(reduction)
    p = option_probabilities(ll)
    h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)  # 0·log 0 = 0 (padded options)
    k = cube.valid.sum(axis=-1)
    normalised = 1.0 - h / np.log(np.maximum(k, 2))
    return Estimate(ll.argmax(axis=-1), np.where(k > 1, np.clip(normalised, 0.0, 1.0), 1.0))
