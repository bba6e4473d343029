"""The binning of the binned calibration metrics (ACE, ECE, H, the bin-count sweep, classwise ECE)
and of the reliability curves (curves.py), one function for both, so a curve always shows the bins
its number uses: per sample (_bin_ids, _bin_stats) and for every sample of a table at once
(bin_sums, row_bins).
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.segments import Segments

BINS = 20


def _bin_ids(c: np.ndarray, bins: int, strategy: str) -> np.ndarray:
    """The bin (0..bins−1) of every confidence.

    quantile: exactly as sklearn.calibration.calibration_curve(strategy="quantile") forms them,
    as the seed's code does: edges = np.percentile(c, linspace(0, 1, B+1)·100), bin =
    np.searchsorted(inner edges, c) (side "left": a value equal to an edge goes to the lower bin).
    Equal confidences therefore always share a bin, several edges may coincide (their bins stay
    empty), and the bins depend only on the values, never on the input order.
    uniform: bin k = [k/B, (k+1)/B), the last bin closed at 1.0; computed as floor(B·c) so that a
    value exactly on an edge (e.g. 0.15) lands in the upper bin.
    """
    if strategy == "quantile":
        edges = np.percentile(c, np.linspace(0, 1, bins + 1) * 100)
        return np.searchsorted(edges[1:-1], c)
    if strategy == "uniform":
        return np.minimum(np.floor(c * bins).astype(np.int64), bins - 1)
    raise ValueError(f"unknown binning strategy {strategy!r}; known: ['quantile', 'uniform']")


def _bin_stats(c: np.ndarray, y: np.ndarray, bins: int, strategy: str):
    """(bin number, mean confidence, accuracy, count) of the non-empty bins; sums by np.bincount,
    as sklearn does, so the per-bin numbers equal calibration_curve's prob_pred and prob_true."""
    ids = _bin_ids(c, bins, strategy)
    n = np.bincount(ids, minlength=bins)
    conf_sum = np.bincount(ids, weights=c, minlength=bins)
    acc_sum = np.bincount(ids, weights=y.astype(np.float64), minlength=bins)
    k = np.flatnonzero(n)
    return k.astype(np.int64), conf_sum[k] / n[k], acc_sum[k] / n[k], n[k].astype(np.int64)


def _quantile_bin_ids(seg: Segments, bins: int) -> np.ndarray:
    """_bin_ids(strategy="quantile") of every sample at once, for the rows in ascending order
    (seg.ascending): a row at ascending position p is in bin #{inner edges e : (values ≤ e) ≤ p},
    i.e. the number of inner edges strictly below its value, as searchsorted(side="left") counts."""
    inner = seg.percentiles(np.linspace(0, 1, bins + 1)[1:-1] * 100)
    at_or_below = seg.count_at_or_below(inner)
    inside = at_or_below < seg.sizes[:, None]
    marks = np.bincount((seg.starts[:, None] + at_or_below)[inside], minlength=seg.c.size)
    return seg.cumsum(marks)


def bin_sums(seg: Segments, bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample and bin [S, bins]: count, confidence sum and correct sum, as _bin_stats' bincounts."""
    if strategy == "quantile":
        ids, c, y = _quantile_bin_ids(seg, bins), seg.c_ascending, seg.y_ascending
    else:
        ids, c, y = _bin_ids(seg.c, bins, strategy), seg.c, seg.y
    key = seg.segment * bins + ids  # the ascending order keeps every sample's rows together
    size = seg.count * bins
    n = np.bincount(key, minlength=size).reshape(seg.count, bins)
    conf = np.bincount(key, weights=c, minlength=size).reshape(seg.count, bins)
    acc = np.bincount(key, weights=y.astype(np.float64), minlength=size).reshape(seg.count, bins)
    return n, conf, acc


def row_bins(seg: Segments, bins: int, strategy: str) -> np.ndarray:
    """The bin of every row of every sample, in row order: the bins bin_sums counts (what the
    reliability band resamples keep; curves.py)."""
    if strategy != "quantile":
        return _bin_ids(seg.c, bins, strategy)
    ids = np.empty(seg.c.size, dtype=np.int64)
    ids[seg.ascending] = _quantile_bin_ids(seg, bins)
    return ids
