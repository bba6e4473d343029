"""Recalibrated Base, Margin and template marginal: temperature scaling (Guo et al. 2017), Platt
scaling (Platt 1999) and isotonic regression (Zadrozny & Elkan 2002), fitted on the dev split.

None of the seed papers recalibrates, and users ask whether a cheap post-hoc map repairs what the
raw estimators get wrong. Each map is fitted per group, on the group's dev-split rows, labelled
with the underlying estimator's own correctness (ŷ ∈ G), and applied to every row of the group
(dev rows are in-sample; the metrics read the test split). Groups: template grain (Base, Margin)
one per (template, answer space); instance grain (template marginal) one per answer space, an answer
space being (answer_space_k, answer_space_draw): each draw of the option-count sweep is fitted alone.
The prediction is always the plain estimator's, so a change in ACE is calibration alone.

- temperature: p = softmax(ll/T) (template marginal: the mean over templates of softmax(ll_t/T)),
  T ∈ [0.05, 20] minimising the mean dev NLL of the gold set, −log Σ_{g∈G} p(g) (the global
  minimum: a 13-point grid in log T, then Newton between the best point's neighbours); then the
  plain formula on the scaled distribution.
- platt: logistic regression of correctness on the raw confidence, σ(slope·C + intercept),
  without a penalty but on Platt's smoothed targets ((N₊+1)/(N₊+2) and 1/(N₋+2)), so that a dev
  set where confidence separates right from wrong gives a finite slope instead of a 0/1 step.
- isotonic: the monotone least-squares map of the raw confidence to correctness (PAVA), linear
  between the fitted points and clipped to the end values outside them.
The fits run for all groups of a (cube, reduction) at once (estimation/fitting.py).

A group without dev rows gets no rows (nothing was fitted); Platt and isotonic fall back to the
identity when the dev rows are all right or all wrong; isotonic needs ≥ 2 dev rows; temperature is
1 when no dev row's gold mass depends on T. Every group leaves a row in estimator_fits saying which
it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.fitting import GoldMassRows, expit, fit_isotonic, fit_platt, fit_temperatures
from kcal_pipeline.estimation.probabilities import (
    marginal_option_probabilities,
    option_probabilities,
    top_option,
    top_two_gap,
)
from kcal_pipeline.estimation.registry import Estimate, Grain, register

FAMILY = "recalibration"
NO_DEV = "no dev-split instances to fit on"
NOTE_NO_DEV = "no dev-split instances in this group: no rows"
NOTE_ONE_CLASS = "one class on dev: identity"
NOTE_TOO_FEW = "fewer than 2 dev instances: no rows"
NOTE_NO_GOLD = "no dev instance has its gold option scored: identity (temperature 1)"
NOTE_FLAT = (
    "the dev NLL does not depend on T (no dev instance has a wrong option scored apart): temperature 1"
)


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
    plain, present = marginal_option_probabilities(cube, reduction)
    predicted = plain.argmax(axis=-1)
    if np.ndim(temperature) == 0 and temperature == 1.0:
        scaled = plain
    else:
        scaled, _ = marginal_option_probabilities(cube, reduction, np.asarray(temperature)[:, None, None])
    return predicted, scaled[np.arange(len(predicted)), predicted], present


# --- the temperature fit's dev rows ------------------------------------------------------------------
# Only rows with a scored gold option count: the others add +inf at every T and carry no signal.


def _gold_mass_single(cube: OptionScoreCube, reduction: str, cells: tuple) -> GoldMassRows:
    instances, templates = cells
    ll = cube.ll(reduction)[instances, templates, :][:, None, :]
    gold = (cube.gold[instances] & cube.valid[instances, templates, :])[:, None, :]
    return GoldMassRows(ll, gold, np.zeros(len(instances)), np.empty(0, dtype=np.intp))


def _gold_mass_marginal(cube: OptionScoreCube, reduction: str, cells: tuple) -> GoldMassRows:
    (instances,) = cells
    templates = cube.paraphrase_templates()
    present = cube.present[instances][:, templates]
    ll = np.where(present[..., None], cube.ll(reduction)[instances][:, templates, :], -np.inf)
    gold = cube.gold[instances][:, None, :] & cube.valid[instances][:, templates, :] & present[..., None]
    with np.errstate(divide="ignore"):  # rows without templates are not usable: dropped
        log_count = np.log(present.sum(axis=1))
    return GoldMassRows(ll, gold, log_count, np.empty(0, dtype=np.intp))


@dataclass(frozen=True)
class _Underlying:
    name: str
    label: str
    grain: Grain
    estimate: Callable
    gold_mass_rows: Callable


UNDERLYING = (
    _Underlying("base", "Base", "template", _base, _gold_mass_single),
    _Underlying("margin", "Margin", "template", _margin, _gold_mass_single),
    _Underlying(
        "template_marginal", "Template marginal", "instance", _template_marginal, _gold_mass_marginal
    ),
)


# --- groups --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Groups:
    """The estimate's cells with a row, each with its group: (template, answer space) at template
    grain, the answer space at instance grain; groups ordered by template, then k, then draw."""

    cells: tuple  # (instances,) or (instances, templates), one entry per cell
    group: np.ndarray  # [cells] group index
    keys: list  # per group: (template index or None, answer_space_k, answer_space_draw)
    dev: np.ndarray  # [cells] in the dev split

    @property
    def n(self) -> int:
        return len(self.keys)

    @cached_property
    def n_dev(self) -> np.ndarray:
        return np.bincount(self.group[self.dev], minlength=self.n)

    def dev_cells(self, keep: np.ndarray | None = None) -> tuple:
        mask = self.dev if keep is None else self.dev & keep
        return tuple(c[mask] for c in self.cells)

    def fit_row(self, cube: OptionScoreCube, g: int, parameter: str, value, note: str | None = None) -> dict:
        template, k, draw = self.keys[g]
        return {
            "parameter": parameter,
            "value": None if value is None else float(value),
            "template_id": None if template is None else str(cube.template_ids[template]),
            "answer_space_k": k,
            "answer_space_draw": draw,
            "n_dev": int(self.n_dev[g]),
            "note": note,
        }


def _groups(cube: OptionScoreCube, grain: Grain, rows: np.ndarray) -> _Groups:
    if grain == "template":
        templates, instances = np.nonzero(rows.T)  # template-major, instances ascending within
        cells, template_key = (instances, templates), templates.astype(np.int64)
    else:
        instances = np.flatnonzero(rows)
        cells, template_key = (instances,), np.zeros(len(instances), dtype=np.int64)
    spaces, space_of = cube.answer_spaces()
    width = len(spaces)
    pairs, group = np.unique(template_key * width + space_of[instances], return_inverse=True)
    keys = [
        (None if grain != "template" else int(p // width), *spaces[int(p % width)]) for p in pairs.tolist()
    ]
    return _Groups(cells, group.reshape(-1), keys, cube.split[instances] == "dev")


@dataclass(frozen=True)
class _Plain:
    """The plain estimate a recalibration starts from, and its groups."""

    predicted: np.ndarray
    raw: np.ndarray
    rows: np.ndarray
    groups: _Groups


_last_plain: dict = {"cube": None, "values": {}}


def _plain(underlying: _Underlying, cube: OptionScoreCube, reduction: str) -> _Plain:
    """Memoised for the cube at hand: its three maps (and their reductions) start from the same
    plain estimate and groups, and the stage runs cube by cube."""
    if _last_plain["cube"] is not cube:
        _last_plain["cube"], _last_plain["values"] = cube, {}
    key = (underlying.name, reduction)
    if key not in _last_plain["values"]:
        predicted, raw, rows = underlying.estimate(cube, reduction)
        plain = _Plain(predicted, raw, rows, _groups(cube, underlying.grain, rows))
        _last_plain["values"][key] = plain
    return _last_plain["values"][key]


def _two_classes(groups: _Groups, correct: np.ndarray) -> np.ndarray:
    """[G] whether a group's dev rows hold both right and wrong ones."""
    n_dev = groups.n_dev
    n_right = np.bincount(groups.group[groups.dev], weights=correct[groups.dev], minlength=groups.n)
    return (n_right > 0) & (n_right < n_dev)


# --- the three maps ------------------------------------------------------------------------------


def _temperature(underlying: _Underlying) -> Callable[[OptionScoreCube, str], Estimate]:
    def estimate(cube: OptionScoreCube, reduction: str) -> Estimate:
        plain = _plain(underlying, cube, reduction)
        rows, groups = plain.rows, plain.groups
        dev = underlying.gold_mass_rows(cube, reduction, groups.dev_cells())
        usable = dev.gold.any(axis=(1, 2))
        group = groups.group[groups.dev][usable]
        usable_rows = GoldMassRows(dev.ll[usable], dev.gold[usable], dev.log_count[usable], group)
        fitted_t, flat = fit_temperatures(usable_rows, groups.n)
        n_usable = np.bincount(group, minlength=groups.n)
        n_dev = groups.n_dev
        temperature, fitted, fits = np.ones(rows.shape), np.zeros(rows.shape, dtype=bool), []
        has_dev = n_dev[groups.group] > 0
        cells = tuple(c[has_dev] for c in groups.cells)
        temperature[cells] = fitted_t[groups.group[has_dev]]
        fitted[cells] = True
        for g in range(groups.n):
            if not n_dev[g]:
                fits.append(groups.fit_row(cube, g, "temperature", None, NOTE_NO_DEV))
            else:
                note = NOTE_NO_GOLD if not n_usable[g] else NOTE_FLAT if flat[g] else None
                fits.append(groups.fit_row(cube, g, "temperature", fitted_t[g], note))
        predicted, confidence, _ = underlying.estimate(cube, reduction, temperature)
        return Estimate(predicted, confidence, rows=fitted, fits=tuple(fits))

    return estimate


def _on_confidence(underlying: _Underlying, method: str) -> Callable[[OptionScoreCube, str], Estimate]:
    """Platt or isotonic: a map of the raw confidence fitted per group."""

    def estimate(cube: OptionScoreCube, reduction: str) -> Estimate:
        plain = _plain(underlying, cube, reduction)
        predicted, raw, rows, groups = plain.predicted, plain.raw, plain.rows, plain.groups
        index = np.arange(len(predicted)).reshape(-1, *([1] * (predicted.ndim - 1)))
        correct_all = cube.gold[index, predicted]
        x, correct = raw[groups.cells], correct_all[groups.cells]
        n_dev, two_classes = groups.n_dev, _two_classes(groups, correct)
        position = np.cumsum(two_classes) - 1  # a two-class group's index among those fitted
        fit_on = groups.dev & two_classes[groups.group]
        apply_to = two_classes[groups.group]
        fit_group, apply_group = position[groups.group[fit_on]], position[groups.group[apply_to]]
        cells = tuple(c[apply_to] for c in groups.cells)
        confidence, fits = raw.copy(), []
        if method == "platt":
            slope, intercept = fit_platt(x[fit_on], correct[fit_on], fit_group, int(two_classes.sum()))
            confidence[cells] = expit(slope[apply_group] * raw[cells] + intercept[apply_group])
            keep = n_dev > 0
        else:
            isotonic = fit_isotonic(x[fit_on], correct[fit_on], fit_group, int(two_classes.sum()))
            confidence[cells] = isotonic.predict(raw[cells], apply_group)
            n_steps = isotonic.n_steps()
            keep = n_dev >= 2
        for g in range(groups.n):
            too_few = NOTE_TOO_FEW if n_dev[g] else NOTE_NO_DEV
            if not keep[g]:
                fits.append(
                    groups.fit_row(cube, g, "n_steps", None, too_few)
                    if method == "isotonic"
                    else groups.fit_row(cube, g, "slope", None, NOTE_NO_DEV)
                )
            elif not two_classes[g]:
                parameters = ("slope", "intercept") if method == "platt" else ("n_steps",)
                fits += [groups.fit_row(cube, g, p, None, NOTE_ONE_CLASS) for p in parameters]
            elif method == "platt":
                fits.append(groups.fit_row(cube, g, "slope", slope[position[g]]))
                fits.append(groups.fit_row(cube, g, "intercept", intercept[position[g]]))
            else:
                fits.append(groups.fit_row(cube, g, "n_steps", n_steps[position[g]]))
        fitted = np.zeros(rows.shape, dtype=bool)
        fitted[tuple(c[keep[groups.group]] for c in groups.cells)] = True
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
                main=True,
                family_line=underlying is UNDERLYING[0] and method == "temperature",
            )(fn)


_register()
