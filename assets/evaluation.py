"""Per-model evaluation: metrics and reliability curves over every relation's estimates."""

import polars as pl
from dagster import asset

from assets.partitions import model_partitions, one_dimension_of
from kcal_pipeline.estimation.registry import headline_estimates
from kcal_pipeline.evaluation import compute_curves, compute_metrics

GROUP = "evaluation"
ALL_RELATIONS = one_dimension_of("estimates", "model")


@asset(group_name=GROUP, partitions_def=model_partitions, ins=ALL_RELATIONS, code_version="2")
def metrics(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Every registered metric that applies to each estimator (probability metrics only for
    probability-valued ones) on each relation's headline template, overall and per relation."""
    return compute_metrics(headline_estimates(estimates, templates))


@asset(group_name=GROUP, partitions_def=model_partitions, ins=ALL_RELATIONS, code_version="2")
def curves(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Reliability (calibration) curves on the headline template."""
    return compute_curves(headline_estimates(estimates, templates))
