"""What the claims read of one model's tables: the headline and template selections, single rows
of the metrics tables, paired differences, the seeded resample plans and the statistics read from
them (sums, means, ratios, bias-corrected intervals), and how many dev instances a fit saw."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import polars as pl

from kcal_pipeline.estimation.fitting import TEMPERATURE_BOUNDS
from kcal_pipeline.estimation.registry import FULL_ANSWER_SPACE, HEADLINE_SPLIT, headline_template_estimates
from kcal_pipeline.evaluation.bootstrap import paired_differences
from kcal_pipeline.evaluation.intervals import bias_corrected_interval
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, PAD, Resamples, resample_plan
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import REDUCTION, SEED, StoreTables, fmt


def headline_rows(t: StoreTables, reduction: str | None = REDUCTION) -> pl.DataFrame:
    """The headline selection (each relation's headline template, plus the instance-grain rows) on
    the test split and full answer spaces, as metric_differences reads it; one reduction."""
    if t.estimates.is_empty() or t.templates.is_empty():
        return pl.DataFrame()
    est = t.estimates.filter(
        (pl.col("split") == HEADLINE_SPLIT) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    )
    if reduction is not None:
        est = est.filter(pl.col("reduction") == reduction)
    return headline_template_estimates(est, t.templates)


def template_rows(t: StoreTables, estimators: Sequence[str]) -> pl.DataFrame:
    """The estimators' template-grain rows as the claims read them: test split, full answer
    spaces, the headline reduction."""
    return t.estimates.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("template_id").is_not_null()
        & pl.col("estimator").is_in(list(estimators))
    )


def pair_key(template_column: str) -> pl.Expr:
    """An instance_id naming the (instance, template) pair, so that a paired difference pairs one
    statement with and without a variant (a marker, a context) rather than the bare instance."""
    return pl.col("instance_id") + "|" + pl.col(template_column)


def join_instances(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """Several selections side by side on their shared (relation, instance), sorted so that a
    resample plan over the rows is reproducible."""
    keys = ["relation_id", "instance_id"]
    it = iter(frames)
    wide = next(it)
    for frame in it:
        wide = wide.join(frame, on=keys)
    return wide.sort(*keys)


def estimators_in(frame: pl.DataFrame) -> set[str]:
    return set(frame["estimator"].unique().to_list()) if "estimator" in frame.columns else set()


def _headline_row(table: pl.DataFrame, **equal: str) -> dict | None:
    """The first row of a metrics-shaped table on the test split, full answer spaces, scope all and
    the headline reduction whose columns `equal` name have those values; None if absent."""
    if table.is_empty():
        return None
    where = (
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("scope") == "all")
        & (pl.col("reduction") == REDUCTION)
    )
    for column, value in equal.items():
        where = where & (pl.col(column) == value)
    rows = table.filter(where)
    return rows.row(0, named=True) if rows.height else None


def difference_row(t: StoreTables, estimator: str, metric: str) -> dict | None:
    """The metric_differences row estimator − Base: test split, full answer spaces, scope all,
    the headline reduction; None if the table has none."""
    return _headline_row(t.differences, estimator_a=estimator, estimator_b=BASELINE, metric=metric)


def metric_row(t: StoreTables, estimator: str, metric: str) -> dict | None:
    """The metrics row of one estimator: test split, full answer spaces, scope all, headline
    reduction; None if absent."""
    return _headline_row(t.metrics, estimator=estimator, metric=metric)


def paired_difference(frame: pl.DataFrame, a: str, b: str, metrics: Sequence[str]) -> dict[str, dict]:
    """metric(a) − metric(b) on their shared instances with a paired bootstrap interval (the
    library's paired_differences, scope all): {metric: row}."""
    rows = paired_differences(
        frame.filter(pl.col("estimator").is_in([a, b])), [(a, b)], metrics, n_resamples=N_RESAMPLES, seed=SEED
    ).filter(pl.col("scope") == "all")
    return {r["metric"]: r for r in rows.iter_rows(named=True)}


def resample_sums(values: np.ndarray, resamples: Resamples) -> np.ndarray:
    """Σ values over each resample's rows (padding excluded): [B]. A statistic that the batched
    metrics do not cover (a mean confidence, an accuracy among answered) is read from these."""
    idx = resamples.indices
    return np.where(idx != PAD, values[idx], 0.0).sum(axis=1)


def relation_resamples(relation_ids: np.ndarray, seed: int = SEED) -> Resamples:
    """The seeded two-stage resample plan (relations, then rows; scope all) as the metrics tables
    draw it, for a statistic computed here over rows sorted by relation."""
    return resample_plan(relation_ids, N_RESAMPLES, seed)[0].resamples


def resample_means(values: np.ndarray, resamples: Resamples) -> np.ndarray:
    """The mean of values on each resample: [B]."""
    return resample_sums(values, resamples) / resamples.sizes


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> float:
    """Σ numerator / Σ denominator (an accuracy among the answered or asserted); NaN when the
    denominator sums to 0."""
    return float(numerator.sum() / denominator.sum()) if denominator.sum() else math.nan


def resample_ratio(numerator: np.ndarray, denominator: np.ndarray, resamples: Resamples) -> np.ndarray:
    """ratio on every resample ([B]; NaN where the denominator sums to 0 there, which
    bc_interval leaves out)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return resample_sums(numerator, resamples) / resample_sums(denominator, resamples)


def bc_interval(values: np.ndarray, point: float) -> tuple[float, float]:
    """The 95 % bias-corrected interval of one statistic's resample values around its point (NaN
    ones left out), as the metrics' intervals are read: it always contains `point`."""
    low, high, _ = bias_corrected_interval(values[None, :], np.array([point]))
    return float(low[0]), float(high[0])


# --- dev-split fits ----------------------------------------------------------------------------

# Fewer dev instances per fit than this and a recalibration is fitted to noise: the note says so.
FEW_DEV = 20


def fits_of(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> pl.DataFrame:
    """The estimator's dev-split fits under one reduction, full answer spaces."""
    if fits.is_empty():
        return fits
    return fits.filter(
        (pl.col("estimator") == estimator)
        & (pl.col("reduction") == reduction)
        & (pl.col("answer_space_k") == 0)
    )


def dev_size_note(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> str:
    """How many dev instances the estimator's fits saw (one reduction, full answer spaces), how
    many temperatures ended on a bound and which τ were tuned: a fit on a handful of instances
    explains a recalibration that makes ACE worse, or a tuned τ equal to τ = 0."""
    own = fits_of(fits, estimator, reduction)
    if own.is_empty():
        return ""
    per_relation = own.group_by("relation_id").agg(pl.col("n_dev").max())
    low, high = int(per_relation["n_dev"].min()), int(per_relation["n_dev"].max())
    note = (
        f"fitted per relation on {low}–{high} dev instances"
        if low != high
        else f"fitted on {low} dev instances per relation"
    )
    temperatures = own.filter(pl.col("parameter") == "temperature")["value"]
    if temperatures.len():
        at_bound = int(temperatures.is_in(list(TEMPERATURE_BOUNDS)).sum())
        note += f"; temperature on a bound {TEMPERATURE_BOUNDS} in {at_bound} of {temperatures.len()} fits"
    taus = own.filter(pl.col("parameter") == "tau")["value"]
    if taus.len():
        note += f"; tuned τ {', '.join(fmt(v) for v in sorted(set(taus.to_list())))}"
    if high < FEW_DEV:
        note += (
            f": fewer than {FEW_DEV} dev instances per fit, so the fit follows noise "
            "(raise --max-instances or --dev-fraction)"
        )
    return note


def few_dev_precondition(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> str:
    """The failed precondition of a claim behind a fitted parameter (temperature, Platt, isotonic,
    τ): every relation's fit saw fewer than FEW_DEV dev instances, so the comparison reads a fit
    to noise; "" when the fits are large enough or there are none to judge."""
    own = fits_of(fits, estimator, reduction)
    if own.is_empty():
        return ""
    most = int(own["n_dev"].max())
    if most >= FEW_DEV:
        return ""
    return (
        f"too few dev instances: {estimator} was fitted on at most {most} per relation, fewer than "
        f"{FEW_DEV} (raise --max-instances or --dev-fraction)"
    )
