"""Curves over (confidence, correct): reliability (calibration) curves per estimator and scope."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.evaluation.calibration import BINS, calibration_curve
from kcal_pipeline.evaluation.registry import scopes


def compute_curves(estimates: pl.DataFrame, bins: int = BINS, strategy: str = "quantile") -> pl.DataFrame:
    """Reliability curves of every probability-valued (model, estimator, reduction, split, answer
    space) × scope, binned as ACE by default; score-valued estimators have no reliability curve."""
    frames = [
        calibration_curve(c, y, bins, strategy).select(
            pl.lit(key["model_id"], pl.String).alias("model_id"),
            pl.lit(key["estimator"], pl.String).alias("estimator"),
            pl.lit(key["reduction"], pl.String).alias("reduction"),
            pl.lit(key["split"], pl.String).alias("split"),
            pl.lit(key["answer_space_k"], pl.Int32).alias("answer_space_k"),
            pl.lit(scope, pl.String).alias("scope"),
            pl.lit(value, pl.String).alias("scope_value"),
            pl.lit("calibration", pl.String).alias("curve"),
            pl.col("conf").alias("x"),
            pl.col("acc").alias("y"),
            "n",
            "bin",
        )
        for key, scope, value, c, y in scopes(estimates)
        if key["output_kind"] == "probability"
    ]
    if not frames:
        raise ValueError("estimates: no probability-valued estimator to draw reliability curves for")
    return pl.concat(frames)
