"""Calibration and selective-prediction metrics (METHODS §3) over (confidence, correct) pairs.

Every metric is `fn(confidence, correct) -> float`, registered by name; `compute_metrics` applies
them per (model_id, estimator) to all instances and to each relation. Binned metrics and the
reliability curves share one binning function, so a curve always shows the bins its number uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns

BINS = 20
BINNING = {
    "ace": f"{BINS} quantile (equal-count) bins",
    "ece": f"{BINS} equal-width bins on [0, 1]",
}

Metric = Callable[[np.ndarray, np.ndarray], float]
METRICS: dict[str, Metric] = {}


def _as_arrays(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """Validate once at the metric boundary: a confidence outside [0, 1] is an estimator bug."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct)
    if c.ndim != 1 or c.shape != y.shape:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if c.size == 0:
        raise ValueError("no predictions: confidence is empty")
    bad = c[~((c >= 0.0) & (c <= 1.0))]
    if bad.size:
        raise ValueError(f"confidence {bad[0].item()!r} is outside [0, 1]")
    if y.dtype != np.bool_:
        odd = y[~np.isin(y, (0, 1))]
        if odd.size:
            raise ValueError(f"correct must be boolean or 0/1, got value {odd[0].item()!r}")
        y = y.astype(np.bool_)
    return c, y


def register(name: str) -> Callable[[Metric], Metric]:
    """Register a metric; the wrapper validates inputs so each metric body can assume clean arrays."""

    def add(fn: Metric) -> Metric:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is already registered")

        @functools.wraps(fn)
        def checked(confidence, correct) -> float:
            return float(fn(*_as_arrays(confidence, correct)))

        METRICS[name] = checked
        return checked

    return add


def _bins(c: np.ndarray, bins: int, strategy: str) -> list[np.ndarray]:
    """Index arrays of the `bins` bins (some may be empty).

    quantile: stable argsort by confidence, then numpy.array_split into near-equal counts (the
    first N mod B bins get one extra). Tie rule: equal confidences keep their input order and may
    straddle a bin boundary, so the result depends on input order among ties — callers sort their
    input (compute_metrics sorts by relation_id, instance_id) to make it deterministic.
    uniform: bin k = [k/B, (k+1)/B), the last bin closed at 1.0; computed as floor(B·c) so that a
    value exactly on an edge (e.g. 0.15) lands in the upper bin.
    """
    if strategy == "quantile":
        return np.array_split(np.argsort(c, kind="stable"), bins)
    if strategy == "uniform":
        idx = np.minimum(np.floor(c * bins).astype(np.int64), bins - 1)
        return [np.flatnonzero(idx == k) for k in range(bins)]
    raise ValueError(f"unknown binning strategy {strategy!r}; known: ['quantile', 'uniform']")


def _bin_stats(c: np.ndarray, y: np.ndarray, bins: int, strategy: str):
    """(bin number, mean confidence, accuracy, count) of the non-empty bins."""
    kept = [(k, ix) for k, ix in enumerate(_bins(c, bins, strategy)) if ix.size]
    k = np.array([k for k, _ in kept], dtype=np.int64)
    conf = np.array([c[ix].mean() for _, ix in kept])
    acc = np.array([y[ix].mean() for _, ix in kept])
    n = np.array([ix.size for _, ix in kept], dtype=np.int64)
    return k, conf, acc, n


@register("accuracy")
def accuracy(c: np.ndarray, y: np.ndarray) -> float:
    """Share of correct predictions (micro-average over the instances in scope)."""
    return y.mean()


@register("ace")
def ace(c: np.ndarray, y: np.ndarray) -> float:
    """Adaptive calibration error (Nixon et al.): mean over NON-EMPTY quantile bins of |acc_b − conf_b|.

    20 bins of near-equal count (stable sort + numpy.array_split). Ties: equal confidences keep
    their input order, so a run of ties may be split across two bins; sort the input (e.g. by
    instance_id) for a deterministic result. With fewer points than bins, each point is its own
    bin and the empty bins are skipped, so ACE = mean |1[correct] − C|.
    """
    _, conf, acc, _ = _bin_stats(c, y, BINS, "quantile")
    return np.abs(acc - conf).mean()


@register("ece")
def ece(c: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error: 20 equal-width bins on [0, 1] (last closed), weighted by bin size."""
    _, conf, acc, n = _bin_stats(c, y, BINS, "uniform")
    return (n * np.abs(acc - conf)).sum() / n.sum()


@register("brier")
def brier(c: np.ndarray, y: np.ndarray) -> float:
    """Mean (C − 1[correct])²; 0.25 is what always answering 0.5 scores."""
    return ((c - y) ** 2).mean()


@register("auroc")
def auroc(c: np.ndarray, y: np.ndarray) -> float:
    """P(C_correct > C_wrong) + ½·P(tie) (Mann–Whitney U via average ranks); NaN with one class only."""
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(c, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum = avg_rank[inverse][y].sum()
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


@register("aurc")
def aurc(c: np.ndarray, y: np.ndarray) -> float:
    """Area under risk–coverage: mean over k=1..N of the error rate among the k most confident.

    Stable descending sort, so ties keep input order (as for ACE).
    """
    errors = ~y[np.argsort(-c, kind="stable")]
    return (np.cumsum(errors) / np.arange(1, c.size + 1)).mean()


def calibration_curve(confidence, correct, bins: int = BINS, strategy: str = "quantile") -> pl.DataFrame:
    """Reliability curve (bin, conf, acc, n) over non-empty bins; quantile ≙ ACE, uniform ≙ ECE."""
    k, conf, acc, n = _bin_stats(*_as_arrays(confidence, correct), bins, strategy)
    return pl.DataFrame(
        {"bin": k, "conf": conf, "acc": acc, "n": n},
        schema={"bin": pl.Int64, "conf": pl.Float64, "acc": pl.Float64, "n": pl.Int64},
    )


_EST_COLUMNS = ("model_id", "estimator", "relation_id", "instance_id", "confidence", "correct")


def _scopes(estimates: pl.DataFrame):
    """Yield (model_id, estimator, scope, scope_value, confidence, correct) in a deterministic order.

    Rows are sorted by (relation_id, instance_id) first: ACE/AURC tie handling depends on input
    order, and this makes it independent of how the caller's frame happened to be ordered.
    """
    require_columns(estimates, _EST_COLUMNS, "estimates")
    dup = estimates.filter(pl.struct("model_id", "estimator", "relation_id", "instance_id").is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"estimates: several rows for instance {row['instance_id']!r} of estimator "
            f"{row['estimator']!r}; filter to one template or aggregation first"
        )
    df = estimates.sort("model_id", "estimator", "relation_id", "instance_id")
    for (model, est), g in df.group_by("model_id", "estimator", maintain_order=True):
        yield model, est, "all", "all", g["confidence"].to_numpy(), g["correct"].to_numpy()
        for (rel,), r in g.group_by("relation_id", maintain_order=True):
            yield model, est, "relation", rel, r["confidence"].to_numpy(), r["correct"].to_numpy()


def compute_metrics(estimates: pl.DataFrame, metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Long table (model_id, estimator, scope, scope_value, metric, value, n) for scopes all and relation.

    Expects one row per instance per (model_id, estimator): the caller filters to one template
    or one aggregation, since pooling templates would count an instance several times.
    """
    names = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    rows = [
        (model, est, scope, value, m, METRICS[m](c, y), len(c))
        for model, est, scope, value, c, y in _scopes(estimates)
        for m in names
    ]
    return pl.DataFrame(
        rows,
        orient="row",
        schema={
            "model_id": pl.String,
            "estimator": pl.String,
            "scope": pl.String,
            "scope_value": pl.String,
            "metric": pl.String,
            "value": pl.Float64,
            "n": pl.Int64,
        },
    )


def compute_curves(estimates: pl.DataFrame, bins: int = BINS, strategy: str = "quantile") -> pl.DataFrame:
    """Reliability curves for every (model_id, estimator) × scope, binned as ACE by default."""
    frames = [
        calibration_curve(c, y, bins, strategy).select(
            pl.lit(model, pl.String).alias("model_id"),
            pl.lit(est, pl.String).alias("estimator"),
            pl.lit(scope, pl.String).alias("scope"),
            pl.lit(value, pl.String).alias("scope_value"),
            pl.lit("calibration", pl.String).alias("curve"),
            pl.col("conf").alias("x"),
            pl.col("acc").alias("y"),
            "n",
            "bin",
        )
        for model, est, scope, value, c, y in _scopes(estimates)
    ]
    return pl.concat(frames)
