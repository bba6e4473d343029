"""The metric contract: one registry of specs over (confidence, correct) pairs.

A metric spec says whether it needs probabilities (calibration: ACE, ECE, Brier) or accepts any
real-valued score where higher means more confident (ranking: AUROC, AURC, accuracy), and whether
higher values are better. `compute_metrics` applies every applicable metric per (model, estimator,
reduction, split, answer space) to all instances and to each relation, `compute_template_metrics`
per template and averaged over templates (BEAR's relation accuracy). A probability metric is never
computed on a score-valued estimator, and calling one directly on scores is an error that says
which metrics would apply. This registry is the only list of metric names in kcal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns

Needs = Literal["probability", "any"]
MetricFn = Callable[[np.ndarray, np.ndarray], float]


def as_arrays(confidence, correct, output_kind: str = "probability") -> tuple[np.ndarray, np.ndarray]:
    """Validate once at the metric boundary: a probability outside [0, 1], or a non-finite score,
    is an estimator bug."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct)
    if c.ndim != 1 or c.shape != y.shape:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if c.size == 0:
        raise ValueError("no predictions: confidence is empty")
    if output_kind == "probability":
        bad = c[~((c >= 0.0) & (c <= 1.0))]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is outside [0, 1]")
    else:
        bad = c[~np.isfinite(c)]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is not a finite score")
    if y.dtype != np.bool_:
        odd = y[~np.isin(y, (0, 1))]
        if odd.size:
            raise ValueError(f"correct must be boolean or 0/1, got value {odd[0].item()!r}")
        y = y.astype(np.bool_)
    return c, y


@dataclass(frozen=True)
class MetricSpec:
    """One metric; calling it validates the inputs for its needs, then computes."""

    name: str
    label: str
    family: str
    fn: MetricFn
    needs: Needs
    higher_is_better: bool
    in_summary: bool = False

    def applies_to(self, output_kind: str) -> bool:
        return self.needs == "any" or output_kind == "probability"

    def __call__(self, confidence, correct, output_kind: str = "probability") -> float:
        if not self.applies_to(output_kind):
            usable = [m.name for m in METRICS.values() if m.applies_to(output_kind)]
            raise ValueError(
                f"metric {self.name!r} needs probabilities in [0, 1], but the estimator's output is an "
                f"unbounded {output_kind}; metrics that accept it: {', '.join(usable)}"
            )
        return float(self.fn(*as_arrays(confidence, correct, output_kind)))


METRICS: dict[str, MetricSpec] = {}


def register(
    name: str, *, label: str, family: str, needs: Needs, higher_is_better: bool, in_summary: bool = False
) -> Callable[[MetricFn], MetricSpec]:
    """Add a metric; a second one under the same name is a bug, not an override."""

    def add(fn: MetricFn) -> MetricSpec:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        if needs not in ("probability", "any"):
            raise ValueError(f"metric {name!r}: needs must be 'probability' or 'any', got {needs!r}")
        spec = MetricSpec(name, label, family, fn, needs, higher_is_better, in_summary)
        METRICS[name] = spec
        return spec

    return add


def summary_metrics() -> list[MetricSpec]:
    """The metrics of the demo summary and the report's headline table, in registry order."""
    return [m for m in METRICS.values() if m.in_summary]


_EST_COLUMNS = ("model_id", "estimator", "relation_id", "instance_id", "confidence", "correct")
# A metric is computed within one of these groups, never across two: an estimator's reduction, its
# kind of output, the probe split (metrics are reported on test; dev only tunes) and the answer
# space (0 = each instance's full answer space, k = its `#k` subsample copy).
GROUP = ("model_id", "estimator", "reduction", "output_kind", "split", "answer_space_k")


def with_defaults(estimates: pl.DataFrame) -> pl.DataFrame:
    """Estimates as metrics read them: reduction (null if absent), output_kind (probability),
    split (null: unknown) and answer_space_k (0: full answer spaces)."""
    require_columns(estimates, _EST_COLUMNS, "estimates")
    defaults = {
        "reduction": pl.lit(None, pl.String),
        "output_kind": pl.lit("probability", pl.String),
        "split": pl.lit(None, pl.String),
        "answer_space_k": pl.lit(0, pl.Int32),
    }
    missing = {name: value for name, value in defaults.items() if name not in estimates.columns}
    return estimates.with_columns(**missing).with_columns(pl.col("answer_space_k").cast(pl.Int32))


def _check_one_row_per_instance(df: pl.DataFrame, keys: Sequence[str], hint: str) -> None:
    dup = df.filter(pl.struct(keys).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"estimates: several rows for instance {row['instance_id']!r} of estimator "
            f"{row['estimator']!r}; {hint}"
        )


def scopes(estimates: pl.DataFrame) -> Iterator[tuple[dict, str, str, np.ndarray, np.ndarray]]:
    """Yield (group keys, scope, scope_value, confidence, correct) in a deterministic order.

    One GROUP (split and answer space included) at a time: scope "all" is all relations of that
    group, never dev and test together, never a full answer space with its subsamples. Rows are
    sorted by (relation_id, instance_id) first, so AURC's tie order (and the last bits of a binned
    sum) do not depend on how the caller's frame happened to be ordered.
    """
    df = with_defaults(estimates)
    _check_one_row_per_instance(
        df, [*GROUP, "relation_id", "instance_id"], "filter to one template or aggregation first"
    )
    df = df.sort(*GROUP, "relation_id", "instance_id", nulls_last=True)
    for group, g in df.group_by(GROUP, maintain_order=True):
        key = dict(zip(GROUP, group, strict=True))
        yield key, "all", "all", g["confidence"].to_numpy(), g["correct"].to_numpy()
        for (rel,), r in g.group_by("relation_id", maintain_order=True):
            yield key, "relation", rel, r["confidence"].to_numpy(), r["correct"].to_numpy()


OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
    "higher_is_better": pl.Boolean,
}
_KEYS = ("model_id", "estimator", "reduction", "split", "answer_space_k")


def _specs(metrics: Sequence[str] | None) -> list[MetricSpec]:
    names = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    return [METRICS[m] for m in names]


def compute_metrics(estimates: pl.DataFrame, metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Long table (model_id, estimator, reduction, split, answer_space_k, scope, scope_value,
    metric, value, n, higher_is_better) for the scopes all and relation, within each split and
    answer space separately.

    Expects one row per instance per (model_id, estimator, reduction): the caller filters to one
    template or one aggregation, since pooling templates would count an instance several times.
    Metrics that need probabilities are left out for score-valued estimators.
    """
    specs = _specs(metrics)
    if estimates.is_empty():
        raise ValueError("estimates: no rows to compute metrics on")
    rows = [
        (*(key[k] for k in _KEYS), scope, value, m.name, m(c, y, key["output_kind"]), len(c),
         m.higher_is_better)
        for key, scope, value, c, y in scopes(estimates)
        for m in specs
        if m.applies_to(key["output_kind"])
    ]  # fmt: skip
    return pl.DataFrame(rows, orient="row", schema=OUTPUT_SCHEMA)


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
    specs = _specs(metrics)
    if "template_id" not in estimates.columns:
        raise ValueError(f"estimates: missing column 'template_id' (have {estimates.columns})")
    if estimates.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    df = with_defaults(estimates).drop_nulls("template_id")  # instance-grain rows have no template
    if df.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    per = [*GROUP, "relation_id", "template_id"]
    _check_one_row_per_instance(df, [*per, "instance_id"], "expected one per template")
    df = df.sort(*per, "instance_id", nulls_last=True)
    rows = [
        (*(key[k] for k in _KEYS), key["relation_id"], key["template_id"], m.name,
         m(g["confidence"].to_numpy(), g["correct"].to_numpy(), key["output_kind"]), g.height,
         m.higher_is_better)
        for values, g in df.group_by(per, maintain_order=True)
        for key in [dict(zip(per, values, strict=True))]
        for m in specs
        if m.applies_to(key["output_kind"])
    ]  # fmt: skip
    schema = {**{k: OUTPUT_SCHEMA[k] for k in _KEYS}, "relation_id": pl.String, "template_id": pl.String}
    schema |= {k: OUTPUT_SCHEMA[k] for k in ("metric", "value", "n", "higher_is_better")}
    templates = pl.DataFrame(rows, orient="row", schema=schema)
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
