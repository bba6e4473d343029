"""Calibration metrics (METHODS §3): ACE, ECE, Brier, smooth ECE, H, mean confidence and its signed
gap to accuracy, the ACE/ECE sweep, the reliability curve they are read from, and two metrics of the
whole option distribution (multi-hot Brier, classwise ECE; input "options").

They compare a confidence with a frequency, so they need probabilities in [0, 1]. Binned metrics
and the reliability curves share one binning function (binning.py), so a curve always shows the
bins its number uses; the sweep (5–50 bins) shows how much the bin count alone moves ACE and ECE,
and smECE is a calibration error without a bin count at all (its batched form: smooth_ece.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.binning import BINS, _bin_ids, _bin_stats, bin_sums
from kcal_pipeline.evaluation.registry import as_arrays, register
from kcal_pipeline.evaluation.segments import Segments
from kcal_pipeline.evaluation.smooth_ece import (
    SMECE_GRID,
    SMECE_SIGMA_MIN,
    SMECE_SIGMA_TOL,
    _smooth_ece_batched,
)

# How each binned metric bins (quantile: edges at the confidence quantiles; uniform: equal width on
# [0, 1]). Shown next to every binned number.
BINNING = {
    "ace": f"{BINS} quantile bins as in sklearn's calibration_curve (ties share a bin, empty bins dropped)",
    "ece": f"{BINS} equal-width bins",
}


def _ace(c: np.ndarray, y: np.ndarray, bins: int) -> float:
    _, conf, acc, _ = _bin_stats(c, y, bins, "quantile")
    return np.abs(acc - conf).mean()


def _ece(c: np.ndarray, y: np.ndarray, bins: int) -> float:
    _, conf, acc, n = _bin_stats(c, y, bins, "uniform")
    return (n * np.abs(acc - conf)).sum() / n.sum()


def _bin_gaps(seg: Segments, bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """Per sample and bin: |acc_b − conf_b| (0 in an empty bin) and the bin's count."""
    n, conf, acc = bin_sums(seg, bins, strategy)
    safe = np.maximum(n, 1)
    return np.where(n > 0, np.abs(acc / safe - conf / safe), 0.0), n


def _ace_batched(seg: Segments, bins: int = BINS) -> np.ndarray:
    gap, n = _bin_gaps(seg, bins, "quantile")
    return gap.sum(axis=1) / (n > 0).sum(axis=1)


def _ece_batched(seg: Segments, bins: int = BINS) -> np.ndarray:
    gap, n = _bin_gaps(seg, bins, "uniform")
    return (n * gap).sum(axis=1) / seg.sizes


def _brier_batched(seg: Segments) -> np.ndarray:
    return seg.mean((seg.c - seg.y) ** 2)


@register(
    "ace",
    label="ACE",
    family="calibration",
    needs="probability",
    higher_is_better=False,
    in_summary=True,
    batched=_ace_batched,
    role="calibration",
    headline=True,
)
def ace(c: np.ndarray, y: np.ndarray) -> float:
    """Adaptive calibration error (Nixon et al.): mean over the NON-EMPTY quantile bins of |acc_b − conf_b|.

    Bins as sklearn's calibration_curve(strategy="quantile", n_bins=20) forms them (see _bin_ids):
    tied confidences share one bin, so a bin may hold many points and fewer than 20 bins may
    remain; each remaining bin counts once, whatever its size. Independent of the input order.
    """
    return _ace(c, y, BINS)


@register(
    "ece",
    label="ECE",
    family="calibration",
    needs="probability",
    higher_is_better=False,
    batched=_ece_batched,
)
def ece(c: np.ndarray, y: np.ndarray) -> float:
    """Expected calibration error: 20 equal-width bins on [0, 1] (last closed), weighted by bin size."""
    return _ece(c, y, BINS)


@register(
    "brier",
    label="Brier",
    family="calibration",
    needs="probability",
    higher_is_better=False,
    in_summary=True,
    batched=_brier_batched,
    role="proper_score",
    headline=True,
)
def brier(c: np.ndarray, y: np.ndarray) -> float:
    """Mean (C − 1[correct])²; 0.25 is what always answering 0.5 scores."""
    return ((c - y) ** 2).mean()


# smECE on one sample (its grid and tolerances, and its batched form: smooth_ece.py).


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


@register(
    "smooth_ece",
    label="smECE",
    family="calibration",
    needs="probability",
    higher_is_better=False,
    batched=_smooth_ece_batched,
)
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
        sigma = lo
    elif excess(hi) >= 0.0:
        sigma = hi
    else:
        from scipy.optimize import brentq

        sigma = brentq(excess, lo, hi, xtol=SMECE_SIGMA_TOL, rtol=4 * np.finfo(float).eps)
    # A mean of |c − y| ≤ 1: the transforms' rounding can reach 1 + 2e-16 (every answer wrong at 1).
    return float(min(max(_smece_at(spectrum, sigma, c.size), 0.0), 1.0))


def _h_score_batched(seg: Segments) -> np.ndarray:
    acc, good = seg.mean(seg.y.astype(np.float64)), 1.0 - _ace_batched(seg, BINS)
    total = acc + good
    return np.where(total == 0.0, 0.0, 2.0 * acc * good / np.where(total == 0.0, 1.0, total))


@register(
    "h_score",
    label="H",
    family="calibration",
    needs="probability",
    higher_is_better=True,
    batched=_h_score_batched,
)
def h_score(c: np.ndarray, y: np.ndarray) -> float:
    """H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE) (METHODS §3; the harmonic mean of accuracy and 1 − ACE, as
    used to choose a reduction); 0 when Acc = 0 and ACE = 1."""
    acc, good = y.mean(), 1.0 - _ace(c, y, BINS)
    return 0.0 if acc + good == 0.0 else 2.0 * acc * good / (acc + good)


def _mean_confidence_batched(seg: Segments) -> np.ndarray:
    return seg.mean(seg.c)


@register(
    "mean_confidence",
    label="mean confidence",
    family="calibration",
    needs="probability",
    higher_is_better=None,
    batched=_mean_confidence_batched,
    role="confidence_level",
)
def mean_confidence(c: np.ndarray, y: np.ndarray) -> float:
    """Mean C: what the estimator claims on average, read beside the accuracy (above it:
    overconfident); descriptive. Per gold count it shows MACE's cardinality effect."""
    return c.mean()


def _confidence_gap_batched(seg: Segments) -> np.ndarray:
    return seg.mean(seg.c) - seg.mean(seg.y.astype(np.float64))


@register(
    "confidence_gap",
    label="mean confidence − accuracy (> 0: over-confident)",
    family="calibration",
    needs="probability",
    higher_is_better=None,
    batched=_confidence_gap_batched,
    value_range=(-1.0, 1.0),
)
def confidence_gap(c: np.ndarray, y: np.ndarray) -> float:
    """Mean C − accuracy, signed: positive = over-confident, negative = under-confident (seed 000's
    first finding is the sign). Descriptive (higher_is_better None): over- and under-confident
    instances cancel in it, so rank by ACE/ECE, or by |gap| where one number must order them."""
    return c.mean() - y.mean()


# --- the whole option distribution ---------------------------------------------------------------
# METHODS (all-option calibration; seed 000, Limitations; lm-pub-quiz): over the template marginal
# P(o | r, s) of every option o of every instance (option_estimates), y_o = 1 for EVERY gold option.
#   multi-hot Brier = (1/N) Σ_i Σ_o (p_io − y_io)²: summed over options, averaged over instances,
#     not divided by the option count: with one gold it is sklearn's multi-class brier_score_loss
#     (range [0, 2]); with G golds a distribution (Σ_o p = 1) scores at least (G − 1)²/G.
#   classwise ECE (Kull et al. 2019) = (1/K) Σ_j Σ_b (n_jb / n_j)·|acc_jb − conf_jb|: class j = an
#     option object within its relation, binned over the n_j instances that offer it (all of the
#     relation's instances in a full answer space; in a `#k` subsample, or MACE's per-question
#     options, only those that drew it), 20 equal-width bins as ECE; mean over the K classes present.


def _distinct_per_sample(seg: Segments, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per row: a dense number of its (sample, code) pair; per pair: its sample), pairs ascending."""
    width = int(codes.max(initial=0)) + 1
    pairs, pair = np.unique(seg.segment * width + codes, return_inverse=True)
    return pair, pairs // width


def _multihot_brier_batched(seg: Segments, instance: np.ndarray, option: np.ndarray) -> np.ndarray:
    _, pair_sample = _distinct_per_sample(seg, instance)
    return seg.sum((seg.c - seg.y) ** 2) / np.bincount(pair_sample, minlength=seg.count)


@register(
    "multihot_brier",
    label="multi-hot Brier over all options (Σ_o per instance, mean over instances)",
    family="all_options",
    needs="probability",
    higher_is_better=False,
    input="options",
    batched=_multihot_brier_batched,
    value_range=(0.0, np.inf),
)
def multihot_brier(c: np.ndarray, y: np.ndarray, instance: np.ndarray, option: np.ndarray) -> float:
    """(1/N) Σ_i Σ_o (P(o | r, s) − 1[o gold])², every gold a 1: the whole distribution, not just
    its top answer, is scored (see the METHODS comment above for the range and the multi-gold floor)."""
    return ((c - y) ** 2).sum() / np.unique(instance).size


def _class_gaps(c, y, pair: np.ndarray, pairs: int) -> np.ndarray:
    """Per (sample, class) pair: Σ_b |Σ y − Σ c| / n over its equal-width bins, which is
    Σ_b (n_b/n)·|acc_b − conf_b|."""
    key = pair * BINS + _bin_ids(c, BINS, "uniform")
    size = pairs * BINS
    diff = np.bincount(key, weights=y.astype(np.float64), minlength=size)
    diff -= np.bincount(key, weights=c, minlength=size)
    return np.abs(diff).reshape(pairs, BINS).sum(axis=1) / np.bincount(pair, minlength=pairs)


def _classwise_ece_batched(seg: Segments, instance: np.ndarray, option: np.ndarray) -> np.ndarray:
    pair, pair_sample = _distinct_per_sample(seg, option)
    gaps = _class_gaps(seg.c, seg.y, pair, pair_sample.size)
    return np.bincount(pair_sample, weights=gaps, minlength=seg.count) / np.bincount(
        pair_sample, minlength=seg.count
    )


@register(
    "classwise_ece",
    label=f"classwise ECE over all options ({BINS} equal-width bins per class, mean over classes)",
    family="all_options",
    needs="probability",
    higher_is_better=False,
    input="options",
    batched=_classwise_ece_batched,
)
def classwise_ece(c: np.ndarray, y: np.ndarray, instance: np.ndarray, option: np.ndarray) -> float:
    """Kull et al.'s classwise (static) calibration error: per class, ECE of P(class) against
    1[class gold] over the instances offering it; the unweighted mean over classes. Unlike ACE on
    the top answer it also sees what the model believes of the options it did not pick."""
    classes, cls = np.unique(option, return_inverse=True)
    return _class_gaps(c, y, cls, classes.size).mean()


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

    def batched_at(batched, bins: int):
        return lambda seg: batched(seg, bins)

    for name, label, make, batched in (
        ("ace", "ACE", ace_at, _ace_batched),
        ("ece", "ECE", ece_at, _ece_batched),
    ):
        for bins in BIN_SWEEP:
            register(
                f"{name}_b{bins}", label=f"{label} ({bins} bins)", family="calibration_sweep",
                needs="probability", higher_is_better=False, batched=batched_at(batched, bins),
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
