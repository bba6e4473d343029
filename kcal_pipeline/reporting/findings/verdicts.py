"""The verdicts' statistics and every claim's evaluation: the minimum detectable effect of an
inconclusive difference, p-values read from intervals, Holm–Bonferroni over one claim's
comparisons on one model, and the ACE a perfectly calibrated scorer shows (simulated_ace_floor:
seeded calibrated outcomes). Intervals come from kcal_pipeline.evaluation.bootstrap (the same seeded
resample plans and bias-corrected intervals as the metrics tables)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.binning import BINS, _bin_ids
from kcal_pipeline.reporting.findings.core import (
    CLAIMS,
    DESCRIPTIVE,
    DIFFERENCE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    SEED,
    Finding,
    StoreTables,
    fmt,
    ordered_claims,
)
from kcal_pipeline.reporting.findings.selections import headline_rows

ALPHA = 0.05  # two-sided, as the 95 % intervals
POWER = 0.80  # the power a minimum detectable effect is stated at
Z_ALPHA = NormalDist().inv_cdf(1 - ALPHA / 2)
Z_POWER = NormalDist().inv_cdf(POWER)
NOISE_FLOOR_SIMULATIONS = 1000


def minimum_detectable_effect(sd_boot: float) -> float:
    """The smallest true difference this n detects with 80 % power at two-sided 5 %:
    (z_0.975 + z_0.80) · sd_boot, sd_boot the bootstrap spread of the difference. An inconclusive
    verdict with an MDE larger than the paper's effect says the store is too small, not that the
    effect is absent."""
    if sd_boot is None or math.isnan(sd_boot) or sd_boot < 0:
        return math.nan
    return (Z_ALPHA + Z_POWER) * sd_boot


def sd_from_interval(ci_low: float, ci_high: float) -> float:
    """The bootstrap spread read back from a stored 95 % interval: (high − low) / (2 · z_0.975).
    The tables keep intervals, not resamples; for a near-normal resample distribution the
    percentile interval spans 2 · 1.96 standard deviations."""
    if ci_low is None or ci_high is None or math.isnan(ci_low) or math.isnan(ci_high):
        return math.nan
    return (ci_high - ci_low) / (2 * Z_ALPHA)


def bootstrap_p(differences: np.ndarray) -> float:
    """Two-sided bootstrap p of a difference from its resample values: 2 · min(share ≤ 0, share ≥ 0),
    at most 1 (NaN resamples left out; NaN when none is left). Used where the resamples are at hand."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return math.nan
    return float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean())))


def interval_p(difference: float, ci_low: float, ci_high: float) -> float:
    """Two-sided p of a difference from its stored 95 % interval (normal approximation,
    sd = sd_from_interval): what the tables allow, since they keep no resamples. A zero-width
    interval (every resample equal) gives 0 for a non-zero difference, 1 for a zero one."""
    sd = sd_from_interval(ci_low, ci_high)
    if difference is None or math.isnan(difference) or math.isnan(sd):
        return math.nan
    if sd == 0:
        return 0.0 if difference != 0 else 1.0
    return 2 * (1 - NormalDist().cdf(abs(difference) / sd))


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order: the i-th smallest p times (m − i + 1),
    made non-decreasing along that order, capped at 1. A NaN p counts as a comparison (m includes
    it: it cannot be dropped after the fact) and stays NaN."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    out = np.full(m, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def simulated_ace_floor(
    confidence: np.ndarray, bins: int = BINS, simulations: int = NOISE_FLOOR_SIMULATIONS, seed: int = SEED
) -> float:
    """The expected ACE of a perfectly calibrated scorer at this n and these bins: outcomes drawn
    as Bernoulli(confidence) for the observed confidences, ACE with calibration.py's quantile bins
    (which depend on the confidences only, so they are formed once), averaged over `simulations`
    seeded draws. An ACE near this floor is no evidence of miscalibration."""
    c = np.asarray(confidence, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"confidence: expected a non-empty 1-d array, got shape {c.shape}")
    if np.isnan(c).any() or (c < 0).any() or (c > 1).any():
        raise ValueError("confidence: every value must lie in [0, 1]")
    if simulations < 1:
        raise ValueError(f"simulations: expected at least 1, got {simulations}")
    ids = _bin_ids(c, bins, "quantile")
    count = np.bincount(ids, minlength=bins)
    kept = np.flatnonzero(count)
    conf = np.bincount(ids, weights=c, minlength=bins)[kept] / count[kept]
    onehot = np.zeros((c.size, kept.size))
    onehot[np.arange(c.size), np.searchsorted(kept, ids)] = 1.0
    rng = np.random.default_rng(seed)
    total = 0.0
    for start in range(0, simulations, 256):  # blocks keep the outcome matrix small
        y = (rng.random((min(256, simulations - start), c.size)) < c).astype(np.float64)
        acc = (y @ onehot) / count[kept]
        total += np.abs(acc - conf).mean(axis=1).sum()
    return total / simulations


def ace_floor_note(t: StoreTables, estimator: str) -> str:
    """The ACE a perfectly calibrated scorer would show on `estimator`'s test confidences (headline
    selection): below it an ACE difference is sampling noise; "" without probability rows."""
    head = headline_rows(t)
    if head.is_empty():
        return ""
    rows = head.filter((pl.col("estimator") == estimator) & (pl.col("output_kind") == "probability"))
    if rows.is_empty():
        return ""
    floor = simulated_ace_floor(rows["confidence"].to_numpy())
    return f"ACE noise floor at n = {rows.height} ({NOISE_FLOOR_SIMULATIONS} calibrated draws) {fmt(floor)}"


def _with_power(f: Finding, paper_effect: float | None = None) -> Finding:
    """A row with an interval gets its minimum detectable effect and whether the paper's effect
    (where the claim gives one) lies inside the interval; an inconclusive one says both in its note."""
    if f.verdict in (NOT_TESTABLE, DESCRIPTIVE) or math.isnan(f.ci_low) or math.isnan(f.ci_high):
        return f
    mde = minimum_detectable_effect(sd_from_interval(f.ci_low, f.ci_high))
    inside = None if paper_effect is None else bool(f.ci_low <= paper_effect <= f.ci_high)
    if f.verdict != INCONCLUSIVE:
        return replace(f, mde=mde, paper_inside=inside)
    note = f"MDE at n = {f.n}: {fmt(mde)} (80 % power, two-sided 5 %)"
    if paper_effect is not None:
        note += (
            f"; the paper's effect {fmt(paper_effect)} lies {'inside' if inside else 'outside'} the interval"
        )
    return replace(f, note=f"{f.note}; {note}" if f.note else note, mde=mde, paper_inside=inside)


def detects(mde: float, paper_effect: float | None) -> str:
    """Whether this n could detect the paper's effect: |effect| ≥ MDE (80 % power, two-sided 5 %)."""
    if paper_effect is None:
        return "no effect printed"
    if mde is None or math.isnan(mde):
        return "n/a"
    return "yes" if abs(paper_effect) >= mde else "no"


def holm_family(findings: Sequence[Finding], alpha: float = ALPHA) -> list[Finding]:
    """Holm–Bonferroni over one claim's comparisons on one model: every row with an interval gets
    its adjusted p (interval_p; m = 1 leaves it unadjusted) and m; a verdict that holds or does not
    hold stays so only if that p is below `alpha`, else it becomes inconclusive; Holm never upgrades
    an inconclusive one. Not-testable and descriptive rows are not comparisons."""
    tested = [i for i, f in enumerate(findings) if f.verdict not in (NOT_TESTABLE, DESCRIPTIVE)]
    raw = [interval_p(findings[i].value, findings[i].ci_low, findings[i].ci_high) for i in tested]
    adjusted = dict(zip(tested, holm_adjusted(raw), strict=True))
    out = list(findings)
    for i, p in adjusted.items():
        f = findings[i]
        if len(tested) < 2:
            out[i] = replace(f, p_holm=p, m_holm=1)
            continue
        keep = f.verdict in (HOLDS, FAILS) and not math.isnan(p) and p < alpha
        verdict = f.verdict if keep or f.verdict == INCONCLUSIVE else INCONCLUSIVE
        note = f"Holm-adjusted p {fmt(p)} over {len(tested)} comparisons"
        out[i] = replace(
            f, verdict=verdict, note=f"{f.note}; {note}" if f.note else note, p_holm=p, m_holm=len(tested)
        )
    return out


def evaluate_claims(
    models: Sequence[StoreTables] | Mapping[str, Sequence[StoreTables]], claims: Iterable[str] | None = None
) -> list[Finding]:
    """Every registered claim (or the named ones) on every model, in registry then model order;
    difference claims Holm-adjusted within each model's family, inconclusive ones with their MDE and
    the paper's effect placed against the interval.

    `models` is one store's tables (every claim reads them) or a findings profile's stages
    (stage → tables, kcal findings --build): each claim reads its own stage's store, and a claim
    whose stage the profile lacks is not testable, naming it."""
    keys = [c.key for c in ordered_claims()] if claims is None else list(claims)
    unknown = [k for k in keys if k not in CLAIMS]
    if unknown:
        raise ValueError(f"unknown claim(s) {unknown}; known: {list(CLAIMS)}")
    staged = isinstance(models, Mapping)
    every = list(dict.fromkeys(t.model_id for ts in models.values() for t in ts)) if staged else []
    out = []
    for k in keys:
        spec = CLAIMS[k]
        if staged and spec.stage not in models:
            why = f"the profile has no {spec.stage!r} stage store (kcal findings --build builds it)"
            out += [Finding(k, m, spec.title, NOT_TESTABLE, note=why) for m in every]
            continue
        for t in models[spec.stage] if staged else models:
            rows = spec.fn(t)
            if spec.kind == DIFFERENCE:
                rows = holm_family(rows)
            out += [_with_power(f, spec.number.effect) for f in rows]
    return out
