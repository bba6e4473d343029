"""Multi-answer confidence (MACE: Wang et al. 2026, "Evaluating and Calibrating LLM Confidence on
Questions with Multiple Correct Answers"): SCA, SNCA and SFCA over the question templates.

With several correct answers the top option's softmax share understates what a model knows: the
correct answers compete for one unit of probability. MACE sums *absolute* answer probabilities
instead, so they add up. A MACE "sample" is one generated answer; here it is a (template t ∈ Q,
option o) pair, and a cluster C_m is one option m. Q = the templates whose `ll_answer_sum` is the
answer given the question (conditioning.answer_conditional_templates: the question templates),
T_q = how many of them an instance has, and a_t(o) = exp(ll_answer_sum_t(o)), not normalised.

- SCA_τ(C_m) = (1/T_q) Σ_{t∈Q} a_t(m)·1[a_t(m) > τ]
- ŷ = argmax_m SCA_0(C_m) (ties: the lowest option index), the same for every τ and estimator
- SCA:  C = Σ_m SCA_τ(C_m), the mass on all options above τ
- SNCA: C = SCA_τ(C_ŷ) / Σ_m SCA_τ(C_m) (0 when nothing is above τ)
- SFCA: C = (1/T_q) Σ_{t∈Q} 1[ỹ_t = ŷ ∧ a_t(ŷ) > τ], ỹ_t = argmax_o a_t(o)

`*_tau0` use τ = 0. `*_tuned` take the τ of TAU_GRID with the lowest Brier score (C − 1[correct])²
on the dev-split instances of the same answer space (ties: the smallest τ), as MACE tunes on a dev
split; the paper finds τ = 0 about as good, which these estimators let a user check. SCA's sum is
capped at 1: it adds probabilities of different answer strings under one prefix, which a real model
keeps near or below 1 but need not (strings that extend one another), and a confidence above 1
would leave the calibration metrics undefined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kcal_pipeline.estimation.conditioning import answer_conditional_templates, require_answer_conditional
from kcal_pipeline.estimation.cube import OptionScoreCube
from kcal_pipeline.estimation.registry import Estimate, register

PAPER = "Wang et al. 2026 (MACE)"
FAMILY = "multi_answer"
REDUCTION = "answer_sum"  # the answer's log-probability given the question (MACE's a_t)
# The thresholds *_tuned choose from; 0 first, so a tie keeps the untuned estimator.
TAU_GRID = (0.0, 1e-4, 1e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
NO_DEV = "no dev-split instances to tune τ on"


@dataclass(frozen=True)
class _Samples:
    """The (question template, option) samples of every instance."""

    probability: np.ndarray  # [I, Q, O] a_t(o); 0 for an unscored option or absent template
    n_templates: np.ndarray  # [I] T_q
    per_template: np.ndarray  # [I, Q] ỹ_t
    predicted: np.ndarray  # [I] ŷ


def _samples(cube: OptionScoreCube) -> _Samples:
    questions = answer_conditional_templates(cube)
    ll = cube.ll(REDUCTION)[:, questions, :]
    probability = np.exp(ll)  # exp(−inf) = 0 for padding
    n_templates = cube.present[:, questions].sum(axis=1)
    sca0 = _sca(probability, n_templates, 0.0)
    # Only options scored on some question template compete: an option whose a_t underflows to 0
    # must still beat a padded slot of lower index.
    scored = cube.valid[:, questions, :].any(axis=1)
    predicted = np.where(scored, sca0, -1.0).argmax(axis=1)
    # argmax of ll = argmax of a_t (exp is increasing), without ties from underflow
    return _Samples(probability, n_templates, ll.argmax(axis=2), predicted)


def _sca(probability: np.ndarray, n_templates: np.ndarray, tau: float) -> np.ndarray:
    """[I, O] SCA_τ(C_m); 0 for an instance without question templates."""
    total = np.where(probability > tau, probability, 0.0).sum(axis=1)
    counts = n_templates[:, None].astype(np.float64)
    return np.divide(total, counts, out=np.zeros_like(total), where=counts > 0)


def _confidence(name: str, s: _Samples, tau: float) -> np.ndarray:
    """[I] SCA, SNCA or SFCA at threshold τ."""
    n_instances = len(s.predicted)
    if name == "sfca":
        top = np.take_along_axis(s.probability, s.predicted[:, None, None], axis=2)[..., 0]  # a_t(ŷ)
        # a_t(ŷ) > τ ≥ 0 holds only on a template the instance has
        agree = (s.per_template == s.predicted[:, None]) & (top > tau)
        counts = s.n_templates.astype(np.float64)
        return np.divide(agree.sum(axis=1), counts, out=np.zeros(n_instances), where=counts > 0)
    sca = _sca(s.probability, s.n_templates, tau)
    total = sca.sum(axis=1)
    if name == "sca":
        return np.minimum(total, 1.0)
    top = sca[np.arange(n_instances), s.predicted]
    return np.divide(top, total, out=np.zeros(n_instances), where=total > 0)


def at_threshold(cube: OptionScoreCube, name: str, tau: float) -> Estimate:
    """SCA, SNCA or SFCA ("sca", "snca", "sfca") at one τ; rows for instances with a question template."""
    s = _samples(cube)
    return Estimate(s.predicted, _confidence(name, s, tau), rows=s.n_templates > 0)


def _at_zero(name: str) -> Callable[[OptionScoreCube, str], Estimate]:
    return lambda cube, reduction: at_threshold(cube, name, 0.0)


def _tuned(name: str) -> Callable[[OptionScoreCube, str], Estimate]:
    def estimate(cube: OptionScoreCube, reduction: str) -> Estimate:
        """τ from TAU_GRID with the lowest dev Brier score per answer space (answer_space_k and
        draw; ties: the smallest τ); an answer space without dev instances gets no rows, and a fit
        row saying so."""
        s = _samples(cube)
        n_instances = len(s.predicted)
        grid = np.stack([_confidence(name, s, tau) for tau in TAU_GRID])  # [G, I]
        correct = cube.gold[np.arange(n_instances), s.predicted].astype(np.float64)
        answered = s.n_templates > 0
        dev = answered & (cube.split == "dev")
        chosen = np.full(n_instances, -1)
        fits = []
        spaces, space_of = cube.answer_spaces()
        for index in np.unique(space_of[answered]).tolist():
            k, draw = spaces[index]
            space = {"answer_space_k": k, "answer_space_draw": draw}
            group = answered & (space_of == index)
            on_dev = group & dev
            n_dev = int(on_dev.sum())
            if n_dev == 0:
                fits.append(
                    {
                        "parameter": "tau",
                        **space,
                        "n_dev": 0,
                        "note": "no dev-split instances in this answer space: no rows",
                    }
                )
                continue
            brier = ((grid[:, on_dev] - correct[on_dev]) ** 2).mean(axis=1)
            best = int(np.argmin(brier))  # the first minimum: the smallest τ
            chosen[group] = best
            fits.append({"parameter": "tau", "value": TAU_GRID[best], **space, "n_dev": n_dev})
        confidence = grid[np.maximum(chosen, 0), np.arange(n_instances)]
        return Estimate(s.predicted, confidence, rows=chosen >= 0, fits=tuple(fits))

    return estimate


def require_answer_conditional_and_dev(cube: OptionScoreCube, reduction: str) -> str | None:
    return require_answer_conditional(cube, reduction) or (None if (cube.split == "dev").any() else NO_DEV)


def _register() -> None:
    common = dict(family=FAMILY, grain="instance", reductions=(REDUCTION,), paper=PAPER, main=True)
    for k, (name, label) in enumerate((("sca", "SCA"), ("snca", "SNCA"), ("sfca", "SFCA"))):
        register(
            f"{name}_tau0",
            label=f"{label} (τ = 0)",
            requires=require_answer_conditional,
            family_line=k == 0,
            **common,
        )(_at_zero(name))
        register(
            f"{name}_tuned", label=f"{label} (τ tuned)", requires=require_answer_conditional_and_dev, **common
        )(_tuned(name))


_register()
