"""The evaluation stage's tables, one function each, so the Dagster assets stay thin: which rows
each table reads (the headline selection, the curated templates, the test split for intervals)
is decided here, once."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.estimation.registry import (
    BASELINE,  # defined with the registry; kept importable here (findings, assets read it from here)
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    curated_template_estimates,
    headline_template_estimates,
)
from kcal_pipeline.evaluation.bias import attach_gold_ids
from kcal_pipeline.evaluation.bootstrap import (
    INTERVAL_METRICS,
    PAIRED_SCHEMA,
    ResampledValues,
    bootstrap_intervals,
    paired_differences,
)
from kcal_pipeline.evaluation.bootstrap import OUTPUT_SCHEMA as BOOTSTRAP_SCHEMA
from kcal_pipeline.evaluation.consistency import compute_consistency
from kcal_pipeline.evaluation.curves import compute_curves
from kcal_pipeline.evaluation.engine import (
    THRESHOLDS_SCHEMA,
    compute_metrics,
    compute_template_metrics,
    tuned_thresholds,
)
from kcal_pipeline.evaluation.families import METRIC_KEYS
from kcal_pipeline.evaluation.intervals import LEVEL
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA
from kcal_pipeline.evaluation.resamples import N_RESAMPLES
from kcal_pipeline.evaluation.scopes import attach_attributes

# Bootstrap intervals and paired differences are resampled on the full answer spaces only: the
# option-count sweep's uncertainty is its spread over draws (options_sweep), and resampling each
# (k, draw) as well would multiply the stage's main cost by their number (a 5 k × 3 draws sweep:
# 16 times) for intervals nothing reads.
INTERVAL_SPACES = pl.col("answer_space_k") == FULL_ANSWER_SPACE
INTERVAL_KEYS = ("model_id", *METRIC_KEYS)  # one number of one model in the metrics table


def headline_frame(
    estimates: pl.DataFrame,
    templates: pl.DataFrame,
    relations: pl.DataFrame | None = None,
    probe_instances: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One answer per instance, estimator and reduction (each relation's headline template, or the
    instance-grain answer; metrics group by reduction), with the attributes the breakdowns split on
    and the gold ids the template-bias metrics read, where their tables are given."""
    frame = headline_template_estimates(estimates, templates)
    frame = attach_attributes(frame, relations=relations, instances=probe_instances)
    return frame if probe_instances is None else attach_gold_ids(frame, probe_instances)


def metrics_table(
    estimates: pl.DataFrame,
    templates: pl.DataFrame,
    relations: pl.DataFrame | None = None,
    probe_instances: pl.DataFrame | None = None,
    option_estimates: pl.DataFrame | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """Every applicable metric on the headline selection, per split, answer space and breakdown
    (and per template kind over all templates of the kind: template_kind_metrics), with a bootstrap
    interval (ci_low, ci_high, level LEVEL) for INTERVAL_METRICS on the test split and full answer
    spaces (INTERVAL_SPACES), scopes all (clustered by relation) and relation; then per curated
    template and their means
    (BEAR's relation accuracy), without intervals. `values`: see metrics_and_differences."""
    frame = headline_frame(estimates, templates, relations, probe_instances)
    if option_estimates is not None:  # the statements' breakdowns: the instances' (gold count, …)
        option_estimates = attach_attributes(option_estimates, relations=relations, instances=probe_instances)
    point = pl.concat(
        [
            compute_metrics(frame, option_estimates=option_estimates),
            template_kind_metrics(estimates, templates),
        ]
    )
    test = frame.filter(pl.col("split") == HEADLINE_SPLIT).filter(INTERVAL_SPACES)
    intervals = (
        bootstrap_intervals(
            test, INTERVAL_METRICS, n_resamples=n_resamples, seed=seed, level=LEVEL, values=values
        )
        if not test.is_empty()
        else pl.DataFrame(schema=BOOTSTRAP_SCHEMA)
    ).select(*INTERVAL_KEYS, "ci_low", "ci_high")
    with_ci = point.join(
        intervals, on=list(INTERVAL_KEYS), how="left", nulls_equal=True, maintain_order="left"
    ).with_columns(_containing("value"))
    per_template = compute_template_metrics(curated_template_estimates(estimates, templates)).with_columns(
        ci_low=pl.lit(None, pl.Float64), ci_high=pl.lit(None, pl.Float64)
    )
    return pl.concat([with_ci, per_template.select(with_ci.columns)])


def _containing(value: str) -> list[pl.Expr]:
    """ci_low, ci_high moved to `value` where it lies outside by a last bit: the intervals contain
    the registered metric (intervals.bias_corrected_interval), which the table's batched value
    equals up to summation order (ACE: 1 ulp on a demo store)."""
    v, defined = pl.col(value), pl.col(value).is_not_nan()
    return [
        pl.when(defined & (v < pl.col("ci_low"))).then(v).otherwise(pl.col("ci_low")).alias("ci_low"),
        pl.when(defined & (v > pl.col("ci_high"))).then(v).otherwise(pl.col("ci_high")).alias("ci_high"),
    ]


def _template_kind_pairs(estimates: pl.DataFrame, templates: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(kind, its (instance, template) pairs as rows, instance_id = "instance|template") per template
    kind, in scopes.TEMPLATE_KIND_GROUPS order of appearance. Template-grain estimates only;
    templates the table does not list (generated paraphrases, read from their own table) are left
    out."""
    per_template = estimates.filter(pl.col("template_id").is_not_null()).join(
        templates.select("relation_id", "template_id"), on=["relation_id", "template_id"], how="semi"
    )
    if per_template.is_empty():
        return []
    pairs = attach_attributes(per_template, templates=templates).with_columns(
        instance_id=pl.col("instance_id") + "|" + pl.col("template_id")  # a pair is the unit
    )
    return [
        (kind, g.drop("template_kind")) for (kind,), g in pairs.group_by("template_kind", maintain_order=True)
    ]


def template_kind_metrics(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Scope `template_kind`: each metric over every (instance, template) pair of the templates of
    one kind (curated, question, paraphrase = generated, marker, perturbation), each pair counted
    once, per split and answer space; a tuned τ is tuned on the kind's own dev pairs (listed by
    thresholds_table, unit "pairs")."""
    frames = [
        compute_metrics(g, scopes=["all"]).with_columns(
            scope=pl.lit("template_kind"), scope_value=pl.lit(kind)
        )
        for kind, g in _template_kind_pairs(estimates, templates)
    ]
    return pl.concat(frames) if frames else pl.DataFrame(schema=OUTPUT_SCHEMA)


def differences_table(
    estimates: pl.DataFrame,
    templates: pl.DataFrame,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """metric(estimator) − metric(Base) with a paired bootstrap interval (the same resamples for
    both), for every other estimator on the headline selection's test split and full answer spaces
    (INTERVAL_SPACES): is Margin really better calibrated than Base here? `values`: see
    metrics_and_differences."""
    test = (
        headline_template_estimates(estimates, templates)
        .filter(pl.col("split") == HEADLINE_SPLIT)
        .filter(INTERVAL_SPACES)
    )
    present = set(test["estimator"].unique().to_list())
    if BASELINE not in present or present == {BASELINE}:
        return pl.DataFrame(schema=PAIRED_SCHEMA)
    pairs = [(name, BASELINE) for name in ESTIMATORS if name in present and name != BASELINE]
    return paired_differences(test, pairs, n_resamples=n_resamples, seed=seed, values=values)


def metrics_and_differences(
    estimates: pl.DataFrame,
    templates: pl.DataFrame,
    relations: pl.DataFrame | None = None,
    probe_instances: pl.DataFrame | None = None,
    option_estimates: pl.DataFrame | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """metrics_table and differences_table of one model, equal to calling each alone, with each
    estimator's resample values computed once for both: the paired differences resample the very
    rows the intervals resampled (same plan, same seed), so an estimator's A-side values are its
    interval values and Base's are computed once."""
    values = ResampledValues(n_resamples, seed)
    return (
        metrics_table(
            estimates, templates, relations, probe_instances, option_estimates, n_resamples, seed, values
        ),
        differences_table(estimates, templates, n_resamples, seed, values),
    )


def curves_table(
    estimates: pl.DataFrame, templates: pl.DataFrame, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> pl.DataFrame:
    """Reliability, accuracy–rejection, risk–coverage and ROC curves on the headline selection; the
    reliability band on the resamples metrics_table's intervals draw (same B and seed)."""
    return compute_curves(
        headline_template_estimates(estimates, templates), n_resamples=n_resamples, seed=seed
    )


# decision_thresholds: tuned_thresholds' columns plus the template kind of the "pairs" rows.
DECISION_THRESHOLDS_SCHEMA = {**THRESHOLDS_SCHEMA, "template_kind": pl.String}


def thresholds_table(
    estimates: pl.DataFrame, templates: pl.DataFrame, option_estimates: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The dev-tuned τ behind every `*_tuned` metric, with its fallback and reason: units
    "instances" (headline selection), "statements" (option estimates) and "pairs" (the
    template_kind breakdown, one τ per kind, `template_kind` naming it; null on the others)."""
    headline = tuned_thresholds(headline_template_estimates(estimates, templates), option_estimates)
    frames = [headline.with_columns(template_kind=pl.lit(None, pl.String))]
    for kind, pairs in _template_kind_pairs(estimates, templates):
        frames.append(tuned_thresholds(pairs).with_columns(unit=pl.lit("pairs"), template_kind=pl.lit(kind)))
    return pl.concat([f.cast(DECISION_THRESHOLDS_SCHEMA) for f in frames])


def consistency_table(
    estimates: pl.DataFrame, templates: pl.DataFrame, seed: int | None = None
) -> pl.DataFrame:
    """Zhao et al.'s consistency of accept/reject decisions, intra- and cross-method."""
    return compute_consistency(estimates, templates, seed=seed)
