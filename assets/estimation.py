"""The estimation stage: every registered estimator over the option-score cube, per model × relation."""

import polars as pl
from dagster import AssetExecutionContext, AssetOut, MetadataValue, Output, multi_asset

from assets.partitions import model_relation_partitions, one_dimension_of
from kcal_pipeline.core.versions import code_version
from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.marginal import option_estimates as option_estimates_of
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimate_tables

# The hand part covers this module's own code: 4: all families, fits, status, per-option tables;
# 5: exact recal fits; 6: SCA ≤ 1; 7: answer_space_draw (the option-count sweep: fits per k and
# draw). The estimator registry's part follows by itself (a new or changed estimator).
CODE_VERSION = code_version("8", ESTIMATORS)  # 8: a run that gave no rows is skipped, saying why


@multi_asset(
    group_name="estimation",
    partitions_def=model_relation_partitions,
    ins=one_dimension_of("probe_instances", "relation"),
    outs={
        "estimates": AssetOut(
            code_version=CODE_VERSION,
            description="Prediction, confidence and correctness of every registered estimator (per "
            "template or per instance, under each reduction it declares), with split, answer_space_k "
            "and answer_space_draw.",
        ),
        "option_estimates": AssetOut(
            code_version=CODE_VERSION,
            description="The template marginal P(o | r, s) of every option (instance × option): what "
            "selective precision and recall at a threshold read.",
        ),
        "estimator_fits": AssetOut(
            code_version=CODE_VERSION,
            description="Parameters estimators fitted on the dev split (temperature, Platt slope and "
            "intercept, isotonic steps, tuned τ), per template and answer space (k and draw), with "
            "n_dev.",
        ),
        "estimator_status": AssetOut(
            code_version=CODE_VERSION,
            description="Each (estimator, reduction): ran (with its row count, never 0) or skipped, and why "
            "(its inputs are absent, or it ran and gave no rows: e.g. fewer than 2 dev instances).",
        ),
    },
)
def estimates(
    context: AssetExecutionContext,
    statement_scores: pl.DataFrame,
    probe_instances: pl.DataFrame,
    templates: pl.DataFrame,
):
    """Every registered estimator over the partition's option-score cube; estimators whose inputs
    this partition lacks are skipped with a logged reason (and a row in estimator_status)."""
    cube = build_cube(statement_scores, probe_instances, templates)
    tables = compute_estimate_tables(cube, log=context.log.info)
    frame = tables.estimates
    ran = frame.group_by("estimator", "reduction").len().sort("estimator", "reduction")
    yield Output(
        frame,
        output_name="estimates",
        metadata={
            "rows": frame.height,
            "instances": frame["instance_id"].n_unique(),
            "cube": f"{cube.shape[0]} instances × {cube.shape[1]} templates × {cube.shape[2]} options",
            "estimators": MetadataValue.md(
                "\n".join(f"- {e} ({r}): {n} rows" for e, r, n in ran.iter_rows())
            ),
        },
    )
    options = option_estimates_of(cube)
    yield Output(options, output_name="option_estimates", metadata={"rows": options.height})
    yield Output(tables.fits, output_name="estimator_fits", metadata={"rows": tables.fits.height})
    skipped = tables.status.filter(pl.col("status") == "skipped")
    yield Output(
        tables.status,
        output_name="estimator_status",
        metadata={
            "ran": tables.status.height - skipped.height,
            "skipped": MetadataValue.md(
                "\n".join(
                    f"- {e} ({r}): {why}"
                    for e, r, why in skipped.select("estimator", "reduction", "reason").iter_rows()
                )
                or "none"
            ),
        },
    )
