"""Recalibrated Base, Margin and template marginal: temperature scaling (Guo et al. 2017), Platt
scaling (Platt 1999) and isotonic regression (Zadrozny & Elkan 2002), fitted on the dev split.

None of the seed papers recalibrates, and users ask whether a cheap post-hoc map repairs what the
raw estimators get wrong. Each map is fitted per group, on the group's dev-split rows, labelled
with the underlying estimator's own correctness (ŷ ∈ G), and applied to every row of the group
(dev rows are in-sample; the metrics read the test split). Groups: template grain (Base, Margin)
one per (template, answer_space_k); instance grain (template marginal) one per answer_space_k.
The prediction is always the plain estimator's, so a change in ACE is calibration alone.

- temperature: p = softmax(ll/T) (template marginal: the mean over templates of softmax(ll_t/T)),
  T minimising the mean dev NLL of the gold set, −log Σ_{g∈G} p(g), by a bounded search over
  log T ∈ [log 0.05, log 20]; then the plain formula on the scaled distribution.
- platt: logistic regression of correctness on the raw confidence, σ(slope·C + intercept),
  without a penalty but on Platt's smoothed targets ((N₊+1)/(N₊+2) and 1/(N₋+2)), so that a dev
  set where confidence separates right from wrong gives a finite slope instead of a 0/1 step.
- isotonic: the monotone least-squares map of the raw confidence to correctness, clipped to [0, 1].

A group without dev rows gets no rows (nothing was fitted); Platt and isotonic fall back to the
identity when the dev rows are all right or all wrong; isotonic needs ≥ 2 dev rows. Every group
leaves a row in estimator_fits saying which it was.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgWarning
from scipy.optimize import minimize_scalar
from scipy.special import expit

from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import (
    option_probabilities,
    template_marginal,
    top_option,
    top_two_gap,
)
from kcal_pipeline.estimation.registry import Estimate, Grain, register

FAMILY = "recalibration"
TEMPERATURE_BOUNDS = (0.05, 20.0)
NO_DEV = "no dev-split instances to fit on"
NOTE_NO_DEV = "no dev-split instances in this group: no rows"
NOTE_ONE_CLASS = "one class on dev: identity"
NOTE_TOO_FEW = "fewer than 2 dev instances: no rows"
NOTE_NO_GOLD = "no dev instance has its gold option scored: identity (temperature 1)"


# --- the underlying estimators, at a temperature ----------------------------------------------------
# Each returns (predicted, confidence, rows) as the plain estimator does; `temperature` has the
# estimate's shape ([I, T] or [I]) or is 1. The prediction never depends on the temperature.
# Template-grain rows are the paraphrase templates only: recalibration is for the main estimators
# on the relation's own templates, not for their marker or perturbation variants (whose raw Base
# is what the marker and consistency studies compare).


def _paraphrase_cells(cube: OptionScoreCube) -> np.ndarray:
    paraphrase = np.zeros(cube.shape[1], dtype=bool)
    paraphrase[cube.paraphrase_templates()] = True
    return cube.present & paraphrase


def _base(cube: OptionScoreCube, reduction: str, temperature: float | np.ndarray = 1.0):
    ll = cube.ll(reduction)
    p = option_probabilities(ll, np.asarray(temperature)[..., None])
    return (*top_option(ll, p), _paraphrase_cells(cube))


def _margin(cube: OptionScoreCube, reduction: str, temperature: float | np.ndarray = 1.0):
    ll = cube.ll(reduction)
    p = option_probabilities(ll, np.asarray(temperature)[..., None])
    return ll.argmax(axis=-1), top_two_gap(p), _paraphrase_cells(cube)


def _template_marginal(cube: OptionScoreCube, reduction: str, temperature: float | np.ndarray = 1.0):
    """ŷ = argmax of the plain marginal; C = the scaled marginal's mass on ŷ (the argmax of a mean
    of tempered softmaxes can move with T; keeping ŷ keeps accuracy out of the comparison)."""
    plain, present = template_marginal(cube, reduction)
    predicted = plain.argmax(axis=-1)
    if np.ndim(temperature) == 0 and temperature == 1.0:
        scaled = plain
    else:
        scaled, _ = template_marginal(cube, reduction, np.asarray(temperature)[:, None, None])
    return predicted, scaled[np.arange(len(predicted)), predicted], present


# --- log Σ_{g∈G} p_T(g) of the dev rows, for the temperature fit --------------------------------------
# In log space, so that a gold option far below the top does not underflow to −log 0 at small T.
# Only rows with a scored gold option count: the others add +inf at every T and carry no signal.
# Each returns (T ↦ per-row log mass, the number of rows it covers).


def _log_sum_exp(x: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """log Σ exp(x) over `axis`, shifted by the max; −inf where every term is −inf. (scipy's
    logsumexp gives the same numbers, at several times the cost per call of the T search.)"""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - top).sum(axis=axis)) + np.squeeze(top, axis=axis)


def _log_gold_mass_single(cube: OptionScoreCube, reduction: str, instances: np.ndarray, template: int):
    gold = cube.gold[instances] & cube.valid[instances, template, :]
    usable = gold.any(axis=-1)
    ll, gold = cube.ll(reduction)[instances[usable], template, :], gold[usable]

    def log_mass(temperature: float) -> np.ndarray:
        scaled = ll / temperature
        return _log_sum_exp(np.where(gold, scaled, -np.inf), -1) - _log_sum_exp(scaled, -1)

    return log_mass, int(usable.sum())


def _log_gold_mass_marginal(cube: OptionScoreCube, reduction: str, instances: np.ndarray, template: None):
    templates = cube.paraphrase_templates()
    present = cube.present[instances][:, templates]
    gold = cube.gold[instances][:, None, :] & cube.valid[instances][:, templates, :] & present[..., None]
    usable = gold.any(axis=(1, 2))
    ll, gold = cube.ll(reduction)[instances[usable]][:, templates, :], gold[usable]
    log_count = np.log(present[usable].sum(axis=1))

    def log_mass(temperature: float) -> np.ndarray:
        scaled = ll / temperature
        with np.errstate(invalid="ignore"):  # absent templates: −inf − (−inf), masked below
            log_p = scaled - _log_sum_exp(scaled, -1)[..., None]
        return _log_sum_exp(np.where(gold, log_p, -np.inf), (1, 2)) - log_count

    return log_mass, int(usable.sum())


@dataclass(frozen=True)
class _Underlying:
    name: str
    label: str
    grain: Grain
    estimate: Callable
    log_gold_mass: Callable


UNDERLYING = (
    _Underlying("base", "Base", "template", _base, _log_gold_mass_single),
    _Underlying("margin", "Margin", "template", _margin, _log_gold_mass_single),
    _Underlying(
        "template_marginal", "Template marginal", "instance", _template_marginal, _log_gold_mass_marginal
    ),
)


# --- groups --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    template: int | None  # template grain: its index on the cube's template axis
    answer_space_k: int
    instances: np.ndarray  # the instances with a row in this group, ascending
    dev: np.ndarray  # those of the dev split

    def cells(self, instances: np.ndarray) -> tuple:
        """Index of `instances`' cells in an [I, T] (template grain) or [I] array."""
        return (instances,) if self.template is None else (instances, self.template)

    def fit_row(self, cube: OptionScoreCube, parameter: str, value: float | None, note: str | None = None):
        return {
            "parameter": parameter,
            "value": value,
            "template_id": None if self.template is None else str(cube.template_ids[self.template]),
            "answer_space_k": self.answer_space_k,
            "n_dev": len(self.dev),
            "note": note,
        }


def _groups(cube: OptionScoreCube, grain: Grain, rows: np.ndarray) -> Iterator[_Group]:
    is_dev = cube.split == "dev"
    columns = [(t, rows[:, t]) for t in range(rows.shape[1])] if grain == "template" else [(None, rows)]
    for template, has_row in columns:
        for k in np.unique(cube.answer_space_k[has_row]).tolist():
            instances = np.flatnonzero(has_row & (cube.answer_space_k == k))
            yield _Group(template, int(k), instances, instances[is_dev[instances]])


# --- the three maps ------------------------------------------------------------------------------


def fit_temperature(log_gold_mass: Callable[[float], np.ndarray]) -> float:
    """T minimising the mean NLL −log Σ_{g∈G} p_T(g), searched over log T (scale-symmetric)."""
    result = minimize_scalar(
        lambda log_t: -float(np.mean(log_gold_mass(math.exp(log_t)))),
        bounds=tuple(math.log(b) for b in TEMPERATURE_BOUNDS),
        method="bounded",
    )
    return math.exp(result.x)


def fit_platt(confidence: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of an unpenalised logistic regression on Platt's smoothed targets: each
    dev row enters once as correct with weight t and once as wrong with weight 1 − t."""
    from sklearn.linear_model import LogisticRegression  # scikit-learn takes ~1 s to import

    n_right = int(correct.sum())
    n_wrong = len(correct) - n_right
    target = np.where(correct, (n_right + 1) / (n_right + 2), 1 / (n_wrong + 2))
    # Newton–Cholesky: one feature, so each step is exact and a fit takes a few iterations (lbfgs
    # at this tolerance took ~50 ms per group and dominated the whole estimation stage).
    with warnings.catch_warnings():  # an ill-conditioned Hessian makes sklearn finish with lbfgs: fine
        warnings.simplefilter("ignore", LinAlgWarning)
        model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=1000).fit(
            np.concatenate([confidence, confidence])[:, None],
            np.concatenate([np.ones(len(correct)), np.zeros(len(correct))]),
            sample_weight=np.concatenate([target, 1 - target]),
        )
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def fit_isotonic(confidence: np.ndarray, correct: np.ndarray):
    """The fitted IsotonicRegression (increasing, outputs in [0, 1], clipped outside the dev range)."""
    from sklearn.isotonic import IsotonicRegression  # scikit-learn takes ~1 s to import

    model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    return model.fit(confidence, correct.astype(np.float64))


def _temperature(underlying: _Underlying) -> Callable[[OptionScoreCube, str], Estimate]:
    def estimate(cube: OptionScoreCube, reduction: str) -> Estimate:
        _, _, rows = underlying.estimate(cube, reduction)
        temperature, fitted, fits = np.ones(rows.shape), np.zeros(rows.shape, dtype=bool), []
        for group in _groups(cube, underlying.grain, rows):
            if not len(group.dev):
                fits.append(group.fit_row(cube, "temperature", None, NOTE_NO_DEV))
                continue
            log_mass, n_usable = underlying.log_gold_mass(cube, reduction, group.dev, group.template)
            value, note = (fit_temperature(log_mass), None) if n_usable else (1.0, NOTE_NO_GOLD)
            temperature[group.cells(group.instances)] = value
            fitted[group.cells(group.instances)] = True
            fits.append(group.fit_row(cube, "temperature", value, note))
        predicted, confidence, _ = underlying.estimate(cube, reduction, temperature)
        return Estimate(predicted, confidence, rows=fitted, fits=tuple(fits))

    return estimate


def _on_confidence(underlying: _Underlying, method: str) -> Callable[[OptionScoreCube, str], Estimate]:
    """Platt or isotonic: a map of the raw confidence fitted per group."""

    def estimate(cube: OptionScoreCube, reduction: str) -> Estimate:
        predicted, raw, rows = underlying.estimate(cube, reduction)
        index = np.arange(len(predicted)).reshape(-1, *([1] * (predicted.ndim - 1)))
        correct = cube.gold[index, predicted]
        confidence, fitted, fits = raw.copy(), np.zeros(rows.shape, dtype=bool), []
        for group in _groups(cube, underlying.grain, rows):
            x_dev, y_dev = raw[group.cells(group.dev)], correct[group.cells(group.dev)]
            cells = group.cells(group.instances)
            one_class = y_dev.all() or not y_dev.any()
            if method == "platt":
                if not len(group.dev):
                    fits.append(group.fit_row(cube, "slope", None, NOTE_NO_DEV))
                    continue
                if one_class:
                    fits += [group.fit_row(cube, p, None, NOTE_ONE_CLASS) for p in ("slope", "intercept")]
                else:
                    slope, intercept = fit_platt(x_dev, y_dev)
                    confidence[cells] = expit(slope * raw[cells] + intercept)
                    fits += [group.fit_row(cube, "slope", slope), group.fit_row(cube, "intercept", intercept)]
            else:
                if len(group.dev) < 2:
                    note = NOTE_TOO_FEW if len(group.dev) else NOTE_NO_DEV
                    fits.append(group.fit_row(cube, "n_steps", None, note))
                    continue
                if one_class:
                    fits.append(group.fit_row(cube, "n_steps", None, NOTE_ONE_CLASS))
                else:
                    model = fit_isotonic(x_dev, y_dev)
                    confidence[cells] = model.predict(raw[cells])
                    fits.append(group.fit_row(cube, "n_steps", float(np.unique(model.y_thresholds_).size)))
            fitted[cells] = True
        return Estimate(predicted, confidence, rows=fitted, fits=tuple(fits))

    return estimate


def _has_dev(cube: OptionScoreCube, reduction: str) -> str | None:
    return None if (cube.split == "dev").any() else NO_DEV


METHODS = {
    "temperature": ("temperature scaling", "Guo et al. 2017"),
    "platt": ("Platt scaling", "Platt 1999"),
    "isotonic": ("isotonic regression", "Zadrozny & Elkan 2002"),
}


def _register() -> None:
    for underlying in UNDERLYING:
        for method, (label, paper) in METHODS.items():
            fn = _temperature(underlying) if method == "temperature" else _on_confidence(underlying, method)
            register(
                f"{underlying.name}_{method}",
                label=f"{underlying.label} + {label}",
                family=FAMILY,
                grain=underlying.grain,
                reductions=ALL_REDUCTIONS,
                requires=_has_dev,
                paper=paper,
            )(fn)


_register()
