"""Metrics of the generation estimates (issue 33, MACE's setting) and of knowledge coverage, in the
metrics table's schema (registry.OUTPUT_SCHEMA) so the same readers and views take them.

The evaluation stage is reused as it is: compute_metrics on the answered rows (probability-only
metrics left out for score-valued estimators), the breakdowns of scopes.py and MACE's macro
mixtures. The rows carry reduction GENERATED and the full answer space (answer_space_k = draw = 0).
Scopes:
  - all, relation, n_gold (gold counts pooled over relations), mixture_domain and mixture (MACE's
    {1}, {1,2}, {1,2,4}, {1,2,4,6}, macro-averaged over MACE's domains), as for the closed-set metrics;
  - GOLD_DOMAIN ("n_gold_domain", value "2|mace-award"): one gold count within one MACE relation,
    and GOLD_MACRO ("n_gold_macro", value "2"): those macro-averaged over the MACE relations having
    that gold count, every domain counting equally as in the mixtures. MACE's Table 3 columns
    1a/2a/4a/6a read GOLD_MACRO (reporting/generation.py).

A refused instance (confidence null: no number parsed, no answer, …) has no value to score: it is
left out of every metric and counted instead, in ANSWERED_SHARE = answered / all instances of the
scope (n = all of them; descriptive, higher_is_better null), so a reader sees what a value rests on.
A score-valued estimator has no mean confidence (not a probability): MEAN_SCORE holds its mean
score, descriptive, for the Table 3 layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from kcal_pipeline.evaluation.registry import (
    GROUP,
    OUTPUT_SCHEMA,
    compute_metrics,
    with_group_numbers,
)
from kcal_pipeline.evaluation.scopes import (
    MACE_DOMAIN,
    attach_attributes,
    breakdown_members,
    macro_average_mixtures,
)

GENERATION_METRICS = ("accuracy", "mean_confidence", "auroc", "ece", "ace", "brier")
GENERATED = "generated"  # the reduction of every generation metric row
SCOPES = ("all", "relation", "n_gold", "mixture_domain")
GOLD_DOMAIN = "n_gold_domain"
GOLD_MACRO = "n_gold_macro"
ANSWERED_SHARE = "answered_share"
MEAN_SCORE = "mean_score"
COVERAGE_ESTIMATOR = "knowledge_coverage"
COVERAGE_TAU = 0.1
REQUIRED_COLUMNS = (
    "model_id",
    "relation_id",
    "instance_id",
    "estimator",
    "output_kind",
    "correct",
    "confidence",
)

RowsFn = Callable[[pl.DataFrame, Sequence[str]], pl.DataFrame]


def coverage_metric(tau: float = COVERAGE_TAU) -> str:
    """The metric name of knowledge coverage at τ: "coverage_tau0.1"."""
    return f"coverage_tau{tau:g}"


def _with_attributes(
    frame: pl.DataFrame, instances: pl.DataFrame, relations: pl.DataFrame | None
) -> pl.DataFrame:
    """`frame` (relation_id, instance_id, …) as the breakdowns read it: the generated reduction,
    the full answer space, split (from probe_instances where the frame has none), n_gold and domain
    (without a relations table every relation counts as a MACE domain: the generation setting runs
    on MACE relations only)."""
    keys = ["relation_id", "instance_id"]
    attributes = instances.select(
        *keys,
        "n_gold",
        pl.col("n_options") if "n_options" in instances.columns else pl.lit(0, pl.Int64).alias("n_options"),
    )
    out = frame.drop([c for c in ("n_gold", "domain") if c in frame.columns])
    if "split" not in out.columns:
        out = out.join(instances.select(*keys, "split"), on=keys, how="left", maintain_order="left")
    domains = (
        relations
        if relations is not None
        else out.select("relation_id").unique().with_columns(domain=pl.lit(MACE_DOMAIN))
    )
    out = attach_attributes(
        out, relations=domains.select("relation_id", "domain"), instances=attributes
    ).drop("n_options")
    return out.with_columns(
        reduction=pl.lit(GENERATED),
        answer_space_k=pl.lit(0, pl.Int32),
        answer_space_draw=pl.lit(0, pl.Int32),
        split=pl.col("split").cast(pl.String),
    )


def _scope_means(frame: pl.DataFrame, value: str, metric: str, scopes: Sequence[str]) -> pl.DataFrame:
    """OUTPUT_SCHEMA rows of a descriptive metric: per metrics group and breakdown, the mean of
    `value` over the rows (n = the rows), higher_is_better null."""
    if frame.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    df = with_group_numbers(frame.sort(*GROUP, "relation_id", "instance_id", nulls_last=True))
    members = breakdown_members(df, "group", scopes)
    values = df.select(pl.col(value).cast(pl.Float64).alias("value"), *GROUP).with_row_index("row")
    rows = (
        members.join(values.with_columns(pl.col("row").cast(members.schema["row"])), on="row")
        .group_by("segment", maintain_order=True)
        .agg(pl.col(*GROUP, "scope", "scope_value").first(), pl.col("value").mean(), pl.len().alias("n"))
    )
    return (
        rows.with_columns(metric=pl.lit(metric), higher_is_better=pl.lit(None, pl.Boolean))
        .select(list(OUTPUT_SCHEMA))
        .cast(OUTPUT_SCHEMA)
    )


def _descriptive(frame: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
    """ANSWERED_SHARE of every estimator (over all rows) and MEAN_SCORE of the score-valued ones
    (over the answered rows)."""
    answered = frame.with_columns(answered=pl.col("confidence").is_not_null())
    scores = frame.filter((pl.col("output_kind") == "score") & pl.col("confidence").is_not_null())
    return pl.concat(
        [
            _scope_means(answered, "answered", ANSWERED_SHARE, scopes),
            _scope_means(scores, "confidence", MEAN_SCORE, scopes),
        ]
    )


def _metric_rows(frame: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
    """compute_metrics' GENERATION_METRICS on the answered rows, plus the descriptive rows; the
    mixtures are left to _with_macros, which averages every metric's domains at once."""
    answered = frame.filter(pl.col("confidence").is_not_null())
    computed = (
        compute_metrics(answered, list(GENERATION_METRICS), scopes=scopes).filter(
            pl.col("scope") != "mixture"
        )
        if not answered.is_empty()
        else pl.DataFrame(schema=OUTPUT_SCHEMA)
    )
    return pl.concat([computed, _descriptive(frame, scopes)])


def _with_macros(rows: pl.DataFrame, frame: pl.DataFrame, rows_fn: RowsFn) -> pl.DataFrame:
    """`rows` (scopes SCOPES) with the mixtures, then GOLD_DOMAIN (rows_fn per MACE relation on its
    n_gold breakdown) and GOLD_MACRO rows, each macro-averaged over domains (macro_average_mixtures:
    a GOLD_DOMAIN value "2|mace-award" is read as a one-count mixture of that domain)."""
    per_domain = [
        rows_fn(g, ["n_gold"]).with_columns(
            scope=pl.lit(GOLD_DOMAIN), scope_value=pl.col("scope_value") + "|" + pl.lit(relation)
        )
        for (relation,), g in frame.filter(pl.col("domain") == MACE_DOMAIN).group_by(
            "relation_id", maintain_order=True
        )
    ]
    domain_rows = pl.concat(per_domain) if per_domain else pl.DataFrame(schema=OUTPUT_SCHEMA)
    gold_macro = macro_average_mixtures(
        domain_rows.with_columns(scope=pl.lit("mixture_domain"))
    ).with_columns(scope=pl.lit(GOLD_MACRO))
    return pl.concat([rows, macro_average_mixtures(rows), domain_rows, gold_macro]).cast(OUTPUT_SCHEMA)


def generation_metrics(
    estimates: pl.DataFrame, instances: pl.DataFrame, relations: pl.DataFrame
) -> pl.DataFrame:
    """Metrics of one model's generation_estimates (several relations): GENERATION_METRICS on the
    answered rows, ANSWERED_SHARE and MEAN_SCORE, per split and scope (module docstring), in
    OUTPUT_SCHEMA. `instances`: probe_instances (relation_id, instance_id, n_gold, split);
    `relations`: the relations table (relation_id, domain)."""
    if estimates.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    missing = [c for c in REQUIRED_COLUMNS if c not in estimates.columns]
    if missing:
        raise ValueError(f"generation_estimates: missing column(s) {missing} (have {estimates.columns})")
    frame = _with_attributes(
        estimates.select(*REQUIRED_COLUMNS, *(["split"] if "split" in estimates.columns else [])),
        instances,
        relations,
    )
    frame = frame.with_columns(pl.col("correct").fill_null(False))  # a refusal is never correct
    return _with_macros(_metric_rows(frame, SCOPES), frame, _metric_rows)


def coverage_metrics(
    coverage: pl.DataFrame,
    instances: pl.DataFrame,
    relations: pl.DataFrame | None = None,
    tau: float = COVERAGE_TAU,
) -> pl.DataFrame:
    """Knowledge coverage (MACE §5.3: per instance, the share of its gold answers whose cluster's
    mean sampled probability exceeds τ; estimation.generation.knowledge_coverage) as OUTPUT_SCHEMA
    rows: estimator COVERAGE_ESTIMATOR, metric coverage_metric(τ), the mean over the instances of
    every scope (as generation_metrics), higher_is_better null (a property of the model, not of an
    estimator). `coverage`: model_id, instance_id, coverage, and relation_id (else joined from
    `instances` by instance_id, which must then name one relation)."""
    if coverage.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    for column in ("model_id", "instance_id", "coverage"):
        if column not in coverage.columns:
            raise ValueError(f"coverage: missing column {column!r} (have {coverage.columns})")
    frame = coverage.select(
        "model_id", *(["relation_id"] if "relation_id" in coverage.columns else []), "instance_id", "coverage"
    )
    if "relation_id" not in frame.columns:
        owners = instances.select("instance_id", "relation_id").unique()
        if owners["instance_id"].is_duplicated().any():
            raise ValueError("coverage: has no relation_id, and instance ids repeat across relations")
        frame = frame.join(owners, on="instance_id", how="left", maintain_order="left")
    frame = _with_attributes(
        frame.with_columns(
            estimator=pl.lit(COVERAGE_ESTIMATOR),
            output_kind=pl.lit("probability"),  # a metrics group key; coverage is a share
        ),
        instances,
        relations,
    )
    metric = coverage_metric(tau)

    def means(g: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
        return _scope_means(g, "coverage", metric, scopes)

    return _with_macros(means(frame, SCOPES), frame, means)
