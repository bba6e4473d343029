"""The metric engine: every applicable metric of the registry (registry.py) on the samples of an
estimates table (samples.py), one batched call per metric over all samples, into the long metrics
table (OUTPUT_SCHEMA): per group and breakdown scope (compute_metrics), per template and averaged
over templates (compute_template_metrics), with the τ of every tuned threshold metric
(tuned_thresholds), tuned on the dev split of the same group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import (
    OPTION_INPUTS,
    OUTPUT_SCHEMA,
    TUNING_SPLIT,
    MetricSpec,
    TunedThreshold,
    TuningRule,
    metric_specs,
)
from kcal_pipeline.evaluation.samples import (
    ANSWER_SPACE_KEYS,
    GROUP,
    MetricSamples,
    check_one_row_per_instance,
    check_values,
    prepared,
    statement_frame,
    with_defaults,
    with_group_numbers,
)
from kcal_pipeline.evaluation.scopes import macro_average_mixtures

_KEYS = ("model_id", "estimator", "reduction", "split", *ANSWER_SPACE_KEYS)
PREDICTION_COLUMNS = ("predicted_id", "gold_ids")
# τ is tuned once per estimator output on the dev split of its answer space, over all relations.
TUNING_KEYS = ("model_id", "estimator", "reduction", "output_kind", *ANSWER_SPACE_KEYS)


def _available(
    specs: list[MetricSpec], estimates: pl.DataFrame, option_estimates: pl.DataFrame | None, asked: bool
) -> list[MetricSpec]:
    """Drop the specs whose inputs were not given; if the caller asked for them by name, say what
    is missing instead."""
    lacking = {
        "predictions": [c for c in PREDICTION_COLUMNS if c not in estimates.columns],
        "statements": [] if option_estimates is not None else ["option_estimates"],
        "options": [] if option_estimates is not None else ["option_estimates"],
    }
    kept = []
    for m in specs:
        missing = lacking.get(m.input, [])
        if not missing:
            kept.append(m)
        elif asked:
            what = "argument option_estimates" if m.input in OPTION_INPUTS else f"estimates columns {missing}"
            raise ValueError(
                f"metric {m.name!r} reads {m.input}; missing {what} (gold ids: evaluation.bias."
                "attach_gold_ids; option estimates: estimation.marginal.option_estimates)"
            )
    return kept


def _tuned(
    df: pl.DataFrame, rule: TuningRule, keys: Sequence[str] = TUNING_KEYS
) -> dict[tuple, TunedThreshold]:
    """rule applied to the TUNING_SPLIT rows of every `keys` group of `df` (prepared: sorted),
    and to empty arrays for a group with no dev rows. keys[3] is the output kind."""
    out = {}
    for values, g in df.filter(pl.col("split") == TUNING_SPLIT).group_by(keys, maintain_order=True):
        out[values] = rule(g["confidence"].to_numpy(), g["correct"].to_numpy(), values[3])
    for values in df.select(keys).unique(maintain_order=True).iter_rows():
        if values not in out:
            out[values] = rule(np.empty(0), np.empty(0, dtype=np.bool_), values[3])
    return out


_VALUES_SCHEMA = {"segment": pl.Int64, "rank": pl.Int64, "value": pl.Float64}


def _values(samples: MetricSamples, specs: list[MetricSpec], tuning_keys: Sequence[str]) -> pl.DataFrame:
    """Every applicable metric of `specs` but the "predictions" ones on every sample: (segment,
    metric rank, value); one batched call per metric over all samples (evaluation/segments.py)."""
    taus = {
        rule: _tuned(samples.frame, rule, tuning_keys)
        for rule in dict.fromkeys(m.threshold for m in specs if m.tuned)
    }
    group_tuning = list(
        samples.frame.unique("group", keep="first", maintain_order=True).select(tuning_keys).iter_rows()
    )
    parts = []
    for rank, m in enumerate(specs):
        if m.input == "predictions":
            continue  # per relation only: _prediction_values
        chosen, seg = samples.view(m.needs)
        if chosen is None:
            continue  # a probability metric and no probability-valued group
        if m.input == "confidence":
            value = m.batched(seg)
        elif m.input == "options":
            value = m.batched(seg, *samples.option_codes(chosen))
        else:
            if m.tuned:
                per_group = np.array([taus[m.threshold][key].threshold for key in group_tuning])
                tau = per_group[samples.segment_group[chosen]]
            else:
                tau = np.full(chosen.size, float(m.threshold))
            value = m.batched(seg, tau)
        parts.append(pl.DataFrame({"segment": chosen, "rank": np.full(chosen.size, rank), "value": value}))
    return pl.concat(parts).cast(_VALUES_SCHEMA) if parts else pl.DataFrame(schema=_VALUES_SCHEMA)


def _prediction_values(samples: MetricSamples, specs: list[MetricSpec]) -> pl.DataFrame:
    """The "predictions" metrics: on each relation sample (batched over all of them), and on each
    "all" sample the unweighted mean of its group's relation values."""
    chosen = [(rank, m) for rank, m in enumerate(specs) if m.input == "predictions"]
    members = samples.members
    relation = members.filter(pl.col("scope") == "relation")
    if not chosen or relation.is_empty():
        return pl.DataFrame(schema=_VALUES_SCHEMA)
    frame = relation.select("segment", "group").with_columns(
        samples.frame.select("predicted_id", "gold_ids")[relation["row"]],
        local=pl.col("segment").rle_id().cast(pl.Int64),  # the relation samples numbered 0 … R−1
    )
    firsts = frame.unique("local", keep="first", maintain_order=True).select("local", "segment", "group")
    alls = members.filter(pl.col("scope") == "all").unique("segment", keep="first").select("segment", "group")
    parts = []
    for rank, m in chosen:
        values = m.batched(frame.drop("segment").rename({"local": "segment"}), firsts.height)
        per_relation = firsts.with_columns(value=pl.Series(values, dtype=pl.Float64), rank=pl.lit(rank))
        means = per_relation.group_by("group").agg(pl.col("value").mean())
        parts.append(per_relation.select(list(_VALUES_SCHEMA)))
        parts.append(
            alls.join(means, on="group").with_columns(rank=pl.lit(rank)).select(list(_VALUES_SCHEMA))
        )
    return pl.concat([p.cast(_VALUES_SCHEMA) for p in parts])


def _metric_rows(
    df: pl.DataFrame,
    specs: list[MetricSpec],
    scopes: Sequence[str] | None = None,
    tuning_keys: Sequence[str] = TUNING_KEYS,
) -> pl.DataFrame:
    """OUTPUT_SCHEMA rows for `df` (prepared) per GROUP × breakdown scope (evaluation/scopes.py:
    all and each relation always; domain, gold count, MACE mixture per domain, option count,
    template kind where `df` has the attribute columns attach_attributes adds), in the order group,
    scope, value, metric (registry order)."""
    samples = MetricSamples.of(df, scopes)
    values = pl.concat([_values(samples, specs, tuning_keys), _prediction_values(samples, specs)])
    return _with_keys(values, samples, specs).select(list(OUTPUT_SCHEMA)).cast(OUTPUT_SCHEMA)


def _with_keys(
    values: pl.DataFrame, samples: MetricSamples, specs: list[MetricSpec], carry: Sequence[str] = ()
) -> pl.DataFrame:
    """(segment, rank, value) rows with their sample's keys (MetricSamples.keys) and the metric's
    name and direction; by segment, then metric."""
    names = pl.DataFrame(
        {
            "rank": range(len(specs)),
            "metric": [m.name for m in specs],
            "higher_is_better": [m.higher_is_better for m in specs],
        },
        schema={"rank": pl.Int64, "metric": pl.String, "higher_is_better": pl.Boolean},
    )
    joined = values.join(samples.keys(carry), on="segment").join(names, on="rank")
    return joined.sort("segment", "rank")


def compute_metrics(
    estimates: pl.DataFrame,
    metrics: Sequence[str] | None = None,
    option_estimates: pl.DataFrame | None = None,
    scopes: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Long table (model_id, estimator, reduction, split, answer_space_k, answer_space_draw, scope,
    scope_value, metric, value, n, higher_is_better) for the scopes all and relation, within each
    split and answer space (k and draw) separately.

    Expects one row per instance per (model_id, estimator, reduction): the caller filters to one
    template or one aggregation, since pooling templates would count an instance several times.
    Metrics that need probabilities are left out for score-valued estimators. "predictions"
    metrics need the columns predicted_id and gold_ids; "statements" and "options" metrics read
    `option_estimates` (their rows come after the instance rows, n = statements; scopes as its
    attribute columns allow). Without those inputs such metrics are left out, or, when asked for
    by name, an error. A tuned threshold
    metric uses the τ its rule picks on the dev split of the same (model, estimator, reduction,
    output kind, answer space) — see tuned_thresholds — in every split and scope.
    """
    specs = metric_specs(metrics)
    if estimates.is_empty():
        raise ValueError("estimates: no rows to compute metrics on")
    specs = _available(specs, estimates, option_estimates, asked=metrics is not None)
    if any(m.input == "predictions" for m in specs):
        no_gold = estimates.filter(pl.col("gold_ids").is_null() | (pl.col("gold_ids").list.len() == 0))
        if not no_gold.is_empty():
            row = no_gold.row(0, named=True)
            raise ValueError(
                f"estimates: no gold_ids for instance {row['instance_id']!r} of relation "
                f"{row['relation_id']!r}"
            )
    frames = [_metric_rows(prepared(estimates), [m for m in specs if m.input not in OPTION_INPUTS], scopes)]
    statement_specs = [m for m in specs if m.input in OPTION_INPUTS]
    if statement_specs and not option_estimates.is_empty():
        frames.append(_metric_rows(statement_frame(option_estimates), statement_specs))
    out = pl.concat(frames)
    return pl.concat([out, macro_average_mixtures(out).select(out.columns).cast(OUTPUT_SCHEMA)])


THRESHOLDS_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "unit": pl.String,
    "rule": pl.String,
    "threshold": pl.Float64,
    "fallback": pl.Boolean,
    "reason": pl.String,
    "n_dev": pl.Int64,
}


def tuned_thresholds(
    estimates: pl.DataFrame,
    option_estimates: pl.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
) -> pl.DataFrame:
    """The τ behind every tuned threshold metric of compute_metrics, one row per (model, estimator,
    reduction, answer space, unit, rule): unit "instances" (estimates) or "statements"
    (option_estimates); `fallback` and `reason` say when the rule fell back to its default."""
    specs = [m for m in metric_specs(metrics) if m.tuned]
    inputs = [("instances", "threshold", prepared(estimates))]
    if option_estimates is not None and not option_estimates.is_empty():
        inputs.append(("statements", "statements", statement_frame(option_estimates)))
    rows = []
    for unit, kind, df in inputs:
        rules = {m.threshold: None for m in specs if m.input == kind}  # distinct, in registry order
        for rule in rules:
            for values, t in _tuned(df, rule).items():
                key = dict(zip(TUNING_KEYS, values, strict=True))
                if not any(m.applies_to(key["output_kind"]) for m in specs if m.threshold is rule):
                    continue
                rows.append(
                    (key["model_id"], key["estimator"], key["reduction"], key["answer_space_k"],
                     key["answer_space_draw"], unit, rule.__name__, t.threshold, t.fallback, t.reason,
                     t.n_dev)
                )  # fmt: skip
    return pl.DataFrame(rows, orient="row", schema=THRESHOLDS_SCHEMA)


def _per_template(specs: list[MetricSpec], asked: bool) -> list[MetricSpec]:
    """Per template: the (confidence, correct) metrics and fixed-threshold ones; a tuned τ, a
    relation's prediction distribution or option estimates have no per-template meaning here."""
    kept = [m for m in specs if m.input == "confidence" or (m.input == "threshold" and not m.tuned)]
    if asked and len(kept) < len(specs):
        odd = [m.name for m in specs if m not in kept]
        usable = [m.name for m in kept]
        raise ValueError(f"metric(s) {odd} are not computed per template; per template: {usable}")
    return kept


def compute_template_metrics(estimates: pl.DataFrame, metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Metrics per template, and their mean over templates, in the schema of compute_metrics.

    `estimates`: template-grain rows on the templates to average (the curated ones), one row per
    (instance, template). Within each group (split and answer space included), per relation:
      - scope "template", scope_value = template_id: every applicable metric on that template alone;
      - scope "relation_template_mean", scope_value = relation_id: the unweighted mean of those
        values over the relation's templates (NaN if one is NaN); n = the relation's instances;
      - scope "all_template_mean", scope_value "all": the relations' template means weighted by
        their instances (as "all" weighs the relations' headline values); n = their sum.
    With every template covering every instance, the accuracy means equal the share of correct
    (instance, template) pairs.
    """
    specs = _per_template(metric_specs(metrics), asked=metrics is not None)
    if "template_id" not in estimates.columns:
        raise ValueError(f"estimates: missing column 'template_id' (have {estimates.columns})")
    if estimates.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    df = with_defaults(estimates).drop_nulls("template_id")  # instance-grain rows have no template
    if df.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    per = [*GROUP, "relation_id", "template_id"]
    check_one_row_per_instance(df, [*per, "instance_id"], "expected one per template")
    df = df.sort(*per, "instance_id", nulls_last=True)
    check_values(df)
    df = with_group_numbers(df)
    members = df.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
        "group",
        pl.struct(per).rle_id().cast(pl.Int64).alias("segment"),
        pl.lit("template").alias("scope"),
        pl.col("template_id").alias("scope_value"),
        "relation_id",
        "template_id",
    )
    samples = MetricSamples(df, members)
    templates = _with_keys(
        _values(samples, specs, TUNING_KEYS), samples, specs, ["relation_id", "template_id"]
    )
    instances = df.group_by(*_KEYS, "relation_id").agg(pl.col("instance_id").n_unique().alias("n"))
    relation_mean = (
        templates.group_by(*_KEYS, "relation_id", "metric", "higher_is_better", maintain_order=True)
        .agg(pl.col("value").mean())
        .join(instances, on=[*_KEYS, "relation_id"], nulls_equal=True, maintain_order="left")
    )
    all_mean = relation_mean.group_by(*_KEYS, "metric", "higher_is_better", maintain_order=True).agg(
        ((pl.col("value") * pl.col("n")).sum() / pl.col("n").sum()).alias("value"), pl.col("n").sum()
    )
    frames = [
        templates.with_columns(scope=pl.lit("template"), scope_value=pl.col("template_id")),
        relation_mean.with_columns(scope=pl.lit("relation_template_mean"), scope_value=pl.col("relation_id")),
        all_mean.with_columns(scope=pl.lit("all_template_mean"), scope_value=pl.lit("all")),
    ]
    return pl.concat([f.select(list(OUTPUT_SCHEMA)).cast(OUTPUT_SCHEMA) for f in frames])
