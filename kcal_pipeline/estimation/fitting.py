"""The recalibration maps fitted for many groups at once: temperature (Guo et al. 2017), Platt
(Platt 1999) and isotonic regression (Zadrozny & Elkan 2002).

A run has thousands of (model, relation, reduction, template, answer_space_k) groups of a few
dozen dev rows each. Calling a library optimiser per group cost ~3 ms of call overhead per fit
and was 95 % of the estimation stage, so the two smooth fits are Newton iterations run for all
groups of a call together (one numpy pass over the dev rows per step, sums per group by
`np.bincount`); isotonic regression is exact PAVA (scipy) per group on tie-merged points. Each
returns the exact optimum of the same objective the library would fit, checked against scipy's
bounded search and scikit-learn in tests/estimation/test_fitting.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# scipy is imported where it is used: this module is on the code location's import path (every run,
# code server and UI process), and scipy.optimize alone takes ~0.5 s to import.

TEMPERATURE_BOUNDS = (0.05, 20.0)
_MAX_ITERATIONS = 100
_RTOL = 1e-12


def expit(z: np.ndarray) -> np.ndarray:
    """scipy's logistic function, imported on first use."""
    from scipy.special import expit

    return expit(z)


def _isotonic_regression(y: np.ndarray, weights: np.ndarray):
    from scipy.optimize import isotonic_regression

    return isotonic_regression(y, weights=weights)


def _group_mean(values: np.ndarray, group: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.bincount(group, weights=values, minlength=len(counts)) / counts


# --- temperature -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldMassRows:
    """The dev rows of a temperature fit. A row is one instance on S templates (S = 1 for a
    one-template estimator; the paraphrase templates for the template marginal) and K options:
    ll [R, S, K] with −inf on padded options and absent templates, gold [R, S, K] (a scored gold
    option of a present template), log_count [R] = log of the number of present templates, and
    group [R], the row's group. Every row has at least one gold cell."""

    ll: np.ndarray
    gold: np.ndarray
    log_count: np.ndarray
    group: np.ndarray

    def informative(self) -> np.ndarray:
        """[R] whether the row's gold mass can depend on T: some template has a gold option, a
        valid wrong one and two valid options of different score. (Otherwise every term of m is
        0, 1 or 1/K at every T, and the row adds the same NLL at every T.)"""
        valid = np.isfinite(self.ll)
        low = np.where(valid, self.ll, np.inf).min(axis=2)
        high = np.where(valid, self.ll, -np.inf).max(axis=2)
        wrong = (valid & ~self.gold).any(axis=2)
        return (self.gold.any(axis=2) & wrong & (high > low)).any(axis=1)

    @cached_property
    def _valid(self) -> np.ndarray:
        return np.isfinite(self.ll)

    @cached_property
    def _ll_or_zero(self) -> np.ndarray:
        return np.where(self._valid, self.ll, 0.0)

    def log_mass_derivatives(self, beta: np.ndarray, only_mass: bool = False):
        """Per row, at inverse temperature β = 1/T (`beta` [..., R], one per row and as many
        leading axes as wanted): log m, d log m/dβ, d² log m/dβ², with m = (1/S_i) Σ_s Σ_{g∈G}
        p_s(g) and p_s = softmax(β·ll_s). With w the gold cells' shares of m, μ_s and V_s the
        mean and variance of ll_s under p_s:
        d log m/dβ = Σ w (ll − μ_s) = A and d² log m/dβ² = Σ w ((ll − μ_s)² − V_s) − A²."""
        scaled = np.where(self._valid, self.ll * beta[..., None, None], -np.inf)
        top = scaled.max(axis=-1, keepdims=True)
        top[~np.isfinite(top)] = 0.0
        scaled -= top
        e = np.exp(scaled)
        total = e.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_p = scaled - np.log(total)
        gold_log_p = np.where(self.gold, log_p, -np.inf)
        gold_top = gold_log_p.max(axis=(-2, -1), keepdims=True)
        w = np.exp(gold_log_p - gold_top)
        gold_sum = w.sum(axis=(-2, -1), keepdims=True)
        log_m = (np.log(gold_sum) + gold_top)[..., 0, 0] - self.log_count
        if only_mass:
            return log_m
        w /= gold_sum
        p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        ll = self._ll_or_zero
        dev = ll - (p * ll).sum(axis=-1, keepdims=True)
        variance = (p * dev * dev).sum(axis=-1, keepdims=True)
        first = (w * dev).sum(axis=(-2, -1))
        second = (w * (dev * dev - variance)).sum(axis=(-2, -1)) - first * first
        return log_m, first, second


TEMPERATURE_GRID = 13  # points, evenly spaced in log T over the bounds, that pick the basin


def temperature_grid() -> np.ndarray:
    """The log T grid the search starts from: TEMPERATURE_GRID points from log 0.05 to log 20."""
    return np.linspace(*np.log(TEMPERATURE_BOUNDS), TEMPERATURE_GRID)


def fit_temperatures(rows: GoldMassRows, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(T [G], flat [G]): per group, the T ∈ TEMPERATURE_BOUNDS minimising the mean dev NLL
    −log m_T. With several gold options per row, or the template marginal, the NLL need not be
    convex in 1/T and can have a minimum at a bound besides one inside; so the NLL is first taken
    on a grid of 13 points in log T, and the minimum is then sought between the best grid point's
    neighbours: the root of the derivative in β = 1/T by Newton's method, safeguarded by that
    bracket (bisection in log β when a step leaves it or the curvature is not positive), or the
    bound itself where the NLL still falls there. (With one gold per row it is convex, but the
    grid costs less than the Newton steps it saves.) `flat`: no row of the group is informative
    (the NLL does not depend on T); such a group gets T = 1, as does a group without rows."""
    counts = np.maximum(np.bincount(rows.group, minlength=n_groups).astype(np.float64), 1.0)
    informative = np.bincount(rows.group, weights=rows.informative(), minlength=n_groups) > 0

    def mean(values: np.ndarray) -> np.ndarray:
        return np.bincount(rows.group, weights=values, minlength=n_groups) / counts

    grid = np.exp(-temperature_grid()[::-1])  # β ascending
    grid[[0, -1]] = 1 / TEMPERATURE_BOUNDS[1], 1 / TEMPERATURE_BOUNDS[0]
    log_m = rows.log_mass_derivatives(np.repeat(grid[:, None], len(rows.group), axis=1), only_mass=True)
    nll = np.stack([-mean(values) for values in log_m])
    # of equal values the largest β: where the NLL falls to its last bit before the bound, the
    # bound is the minimum (exactly computed, the NLL is still falling there)
    best = len(grid) - 1 - nll[::-1].argmin(axis=0)
    lo = grid[np.maximum(best - 1, 0)]
    hi = grid[np.minimum(best + 1, len(grid) - 1)]
    beta = grid[best]
    active = informative.copy()
    for _ in range(_MAX_ITERATIONS):
        if not active.any():
            break
        _, first, second = rows.log_mass_derivatives(beta[rows.group])
        slope, curvature = -mean(first), -mean(second)
        lo = np.where(active & (slope < 0), beta, lo)
        hi = np.where(active & (slope > 0), beta, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = beta - slope / curvature
        inside = (curvature > 0) & (newton >= lo) & (newton <= hi)
        # done: at the root, a bracket closed to rounding, or a Newton step below it (quadratic
        # convergence: the step after it would change nothing)
        # (or a step onto a bracket end: rounding in the slope makes it hop between two neighbours)
        step_done = np.abs(newton - beta) <= _RTOL * beta
        done = (
            (slope == 0)
            | (hi - lo <= _RTOL * beta)
            | (inside & (step_done | (newton == lo) | (newton == hi)))
        )
        proposal = np.where(inside, newton, np.sqrt(lo * hi))
        beta = np.where(active & ~done, proposal, np.where(active & inside, newton, beta))
        active &= ~done
    low_t, high_t = TEMPERATURE_BOUNDS
    at_bound = np.where(beta == grid[0], high_t, np.where(beta == grid[-1], low_t, 1 / beta))
    temperature = np.where(informative, at_bound, 1.0)
    return temperature, ~informative


# --- Platt -------------------------------------------------------------------------------------------


def platt_targets(correct: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Platt's smoothed targets per row: (N₊+1)/(N₊+2) if right, 1/(N₋+2) if wrong, counted in its group."""
    n_right = np.bincount(group, weights=correct, minlength=n_groups)
    n_wrong = np.bincount(group, minlength=n_groups) - n_right
    return np.where(correct, (n_right[group] + 1) / (n_right[group] + 2), 1 / (n_wrong[group] + 2))


def _platt_loss(z: np.ndarray, target: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    return np.bincount(group, weights=np.logaddexp(0.0, z) - target * z, minlength=n_groups)


def fit_platt(
    confidence: np.ndarray, correct: np.ndarray, group: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """(slope [G], intercept [G]) of an unpenalised logistic regression of correctness on the
    confidence, per group, on Platt's smoothed targets t: each row counts as right with weight t
    and as wrong with weight 1 − t, i.e. the loss Σ softplus(z) − t·z with z = slope·x + intercept.
    The targets are never 0 or 1, so the optimum is finite whenever x varies; Newton's method
    with a backtracking line search (Lin, Lin & Weng 2007) reaches it in a few steps, on x
    centred per group so that the 2 × 2 system stays well conditioned when every x is near 1.
    A group whose x are all equal cannot tell slope from intercept: slope 0 and the intercept
    that meets the mean target. Groups need at least one row."""
    target = platt_targets(correct, group, n_groups)
    counts = np.bincount(group, minlength=n_groups).astype(np.float64)
    centre = _group_mean(confidence, group, counts)
    x = confidence - centre[group]
    spread = np.bincount(group, weights=x * x, minlength=n_groups)
    scale = np.bincount(group, weights=confidence**2, minlength=n_groups)
    varies = spread > 1e-24 * np.maximum(scale, 1e-300)
    mean_target = _group_mean(target, group, counts)
    slope = np.zeros(n_groups)
    offset = np.log(mean_target) - np.log1p(-mean_target)  # the optimum at slope 0
    loss = _platt_loss(offset[group], target, group, n_groups)
    active = varies.copy()
    for _ in range(_MAX_ITERATIONS):
        if not active.any():
            break
        z = slope[group] * x + offset[group]
        p = expit(z)
        residual, weight = p - target, p * (1 - p)
        g_slope = np.bincount(group, weights=residual * x, minlength=n_groups)
        g_offset = np.bincount(group, weights=residual, minlength=n_groups)
        h_ss = np.bincount(group, weights=weight * x * x, minlength=n_groups)
        h_so = np.bincount(group, weights=weight * x, minlength=n_groups)
        h_oo = np.bincount(group, weights=weight, minlength=n_groups)
        det = h_ss * h_oo - h_so * h_so
        with np.errstate(divide="ignore", invalid="ignore"):
            d_slope = np.where(active, -(h_oo * g_slope - h_so * g_offset) / det, 0.0)
            d_offset = np.where(active, -(h_ss * g_offset - h_so * g_slope) / det, 0.0)
        stalled = ~np.isfinite(d_slope) | ~np.isfinite(d_offset)
        d_slope[stalled], d_offset[stalled] = 0.0, 0.0
        decrease = g_slope * d_slope + g_offset * d_offset  # < 0 for a descent direction
        step = np.where(active & ~stalled, 1.0, 0.0)
        for _ in range(60):  # backtracking: halve each group's step until its loss falls enough
            trial = _platt_loss(
                (slope + step * d_slope)[group] * x + (offset + step * d_offset)[group],
                target,
                group,
                n_groups,
            )
            # (the last term: near the optimum a Newton step changes the loss by less than its
            # rounding, and refusing it there would stop the parameters at ~√ε)
            short = (step > 0) & (trial > loss + 1e-4 * step * decrease + 1e-13 * np.abs(loss))
            if not short.any():
                break
            step = np.where(short, step / 2, step)
        step = np.where(short, 0.0, step)
        slope, offset = slope + step * d_slope, offset + step * d_offset
        loss = np.where(step > 0, trial, loss)
        converged = (np.abs(step * d_slope) <= _RTOL * (1 + np.abs(slope))) & (
            np.abs(step * d_offset) <= _RTOL * (1 + np.abs(offset))
        )
        active &= ~converged & (step > 0)
    return slope, offset - slope * centre


# --- isotonic ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IsotonicFit:
    """Per group: the fitted step function's knots (x ascending, distinct) and values."""

    x: list[np.ndarray]
    y: list[np.ndarray]

    def n_steps(self) -> np.ndarray:
        return np.array([np.unique(y).size for y in self.y], dtype=np.float64)

    def predict(self, confidence: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Linear interpolation between the knots, clipped to the end values outside them."""
        out = np.empty_like(confidence, dtype=np.float64)
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(len(self.x) + 1))
        for g, (x, y) in enumerate(zip(self.x, self.y, strict=True)):
            rows = order[bounds[g] : bounds[g + 1]]
            if len(rows):
                out[rows] = np.interp(confidence[rows], x, y)
        return out


def fit_isotonic(
    confidence: np.ndarray, correct: np.ndarray, group: np.ndarray, n_groups: int
) -> IsotonicFit:
    """The increasing least-squares fit of correctness on the confidence, per group: equal
    confidences merged into one point (mean correctness, weight = count), then PAVA. Outputs stay
    in [0, 1] since the inputs are 0/1. Groups need at least one row."""
    if not len(group):
        return IsotonicFit([np.empty(0)] * n_groups, [np.empty(0)] * n_groups)
    order = np.lexsort((confidence, group))
    g, x, y = group[order], confidence[order], correct[order].astype(np.float64)
    starts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (x[1:] != x[:-1])])
    weight = np.diff(np.r_[starts, len(x)]).astype(np.float64)
    x, g, y = x[starts], g[starts], np.add.reduceat(y, starts) / weight
    bounds = np.searchsorted(g, np.arange(n_groups + 1))
    xs, ys = [], []
    for k in range(n_groups):
        part = slice(bounds[k], bounds[k + 1])
        xs.append(x[part])
        ys.append(_isotonic_regression(y[part], weights=weight[part]).x)
    return IsotonicFit(xs, ys)
