"""Curves over (confidence, correct), per estimator and scope (METHODS §3), in one long table.

`curve` says which: calibration (reliability: per bin conf_b, acc_b, n_b, binned as ACE), rejection
(accuracy–rejection at τ = 0.1 … 0.9), risk_coverage (risk of the k most confident), roc (FPR, TPR
with correct as the positive class). The first two read a confidence as a probability; the other two
use only the order, so score-valued estimators have them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.binning import BINS, bin_sums, row_bins
from kcal_pipeline.evaluation.intervals import LEVEL, bias_corrected_interval
from kcal_pipeline.evaluation.registry import SCOPE_KEY_SCHEMA, as_arrays
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, Resamples, resample_plan
from kcal_pipeline.evaluation.samples import MetricSamples, prepared
from kcal_pipeline.evaluation.segments import Segments, in_threads

# Accuracy–rejection thresholds: τ = k/10 (k/10 is the float nearest the decimal, as the literal 0.3).
REJECTION_THRESHOLDS = tuple(k / 10 for k in range(1, 10))
# Risk–coverage is drawn at coverages q = 1 % … 100 % (k = ⌈q·N⌉, repeated k once), not at all N
# points, so the table stays small however many instances a scope has.
RISK_COVERAGE_PERCENTS = tuple(range(1, 101))

# (curve, needs probabilities)
CURVES = {"calibration": True, "rejection": True, "risk_coverage": False, "roc": False}

SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "curve": pl.String,
    "x": pl.Float64,
    "y": pl.Float64,
    "n": pl.Int64,
    "bin": pl.Int64,
    "threshold": pl.Float64,
    "y_low": pl.Float64,
    "y_high": pl.Float64,
}
_POINT_SCHEMA = {k: SCHEMA[k] for k in ("x", "y", "n", "bin", "threshold")}
BAND = ("y_low", "y_high")


def _points(x, y, n, threshold=None, bins=None) -> pl.DataFrame:
    size = len(x)
    return pl.DataFrame(
        {
            "x": x,
            "y": y,
            "n": n,
            "bin": [None] * size if bins is None else bins,
            "threshold": [None] * size if threshold is None else threshold,
        },
        schema=_POINT_SCHEMA,
    )


def rejection_curve(confidence, correct) -> pl.DataFrame:
    """Accuracy–rejection (METHODS §3): at τ = 0.1 … 0.9, x = share rejected (C < τ), y = accuracy of
    the kept (NaN when none is kept), n = kept, threshold = τ."""
    c, y = as_arrays(confidence, correct)
    tau = np.array(REJECTION_THRESHOLDS)
    kept = c[None, :] >= tau[:, None]
    n_kept = kept.sum(axis=1)
    right = (kept & y[None, :]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(n_kept > 0, right / n_kept, np.nan)
    return _points((c.size - n_kept) / c.size, acc, n_kept, threshold=tau)


def risk_coverage_curve(confidence, correct, output_kind: str = "probability") -> pl.DataFrame:
    """Risk–coverage (METHODS §3): x = k/N, y = error rate among the k most confident (stable sort,
    as AURC), n = k, for k = ⌈q·N⌉ at q = 1 % … 100 % (each k once: at most 100 points)."""
    c, y = as_arrays(confidence, correct, output_kind)
    errors = np.cumsum(~y[np.argsort(-c, kind="stable")])
    k = np.unique((np.array(RISK_COVERAGE_PERCENTS) * c.size + 99) // 100)
    return _points(k / c.size, errors[k - 1] / k, k)


def roc_curve(confidence, correct, output_kind: str = "probability") -> pl.DataFrame:
    """ROC of confidence separating correct (positive) from wrong: (FPR, TPR) of "accept C ≥ t" at
    every distinct confidence t, descending, after a first point (0, 0) at t = +inf (as
    sklearn.metrics.roc_curve(drop_intermediate=False)); n = accepted. A rate whose class is
    absent is NaN."""
    c, y = as_arrays(confidence, correct, output_kind)
    values, inverse, counts = np.unique(c, return_inverse=True, return_counts=True)
    right = np.bincount(inverse, weights=y.astype(np.float64), minlength=values.size)
    # descending thresholds; accepted at t = everything at or above it
    tp = np.concatenate([[0.0], np.cumsum(right[::-1])])
    accepted = np.concatenate([[0], np.cumsum(counts[::-1])])
    fp = accepted - tp
    n_pos, n_neg = tp[-1], fp[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tp / n_pos if n_pos else np.full(tp.size, np.nan)
        fpr = fp / n_neg if n_neg else np.full(fp.size, np.nan)
    return _points(fpr, tpr, accepted, threshold=np.concatenate([[np.inf], values[::-1]]))


# --- every sample at once (evaluation/segments.py): the same points, sample by sample ----------


def _calibration_batched(seg: Segments, bins: int, strategy: str) -> dict[str, np.ndarray]:
    n, conf, acc = bin_sums(seg, bins, strategy)
    sample, k = np.nonzero(n)
    return {"sample": sample, "x": conf[sample, k] / n[sample, k], "y": acc[sample, k] / n[sample, k],
            "n": n[sample, k], "bin": k}  # fmt: skip


def _rejection_batched(seg: Segments) -> dict[str, np.ndarray]:
    tau = np.array(REJECTION_THRESHOLDS)
    kept = np.stack([seg.sum(seg.c >= t) for t in tau], axis=1)
    right = np.stack([seg.sum((seg.c >= t) & seg.y) for t in tau], axis=1)
    total = seg.sizes[:, None].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(kept > 0, right / kept, np.nan)
    sample = np.repeat(np.arange(seg.count), tau.size)
    return {"sample": sample, "x": ((total - kept) / total).ravel(), "y": acc.ravel(),
            "n": kept.ravel().astype(np.int64), "threshold": np.tile(tau, seg.count)}  # fmt: skip


def _risk_coverage_batched(seg: Segments) -> dict[str, np.ndarray]:
    k = (np.array(RISK_COVERAGE_PERCENTS)[None, :] * seg.sizes[:, None] + 99) // 100
    first = np.ones(k.shape, dtype=np.bool_)
    first[:, 1:] = k[:, 1:] != k[:, :-1]  # k is non-decreasing in q: each k once
    sample, q = np.nonzero(first)
    k = k[sample, q]
    at = seg.starts[sample] + k - 1
    errors = k - seg.correct_so_far[at]
    return {"sample": sample, "x": k / seg.sizes[sample], "y": errors / k, "n": k}


def _roc_batched(seg: Segments) -> dict[str, np.ndarray]:
    run, sample, size, correct = seg.runs
    value = seg.c_ascending[np.flatnonzero(np.r_[True, run[1:] != run[:-1]])]
    # runs in descending order within each sample; a sample's own running sums restart at its start
    order = np.lexsort((-np.arange(sample.size), sample))
    sample, size, correct, value = sample[order], size[order], correct[order], value[order]
    starts = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
    restart = np.repeat(starts, np.diff(np.append(starts, sample.size)))
    accepted = np.cumsum(size)
    tp = np.cumsum(correct)
    accepted = accepted - (accepted[restart] - size[restart])
    tp = tp - (tp[restart] - correct[restart])
    # a first point (0, 0) at t = +inf per sample
    sample = np.concatenate([np.arange(seg.count), sample])
    tp = np.concatenate([np.zeros(seg.count), tp])
    accepted = np.concatenate([np.zeros(seg.count, dtype=np.int64), accepted])
    threshold = np.concatenate([np.full(seg.count, np.inf), value])
    first = np.r_[np.ones(seg.count, dtype=np.bool_), np.zeros(value.size, dtype=np.bool_)]
    order = np.lexsort((~first, sample))  # by sample, its +inf point first, then descending
    sample, tp, accepted, threshold = sample[order], tp[order], accepted[order], threshold[order]
    n_pos = seg.sum(seg.y.astype(np.float64))[sample]
    n_neg = seg.sizes[sample] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = np.where(n_pos > 0, tp / n_pos, np.nan)
        fpr = np.where(n_neg > 0, (accepted - tp) / n_neg, np.nan)
    return {"sample": sample, "x": fpr, "y": tpr, "n": accepted, "threshold": threshold}


def compute_curves(
    estimates: pl.DataFrame,
    bins: int = BINS,
    strategy: str = "quantile",
    curves: Sequence[str] | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> pl.DataFrame:
    """Every curve of every (model, estimator, reduction, split, answer space) × scope (all, each
    relation), long: keys, curve, x, y, n, bin (calibration only), threshold (rejection: τ; roc: t;
    null otherwise), and on reliability rows the band y_low, y_high: the bin's accuracy's `level`
    bias-corrected interval (which contains it) over `n_resamples` bootstrap resamples drawn as the
    metrics' intervals draw them (resamples.resample_plan with `seed`; null on the other curves).
    Equal, sample by sample, to the per-sample functions above.

    Reliability curves are binned as ACE by default. Calibration and rejection curves read
    probabilities, so score-valued estimators have risk–coverage and ROC curves only.
    """
    names = list(CURVES) if curves is None else list(curves)
    unknown = [name for name in names if name not in CURVES]
    if unknown:
        raise ValueError(f"unknown curve(s) {unknown}; known: {list(CURVES)}")
    if strategy not in ("quantile", "uniform"):
        raise ValueError(f"unknown binning strategy {strategy!r}; known: ['quantile', 'uniform']")
    samples = MetricSamples.of(prepared(estimates), ["all", "relation"])
    draw = {
        "calibration": lambda seg: _calibration_batched(seg, bins, strategy),
        "rejection": _rejection_batched,
        "risk_coverage": _risk_coverage_batched,
        "roc": _roc_batched,
    }
    frames = []
    for rank, name in enumerate(names):
        chosen, seg = samples.view("probability" if CURVES[name] else "any")
        if chosen is None:
            continue
        points = draw[name](seg)
        size = points["sample"].size
        if name == "calibration":
            keys = samples.keys().filter(pl.col("segment").is_in(chosen)).sort("segment")
            low, high = _calibration_band(keys, seg, bins, strategy, n_resamples, seed, level)
            points["y_low"] = low[points["sample"], points["bin"]]
            points["y_high"] = high[points["sample"], points["bin"]]
        frames.append(
            pl.DataFrame(
                {
                    "segment": chosen[points["sample"]],
                    "rank": np.full(size, rank),
                    "point": np.arange(size),
                    **{k: points.get(k, np.full(size, None)) for k in (*_POINT_SCHEMA, *BAND)},
                },
                schema={
                    "segment": pl.Int64,
                    "rank": pl.Int64,
                    "point": pl.Int64,
                    **_POINT_SCHEMA,
                    **{k: SCHEMA[k] for k in BAND},
                },
            ).with_columns(curve=pl.lit(name))
        )
    if not frames:
        raise ValueError(f"estimates: no probability-valued estimator to draw {', '.join(names)} curves for")
    out = pl.concat(frames).join(samples.keys(), on="segment").sort("segment", "rank", "point")
    return out.select(list(SCHEMA)).cast(SCHEMA)


# --- the reliability band: per-bin bootstrap intervals of the accuracy ---------------------------

# Resamples per chunk: about this many cells [b, M] at once, as resampled_metrics.py bounds its chunks.
_BAND_CHUNK_CELLS = 1 << 21
_ALL = slice(None)


def bin_accuracy_band(
    bin_of_row, correct, resamples: Resamples, bins: int = BINS, level: float = LEVEL, rows: slice = _ALL
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) [bins]: per bin, the bias-corrected interval (intervals.bias_corrected_interval)
    over the resamples of the bin's accuracy, around the bin's accuracy on the point sample (`rows`,
    the rows the resamples are drawn from), so the band always contains the curve's point.

    A resampled row keeps the bin the point sample put it in (`bin_of_row`, one per row the
    resamples index), so the band is drawn around the curve's own points; a bin that a resample
    does not touch has no accuracy there and is left out of that bin's interval (NaN where no
    resample touches it). Counts and correct
    counts of every resample × bin come from one bincount per chunk of resamples.
    """
    bin_of_row = np.asarray(bin_of_row, dtype=np.int64)
    y = np.asarray(correct, dtype=np.float64)
    point_count = np.bincount(bin_of_row[rows], minlength=bins)
    point_right = np.bincount(bin_of_row[rows], weights=y[rows], minlength=bins)
    indices, sizes = resamples.indices, resamples.sizes
    count = np.empty((resamples.n_resamples, bins))
    right = np.empty((resamples.n_resamples, bins))
    step = max(1, _BAND_CHUNK_CELLS // max(indices.shape[1], 1))
    for lo in range(0, resamples.n_resamples, step):
        chunk, chunk_sizes = indices[lo : lo + step], sizes[lo : lo + step]
        b = chunk.shape[0]
        drawn = chunk[np.arange(chunk.shape[1]) < chunk_sizes[:, None]]  # row-major: resample by resample
        cell = np.repeat(np.arange(b), chunk_sizes) * bins + bin_of_row[drawn]
        count[lo : lo + b] = np.bincount(cell, minlength=b * bins).reshape(b, bins)
        right[lo : lo + b] = np.bincount(cell, weights=y[drawn], minlength=b * bins).reshape(b, bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(count > 0, right / count, np.nan)
        point = np.where(point_count > 0, point_right / point_count, np.nan)
    low, high, _ = bias_corrected_interval(accuracy.T, point, level)
    return low, high


def _calibration_band(
    keys: pl.DataFrame, seg: Segments, bins: int, strategy: str, n_resamples: int, seed: int, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) [samples, bins] of the samples of `seg` (keys: their group, scope, scope_value,
    in order): each group's resample plan as the metrics' intervals draw it (resamples.resample_plan:
    scope "all" resamples relations, then instances within them; a relation its own instances),
    memoised by row layout; the groups and scopes on one thread per CPU (numpy outside the GIL)."""
    bin_of = row_bins(seg, bins, strategy)
    plans: dict[tuple, list] = {}
    tasks, targets = [], []
    for _, g in keys.with_row_index("sample").group_by("group", maintain_order=True):
        samples = dict(zip(zip(g["scope"], g["scope_value"], strict=True), g["sample"], strict=True))
        everything = samples[("all", "all")]
        start, size = seg.starts[everything], seg.sizes[everything]
        relations = g.filter(pl.col("scope") == "relation")
        names = relations["scope_value"].to_list()
        counts = seg.sizes[relations["sample"].to_numpy()].tolist()
        layout = (tuple(names), tuple(counts))
        if layout not in plans:
            plans[layout] = resample_plan(np.repeat(np.array(names, dtype=object), counts), n_resamples, seed)
        y = seg.y[start : start + size]
        for scope in plans[layout]:
            sample = samples[(scope.scope, scope.scope_value)]
            own = np.zeros(size, dtype=np.int64)
            own[scope.rows] = bin_of[seg.starts[sample] : seg.starts[sample] + seg.sizes[sample]]
            tasks.append((own, y, scope.resamples, scope.rows))
            targets.append(sample)
    low = np.full((seg.count, bins), np.nan)
    high = np.full((seg.count, bins), np.nan)
    bands = in_threads(lambda task: bin_accuracy_band(*task[:3], bins=bins, level=level, rows=task[3]), tasks)
    for sample, (lo, hi) in zip(targets, bands, strict=True):
        low[sample], high[sample] = lo, hi
    return low, high
