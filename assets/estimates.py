"""Confidence estimates per model × relation, for every template and estimator."""

import polars as pl
from dagster import AssetExecutionContext, asset

from assets.partitions import model_relation_partitions
from kcal_pipeline.estimation.registry import compute_estimates


@asset(group_name="estimates", partitions_def=model_relation_partitions, code_version="1")
def estimates(context: AssetExecutionContext, statement_scores: pl.DataFrame) -> pl.DataFrame:
    """Base and Margin (softmax over options within one template), prediction and correctness."""
    frame = compute_estimates(statement_scores)
    context.add_output_metadata({"rows": frame.height, "instances": frame["instance_id"].n_unique()})
    return frame
