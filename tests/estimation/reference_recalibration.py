"""A slow, obviously-correct reference for the recalibrated estimators, one row and one group at a time.

Plain Python over the statement rows: each (instance, template)'s options sorted by option_index,
its softmax written out with `math`, the template marginal summed template by template, the groups
((template, answer space) for Base and Margin, the answer space (k, draw) for the marginal) collected in
dicts. The fitting itself calls library routines, one group at a time (scipy's bounded scalar
minimiser for the temperature, scikit-learn's LogisticRegression and IsotonicRegression), where kcal
runs its own Newton and PAVA for all groups at once (estimation/fitting.py). For tests only; never
make it fast.

An iterative fit amplifies last-bit differences in its input (a sum taken in another order) into
differences of ~1e-11 (the bounded search for T) to ~1e-7 (L-BFGS for Platt) in the fitted value,
so `fitted` can hand in the estimators' own fitted parameters: the maps are then applied here, row
by row, to be compared at 1e-12, while the fits themselves are compared at the optimisers' precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.optimize import minimize_scalar
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from tests.estimation.reference import answer_space
from tests.estimation.reference_multi_answer import ESTIMATE_COLUMNS, FIT_COLUMNS, SORT_KEYS

PARAPHRASE_KINDS = {"curated", "generated"}
REDUCTION_OF_COLUMN = {
    "ll_sum": "sum",
    "ll_mean": "mean",
    "ll_answer_sum": "answer_sum",
    "ll_answer_mean": "answer_mean",
}
LOG_BOUNDS = (math.log(0.05), math.log(20.0))


def log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def softmax(lls: list[float], temperature: float) -> list[float]:
    scaled = [ll / temperature for ll in lls]
    top = max(scaled)
    z = [math.exp(s - top) for s in scaled]
    total = sum(z)
    return [v / total for v in z]


def first_argmax(values: list[float]) -> int:
    best = 0
    for position, value in enumerate(values):
        if value > values[best]:
            best = position
    return best


class Cell:
    """One (instance, template): its options sorted by option_index."""

    def __init__(self):
        self.options: list[int] = []
        self.lls: list[float] = []
        self.gold: list[bool] = []

    def predicted(self) -> int:
        return self.options[first_argmax(self.lls)]

    def base(self, temperature: float = 1.0) -> float:
        return softmax(self.lls, temperature)[first_argmax(self.lls)]

    def margin(self, temperature: float = 1.0) -> float:
        p = sorted(softmax(self.lls, temperature), reverse=True)
        return p[0] - p[1] if len(p) > 1 else p[0]

    def log_gold_mass(self, temperature: float) -> float:
        """log Σ_{g∈G} p_T(g); None when no gold option is scored."""
        gold = [ll / temperature for ll, g in zip(self.lls, self.gold, strict=True) if g]
        if not gold:
            return None
        return log_sum_exp(gold) - log_sum_exp([ll / temperature for ll in self.lls])


class Marginal:
    """One instance's paraphrase templates: P_T(o) = (1/T_i) Σ_t p_t(o)."""

    def __init__(self, cells: list[Cell]):
        self.cells = cells

    def distribution(self, temperature: float) -> dict[int, float]:
        total: dict[int, float] = {}
        for cell in self.cells:
            for option, p in zip(cell.options, softmax(cell.lls, temperature), strict=True):
                total[option] = total.get(option, 0.0) + p
        return {o: v / len(self.cells) for o, v in sorted(total.items())}

    def predicted(self) -> int:
        plain = self.distribution(1.0)
        options = list(plain)
        return options[first_argmax(list(plain.values()))]

    def confidence(self, temperature: float = 1.0) -> float:
        return self.distribution(temperature)[self.predicted()]

    def log_gold_mass(self, temperature: float) -> float:
        terms = []
        for cell in self.cells:
            norm = log_sum_exp([ll / temperature for ll in cell.lls])
            terms += [ll / temperature - norm for ll, g in zip(cell.lls, cell.gold, strict=True) if g]
        return log_sum_exp(terms) - math.log(len(self.cells)) if terms else None


def fit_temperature(log_masses) -> float:
    """The NLL on 13 points evenly spaced in log T, then Brent's bounded search (to 1e-12; its
    default 1e-5 would leave T ~1e-5 off) between the best point's neighbours; Brent never
    evaluates the ends of its interval, so where the best point is a bound that bound is taken
    when it is no worse. Of equal grid values the smallest T (the NLL falling to its last bit)."""

    def nll(log_t: float) -> float:
        values = [f(math.exp(log_t)) for f in log_masses]
        return -sum(values) / len(values)

    grid = [LOG_BOUNDS[0] + (LOG_BOUNDS[1] - LOG_BOUNDS[0]) * j / 12 for j in range(13)]
    values = [nll(g) for g in grid]
    best = values.index(min(values))
    bracket = (grid[max(best - 1, 0)], grid[min(best + 1, 12)])
    found = minimize_scalar(nll, bounds=bracket, method="bounded", options={"xatol": 1e-12}).x
    if best in (0, 12) and values[best] <= nll(found):
        found = grid[best]
    return math.exp(found)


def informative(cells: list[Cell]) -> bool:
    """Whether a gold mass can depend on T: a template with a gold option, a wrong one and two
    different scores."""
    return any(any(c.gold) and not all(c.gold) and max(c.lls) > min(c.lls) for c in cells)


def fit_platt(x: list[float], y: list[bool]) -> tuple[float, float]:
    n_right = sum(y)
    n_wrong = len(y) - n_right
    targets = [(n_right + 1) / (n_right + 2) if right else 1 / (n_wrong + 2) for right in y]
    if len(set(x)) == 1:  # slope and intercept not identified: slope 0, σ(intercept) = mean target
        mean = sum(targets) / len(targets)
        return 0.0, math.log(mean / (1 - mean))
    features = [[v] for v in x] + [[v] for v in x]
    labels = [1.0] * len(x) + [0.0] * len(x)
    weights = targets + [1 - t for t in targets]
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=1000).fit(
        features, labels, sample_weight=weights
    )
    return float(model.coef_[0][0]), float(model.intercept_[0])


NO_DEV = "no dev-split instances in this group: no rows"
FLAT = "the dev NLL does not depend on T (no dev instance has a wrong option scored apart): temperature 1"


def fit_row(
    group: dict, estimator: str, parameter: str, value: float | None, note: str | None = None
) -> dict:
    return group | {"estimator": estimator, "parameter": parameter, "value": value, "note": note}


ONE_CLASS = "one class on dev: identity"
GRAIN = {"base": "template", "margin": "template", "template_marginal": "instance"}


@dataclass
class Unit:
    """One row of a recalibrated estimator: which group it is fitted in, and its plain estimate."""

    instance_id: str
    template_id: str | None
    answer_space: tuple[int, int]  # (answer_space_k, answer_space_draw)
    split: str
    source: Cell | Marginal  # predicted() and log_gold_mass(T)
    raw: object  # T ↦ the plain confidence at temperature T (Cell.base, Cell.margin, Marginal.confidence)


def reference_recalibration(
    scores: pl.DataFrame,
    templates: pl.DataFrame,
    instances: pl.DataFrame,
    column: str,
    fitted: dict | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(estimate rows, fit rows) of the nine recalibrated estimators under the reduction of `column`.
    `fitted`: {(estimator, template_id, answer_space_k, answer_space_draw, parameter): value} to use
    instead of fitting
    the temperature and Platt parameters here."""
    model_id, relation_id = scores["model_id"][0], scores["relation_id"][0]
    reduction = REDUCTION_OF_COLUMN[column]
    kinds = {
        r["template_id"]: r["kind"]
        for r in templates.iter_rows(named=True)
        if r["relation_id"] == relation_id
    }
    meta = {r["instance_id"]: (r["split"], answer_space(r)) for r in instances.iter_rows(named=True)}
    statements = {}
    for row in scores.iter_rows(named=True):
        statements.setdefault((row["instance_id"], row["template_id"]), []).append(
            (row["option_index"], row["object_id"], row["is_gold"], row[column])
        )
    cells, objects, golds = {}, {}, {}
    for key, rows in sorted(statements.items()):
        cell = cells[key] = Cell()
        for option, object_id, is_gold, ll in sorted(rows):
            cell.options.append(option)
            cell.lls.append(ll)
            cell.gold.append(is_gold)
            objects[(key[0], option)] = object_id
            golds[(key[0], option)] = is_gold
    paraphrases = {}
    for (instance_id, template_id), cell in cells.items():
        if kinds[template_id] in PARAPHRASE_KINDS:
            paraphrases.setdefault(instance_id, []).append(cell)

    units: dict[str, list[Unit]] = {"base": [], "margin": [], "template_marginal": []}
    for (instance_id, template_id), cell in cells.items():
        if kinds[template_id] not in PARAPHRASE_KINDS:
            continue  # Base and Margin are recalibrated on the paraphrase templates only
        split, k = meta[instance_id]
        units["base"].append(Unit(instance_id, template_id, k, split, cell, cell.base))
        units["margin"].append(Unit(instance_id, template_id, k, split, cell, cell.margin))
    for instance_id, members in paraphrases.items():
        split, k = meta[instance_id]
        marginal = Marginal(members)
        units["template_marginal"].append(Unit(instance_id, None, k, split, marginal, marginal.confidence))

    rows, fits = [], []

    def emit(estimator: str, unit: Unit, confidence: float) -> None:
        option = unit.source.predicted()
        key = (unit.instance_id, option)
        grain = GRAIN[estimator.rsplit("_", 1)[0]]
        rows.append(
            (
                model_id,
                relation_id,
                unit.instance_id,
                unit.split,
                *unit.answer_space,
                unit.template_id,
                estimator,
                reduction,
                grain,
                "probability",
                option,
                objects[key],
                confidence,
                golds[key],
            )
        )

    for name, all_units in units.items():
        groups: dict[tuple, list[Unit]] = {}
        for unit in all_units:
            groups.setdefault((unit.template_id, unit.answer_space), []).append(unit)
        for (template_id, (k, draw)), members in groups.items():
            members.sort(key=lambda u: u.instance_id)
            dev = [u for u in members if u.split == "dev"]

            group = {"model_id": model_id, "relation_id": relation_id, "reduction": reduction}
            group |= {"template_id": template_id, "answer_space_k": k, "answer_space_draw": draw}
            group |= {"n_dev": len(dev)}

            # temperature: the gold-set NLL over the dev rows whose gold is scored
            estimator = f"{name}_temperature"
            usable = [u.source.log_gold_mass for u in dev if u.source.log_gold_mass(1.0) is not None]
            if not dev:
                fits.append(fit_row(group, estimator, "temperature", None, NO_DEV))
            else:
                note = (
                    None if usable else "no dev instance has its gold option scored: identity (temperature 1)"
                )
                cells_of = [u.source.cells if isinstance(u.source, Marginal) else [u.source] for u in dev]
                if usable and not any(informative(c) for c in cells_of):
                    note = FLAT
                if not usable or note is not None:
                    temperature = 1.0
                elif fitted is not None:
                    temperature = fitted[(estimator, template_id, k, draw, "temperature")]
                else:
                    temperature = fit_temperature(usable)
                fits.append(fit_row(group, estimator, "temperature", temperature, note))
                for unit in members:
                    emit(estimator, unit, unit.raw(temperature))

            x_dev = [u.raw(1.0) for u in dev]
            y_dev = [golds[(u.instance_id, u.source.predicted())] for u in dev]
            one_class = all(y_dev) or not any(y_dev)

            # Platt
            estimator = f"{name}_platt"
            if not dev:
                fits.append(fit_row(group, estimator, "slope", None, NO_DEV))
            elif one_class:
                fits += [fit_row(group, estimator, p, None, ONE_CLASS) for p in ("slope", "intercept")]
                for unit in members:
                    emit(estimator, unit, unit.raw(1.0))
            else:
                if fitted is None:
                    slope, intercept = fit_platt(x_dev, y_dev)
                else:
                    slope, intercept = (
                        fitted[(estimator, template_id, k, draw, p)] for p in ("slope", "intercept")
                    )
                fits += [
                    fit_row(group, estimator, "slope", slope),
                    fit_row(group, estimator, "intercept", intercept),
                ]
                for unit in members:
                    emit(estimator, unit, 1 / (1 + math.exp(-(slope * unit.raw(1.0) + intercept))))

            # isotonic
            estimator = f"{name}_isotonic"
            if len(dev) < 2:
                note = "fewer than 2 dev instances: no rows" if dev else NO_DEV
                fits.append(fit_row(group, estimator, "n_steps", None, note))
            elif one_class:
                fits.append(fit_row(group, estimator, "n_steps", None, ONE_CLASS))
                for unit in members:
                    emit(estimator, unit, unit.raw(1.0))
            else:
                model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
                model.fit(x_dev, [float(y) for y in y_dev])
                fits.append(
                    fit_row(group, estimator, "n_steps", float(len(set(model.y_thresholds_.tolist()))))
                )
                for unit in members:
                    emit(estimator, unit, float(model.predict([unit.raw(1.0)])[0]))
    estimates = pl.DataFrame(rows, schema=ESTIMATE_COLUMNS, orient="row").sort(SORT_KEYS, nulls_last=True)
    return estimates, pl.DataFrame(fits, schema=FIT_COLUMNS)
