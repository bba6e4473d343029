"""The metric contract: one registry of metric specs, most of them over (confidence, correct) pairs.

A metric spec says whether it needs probabilities (calibration: ACE, ECE, Brier) or accepts any
real-valued score where higher means more confident (ranking: AUROC, AURC, accuracy), and whether
higher values are better. The metric engine (evaluation/engine.py) applies every applicable metric
per (model, estimator, reduction, split, answer space) to all instances and to each relation, per
template and averaged over templates (BEAR's relation accuracy), into rows of OUTPUT_SCHEMA. A
probability metric is never computed on a score-valued estimator, and calling one directly on
scores is an error that says which metrics would apply. This registry is the only list of metric
names in kcal.

A spec's `input` says what its function reads (INPUT_KINDS):
  - "confidence": fn(c, y) over the instances in scope;
  - "threshold": fn(c, y, τ) over the instances, accept = C ≥ τ; the spec's `threshold` is either a
    fixed τ or a tuning rule that compute_metrics applies to the dev split of the same group;
  - "statements": fn(c, y, τ) as "threshold", but over asserted statements: c = the template
    marginal P(o | r, s) of each (instance, option) from `option_estimates`, y = the option is gold;
  - "options": fn(c, y, instance, option) over the same (instance, option) rows, no τ, for the
    metrics of the whole option distribution (multi-hot Brier, classwise ECE): `instance` and
    `option` are integer codes (equal codes = the same instance; the same class, i.e. the same
    option object within its relation), so a metric can sum within an instance or bin per class;
  - "predictions": fn(predicted ids, gold id lists) on ONE relation; scope "all" is the unweighted
    mean of the relations' values (template bias is a property of a relation's answer distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

Needs = Literal["probability", "any"]
InputKind = Literal["confidence", "threshold", "statements", "options", "predictions"]
INPUT_KINDS = ("confidence", "threshold", "statements", "options", "predictions")
# The inputs read from option_estimates (one row per instance × option) rather than the estimates.
OPTION_INPUTS = ("statements", "options")
MetricFn = Callable[..., float]
# The split whose rows tune a "threshold"/"statements" spec's τ; metrics on it are in-sample.
TUNING_SPLIT = "dev"


@dataclass(frozen=True)
class TunedThreshold:
    """What a tuning rule chose on one group's dev rows: τ, whether it fell back to a default (and
    why), and how many dev rows it saw."""

    threshold: float
    fallback: bool
    reason: str | None
    n_dev: int


# A tuning rule: (dev confidences, dev correctness, output kind) -> TunedThreshold. It gets empty
# arrays when the group has no dev rows, and must then fall back.
TuningRule = Callable[[np.ndarray, np.ndarray, str], TunedThreshold]


def as_arrays(confidence, correct, output_kind: str = "probability") -> tuple[np.ndarray, np.ndarray]:
    """Validate once at the metric boundary: a probability outside [0, 1], or a non-finite score,
    is an estimator bug."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct)
    if c.ndim != 1 or c.shape != y.shape:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if c.size == 0:
        raise ValueError("no predictions: confidence is empty")
    if output_kind == "probability":
        bad = c[~((c >= 0.0) & (c <= 1.0))]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is outside [0, 1]")
    else:
        bad = c[~np.isfinite(c)]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is not a finite score")
    if y.dtype != np.bool_:
        odd = y[~np.isin(y, (0, 1))]
        if odd.size:
            raise ValueError(f"correct must be boolean or 0/1, got value {odd[0].item()!r}")
        y = y.astype(np.bool_)
    return c, y


def as_predictions(predicted, gold) -> tuple[pl.Series, pl.Series]:
    """Validate a "predictions" metric's inputs: predicted ids (null = no answer) and, per instance,
    a non-empty list of gold ids."""
    p = pl.Series("predicted_id", predicted, dtype=pl.String)
    g = pl.Series("gold_ids", gold, dtype=pl.List(pl.String))
    if p.len() != g.len():
        raise ValueError(f"predicted_id and gold_ids must be of equal length, got {p.len()} and {g.len()}")
    if p.len() == 0:
        raise ValueError("no predictions: predicted_id is empty")
    empty = (g.is_null() | (g.list.len() == 0)).arg_true()
    if empty.len():
        raise ValueError(f"gold_ids of instance {empty[0]} (0-based) is empty; every instance needs one")
    return p, g


@dataclass(frozen=True)
class MetricSpec:
    """One metric; calling it validates the inputs for its needs, then computes.

    `higher_is_better` is None for a descriptive number with no better direction (template bias).
    `threshold` (inputs "threshold" and "statements" only): a fixed τ, or a TuningRule.
    """

    name: str
    label: str
    family: str
    fn: MetricFn
    needs: Needs
    higher_is_better: bool | None
    in_summary: bool = False
    input: InputKind = "confidence"
    threshold: float | TuningRule | None = None
    # All samples at once (evaluation/segments.py): (Segments) -> [S] for input "confidence",
    # (Segments, τ [S]) -> [S] for "threshold"/"statements", (Segments, instance, option: codes
    # per row) -> [S] for "options", (frame with columns segment, predicted_id, gold_ids; S) -> [S]
    # for "predictions". Must equal fn sample by sample.
    batched: Callable[..., np.ndarray] | None = None
    # Where every defined value lies (NaN = undefined is allowed): the metrics asset's blocking
    # check refuses a table with a value outside it, which only a bug can produce.
    value_range: tuple[float, float] = (0.0, 1.0)
    # Report flags (the metric_catalog table; SQL reports and pages select by them, never by name):
    # `role`: the part the metric plays in the reports (one of REPORT_ROLES, held by one metric);
    # `headline`: a column of the headline comparisons (estimator_comparison, families).
    role: str | None = None
    headline: bool = False

    @property
    def tuned(self) -> bool:
        return callable(self.threshold)

    def applies_to(self, output_kind: str) -> bool:
        return self.needs == "any" or output_kind == "probability"

    def __call__(
        self,
        confidence,
        correct,
        output_kind: str = "probability",
        *,
        tau: float | None = None,
        instance=None,
        option=None,
    ) -> float:
        """fn on validated inputs. A "predictions" metric takes (predicted ids, gold id lists) in
        place of (confidence, correct); a tuned threshold metric needs `tau`; an "options" metric
        the `instance` and `option` of every row (any hashable labels)."""
        if self.input == "predictions":
            return float(self.fn(*as_predictions(confidence, correct)))
        if not self.applies_to(output_kind):
            usable = [m.name for m in METRICS.values() if m.applies_to(output_kind) and m.input == self.input]
            raise ValueError(
                f"metric {self.name!r} needs probabilities in [0, 1], but the estimator's output is an "
                f"unbounded {output_kind}; metrics that accept it: {', '.join(usable)}"
            )
        c, y = as_arrays(confidence, correct, output_kind)
        if self.input == "confidence":
            return float(self.fn(c, y))
        if self.input == "options":
            return float(self.fn(c, y, *option_codes(self.name, c.size, instance, option)))
        if tau is None:
            if self.tuned:
                raise ValueError(f"metric {self.name!r} uses a threshold tuned on the dev split: pass tau")
            tau = self.threshold
        return float(self.fn(c, y, float(tau)))


def option_codes(metric: str, n: int, instance, option) -> tuple[np.ndarray, np.ndarray]:
    """An "options" metric's row labels as integer codes (np.unique's inverse), one per row."""
    codes = []
    for name, labels in (("instance", instance), ("option", option)):
        if labels is None:
            raise ValueError(f"metric {metric!r} reads options: pass {name}, one label per row")
        values = np.asarray(labels)
        if values.shape != (n,):
            raise ValueError(f"metric {metric!r}: {name} must be 1-D of length {n}, got shape {values.shape}")
        codes.append(np.unique(values, return_inverse=True)[1].astype(np.int64))
    return codes[0], codes[1]


METRICS: dict[str, MetricSpec] = {}
# The roles a metric can play in the reports, in the order of their columns there (metric_catalog's
# report_order): the accuracy a report leads with, the calibration error it ranks estimators by,
# the proper score, the ranking quality, the risk–coverage area, and the mean confidence read
# against the accuracy.
REPORT_ROLES = ("correctness", "calibration", "proper_score", "ranking", "risk_coverage", "confidence_level")


def register(
    name: str,
    *,
    label: str,
    family: str,
    needs: Needs,
    higher_is_better: bool | None,
    in_summary: bool = False,
    input: InputKind = "confidence",
    threshold: float | TuningRule | None = None,
    batched: Callable[..., np.ndarray] | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
    role: str | None = None,
    headline: bool = False,
) -> Callable[[MetricFn], MetricFn]:
    """Add a metric; a second one under the same name is a bug, not an override. Returns the
    function unchanged, as the estimator registry does; METRICS[name] is the spec, whose call
    validates the inputs."""

    def add(fn: MetricFn) -> MetricFn:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        if needs not in ("probability", "any"):
            raise ValueError(f"metric {name!r}: needs must be 'probability' or 'any', got {needs!r}")
        if input not in INPUT_KINDS:
            raise ValueError(f"metric {name!r}: input must be one of {list(INPUT_KINDS)}, got {input!r}")
        takes_threshold = input in ("threshold", "statements")
        if takes_threshold != (threshold is not None):
            raise ValueError(
                f"metric {name!r}: a threshold (fixed τ or tuning rule) goes with input 'threshold' or "
                f"'statements' and only with them; got input {input!r}, threshold {threshold!r}"
            )
        if batched is None:
            raise ValueError(f"metric {name!r}: needs a batched implementation (evaluation/segments.py)")
        if role is not None and role not in REPORT_ROLES:
            raise ValueError(f"metric {name!r}: role must be one of {list(REPORT_ROLES)}, got {role!r}")
        taken = [m.name for m in METRICS.values() if role is not None and m.role == role]
        if taken:
            raise ValueError(f"metric {name!r}: role {role!r} is already {taken[0]!r}'s")
        spec = MetricSpec(
            name,
            label,
            family,
            fn,
            needs,
            higher_is_better,
            in_summary,
            input,
            threshold,
            batched,
            value_range,
            role,
            headline,
        )
        METRICS[name] = spec
        return fn

    return add


def metric_for(role: str) -> str:
    """The name of the metric that plays `role` (REPORT_ROLES) in the reports."""
    for m in METRICS.values():
        if m.role == role:
            return m.name
    raise ValueError(f"no metric has the report role {role!r}; roles: {list(REPORT_ROLES)}")


def summary_metrics() -> list[MetricSpec]:
    """The metrics of the demo summary and the report's headline table, in registry order."""
    return [m for m in METRICS.values() if m.in_summary]


# The key columns every evaluation table shares (metrics, intervals, curves), and the rows of the
# metrics table the engine (engine.py) fills with these specs.
SCOPE_KEY_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
}
OUTPUT_SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
    "higher_is_better": pl.Boolean,
}


def metric_specs(metrics: Sequence[str] | None) -> list[MetricSpec]:
    """The specs of `metrics` (every registered one if None), in the order given."""
    names = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    return [METRICS[m] for m in names]
