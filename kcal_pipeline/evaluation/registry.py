"""The metric contract: one registry of specs over (confidence, correct) pairs.

A metric spec says whether it needs probabilities (calibration: ACE, ECE, Brier) or accepts any
real-valued score where higher means more confident (ranking: AUROC, AURC, accuracy), and whether
higher values are better. `compute_metrics` applies every applicable metric per (model, estimator,
reduction) to all instances and to each relation; a probability metric is never computed on a
score-valued estimator, and calling one directly on scores is an error that says which metrics
would apply. This registry is the only list of metric names in kcal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns

Needs = Literal["probability", "any"]
MetricFn = Callable[[np.ndarray, np.ndarray], float]


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


@dataclass(frozen=True)
class MetricSpec:
    """One metric; calling it validates the inputs for its needs, then computes."""

    name: str
    label: str
    family: str
    fn: MetricFn
    needs: Needs
    higher_is_better: bool
    in_summary: bool = False

    def applies_to(self, output_kind: str) -> bool:
        return self.needs == "any" or output_kind == "probability"

    def __call__(self, confidence, correct, output_kind: str = "probability") -> float:
        if not self.applies_to(output_kind):
            usable = [m.name for m in METRICS.values() if m.applies_to(output_kind)]
            raise ValueError(
                f"metric {self.name!r} needs probabilities in [0, 1], but the estimator's output is an "
                f"unbounded {output_kind}; metrics that accept it: {', '.join(usable)}"
            )
        return float(self.fn(*as_arrays(confidence, correct, output_kind)))


METRICS: dict[str, MetricSpec] = {}


def register(
    name: str, *, label: str, family: str, needs: Needs, higher_is_better: bool, in_summary: bool = False
) -> Callable[[MetricFn], MetricSpec]:
    """Add a metric; a second one under the same name is a bug, not an override."""

    def add(fn: MetricFn) -> MetricSpec:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        if needs not in ("probability", "any"):
            raise ValueError(f"metric {name!r}: needs must be 'probability' or 'any', got {needs!r}")
        spec = MetricSpec(name, label, family, fn, needs, higher_is_better, in_summary)
        METRICS[name] = spec
        return spec

    return add


def summary_metrics() -> list[MetricSpec]:
    """The metrics of the demo summary and the report's headline table, in registry order."""
    return [m for m in METRICS.values() if m.in_summary]


_EST_COLUMNS = ("model_id", "estimator", "relation_id", "instance_id", "confidence", "correct")
GROUP = ("model_id", "estimator", "reduction", "output_kind")


def with_defaults(estimates: pl.DataFrame) -> pl.DataFrame:
    """Estimates as metrics read them: reduction (null if absent) and output_kind (probability)."""
    require_columns(estimates, _EST_COLUMNS, "estimates")
    if "reduction" not in estimates.columns:
        estimates = estimates.with_columns(reduction=pl.lit(None, pl.String))
    if "output_kind" not in estimates.columns:
        estimates = estimates.with_columns(output_kind=pl.lit("probability", pl.String))
    return estimates


def scopes(estimates: pl.DataFrame) -> Iterator[tuple[dict, str, str, np.ndarray, np.ndarray]]:
    """Yield (group keys, scope, scope_value, confidence, correct) in a deterministic order.

    Rows are sorted by (relation_id, instance_id) first: ACE/AURC tie handling depends on input
    order, and this makes it independent of how the caller's frame happened to be ordered.
    """
    df = with_defaults(estimates)
    keys = [*GROUP, "relation_id", "instance_id"]
    dup = df.filter(pl.struct(keys).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"estimates: several rows for instance {row['instance_id']!r} of estimator "
            f"{row['estimator']!r}; filter to one template or aggregation first"
        )
    df = df.sort(*GROUP, "relation_id", "instance_id", nulls_last=True)
    for group, g in df.group_by(GROUP, maintain_order=True):
        key = dict(zip(GROUP, group, strict=True))
        yield key, "all", "all", g["confidence"].to_numpy(), g["correct"].to_numpy()
        for (rel,), r in g.group_by("relation_id", maintain_order=True):
            yield key, "relation", rel, r["confidence"].to_numpy(), r["correct"].to_numpy()


OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "scope": pl.String,
    "scope_value": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
    "higher_is_better": pl.Boolean,
}


def compute_metrics(estimates: pl.DataFrame, metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Long table (model_id, estimator, reduction, scope, scope_value, metric, value, n,
    higher_is_better) for the scopes all and relation.

    Expects one row per instance per (model_id, estimator, reduction): the caller filters to one
    template or one aggregation, since pooling templates would count an instance several times.
    Metrics that need probabilities are left out for score-valued estimators.
    """
    names = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    if estimates.is_empty():
        raise ValueError("estimates: no rows to compute metrics on")
    specs = [METRICS[m] for m in names]
    rows = [
        (key["model_id"], key["estimator"], key["reduction"], scope, value, m.name,
         m(c, y, key["output_kind"]), len(c), m.higher_is_better)
        for key, scope, value, c, y in scopes(estimates)
        for m in specs
        if m.applies_to(key["output_kind"])
    ]  # fmt: skip
    return pl.DataFrame(rows, orient="row", schema=OUTPUT_SCHEMA)
