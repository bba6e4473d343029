"""Smooth ECE (calibration.smooth_ece) for every sample of a metrics table at once: the batched
fixed-point search behind the metric's `batched`, and the grid and tolerances it shares with the
single-sample definition (calibration.py), which it equals to the same tolerance.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from kcal_pipeline.evaluation.segments import Segments, in_threads

# smECE's grid: M intervals on [0, 1] (spacing 1e-4, a tenth of the smallest bandwidth searched),
# and the fixed-point search: σ in [0.001, 1] (relplot's floor), to 1e-12.
SMECE_GRID = 10_000
SMECE_SIGMA_MIN = 1e-3
SMECE_SIGMA_TOL = 1e-12

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
