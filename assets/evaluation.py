"""Per-model evaluation: metrics and reliability curves over every relation's estimates."""

import polars as pl
from dagster import asset

from assets.partitions import model_partitions, one_dimension_of
from kcal_pipeline.estimation.registry import curated_template_estimates, headline_template_estimates
from kcal_pipeline.evaluation import compute_curves, compute_metrics, compute_template_metrics

GROUP = "evaluation"
ALL_RELATIONS = one_dimension_of("estimates", "model")


@asset(group_name=GROUP, partitions_def=model_partitions, ins=ALL_RELATIONS, code_version="3")
def metrics(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Every registered metric that applies to each estimator (probability metrics only for
    probability-valued ones), per split and answer space, never pooled: on each relation's
    headline template (overall and per relation), and per curated template with its mean over
    the templates (BEAR's relation accuracy)."""
    return pl.concat(
        [
            compute_metrics(headline_template_estimates(estimates, templates)),
            compute_template_metrics(curated_template_estimates(estimates, templates)),
        ]
    )


@asset(group_name=GROUP, partitions_def=model_partitions, ins=ALL_RELATIONS, code_version="3")
def curves(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Reliability (calibration) curves on the headline template, per split and answer space."""
    return compute_curves(headline_template_estimates(estimates, templates))
