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
# How each binned metric bins (quantile = equal-count, uniform = equal-width on [0, 1]).
BINNING = {
    "ace": f"{BINS} quantile bins",
    "ece": f"{BINS} equal-width bins",
}


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


@register(
    "ace", label="ACE", family="calibration", needs="probability", higher_is_better=False, in_summary=True
)
def ace(c: np.ndarray, y: np.ndarray) -> float:
    """Adaptive calibration error (Nixon et al.): mean over NON-EMPTY quantile bins of |acc_b − conf_b|.

    20 bins of near-equal count (stable sort + numpy.array_split). Ties: equal confidences keep
    their input order, so a run of ties may be split across two bins; sort the input (e.g. by
    instance_id) for a deterministic result. With fewer points than bins, each point is its own
    bin and the empty bins are skipped, so ACE = mean |1[correct] − C|.
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
