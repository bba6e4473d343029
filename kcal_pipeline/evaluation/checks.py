"""Checks of a model's metrics table, run as a blocking asset check before the report reads it."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.checks import CheckOutcome, outcome
from kcal_pipeline.evaluation.registry import METRICS


def metrics_within_their_ranges(metrics: pl.DataFrame) -> CheckOutcome:
    """Every defined value (NaN means undefined: AUROC with one class) and interval bound lies in
    its metric's declared range (value_range in the registry: [0, 1] for most, PRR ≤ 1), and every
    metric is a registered one."""
    ranges = pl.DataFrame(
        [(m.name, float(m.value_range[0]), float(m.value_range[1])) for m in METRICS.values()],
        schema={"metric": pl.String, "low": pl.Float64, "high": pl.Float64},
        orient="row",
    )
    joined = metrics.join(ranges, on="metric", how="left")
    unknown = joined.filter(pl.col("low").is_null()).select("metric").unique()

    def outside(column: str) -> pl.Expr:
        value = pl.col(column)
        return value.is_not_null() & ~value.is_nan() & ((value < pl.col("low")) | (value > pl.col("high")))

    keys = ("estimator", "reduction", "split", "scope", "scope_value", "metric")
    return outcome(
        {
            "values outside their metric's range": joined.filter(outside("value")).select(*keys, "value"),
            "interval bounds outside their metric's range": joined.filter(
                outside("ci_low") | outside("ci_high")
            ).select(*keys, "ci_low", "ci_high"),
            "metrics not in the registry": unknown,
        },
        f"{metrics.height} values of {metrics['metric'].n_unique()} metrics, each within its range",
        {"rows": metrics.height},
    )
