"""Interval methods on resampled values [K, B]: the bias-corrected percentile (BC) interval kcal
shows (bias_corrected_interval; Efron & Tibshirani 1993, §14.3), moved to its point where BC misses
it, so every interval contains its point estimate, even for a metric biased under resampling (ACE);
and the plain percentile interval, its z0 = 0 case, for comparison.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.segments import row_percentiles

LEVEL = 0.95
# bias_corrected_interval's tie tolerance (relative, at least absolute): far below any metric's resolution.
TIE = 1e-12


def interval_percentiles(level: float = LEVEL) -> list[float]:
    """The two percentiles a level reads, 50·(1 ∓ level), rounded to 1e-10 so that 0.95 gives
    exactly 2.5 and 97.5 (as a reference implementation would write them), not 2.5000000000000022."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return [round(50 * (1 - level), 10), round(50 * (1 + level), 10)]


def percentile_interval(
    values: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile interval of each row of `values` [K, B], ignoring NaN resamples (a metric
    undefined on that resample, e.g. AUROC with one class): (low, high, resamples used).
    Equals np.nanpercentile(row, [50(1−level), 50(1+level)]); NaN where no resample is defined.
    What kcal shows is bias_corrected_interval; this one is its z0 = 0 case, for comparison."""
    values = np.atleast_2d(values)
    ascending = np.sort(values, axis=1)  # NaN sorts last
    used = np.isfinite(values).sum(axis=1)
    percent = interval_percentiles(level)
    bounds = row_percentiles(
        lambda pos: np.take_along_axis(ascending, pos, axis=1), np.maximum(used, 1), percent
    )
    bounds[used == 0] = np.nan
    return bounds[:, 0], bounds[:, 1], used


def bias_corrected_interval(
    values: np.ndarray, point: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bias-corrected percentile (BC) interval of each row of `values` [K, B] around its point
    estimate `point` [K], ignoring NaN resamples: (low, high, resamples used).

    Why not the plain percentile interval: a metric biased under resampling (ACE: a resample's bin
    accuracies scatter around the sample's, and |confidence − accuracy| only grows) can have its
    whole percentile interval on one side of its point. BC (Efron & Tibshirani 1993, §14.3: BCa
    with acceleration 0) shifts the percentiles read by that bias: z0 = Φ⁻¹(p), p the share of
    resamples below the point, ties counted half (as scipy.stats.bootstrap counts them; a tie is a
    resample within TIE·max(1, |point|) of the point, so a resample equal to the point but summed
    in another order, 1 ulp off, is a tie whichever implementation computed it); the bounds are the
    percentiles 100·Φ(z0 + (z0 ± z)), z = Φ⁻¹((1 − level)/2). No acceleration: its jackknife would
    re-evaluate every metric once per deleted relation and per deleted instance, per group.

    Containment rule: BC contains the point only while p ∈ (α/2, 1 − α/2) roughly (at p = 0 or 1
    both bounds fall on the resamples' extreme), so each bound is then moved to the point itself:
    low = min(BC low, point), high = max(BC high, point). Every interval contains its point; one
    moved so is narrow on the point's side (no resample there), not precise. A NaN point (the
    metric undefined on the full sample) takes z0 = 0, the percentile interval; NaN bounds where
    no resample is defined.
    """
    from scipy import special  # on first use: see kcal_pipeline/estimation/fitting.py

    values = np.atleast_2d(values)
    point = np.asarray(point, dtype=np.float64).reshape(-1)
    if point.shape[0] != values.shape[0]:
        raise ValueError(f"point: one per row of values ({values.shape[0]}), got {point.shape[0]}")
    interval_percentiles(level)
    used = np.isfinite(values).sum(axis=1)
    tie = TIE * np.maximum(1.0, np.abs(point))[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        below = (values < point[:, None] - tie).sum(axis=1)
        at_or_below = (values <= point[:, None] + tie).sum(axis=1)
        share = (below + at_or_below) / (2 * np.maximum(used, 1))
    z0 = np.where(np.isfinite(point), special.ndtri(share), 0.0)
    z = float(special.ndtri((1 - level) / 2))
    percent = 100 * np.column_stack([special.ndtr(z0 + (z0 + z)), special.ndtr(z0 + (z0 - z))])
    ascending = np.sort(values, axis=1)  # NaN sorts last
    bounds = row_percentiles(
        lambda pos: np.take_along_axis(ascending, pos, axis=1), np.maximum(used, 1), percent
    )
    low, high = np.fmin(bounds[:, 0], point), np.fmax(bounds[:, 1], point)
    low[used == 0], high[used == 0] = np.nan, np.nan
    return low, high, used
