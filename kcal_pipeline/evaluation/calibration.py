"""Calibration metrics (METHODS §3): ACE, ECE, Brier, and the reliability curve they are read from.

They compare a confidence with a frequency, so they need probabilities in [0, 1]. Binned metrics
and the reliability curves share one binning function, so a curve always shows the bins its number
uses.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import as_arrays, register

BINS = 20
# How each binned metric bins (quantile: edges at the confidence quantiles; uniform: equal width on
# [0, 1]). Shown next to every binned number.
BINNING = {
    "ace": f"{BINS} quantile bins as in sklearn's calibration_curve (ties share a bin, empty bins dropped)",
    "ece": f"{BINS} equal-width bins",
}


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


@register(
    "ace", label="ACE", family="calibration", needs="probability", higher_is_better=False, in_summary=True
)
def ace(c: np.ndarray, y: np.ndarray) -> float:
    """Adaptive calibration error (Nixon et al.): mean over the NON-EMPTY quantile bins of |acc_b − conf_b|.

    Bins as sklearn's calibration_curve(strategy="quantile", n_bins=20) forms them (see _bin_ids):
    tied confidences share one bin, so a bin may hold many points and fewer than 20 bins may
    remain; each remaining bin counts once, whatever its size. Independent of the input order.
    """
    _, conf, acc, _ = _bin_stats(c, y, BINS, "quantile")
    return np.abs(acc - conf).mean()


@register("ece", label="ECE", family="calibration", needs="probability", higher_is_better=False)
def ece(c: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error: 20 equal-width bins on [0, 1] (last closed), weighted by bin size."""
    _, conf, acc, n = _bin_stats(c, y, BINS, "uniform")
    return (n * np.abs(acc - conf)).sum() / n.sum()


@register(
    "brier", label="Brier", family="calibration", needs="probability", higher_is_better=False, in_summary=True
)
def brier(c: np.ndarray, y: np.ndarray) -> float:
    """Mean (C − 1[correct])²; 0.25 is what always answering 0.5 scores."""
    return ((c - y) ** 2).mean()


def calibration_curve(confidence, correct, bins: int = BINS, strategy: str = "quantile") -> pl.DataFrame:
    """Reliability curve (bin, conf, acc, n) over non-empty bins; quantile ≙ ACE, uniform ≙ ECE."""
    k, conf, acc, n = _bin_stats(*as_arrays(confidence, correct), bins, strategy)
    return pl.DataFrame(
        {"bin": k, "conf": conf, "acc": acc, "n": n},
        schema={"bin": pl.Int64, "conf": pl.Float64, "acc": pl.Float64, "n": pl.Int64},
    )
