"""Confidence estimates per model × relation: every registered estimator over the option-score cube."""

import polars as pl
from dagster import AssetExecutionContext, MetadataValue, asset

from assets.partitions import model_relation_partitions, one_dimension_of
from kcal_pipeline.estimation import build_cube, compute_estimates


@asset(
    group_name="estimation",
    partitions_def=model_relation_partitions,
    code_version="3",
    ins=one_dimension_of("probe_instances", "relation"),
)
def estimates(
    context: AssetExecutionContext,
    statement_scores: pl.DataFrame,
    probe_instances: pl.DataFrame,
    templates: pl.DataFrame,
) -> pl.DataFrame:
    """Prediction, confidence and correctness of every registered estimator (per template or per
    instance, under each reduction it declares), with each instance's split and answer_space_k;
    estimators whose inputs this partition lacks are skipped with a logged reason."""
    cube = build_cube(statement_scores, probe_instances, templates)
    frame = compute_estimates(cube, log=context.log.info)
    ran = frame.group_by("estimator", "reduction").len().sort("estimator", "reduction")
    context.add_output_metadata(
        {
            "rows": frame.height,
            "instances": frame["instance_id"].n_unique(),
            "cube": f"{cube.shape[0]} instances × {cube.shape[1]} templates × {cube.shape[2]} options",
            "estimators": MetadataValue.md(
                "\n".join(f"- {e} ({r}): {n} rows" for e, r, n in ran.iter_rows())
            ),
        }
    )
    return frame
