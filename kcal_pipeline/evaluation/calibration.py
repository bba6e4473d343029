"""Calibration metrics (METHODS §3): ACE, ECE, Brier, smooth ECE, H, the ACE/ECE bin-count sweep,
and the reliability curve they are read from.

They compare a confidence with a frequency, so they need probabilities in [0, 1]. Binned metrics
and the reliability curves share one binning function, so a curve always shows the bins its number
uses; the sweep (5–50 bins) shows how much the bin count alone moves ACE and ECE, and smECE is a
calibration error without a bin count at all.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.optimize import brentq

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


def _ace(c: np.ndarray, y: np.ndarray, bins: int) -> float:
    _, conf, acc, _ = _bin_stats(c, y, bins, "quantile")
    return np.abs(acc - conf).mean()


def _ece(c: np.ndarray, y: np.ndarray, bins: int) -> float:
    _, conf, acc, n = _bin_stats(c, y, bins, "uniform")
    return (n * np.abs(acc - conf)).sum() / n.sum()


@register(
    "ace", label="ACE", family="calibration", needs="probability", higher_is_better=False, in_summary=True
)
def ace(c: np.ndarray, y: np.ndarray) -> float:
    """Adaptive calibration error (Nixon et al.): mean over the NON-EMPTY quantile bins of |acc_b − conf_b|.

    Bins as sklearn's calibration_curve(strategy="quantile", n_bins=20) forms them (see _bin_ids):
    tied confidences share one bin, so a bin may hold many points and fewer than 20 bins may
    remain; each remaining bin counts once, whatever its size. Independent of the input order.
    """
    return _ace(c, y, BINS)


@register("ece", label="ECE", family="calibration", needs="probability", higher_is_better=False)
def ece(c: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error: 20 equal-width bins on [0, 1] (last closed), weighted by bin size."""
    return _ece(c, y, BINS)


@register(
    "brier", label="Brier", family="calibration", needs="probability", higher_is_better=False, in_summary=True
)
def brier(c: np.ndarray, y: np.ndarray) -> float:
    """Mean (C − 1[correct])²; 0.25 is what always answering 0.5 scores."""
    return ((c - y) ** 2).mean()


# smECE's grid: M intervals on [0, 1] (spacing 1e-4, a tenth of the smallest bandwidth searched),
# and the fixed-point search: σ in [0.001, 1] (relplot's floor), to 1e-12.
SMECE_GRID = 10_000
SMECE_SIGMA_MIN = 1e-3
SMECE_SIGMA_TOL = 1e-12


def _smece_at(spectrum: np.ndarray, sigma: float, n: int) -> float:
    """smECE_σ = (1/n)·∫₀¹ |Σᵢ K_σ(t, cᵢ)(cᵢ − yᵢ)| dt from the residuals' spectrum on the circle.

    The reflected Gaussian kernel on [0, 1] is a Gaussian on the circle of length 2 over the
    residuals mirrored at 0 (c → −c), so the smoothing is one circular convolution; the DFT of the
    Gaussian sampled at spacing 1/M on that circle is M·exp(−π²σ²q²/2) (aliasing below e^−400).
    By the mirror symmetry the trapezoid over [0, 1] is half the sum over the circle.
    """
    m = SMECE_GRID
    q = np.arange(spectrum.size)
    smoothed = np.fft.irfft(spectrum * (m * np.exp(-((np.pi * sigma * q) ** 2) / 2.0)), n=2 * m)
    return np.abs(smoothed).sum() / (2 * m) / n


def _residual_spectrum(c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The residuals cᵢ − yᵢ, linearly split between their two grid nodes, mirrored at 0 onto the
    circle [−1, 1) (nodes 0 and 1 are their own mirror images, so their mass counts twice, as the
    reflected kernel at an endpoint does), then Fourier-transformed once for every bandwidth."""
    m = SMECE_GRID
    pos = c * m
    lo = np.minimum(np.floor(pos).astype(np.int64), m - 1)
    frac = pos - lo
    r = c - y
    grid = np.bincount(lo, weights=(1.0 - frac) * r, minlength=m + 1)
    grid += np.bincount(lo + 1, weights=frac * r, minlength=m + 1)
    circle = np.zeros(2 * m)
    circle[: m + 1] = grid
    circle[(2 * m - np.arange(m + 1)) % (2 * m)] += grid
    return np.fft.rfft(circle)


@register("smooth_ece", label="smECE", family="calibration", needs="probability", higher_is_better=False)
def smooth_ece(c: np.ndarray, y: np.ndarray) -> float:
    """Smooth ECE (Błasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams via kernel
    smoothing"): no bin count to choose.

    smECE_σ = ∫₀¹ |r̂_σ(t)| δ̂_σ(t) dt = (1/n)·∫₀¹ |Σᵢ K_σ(t, cᵢ)(cᵢ − yᵢ)| dt with the reflected Gaussian
    kernel K_σ on [0, 1]; smECE = smECE_σ* at the bandwidth where smECE_σ* = σ* (unique: smECE_σ falls
    as σ grows), found by Brent's method on [0.001, 1], the range the authors' relplot bisects (a
    fixed point below 0.001 reports the value at 0.001). Exact up to a grid of 10,000 intervals (see
    _smece_at; relplot's coarser grid and truncated kernel differ by up to ~4e-3); one confidence
    value c gives |c − accuracy| exactly.
    """
    spectrum = _residual_spectrum(c, y)

    def excess(sigma: float) -> float:
        return _smece_at(spectrum, sigma, c.size) - sigma

    lo, hi = SMECE_SIGMA_MIN, 1.0
    if excess(lo) <= 0.0:
        return _smece_at(spectrum, lo, c.size)
    if excess(hi) >= 0.0:
        return _smece_at(spectrum, hi, c.size)
    sigma = brentq(excess, lo, hi, xtol=SMECE_SIGMA_TOL, rtol=4 * np.finfo(float).eps)
    return _smece_at(spectrum, sigma, c.size)


@register("h_score", label="H", family="calibration", needs="probability", higher_is_better=True)
def h_score(c: np.ndarray, y: np.ndarray) -> float:
    """H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE) (METHODS §3; the harmonic mean of accuracy and 1 − ACE, as
    used to choose a reduction); 0 when Acc = 0 and ACE = 1."""
    acc, good = y.mean(), 1.0 - _ace(c, y, BINS)
    return 0.0 if acc + good == 0.0 else 2.0 * acc * good / (acc + good)


# The bin-count sweep: ACE and ECE at 5–50 bins (20 is `ace`/`ece` itself), so a reader sees how much
# of a difference the binning alone makes. One registration per (metric, bin count).
BIN_SWEEP = (5, 10, 15, 30, 40, 50)


def _register_sweep() -> None:
    def ace_at(bins: int):
        def fn(c: np.ndarray, y: np.ndarray) -> float:
            return _ace(c, y, bins)

        fn.__doc__ = f"ACE with {bins} quantile bins instead of {BINS} (the bin-count sweep)."
        return fn

    def ece_at(bins: int):
        def fn(c: np.ndarray, y: np.ndarray) -> float:
            return _ece(c, y, bins)

        fn.__doc__ = f"ECE with {bins} equal-width bins instead of {BINS} (the bin-count sweep)."
        return fn

    for name, label, make in (("ace", "ACE", ace_at), ("ece", "ECE", ece_at)):
        for bins in BIN_SWEEP:
            register(
                f"{name}_b{bins}", label=f"{label} ({bins} bins)", family="calibration_sweep",
                needs="probability", higher_is_better=False,
            )(make(bins))  # fmt: skip


_register_sweep()

# Every binned metric with its binning (BINNING: the headline ones the report's legend names).
METRIC_BINNING = (
    BINNING
    | {"h_score": f"ACE's {BINS} quantile bins"}
    | {f"ace_b{b}": f"{b} quantile bins as ACE" for b in BIN_SWEEP}
    | {f"ece_b{b}": f"{b} equal-width bins" for b in BIN_SWEEP}
)


def calibration_curve(confidence, correct, bins: int = BINS, strategy: str = "quantile") -> pl.DataFrame:
    """Reliability curve (bin, conf, acc, n) over non-empty bins; quantile ≙ ACE, uniform ≙ ECE."""
    k, conf, acc, n = _bin_stats(*as_arrays(confidence, correct), bins, strategy)
    return pl.DataFrame(
        {"bin": k, "conf": conf, "acc": acc, "n": n},
        schema={"bin": pl.Int64, "conf": pl.Float64, "acc": pl.Float64, "n": pl.Int64},
    )
