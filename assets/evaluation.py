"""The evaluation stage, per model: metrics with intervals and breakdowns, paired differences,
curves, tuned thresholds and the consistency of decisions, over every relation's estimates (and the
report, assets/reporting.py); and in the cross_model stage, causal vs masked models paired by
accuracy (family_comparison)."""

import polars as pl
from dagster import (
    AllPartitionMapping,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetOut,
    MetadataValue,
    Output,
    asset,
    multi_asset,
)

from assets.partitions import model_partitions, one_dimension_of
from assets.reporting import metadata_table, report_link
from kcal_pipeline.core.paths import kcal_home, report_path
from kcal_pipeline.core.versions import code_version
from kcal_pipeline.evaluation.families import family_comparison_by_model, model_families_by_file
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.tables import (
    consistency_table,
    curves_table,
    differences_table,
    metrics_and_differences,
    metrics_table,
    thresholds_table,
)
from kcal_pipeline.reporting.html import summary_table
from kcal_pipeline.reporting.previews import narrow_intervals, narrow_summary, served_images
from resources import ProbeSettings
from resources.settings import reads

GROUP = "evaluation"
ALL_RELATIONS = one_dimension_of("estimates", "model")
ALL_OPTIONS = one_dimension_of("option_estimates", "model")
EVERY_PROBE = {"probe_instances": AssetIn(partition_mapping=AllPartitionMapping())}


@multi_asset(
    group_name=GROUP,
    partitions_def=model_partitions,
    ins={**ALL_RELATIONS, **ALL_OPTIONS, **EVERY_PROBE},
    outs={
        "metrics": AssetOut(
            is_required=False,  # either output alone may be selected (can_subset)
            # 7: the bear_domain scope; 8: answer_space_draw (option-count sweep); 9: the signed gap
            # (with intervals), multi-hot Brier and classwise ECE, statement metrics per breakdown;
            # 10: bias-corrected intervals that contain their point (+ the metric registry's hash)
            code_version=code_version("10", METRICS),
            description="Every registered metric that applies to each estimator, per split and "
            "answer space, never pooled, on the headline selection: overall, per relation, domain, "
            "gold count, MACE mixture, option count and BEAR topic domain, with seeded bootstrap "
            "intervals (test split); and per curated template with their mean over templates "
            "(BEAR's relation accuracy).",
        ),
        "metric_differences": AssetOut(
            is_required=False,
            code_version=code_version("7", METRICS),  # 7: bias-corrected intervals containing it
            description="Each estimator's accuracy, ACE, Brier, AUROC and AURC minus Base's, with "
            "a paired bootstrap interval over the same resamples (test split, headline selection).",
        ),
    },
    # what each table really reads: the differences read neither option estimates nor instances
    internal_asset_deps={
        "metrics": {
            AssetKey(k)
            for k in ("estimates", "option_estimates", "probe_instances", "templates", "relations")
        },
        "metric_differences": {AssetKey("estimates"), AssetKey("templates")},
    },
    can_subset=True,
)
def metrics(
    context: AssetExecutionContext,
    estimates: pl.DataFrame,
    option_estimates: pl.DataFrame,
    probe_instances: pl.DataFrame,
    templates: pl.DataFrame,
    relations: pl.DataFrame,
    probe_settings: ProbeSettings,
):
    """The metrics table and the paired differences in one step when both are selected (the usual
    run): the differences resample the rows the intervals resampled, so each estimator's resample
    values are computed once for both (tables.metrics_and_differences). Either alone still works."""
    selected = {key.to_user_string() for key in context.selected_asset_keys}
    home = kcal_home(probe_settings.home or None)
    report = report_path(home, context.partition_key)
    if {"metrics", "metric_differences"} <= selected:
        table, differences = metrics_and_differences(
            estimates, templates, relations, probe_instances, option_estimates
        )
        yield Output(table, output_name="metrics", metadata=metrics_preview(table, home, report))
        yield Output(differences, output_name="metric_differences")
    elif "metrics" in selected:
        table = metrics_table(estimates, templates, relations, probe_instances, option_estimates)
        yield Output(table, output_name="metrics", metadata=metrics_preview(table, home, report))
    else:
        yield Output(differences_table(estimates, templates), output_name="metric_differences")


# 6: the band; 7: answer_space_draw; 8: the band bias-corrected, containing its point
@asset(
    group_name=GROUP,
    partitions_def=model_partitions,
    ins=ALL_RELATIONS,
    code_version=code_version("8", METRICS),
)
def curves(
    context: AssetExecutionContext,
    estimates: pl.DataFrame,
    templates: pl.DataFrame,
    probe_settings: ProbeSettings,
) -> pl.DataFrame:
    """Reliability (each bin with its 95 % bootstrap band, on the metrics' resamples),
    accuracy–rejection, risk–coverage and ROC curves on the headline selection, per split and answer
    space."""
    from kcal_pipeline.reporting.pages import selective_preview  # matplotlib: see assets/reporting.py

    table = curves_table(estimates, templates)
    figures = selective_preview(table)
    # beside the model's report (its plots/ folder), served by `kcal ui`: short enough to show in place
    home = kcal_home(probe_settings.home or None)
    page = report_path(home, context.partition_key)
    plots = served_images(home, page, figures) if figures else "no selective curves (no test split)"
    context.add_output_metadata({"plots": MetadataValue.md(plots)})
    return table


def metrics_preview(table: pl.DataFrame, home, report) -> dict:
    """What the UI shows of a model's metrics: the summary and the intervals as the report asset
    shows them (narrow tables), and the report page over http (written by the `report` asset)."""
    from kcal_pipeline.reporting.figure_data import intervals_table  # matplotlib: see assets/reporting.py

    return {
        "summary": metadata_table(narrow_summary(summary_table(table))),
        "intervals": metadata_table(narrow_intervals(intervals_table(table))),
        "report": report_link(home, report),
    }


@asset(
    group_name=GROUP,
    partitions_def=model_partitions,
    ins={**ALL_RELATIONS, **ALL_OPTIONS},
    # 5: statements asserted at P > τ, template-kind τ recorded; 6: answer_space_draw
    code_version=code_version("6", METRICS),
)
def decision_thresholds(
    estimates: pl.DataFrame, option_estimates: pl.DataFrame, templates: pl.DataFrame
) -> pl.DataFrame:
    """The τ each `*_tuned` metric used, tuned on the dev split, with its fallback and reason."""
    return thresholds_table(estimates, templates, option_estimates)


@reads("probe.seed")
@asset(
    group_name=GROUP,
    partitions_def=model_partitions,
    ins=ALL_RELATIONS,
    code_version=code_version("6", METRICS),  # 5: seeded consistency; 6: answer_space_draw
)
def consistency(
    estimates: pl.DataFrame, templates: pl.DataFrame, probe_settings: ProbeSettings
) -> pl.DataFrame:
    """Consistency of accept/reject decisions (Zhao et al. 2025): each estimator on its headline
    template against each variant, paraphrase and answer-space subsample (intra), and every pair
    of estimators on the same prompt (cross), thresholds tuned on dev."""
    return consistency_table(estimates, templates, seed=probe_settings.seed)


# Cross-model: every model's metrics, and the kind scoring resolved for each model (two columns of
# every statement_scores file, not the scores); each file as a lazy scan (partition key → scan),
# read a pair of models at a time, so time and memory grow linearly with the models.
EVERY_MODEL = {
    "metrics": AssetIn(partition_mapping=AllPartitionMapping(), metadata={"lazy": True}),
    "statement_scores": AssetIn(
        partition_mapping=AllPartitionMapping(),
        metadata={"columns": ["model_id", "model_kind"], "lazy": True},
    ),
}


# The cross_model stage: unpartitioned, it runs after every model's evaluation.
@asset(
    group_name="cross_model",
    ins=EVERY_MODEL,
    code_version=code_version("2", METRICS),  # 2: answer_space_draw
)
def family_comparison(
    context: AssetExecutionContext,
    metrics: dict[str, pl.LazyFrame],
    statement_scores: dict[str, pl.LazyFrame],
) -> pl.DataFrame:
    """Causal vs masked models, paired by similar accuracy (Base, test split, all relations): every
    metric both models of a pair have, side by side, with masked − causal. Empty, with the reason
    logged, until a causal and a masked model both have metrics."""
    families = model_families_by_file(statement_scores.values())
    result = family_comparison_by_model(metrics.values(), families)
    for row in result.unpaired.iter_rows(named=True):
        context.log.info(f"{row['model_id']} ({row['family']}) is in no pair: {row['reason']}")
    if result.pairs.is_empty():
        context.log.info("family_comparison is empty: no causal model could be paired with a masked one")
    pairs = [
        f"- {c} ↔ {m}: accuracy {a:.3f} vs {b:.3f} (gap {g:.3f})"
        for c, m, a, b, g in result.pairs.iter_rows()
    ]
    unpaired = [f"- {m} ({f}): {r}" for m, f, _, r in result.unpaired.iter_rows()]
    context.add_output_metadata(
        {
            "pairs": MetadataValue.md("\n".join(pairs) or "none"),
            "unpaired": MetadataValue.md("\n".join(unpaired) or "none"),
        }
    )
    return result.table
