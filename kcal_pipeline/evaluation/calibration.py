"""Calibration metrics (METHODS §3): ACE, ECE, Brier, smooth ECE, H, mean confidence and its signed
gap to accuracy, the ACE/ECE sweep, the reliability curve they are read from, and two metrics of the
whole option distribution (multi-hot Brier, classwise ECE; input "options").

They compare a confidence with a frequency, so they need probabilities in [0, 1]. Binned metrics
and the reliability curves share one binning function, so a curve always shows the bins its number
uses; the sweep (5–50 bins) shows how much the bin count alone moves ACE and ECE, and smECE is a
calibration error without a bin count at all.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import as_arrays, register
from kcal_pipeline.evaluation.segments import Segments, in_threads

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


# The batched smECE (every sample of a metrics table at once) finds the fixed point on a coarse grid
# first (SMECE_COARSE_GRID intervals: transforms ~12× cheaper), then polishes it on the SMECE_GRID grid
# by a safeguarded secant started at the coarse root with the coarse slope: ~4 fine transforms per
# sample where Brent's method on [0.001, 1] needs ~9. Same fixed point, to the same tolerance.
SMECE_COARSE_GRID = 1_000
SMECE_COARSE_TOL = 1e-9
SMECE_BLOCK = 128  # samples transformed together: a block's spectra and transforms stay ~40 MB
# exp(−x) is exactly 0.0 in float64 beyond x ≈ 745.13: spectrum columns q with (πσq)²/2 above that
# contribute exact zeros, so the transform reads only the columns below πσq = √(2·745.2).
_GAUSS_REACH = np.sqrt(2 * 745.2) / np.pi


def _block_spectra(seg: Segments, m: int) -> np.ndarray:
    """_residual_spectrum of every sample of `seg` on an m-interval grid, [S, m + 1], real.

    The mirrored residuals are even on the circle, so their DFT is a cosine transform: the DCT-I
    of the m + 1 grid nodes with the two endpoints counted twice (each is its own mirror image) —
    the same numbers at a third of the cost of the complex transform of the whole circle.
    """
    import scipy.fft  # on first use: see kcal_pipeline/estimation/fitting.py

    pos = seg.c * m
    lo = np.minimum(np.floor(pos).astype(np.int64), m - 1)
    frac = pos - lo
    r = seg.c - seg.y
    key = seg.segment * (m + 1) + lo
    size = seg.count * (m + 1)
    grid = np.bincount(key, weights=(1.0 - frac) * r, minlength=size)
    grid += np.bincount(key + 1, weights=frac * r, minlength=size)
    grid = grid.reshape(seg.count, m + 1)
    grid[:, [0, m]] *= 2.0
    return scipy.fft.dct(grid, type=1, axis=1)


def _smece_rows(
    spectra: np.ndarray, n: np.ndarray, m: int, sigma: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """_smece_at for the given rows' (real) spectra, each at its own σ: the smoothed residuals on the
    nodes 0 … m of [0, 1] by the inverse DCT-I (half the circle: the other half mirrors it), then the
    trapezoid. Only the spectrum columns whose Gaussian weight is not exactly 0 are read."""
    import scipy.fft  # on first use: see kcal_pipeline/estimation/fitting.py

    reach = min(spectra.shape[1], int(np.ceil(_GAUSS_REACH / sigma.min())) + 1)
    q = np.arange(reach)
    gauss = m * np.exp(-((np.pi * sigma[:, None] * q[None, :]) ** 2) / 2.0)
    smoothed = np.abs(scipy.fft.idct(spectra[rows, :reach] * gauss, type=1, n=m + 1, axis=1))
    return (smoothed.sum(axis=1) - (smoothed[:, 0] + smoothed[:, m]) / 2) / m / n[rows]


def _solve_fixed_points(smece, sigma, slope, tol_abs):
    """Per sample, σ* in [SMECE_SIGMA_MIN, 1] with smece(σ*) = σ*, vectorised: from σ, a Newton step
    with `slope` (the slope of smece(σ) − σ), then secant steps, each kept inside the bracket the
    evaluations so far prove (bisection when it would leave it; a bound itself is evaluated before
    it is bracketed). The end cases are smooth_ece's: smece(0.001) ≤ 0.001 → the value there,
    smece(1) ≥ 1 → the value there. `smece(σ, rows)` evaluates the given rows. Returns (σ, smece(σ),
    last slope)."""
    count = sigma.size
    x = sigma.astype(np.float64, copy=True)
    s = smece(x, np.arange(count))
    lo, hi = np.full(count, SMECE_SIGMA_MIN), np.ones(count)
    lo_seen, hi_seen = np.zeros(count, dtype=np.bool_), np.zeros(count, dtype=np.bool_)
    done = np.zeros(count, dtype=np.bool_)
    slope = np.asarray(slope, dtype=np.float64) * np.ones(count)
    x_prev = np.full(count, np.nan)
    g_prev = np.full(count, np.nan)
    for _ in range(200):
        g = s - x
        live = ~done
        finished = live & ((g == 0.0) | ((x == SMECE_SIGMA_MIN) & (g <= 0.0)) | ((x == 1.0) & (g >= 0.0)))
        tol = tol_abs + 4 * np.finfo(float).eps * np.abs(x)
        with np.errstate(invalid="ignore"):
            finished |= live & (np.abs(x - x_prev) <= tol)
        above, below = live & (g > 0), live & (g < 0)
        lo[above], hi[below] = x[above], x[below]
        lo_seen |= above
        hi_seen |= below
        finished |= live & lo_seen & hi_seen & (hi - lo <= tol)
        done |= finished
        live = ~done
        if not live.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            secant = (g - g_prev) / (x - x_prev)
            slope = np.where(np.isfinite(secant) & (secant < 0), secant, slope)
            step = x - g / slope
        inside = np.isfinite(step) & (step > lo) & (step < hi)
        to_min = ~inside & ~lo_seen & ~(step > lo)  # past the unproven lower bound: try the bound
        to_max = ~inside & ~hi_seen & ~(step < hi)
        step = np.where(inside, step, np.where(to_min, lo, np.where(to_max, hi, (lo + hi) / 2)))
        x_prev, g_prev = x, g
        x = np.where(live, step, x)
        rows = np.flatnonzero(live)
        s = s.copy()
        s[rows] = smece(x[rows], rows)
    else:  # pragma: no cover - the bracket halves at worst, so 200 steps reach any tolerance
        raise RuntimeError("smooth_ece: the fixed-point search did not converge")
    return x, s, slope


def _smooth_ece_batched(seg: Segments) -> np.ndarray:
    """smooth_ece of every sample: coarse fixed point, then the fine one from there (see above).
    Blocks are independent and their transforms run outside the GIL, so they run in threads."""
    out = np.empty(seg.count)
    # blocks of similar sizes: similar bandwidths, so a block's transforms read similar columns
    by_size = np.argsort(seg.sizes, kind="stable")
    blocks = [np.sort(by_size[first : first + SMECE_BLOCK]) for first in range(0, seg.count, SMECE_BLOCK)]
    for chosen, value in zip(
        blocks, in_threads(lambda c: _smooth_ece_block(seg.take(c)), blocks), strict=True
    ):
        out[chosen] = value
    return out


def _smooth_ece_block(block: Segments) -> np.ndarray:
    """smooth_ece of the samples of one block."""
    n = block.sizes.astype(np.float64)
    coarse = _block_spectra(block, SMECE_COARSE_GRID)
    fine = _block_spectra(block, SMECE_GRID)
    start, _, slope = _solve_fixed_points(
        partial(_smece_rows, coarse, n, SMECE_COARSE_GRID),
        np.full(block.count, SMECE_SIGMA_MIN),
        -1.0,  # from σ = 0.001 a first step to smece(0.001): an upper bound of the fixed point
        SMECE_COARSE_TOL,
    )
    _, value, _ = _solve_fixed_points(
        partial(_smece_rows, fine, n, SMECE_GRID), start, slope, SMECE_SIGMA_TOL
    )
    return np.clip(value, 0.0, 1.0)  # |c − y| ≤ 1: the transforms' rounding can reach 1 + 2e-16


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
