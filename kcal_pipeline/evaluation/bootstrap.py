"""Bootstrap confidence intervals (issue 14): is a metric, or a difference between two
estimators, distinguishable from resampling noise?

bootstrap_intervals and paired_differences draw clustered resamples of every group's rows
(resamples.py), evaluate the batched metrics on all of them at once (resampled_metrics.py) and read
bias-corrected intervals that contain their point estimate (intervals.py). ResampledValues shares
the resample values between the two, so each is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.intervals import LEVEL, bias_corrected_interval, interval_percentiles
from kcal_pipeline.evaluation.registry import METRICS, SCOPE_KEY_SCHEMA, as_arrays
from kcal_pipeline.evaluation.resampled_metrics import batched_metrics, check_metrics
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, ResamplePlans, ScopeResamples
from kcal_pipeline.evaluation.samples import ANSWER_SPACE_KEYS, GROUP, with_defaults
from kcal_pipeline.evaluation.segments import in_threads

DEFAULT_METRICS = ("accuracy", "ace", "brier", "auroc", "aurc")
# The metrics table's intervals: DEFAULT_METRICS (the paired differences' metrics) and the signed gap.
INTERVAL_METRICS = (*DEFAULT_METRICS, "confidence_gap")
_KEYS = ("model_id", "estimator", "reduction", "split", *ANSWER_SPACE_KEYS)
# A paired difference's group (its first _N_PAIR_GROUP keys), then the instance both answered.
_PAIR_ON = ("model_id", "reduction", "split", *ANSWER_SPACE_KEYS, "relation_id", "instance_id")
_N_PAIR_GROUP = 3 + len(ANSWER_SPACE_KEYS)


def _sorted_estimates(frame: pl.DataFrame, keys: Sequence[str], what: str) -> pl.DataFrame:
    df = with_defaults(frame)
    dup = df.filter(pl.struct([*keys, "relation_id", "instance_id"]).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"{what}: several rows for instance {row['instance_id']!r} of estimator {row['estimator']!r}; "
            "filter to one template or aggregation first"
        )
    return df.sort(*keys, "relation_id", "instance_id", nulls_last=True)


OUTPUT_SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "metric": pl.String,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n_resamples": pl.Int64,
}


class ResampledValues:
    """Each estimator's batched metric values on one scope's resamples of its rows, computed once.

    The intervals of bootstrap_intervals and both sides of paired_differences resample the same
    rows with the same plan whenever an estimator answered the instances its baseline answered
    (nearly always): A's paired values are its interval values, and the baseline's are shared by
    every pair. Pass one object to both (tables.metrics_and_differences does) and each is computed
    once. A value is keyed by (estimator, output kind, model, reduction, split, answer space, the
    exact rows as (relation, instance) ids, scope), never by a hash: one object serves ONE
    estimates table, the rows' confidences being read from it.
    """

    def __init__(self, n_resamples: int = N_RESAMPLES, seed: int = 0):
        self.plans = ResamplePlans(n_resamples, seed)
        self._rows: dict[tuple, int] = {}
        self._values: dict[tuple, dict[str, np.ndarray]] = {}

    def check(self, n_resamples: int, seed: int) -> None:
        """Refuse a caller asking for other resamples than the ones memoised."""
        have = (self.plans.n_resamples, self.plans.seed)
        if (n_resamples, seed) != have:
            raise ValueError(
                f"values: memoised for (n_resamples, seed) = {have}, asked for {(n_resamples, seed)}"
            )

    def rows_id(self, g: pl.DataFrame) -> int:
        """A small id for the exact rows of g (relation and instance ids, in order), so value keys
        hash one int rather than the whole tuple on every look-up."""
        rows = (tuple(g["relation_id"].to_list()), tuple(g["instance_id"].to_list()))
        return self._rows.setdefault(rows, len(self._rows))

    def evaluate(self, requests: list[tuple]) -> list[dict[str, np.ndarray]]:
        """For each request (key, metrics, c, y, resamples), {metric: [B] values}; what is not
        memoised yet is computed in threads, once per key however often it is requested."""
        todo: dict[tuple, tuple] = {}
        for key, metrics, c, y, resamples in requests:
            pending = todo[key][0] if key in todo else ()
            need = [m for m in metrics if m not in self._values.get(key, {}) and m not in pending]
            if need:
                todo[key] = ((*pending, *need), c, y, resamples)
        computed = in_threads(lambda task: batched_metrics(*task), list(todo.values()))
        for key, values in zip(todo, computed, strict=True):
            self._values.setdefault(key, {}).update(values)
        return [{m: self._values[key][m] for m in metrics} for key, metrics, *_ in requests]


def _value_key(estimator: str, output_kind: str, key: dict, row_set: int, sc: ScopeResamples) -> tuple:
    return (
        estimator,
        output_kind,
        *(key[k] for k in _PAIR_ON[:_N_PAIR_GROUP]),
        row_set,
        sc.scope,
        sc.scope_value,
    )


def _memo(values: ResampledValues | None, n_resamples: int, seed: int) -> ResampledValues:
    if values is None:
        return ResampledValues(n_resamples, seed)
    values.check(n_resamples, seed)
    return values


def bootstrap_intervals(
    frame: pl.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """Bias-corrected intervals (bias_corrected_interval) for the metrics of `compute_metrics`'
    table, scopes "all" (relations, then instances, resampled) and "relation" (instances
    resampled); each contains the registered metric on the scope's rows, its point estimate.

    `frame`: what compute_metrics reads, one row per instance per (model, estimator, reduction,
    split, answer space). Probability metrics are left out for score-valued estimators.
    `n_resamples` in the output counts the resamples on which the metric is defined (AUROC is
    not on a resample with one class) and from which the interval is read. `values`: resample
    values shared with paired_differences on the same table (see ResampledValues).
    """
    names = check_metrics(metrics)
    interval_percentiles(level)  # a bad level fails before any resampling
    memo = _memo(values, n_resamples, seed)
    df = _sorted_estimates(frame, GROUP, "estimates")
    keys, points, requests = [], [], []
    for group, g in df.group_by(GROUP, maintain_order=True):
        key = dict(zip(GROUP, group, strict=True))
        usable = [m for m in names if METRICS[m].applies_to(key["output_kind"])]
        if not usable:
            continue
        c, y = as_arrays(g["confidence"].to_numpy(), g["correct"].to_numpy(), key["output_kind"])
        row_set = memo.rows_id(g)
        for sc in memo.plans(g["relation_id"].to_numpy()):
            keys += [(*(key[k] for k in _KEYS), sc.scope, sc.scope_value, m) for m in usable]
            points += [METRICS[m](c[sc.rows], y[sc.rows], key["output_kind"]) for m in usable]
            value_key = _value_key(key["estimator"], key["output_kind"], key, row_set, sc)
            requests.append((value_key, usable, c, y, sc.resamples))
    results = memo.evaluate(requests)
    stacked = [v[m] for (_, usable, *_), v in zip(requests, results, strict=True) for m in usable]
    if not keys:
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    low, high, used = bias_corrected_interval(np.vstack(stacked), np.array(points, dtype=np.float64), level)
    rows = [
        (*k, lo, hi, u) for k, lo, hi, u in zip(keys, low.tolist(), high.tolist(), used.tolist(), strict=True)
    ]
    return pl.DataFrame(rows, orient="row", schema=OUTPUT_SCHEMA)


def _paired(df: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
    """A's rows joined with B's on the same instance (B's columns suffixed _b), sorted as scopes
    sorts rows, so that resample plans index them the same way."""
    cols = [*_PAIR_ON, "confidence", "correct", "output_kind"]
    side_a, side_b = (df.filter(pl.col("estimator") == e).select(cols) for e in (a, b))
    joined = side_a.join(side_b, on=list(_PAIR_ON), nulls_equal=True, suffix="_b")
    if joined.is_empty():
        raise ValueError(f"pairs: {a!r} and {b!r} share no (model, reduction, split, answer space, instance)")
    return joined.sort(*_PAIR_ON, nulls_last=True)


PAIRED_SCHEMA = {
    "model_id": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
    "estimator_a": pl.String,
    "estimator_b": pl.String,
    "metric": pl.String,
    "difference": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
    "n_resamples": pl.Int64,
}


def paired_differences(
    frame: pl.DataFrame,
    pairs: Sequence[tuple[str, str]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """metric(A) − metric(B) with a bias-corrected interval (containing it), for each (A, B) in
    `pairs`, on the instances both estimators answered (joined on model, reduction, split, answer
    space, relation and instance; so always under the same reduction).

    Both estimators are evaluated on the SAME resample indices, so the interval is of the paired
    difference: an interval excluding 0 says the gap is not resampling noise. `difference` is the
    registered metric on the paired instances; `n` their count; `n_resamples` the resamples where
    both values are defined. Probability metrics only when both estimators give probabilities.
    `values`: resample values shared with bootstrap_intervals on the same table (an estimator on
    the same instances as B reads its interval values; B's are computed once for every pair).
    """
    names = check_metrics(metrics)
    interval_percentiles(level)  # a bad level fails before any resampling
    memo = _memo(values, n_resamples, seed)
    df = _sorted_estimates(frame, GROUP, "estimates")
    present = set(df["estimator"].unique().to_list())
    keys, points, requests, operands = [], [], [], []  # operands: (request of A, request of B, metric)
    for a, b in pairs:
        missing = [e for e in (a, b) if e not in present]
        if missing:
            raise ValueError(f"pairs: estimator(s) {missing} not in the estimates (have {sorted(present)})")
        joined = _paired(df, a, b)
        by = [*_PAIR_ON[:_N_PAIR_GROUP], "output_kind", "output_kind_b"]
        for group, g in joined.group_by(by, maintain_order=True):
            key = dict(zip(by, group, strict=True))
            kinds = (key["output_kind"], key["output_kind_b"])
            usable = [m for m in names if all(METRICS[m].applies_to(kind) for kind in kinds)]
            if not usable:
                continue
            sides = [
                as_arrays(g[f"confidence{sfx}"].to_numpy(), g[f"correct{sfx}"].to_numpy(), kind)
                for sfx, kind in zip(("", "_b"), kinds, strict=True)
            ]
            row_set = memo.rows_id(g)
            for sc in memo.plans(g["relation_id"].to_numpy()):
                for estimator, kind, (c, y) in zip((a, b), kinds, sides, strict=True):
                    value_key = _value_key(estimator, kind, key, row_set, sc)
                    requests.append((value_key, usable, c, y, sc.resamples))
                (ca, ya), (cb, yb) = ((c[sc.rows], y[sc.rows]) for c, y in sides)
                for m in usable:
                    keys.append(
                        (*(key[k] for k in _PAIR_ON[:_N_PAIR_GROUP]), sc.scope, sc.scope_value, a, b, m)
                    )
                    point = METRICS[m](ca, ya, kinds[0]) - METRICS[m](cb, yb, kinds[1])
                    points.append((point, ca.size))
                    operands.append((len(requests) - 2, len(requests) - 1, m))
    if not keys:
        return pl.DataFrame(schema=PAIRED_SCHEMA)
    results = memo.evaluate(requests)
    stacked = [results[i][m] - results[j][m] for i, j, m in operands]
    point = np.array([d for d, _ in points], dtype=np.float64)
    low, high, used = bias_corrected_interval(np.vstack(stacked), point, level)
    rows = [
        (*k, d, lo, hi, n, u)
        for k, (d, n), lo, hi, u in zip(keys, points, low.tolist(), high.tolist(), used.tolist(), strict=True)
    ]
    return pl.DataFrame(rows, orient="row", schema=PAIRED_SCHEMA)
