"""Findings: the seed papers' claims re-tested on a store's models, with a stated verdict rule.

Each claim is a small function in one registry (`CLAIMS`, like the estimators' and metrics'): it
reads one model's tables (`StoreTables`) and returns `Finding` rows (claim, model, what exactly was
compared, verdict, the number with its 95 % interval). The summary table and every section of the
Markdown document come from the same rows, so a number is never typed twice.

Verdicts (VERDICTS): a claim about a difference **holds** when the 95 % interval of the (paired
where possible) difference excludes 0 in the claimed direction, **does not hold** when it excludes 0
in the other direction, and is **inconclusive at this sample size** otherwise. A claim that is not
a difference states its numeric criterion (e.g. IoU_cons < 0.9 for "far from 1"). A claim the
store cannot test says why and which setting would enable it, never a made-up verdict.

Intervals come from kcal_pipeline.evaluation.bootstrap (the same seeded resample plans and
percentile intervals as the metrics tables); nothing here draws its own resamples. An inconclusive
difference carries its minimum detectable effect; a claim with several comparisons per model is
Holm–Bonferroni adjusted (evaluate_claims); simulated_ace_floor draws seeded calibrated outcomes
(not resamples) for the ACE a perfectly calibrated scorer would show. The document opens with its
provenance (model as the registry describes it, commit, store data version, command, machine).
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.core.storage import (
    BadFileError,
    partition_path,
    read_partition,
    read_partitions,
    rebuild_hint,
)
from kcal_pipeline.core.versions import stored_version
from kcal_pipeline.estimation.fitting import TEMPERATURE_BOUNDS
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    NO_ANSWER,
    OUTPUT_SCHEMA,
    headline_template_estimates,
    summary_estimators,
)
from kcal_pipeline.evaluation.bootstrap import (
    N_RESAMPLES,
    PAD,
    Resamples,
    bias_corrected_interval,
    paired_differences,
    resample_plan,
)
from kcal_pipeline.evaluation.calibration import BIN_SWEEP, BINS, _bin_ids
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.scopes import MACE_DOMAIN

if TYPE_CHECKING:
    from kcal_pipeline.scoring.models.registry import ModelEntry

HOLDS = "holds"
FAILS = "does not hold"
INCONCLUSIVE = "inconclusive at this sample size"
NOT_TESTABLE = "not testable"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE)
SEED = 0  # the resample seed, as the metrics tables use
REDUCTION = "sum"  # the headline reduction every claim is read under (SCA has its own)
BASELINE = "base"
# "far from 1" (consistency): every seed's IoU_cons below this; "close to 1": every seed's at or above.
FAR_FROM_ONE = 0.9
# "τ = 0 is as good as a tuned τ": non-inferiority on the Brier score with this margin.
BRIER_MARGIN = 0.01
MULTI_TEMPLATE_FAMILIES = ("aggregation", "template_marginal")
SELECTIVE_LAMA_FAMILY = "selective_lama"
RECALIBRATED = ("base_temperature", "base_platt", "base_isotonic")
# Zhao et al.'s one-shot prefix is a knowledge-free demonstration ("What is 2+2? 4"): context-fixed.
# Each setup with the template kind that scores it.
CONSISTENCY_SETUPS = {"typo": "perturbation", "context-fixed": "context_fixed"}
FIT_COLUMNS = ["relation_id", "estimator", "reduction", "answer_space_k", "parameter", "value", "n_dev"]


@dataclass(frozen=True)
class StoreTables:
    """One model's tables as the claims read them; a table the store lacks is an empty frame.

    `estimates` holds what the claims read: the test split on full answer spaces (read_store_tables
    keeps the reductions Sum and Sum(A) only);
    `instances` is probe_instances' (relation_id, instance_id, n_gold), `relations` the relations
    table's (relation_id, domain), `fits` estimator_fits' (relation_id, estimator, reduction,
    answer_space_k, parameter, value, n_dev): how many dev instances each recalibration saw."""

    model_id: str
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    differences: pl.DataFrame = field(default_factory=pl.DataFrame)
    consistency: pl.DataFrame = field(default_factory=pl.DataFrame)
    estimates: pl.DataFrame = field(default_factory=pl.DataFrame)
    templates: pl.DataFrame = field(default_factory=pl.DataFrame)
    instances: pl.DataFrame = field(default_factory=pl.DataFrame)
    relations: pl.DataFrame = field(default_factory=pl.DataFrame)
    fits: pl.DataFrame = field(default_factory=pl.DataFrame)


@dataclass(frozen=True)
class Finding:
    """One verdict: `subject` says what exactly was compared; `value` [ci_low, ci_high] is the
    number the verdict reads with its 95 % interval (for a criterion over draws, e.g. IoU_cons per
    seed: their mean and range; NaN where there is none), `numbers` every number shown, `note` the
    reason a claim is not testable or what else to know."""

    claim: str
    model_id: str
    subject: str
    verdict: str
    value: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    n: int | None = None
    numbers: str = ""
    note: str = ""
    mde: float = math.nan  # an inconclusive difference's minimum detectable effect (_with_power)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(
                f"finding {self.claim!r}: verdict {self.verdict!r} is not one of {list(VERDICTS)}"
            )


ClaimFn = Callable[[StoreTables], list[Finding]]


@dataclass(frozen=True)
class Claim:
    """One claim of the seed papers: its section, the sentence tested, where it comes from, the
    paper's setting (models, data, sizes: what a store's model is compared against), the verdict
    rule and the tables it reads."""

    key: str
    section: str
    title: str
    paper: str
    setting: str
    rule: str
    reads: str
    fn: ClaimFn


CLAIMS: dict[str, Claim] = {}
SECTIONS = {
    "1": "Margin against Base",
    "2": "Aggregating paraphrase templates",
    "3": "Epistemic markers",
    "4": "Selective-LAMA's confidence functions",
    "5": "MACE: several correct answers",
    "6": "Consistency under perturbations",
    "7": "What kcal adds",
}


def claim(key: str, *, section: str, title: str, paper: str, setting: str, rule: str, reads: str):
    """Register a claim; a second one under the same key is a bug."""

    def add(fn: ClaimFn) -> ClaimFn:
        if key in CLAIMS:
            raise ValueError(f"claim {key!r} is already registered")
        if section not in SECTIONS:
            raise ValueError(f"claim {key!r}: unknown section {section!r}; known: {list(SECTIONS)}")
        CLAIMS[key] = Claim(key, section, title, paper, setting, rule, reads, fn)
        return fn

    return add


# --- verdicts and numbers ------------------------------------------------------------------------


def difference_verdict(ci_low: float, ci_high: float, claimed: str) -> str:
    """The rule for a difference: holds when the interval excludes 0 on the claimed side
    ("negative" or "positive"), does not hold when it excludes 0 on the other, else inconclusive
    (an undefined interval too)."""
    if claimed not in ("negative", "positive"):
        raise ValueError(f"claimed must be 'negative' or 'positive', got {claimed!r}")
    if ci_low is None or ci_high is None or math.isnan(ci_low) or math.isnan(ci_high):
        return INCONCLUSIVE
    below, above = ci_high < 0, ci_low > 0
    if (below and claimed == "negative") or (above and claimed == "positive"):
        return HOLDS
    if below or above:
        return FAILS
    return INCONCLUSIVE


def fmt(value: float | None, digits: int = 3) -> str:
    """A number as the document shows it; NaN and None as 'n/a'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def fmt_ci(value: float, low: float, high: float) -> str:
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def _label(estimator: str) -> str:
    spec = ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def _not_testable(key: str, t: StoreTables, subject: str, why: str) -> list[Finding]:
    return [Finding(key, t.model_id, subject, NOT_TESTABLE, note=why)]


# --- selections --------------------------------------------------------------------------------


def _head(t: StoreTables, reduction: str | None = REDUCTION) -> pl.DataFrame:
    """The headline selection (each relation's headline template, plus the instance-grain rows) on
    the test split and full answer spaces, as metric_differences reads it; one reduction."""
    if t.estimates.is_empty() or t.templates.is_empty():
        return pl.DataFrame()
    est = t.estimates.filter(
        (pl.col("split") == HEADLINE_SPLIT) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    )
    if reduction is not None:
        est = est.filter(pl.col("reduction") == reduction)
    return headline_template_estimates(est, t.templates)


def _present(frame: pl.DataFrame) -> set[str]:
    return set(frame["estimator"].unique().to_list()) if "estimator" in frame.columns else set()


def _difference(t: StoreTables, estimator: str, metric: str) -> dict | None:
    """The metric_differences row estimator − Base: test split, full answer spaces, scope all,
    the headline reduction; None if the table has none."""
    if t.differences.is_empty():
        return None
    rows = t.differences.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("scope") == "all")
        & (pl.col("reduction") == REDUCTION)
        & (pl.col("estimator_a") == estimator)
        & (pl.col("estimator_b") == BASELINE)
        & (pl.col("metric") == metric)
    )
    return rows.row(0, named=True) if rows.height else None


def _metric(t: StoreTables, estimator: str, metric: str) -> dict | None:
    """The metrics row of one estimator: test split, full answer spaces, scope all, headline
    reduction; None if absent."""
    if t.metrics.is_empty():
        return None
    rows = t.metrics.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("scope") == "all")
        & (pl.col("reduction") == REDUCTION)
        & (pl.col("estimator") == estimator)
        & (pl.col("metric") == metric)
    )
    return rows.row(0, named=True) if rows.height else None


def _paired(frame: pl.DataFrame, a: str, b: str, metrics: Sequence[str]) -> dict[str, dict]:
    """metric(a) − metric(b) on their shared instances with a paired bootstrap interval (the
    library's paired_differences, scope all): {metric: row}."""
    rows = paired_differences(
        frame.filter(pl.col("estimator").is_in([a, b])), [(a, b)], metrics, n_resamples=N_RESAMPLES, seed=SEED
    ).filter(pl.col("scope") == "all")
    return {r["metric"]: r for r in rows.iter_rows(named=True)}


def _resample_sums(values: np.ndarray, resamples: Resamples) -> np.ndarray:
    """Σ values over each resample's rows (padding excluded): [B]. A statistic that the batched
    metrics do not cover (a mean confidence, an accuracy among answered) is read from these."""
    idx = resamples.indices
    return np.where(idx != PAD, values[idx], 0.0).sum(axis=1)


def _interval(values: np.ndarray, point: float) -> tuple[float, float]:
    """The 95 % bias-corrected interval of one statistic's resample values around its point (NaN
    ones left out), as the metrics' intervals are read: it always contains `point`."""
    low, high, _ = bias_corrected_interval(values[None, :], np.array([point]))
    return float(low[0]), float(high[0])


# --- power, noise floor, multiplicity ------------------------------------------------------------

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


def _ace_floor_note(t: StoreTables, estimator: str) -> str:
    """The ACE a perfectly calibrated scorer would show on `estimator`'s test confidences (headline
    selection): below it an ACE difference is sampling noise; "" without probability rows."""
    head = _head(t)
    if head.is_empty():
        return ""
    rows = head.filter((pl.col("estimator") == estimator) & (pl.col("output_kind") == "probability"))
    if rows.is_empty():
        return ""
    floor = simulated_ace_floor(rows["confidence"].to_numpy())
    return f"ACE noise floor at n = {rows.height} ({NOISE_FLOOR_SIMULATIONS} calibrated draws) {fmt(floor)}"


def _with_power(f: Finding, paper_effect: float | None = None) -> Finding:
    """An inconclusive difference with its minimum detectable effect, and whether the paper's
    effect (where the claim gives one) lies inside the interval."""
    if f.verdict != INCONCLUSIVE or math.isnan(f.ci_low) or math.isnan(f.ci_high):
        return f
    mde = minimum_detectable_effect(sd_from_interval(f.ci_low, f.ci_high))
    note = f"MDE at n = {f.n}: {fmt(mde)} (80 % power, two-sided 5 %)"
    if paper_effect is not None:
        where = "inside" if f.ci_low <= paper_effect <= f.ci_high else "outside"
        note += f"; the paper's effect {fmt(paper_effect)} lies {where} the interval"
    return replace(f, note=f"{f.note}; {note}" if f.note else note, mde=mde)


def holm_family(findings: Sequence[Finding], alpha: float = ALPHA) -> list[Finding]:
    """Holm–Bonferroni over one claim's comparisons on one model: a verdict that holds or does not
    hold stays so only if its adjusted p (interval_p) is below `alpha`, else it becomes
    inconclusive; Holm never upgrades an inconclusive one. Not-testable rows are not comparisons."""
    tested = [i for i, f in enumerate(findings) if f.verdict != NOT_TESTABLE]
    if len(tested) < 2:
        return list(findings)
    raw = [interval_p(findings[i].value, findings[i].ci_low, findings[i].ci_high) for i in tested]
    adjusted = dict(zip(tested, holm_adjusted(raw), strict=True))
    out = list(findings)
    for i, p in adjusted.items():
        f = findings[i]
        keep = f.verdict in (HOLDS, FAILS) and not math.isnan(p) and p < alpha
        verdict = f.verdict if keep or f.verdict == INCONCLUSIVE else INCONCLUSIVE
        note = f"Holm-adjusted p {fmt(p)} over {len(tested)} comparisons"
        out[i] = replace(f, verdict=verdict, note=f"{f.note}; {note}" if f.note else note)
    return out


# --- 1. Margin -----------------------------------------------------------------------------------

KISSLING = "Kissling, Merdjanovska & Akbik 2026, Self-Aware Knowledge Probing (arXiv 2601.18901)"
KISSLING_SETTING = (
    "BEAR's closed-set probe (7,731 instances, 5 paraphrase templates per relation), ten causal LMs "
    "(GPT-2 124M to 1.5B, OPT-125M to 6.7B, Gemma 2B and 7B) and six masked LMs (BERT, RoBERTa and "
    "XLM-R, base and large)."
)


@claim(
    "margin_lowers_ace",
    section="1",
    title="Margin is better calibrated than Base: ACE(Margin) − ACE(Base) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING
    + " Margin removes the confidence that near-ties get under Base, which helps any model whose "
    "Base is overconfident.",
    rule="Paired bootstrap (metric_differences: same resamples for both, clustered by relation) of "
    "ACE(Margin) − ACE(Base): holds if the 95 % interval lies below 0, does not hold if it lies above 0, "
    "else inconclusive.",
    reads="metric_differences (margin − base, ace, scope all, test split, full answer spaces, reduction "
    "sum); metrics (each one's ACE)",
)
def margin_lowers_ace(t: StoreTables) -> list[Finding]:
    key, subject = "margin_lowers_ace", "ACE(Margin) − ACE(Base)"
    row = _difference(t, "margin", "ace")
    if row is None:
        return _not_testable(
            key, t, subject, "metric_differences has no Margin − Base ACE row on the test split: "
            "materialize metric_differences (kcal demo) with a test split (--dev-fraction < 1)"
        )  # fmt: skip
    ace = {e: _metric(t, e, "ace") for e in (BASELINE, "margin")}
    context = ", ".join(f"ACE {_label(e)} {fmt(r['value'])}" for e, r in ace.items() if r)
    floor = _ace_floor_note(t, BASELINE)
    context += f"; {floor}" if context and floor else floor
    return [
        Finding(
            key,
            t.model_id,
            subject,
            difference_verdict(row["ci_low"], row["ci_high"], "negative"),
            row["difference"],
            row["ci_low"],
            row["ci_high"],
            row["n"],
            f"ΔACE {fmt_ci(row['difference'], row['ci_low'], row['ci_high'])}"
            + (f"; {context}" if context else ""),
        )
    ]


# --- 2. Aggregation ------------------------------------------------------------------------------


def _vote_levels(present: Iterable[str]) -> list[int]:
    """The k of every vote{k}_average present: 2 … T, T the number of paraphrase templates."""
    levels = []
    for name in present:
        if name.startswith("vote") and name.endswith("_average") and name[4:-8].isdigit():
            levels.append(int(name[4:-8]))
    return sorted(levels)


ONE_TEMPLATE = (
    "a single paraphrase template per instance, so there is nothing to aggregate: run with "
    "--max-templates 2 or more (default 5)"
)


@claim(
    "min_average_best_brier",
    section="2",
    title="Average^Min has the lowest Brier score among the multi-template estimators",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Average^Min was their best-calibrated estimator. It needs paraphrase "
    "templates that disagree, which is what Average^Min uses; with few templates there is little to "
    "aggregate.",
    rule="Brier of every multi-template estimator (families aggregation and template_marginal) on the "
    "test instances; paired bootstrap of Brier(Min Average) − Brier(the best other one): holds if the "
    "95 % interval lies below 0, does not hold if it lies above 0 (another one is better), else "
    "inconclusive.",
    reads="estimates (instance-grain rows, test split, full answer spaces, reduction sum)",
)
def min_average_best_brier(t: StoreTables) -> list[Finding]:
    key = "min_average_best_brier"
    head = _head(t)
    present = _present(head)
    if "min_average" not in present:
        return _not_testable(key, t, "Min Average", "no Min Average estimates: " + ONE_TEMPLATE)
    if not _vote_levels(present):
        return _not_testable(key, t, "Min Average", ONE_TEMPLATE)
    multi = [
        n
        for n, s in ESTIMATORS.items()
        if s.family in MULTI_TEMPLATE_FAMILIES and n in present and n != "min_average"
    ]
    if not multi:
        return _not_testable(key, t, "Min Average", "no other multi-template estimator to compare with")
    brier = {}
    for name in ["min_average", *multi]:
        g = head.filter(pl.col("estimator") == name)
        brier[name] = METRICS["brier"](g["confidence"].to_numpy(), g["correct"].to_numpy())
    best_other = min(multi, key=lambda n: (brier[n], n))
    d = _paired(head, "min_average", best_other, ["brier"])["brier"]
    ranking = ", ".join(
        f"{_label(n)} {fmt(v)}" for n, v in sorted(brier.items(), key=lambda kv: (kv[1], kv[0]))[:4]
    )
    return [
        Finding(
            key,
            t.model_id,
            f"Brier(Min Average) − Brier({_label(best_other)})",
            difference_verdict(d["ci_low"], d["ci_high"], "negative"),
            d["difference"],
            d["ci_low"],
            d["ci_high"],
            d["n"],
            f"ΔBrier {fmt_ci(d['difference'], d['ci_low'], d['ci_high'])}; lowest Brier: {ranking}",
        )
    ]


def _accuracy_among_answered(correct: np.ndarray, answered: np.ndarray) -> float:
    return float(correct.sum() / answered.sum()) if answered.sum() else math.nan


@claim(
    "vote_trades_coverage_for_accuracy",
    section="2",
    title="Vote(k) trades answers for accuracy: a higher k answers fewer instances, more of them correctly",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Vote(k) abstains unless k templates agree: the more a model's templates "
    "disagree, the faster the answered share falls with k; whether the answers left are more often "
    "right is what is tested.",
    rule="Per k: the answered share and the accuracy among answered instances (Vote(k) Average; an "
    "abstention is no answer). The answered share cannot rise with k (Vote(k+1)'s answers are a subset "
    "of Vote(k)'s). Tested: accuracy among answered at the largest k minus at k = 2, paired bootstrap "
    "over the same resampled instances: holds if the 95 % interval lies above 0, does not hold if "
    "below, else inconclusive.",
    reads="estimates (vote{k}_average, test split, full answer spaces, reduction sum)",
)
def vote_trades_coverage_for_accuracy(t: StoreTables) -> list[Finding]:
    key = "vote_trades_coverage_for_accuracy"
    head = _head(t)
    levels = _vote_levels(_present(head))
    if len(levels) < 2:
        why = (
            ONE_TEMPLATE
            if not levels
            else (
                "two paraphrase templates give one vote level (k = 2): run with --max-templates 3 "
                "or more (default 5)"
            )
        )
        return _not_testable(key, t, "accuracy among answered: Vote(T) − Vote(2)", why)
    wide = None
    for k in levels:
        g = head.filter(pl.col("estimator") == f"vote{k}_average").select(
            "relation_id",
            "instance_id",
            pl.col("correct").cast(pl.Float64).alias(f"correct{k}"),
            (pl.col("predicted_index") != NO_ANSWER).cast(pl.Float64).alias(f"answered{k}"),
        )
        wide = g if wide is None else wide.join(g, on=["relation_id", "instance_id"])
    wide = wide.sort("relation_id", "instance_id")
    column = {c: wide[c].to_numpy() for c in wide.columns if c.startswith(("correct", "answered"))}
    per_k = "; ".join(
        f"k={k}: answered {fmt(column[f'answered{k}'].mean())}, accuracy among answered "
        f"{fmt(_accuracy_among_answered(column[f'correct{k}'], column[f'answered{k}']))}"
        for k in levels
    )
    lo, hi = levels[0], levels[-1]
    res = resample_plan(wide["relation_id"].to_numpy(), N_RESAMPLES, SEED)[0].resamples
    sums = {
        c: _resample_sums(column[c], res)
        for c in (f"correct{lo}", f"answered{lo}", f"correct{hi}", f"answered{hi}")
    }
    with np.errstate(divide="ignore", invalid="ignore"):  # nothing answered in a resample: NaN, left out
        diff = sums[f"correct{hi}"] / sums[f"answered{hi}"] - sums[f"correct{lo}"] / sums[f"answered{lo}"]
    value = _accuracy_among_answered(
        column[f"correct{hi}"], column[f"answered{hi}"]
    ) - _accuracy_among_answered(column[f"correct{lo}"], column[f"answered{lo}"])
    low, high = _interval(diff, value)
    return [
        Finding(
            key,
            t.model_id,
            f"accuracy among answered: Vote({hi}) − Vote({lo})",
            difference_verdict(low, high, "positive"),
            value,
            low,
            high,
            wide.height,
            f"Δaccuracy {fmt_ci(value, low, high)}; {per_k}",
        )
    ]


# --- 3. Markers ----------------------------------------------------------------------------------


@claim(
    "markers_lower_accuracy_raise_ace",
    section="3",
    title="Epistemic markers lower accuracy and raise ACE (marked template against its unmarked parent)",
    paper=KISSLING + " (semantic grounding)",
    setting=KISSLING_SETTING + " They found that even the largest models do not encode what the markers "
    "mean: a change in accuracy (a different sentence) is plausible, a calibration that follows the "
    "marker's meaning is not to be expected.",
    rule="Each marker estimator (Base on the marked variant, stored on its parent template's row) "
    "against Base on the parent, paired on the same (instance, template) pairs of every marked "
    "template: paired bootstrap (relations, then pairs, resampled) of accuracy(marked) − "
    "accuracy(unmarked), claimed < 0, and ACE(marked) − ACE(unmarked), claimed > 0: holds if the 95 % "
    "interval excludes 0 on the claimed side, does not hold if on the other, else inconclusive.",
    reads="estimates (marker_* and base on the marked parents, test split, full answer spaces, "
    "reduction sum), "
    "templates",
)
def markers_lower_accuracy_raise_ace(t: StoreTables) -> list[Finding]:
    key = "markers_lower_accuracy_raise_ace"
    markers = [n for n, s in ESTIMATORS.items() if s.family == "markers"]
    est = t.estimates
    if est.is_empty():
        return _not_testable(key, t, "markers", "no estimates on the test split")
    est = est.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("template_id").is_not_null()
        & pl.col("estimator").is_in([*markers, BASELINE])
    )
    present = [m for m in markers if m in _present(est)]
    if not present:
        return _not_testable(
            key, t, "markers", "no marker templates were scored: run with --template-kinds "
            "curated,question,marker_verbal,marker_numeric"
        )  # fmt: skip
    # A pair (instance, parent template) is the unit, as the template-kind breakdown counts it.
    pairs = est.with_columns(instance_id=pl.col("instance_id") + "|" + pl.col("template_id"))
    out = []
    for m in present:
        d = _paired(pairs, m, BASELINE, ["accuracy", "ace"])
        for metric, claimed, label in (("accuracy", "negative", "accuracy"), ("ace", "positive", "ACE")):
            r = d[metric]
            out.append(
                Finding(
                    key,
                    t.model_id,
                    f"{_label(m)}: {label}(marked) − {label}(unmarked)",
                    difference_verdict(r["ci_low"], r["ci_high"], claimed),
                    r["difference"],
                    r["ci_low"],
                    r["ci_high"],
                    r["n"],
                    f"Δ{label} {fmt_ci(r['difference'], r['ci_low'], r['ci_high'])} over {r['n']} pairs",
                )
            )
    return out


# --- 4. Selective-LAMA ---------------------------------------------------------------------------


@claim(
    "selective_lama_best_function",
    section="4",
    title="The choice of confidence function matters: the one with the lowest AURC beats the runner-up",
    paper="Yoshikawa & Okazaki 2023, Selective-LAMA (Findings of EACL 2023)",
    setting="LAMA's open-vocabulary cloze questions on pretrained language models; their finding is "
    "that the token probability is not always the best confidence function. kcal adapts the functions "
    "to a closed answer set. Ranking confidence functions is a property of the scores, so any model "
    "can show it; with few test instances the best two are seldom separable.",
    rule="AURC (area under risk–coverage, lower is better; Selective-LAMA's RC-AUC) of Base and every "
    "Selective-LAMA function on the headline selection; functions defined on fewer instances than the "
    "others (Token: answer-conditional templates only) are listed, not ranked. Paired bootstrap of "
    "AURC(best) − AURC(runner-up): holds if the 95 % interval lies below 0, else inconclusive (does "
    "not hold if it lies above 0).",
    reads="estimates (base and the selective_lama family, headline selection, test split, full answer "
    "spaces, reduction sum)",
)
def selective_lama_best_function(t: StoreTables) -> list[Finding]:
    key, subject = "selective_lama_best_function", "AURC(best) − AURC(runner-up)"
    head = _head(t)
    names = [n for n, s in ESTIMATORS.items() if (s.family == SELECTIVE_LAMA_FAMILY or n == BASELINE)]
    present = _present(head)
    candidates = {}
    for name in (n for n in names if n in present):
        g = head.filter(pl.col("estimator") == name)
        candidates[name] = (
            METRICS["aurc"](g["confidence"].to_numpy(), g["correct"].to_numpy(), "score"),
            g.height,
        )
    full = max((n for _, n in candidates.values()), default=0)
    ranked = sorted((v, name) for name, (v, n) in candidates.items() if n == full)
    if len(ranked) < 2:
        return _not_testable(key, t, subject, "fewer than two confidence functions on the test instances")
    (_, best), (_, runner) = ranked[0], ranked[1]
    d = _paired(head, best, runner, ["aurc"])["aurc"]
    listing = ", ".join(f"{_label(n)} {fmt(v)}" for v, n in ranked)
    partial = [f"{_label(n)} {fmt(v)} (n = {k})" for n, (v, k) in candidates.items() if k != full]
    note = f"not ranked, defined on fewer instances: {', '.join(partial)}" if partial else ""
    return [
        Finding(
            key,
            t.model_id,
            f"AURC({_label(best)}) − AURC({_label(runner)})",
            difference_verdict(d["ci_low"], d["ci_high"], "negative"),
            d["difference"],
            d["ci_low"],
            d["ci_high"],
            d["n"],
            f"ΔAURC {fmt_ci(d['difference'], d['ci_low'], d['ci_high'])}; AURC: {listing}",
            note,
        )
    ]


# --- 5. MACE -------------------------------------------------------------------------------------

MACE = (
    "Wang et al. 2026, Evaluating and Calibrating LLM Confidence on Questions with Multiple Correct "
    "Answers (MACE, arXiv 2602.07842)"
)
MACE_SETTING = (
    "12,000 open questions in six domains with 1, 2, 4 or 6 correct answers, 15 calibration methods, "
    "four LLM families of 7B to 72B parameters (larger models were affected more). kcal's MACE is a "
    "closed set (the golds plus 5 distractors) scored by likelihood, not by sampling."
)
NO_MACE = "no MACE relation in this store: run kcal demo --relation mace-award (or another mace-* relation)"


def _mace_groups(t: StoreTables) -> dict[int, pl.DataFrame] | str:
    """Base on the headline template of the MACE relations' test questions, by gold count (sorted
    by relation and instance, as resample plans need); or why there are none."""
    head = _head(t)
    if head.is_empty() or t.relations.is_empty() or t.instances.is_empty():
        return NO_MACE
    mace = t.relations.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].to_list()
    rows = head.filter((pl.col("estimator") == BASELINE) & pl.col("relation_id").is_in(mace))
    if rows.is_empty():
        return NO_MACE
    rows = rows.join(
        t.instances.select("relation_id", "instance_id", "n_gold"), on=["relation_id", "instance_id"]
    )
    groups = {int(n): g.sort("relation_id", "instance_id") for (n,), g in rows.group_by("n_gold") if g.height}
    if len(groups) < 2:
        return (
            f"the MACE test questions have one gold count only ({sorted(groups)}): probe more "
            "questions (--max-instances)"
        )
    return dict(sorted(groups.items()))


def _gold_count_trend(t: StoreTables, key: str, column: str, claimed: str, label: str) -> list[Finding]:
    """`column`'s mean (accuracy: correct; confidence) per gold count, and the unpaired bootstrap
    interval of (largest gold count − smallest): each group resampled on its own (relations, then
    questions), the two independent."""
    groups = _mace_groups(t)
    subject = f"{label}: most golds − one gold"
    if isinstance(groups, str):
        return _not_testable(key, t, subject, groups)
    means, resampled = {}, {}
    for n_gold, g in groups.items():
        values = g[column].cast(pl.Float64).to_numpy()
        res = resample_plan(g["relation_id"].to_numpy(), N_RESAMPLES, SEED + n_gold)[0].resamples
        means[n_gold] = float(values.mean())
        resampled[n_gold] = _resample_sums(values, res) / res.sizes
    lo, hi = min(groups), max(groups)
    value = means[hi] - means[lo]
    low, high = _interval(resampled[hi] - resampled[lo], value)
    steps = np.diff([means[n] for n in groups])
    monotone = bool((steps >= 0).all()) if claimed == "positive" else bool((steps <= 0).all())
    per_n = ", ".join(f"{n}: {fmt(means[n])} (n = {groups[n].height})" for n in groups)
    direction = "rises" if claimed == "positive" else "falls"
    return [
        Finding(
            key,
            t.model_id,
            f"{label}: {hi} golds − {lo} gold{'s' if lo > 1 else ''}",
            difference_verdict(low, high, claimed),
            value,
            low,
            high,
            sum(g.height for g in groups.values()),
            f"Δ{label} {fmt_ci(value, low, high)}; by gold count {per_n}",
            f"{label} {direction} at every step (monotone)"
            if monotone
            else f"not monotone: {label} does not {direction[:-1]} at every step",
        )
    ]


MACE_READS = (
    "estimates (base, headline template, MACE relations, test split), probe_instances (n_gold), "
    "relations (domain)"
)
TREND_RULE = (
    "Base on each MACE relation's headline template, test questions grouped by gold count. The "
    "difference largest − smallest gold count with a 95 % interval from an unpaired bootstrap (each "
    "group resampled on its own, relations then questions; different questions, so no pairing): "
    "holds if the interval excludes 0 on the claimed side, does not hold if on the other, else "
    "inconclusive. Whether the sequence over all gold counts is monotone is reported beside it."
)


@claim(
    "mace_accuracy_rises_with_golds",
    section="5",
    title="Accuracy rises as the number of correct answers grows",
    paper=MACE,
    setting=MACE_SETTING + " In a closed set, more golds among the options also raise chance accuracy "
    "(n golds of n + 5 options), so a model near chance shows this rise mechanically.",
    rule=TREND_RULE + " Claimed: > 0.",
    reads=MACE_READS,
)
def mace_accuracy_rises_with_golds(t: StoreTables) -> list[Finding]:
    return _gold_count_trend(t, "mace_accuracy_rises_with_golds", "correct", "positive", "accuracy")


@claim(
    "mace_confidence_falls_with_golds",
    section="5",
    title="Confidence in the top answer falls as the number of correct answers grows",
    paper=MACE,
    setting=MACE_SETTING + " The fall needs a model that spreads its probability over the several "
    "correct answers; a model that does not know them may not spread it, so the effect can be absent.",
    rule=TREND_RULE + " Confidence = Base's mean confidence. Claimed: < 0.",
    reads=MACE_READS,
)
def mace_confidence_falls_with_golds(t: StoreTables) -> list[Finding]:
    return _gold_count_trend(t, "mace_confidence_falls_with_golds", "confidence", "negative", "confidence")


@claim(
    "sca_tau0_as_good_as_tuned",
    section="5",
    title="SCA with τ = 0 is as good as SCA with τ tuned on the dev split",
    paper=MACE,
    setting=MACE_SETTING + " The claim is about the threshold, not the model: it can be tested at any "
    "size, but the tuned τ is fitted on a fifth of a small probe.",
    rule=f"Non-inferiority on the Brier score (the criterion τ is tuned on), margin {BRIER_MARGIN}: paired "
    "bootstrap of Brier(SCA tuned) − Brier(SCA τ = 0) on the same test questions; holds if the 95 % "
    f"interval's lower end is ≥ −{BRIER_MARGIN} (tuning gains at most {BRIER_MARGIN}), does not hold if "
    f"its upper end is < −{BRIER_MARGIN} (tuning clearly helps), else inconclusive. ΔACE is shown beside it.",
    reads="estimates (sca_tau0, sca_tuned: instance grain, reduction answer_sum, test split, full "
    "answer spaces)",
)
def sca_tau0_as_good_as_tuned(t: StoreTables) -> list[Finding]:
    key, subject = "sca_tau0_as_good_as_tuned", "Brier(SCA tuned) − Brier(SCA τ = 0)"
    head = _head(t, reduction=None)
    present = _present(head)
    if not {"sca_tau0", "sca_tuned"} <= present:
        why = (
            "no SCA estimates: SCA needs answer-conditional question templates on a MACE relation "
            "(--relation mace-award with --template-kinds including question)"
            if "sca_tau0" not in present
            else "no SCA (τ tuned): it needs a dev split (--dev-fraction > 0)"
        )
        return _not_testable(key, t, subject, why)
    d = _paired(head, "sca_tuned", "sca_tau0", ["brier", "ace"])
    b = d["brier"]
    if b["ci_low"] >= -BRIER_MARGIN:
        verdict = HOLDS
    elif b["ci_high"] < -BRIER_MARGIN:
        verdict = FAILS
    else:
        verdict = INCONCLUSIVE
    if math.isnan(b["ci_low"]) or math.isnan(b["ci_high"]):
        verdict = INCONCLUSIVE
    compared = sorted(set(head.filter(pl.col("estimator") == "sca_tuned")["relation_id"].to_list()))
    notes = [f"compared on {', '.join(compared)}"]
    if not t.relations.is_empty():
        mace = set(t.relations.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].to_list())
        if not mace & set(compared):
            notes.append("no MACE relation among them (SCA τ tuned needs dev questions there)")
    fitted = _fits_of(t.fits, "sca_tuned", "answer_sum")
    if fitted_note := _dev_size_note(t.fits, "sca_tuned", "answer_sum"):
        notes.append(fitted_note)
    taus = fitted.filter(pl.col("parameter") == "tau")["value"] if not fitted.is_empty() else pl.Series([])
    if taus.len() and (taus == 0).all():
        notes.append("τ was tuned to 0 everywhere, so both are the same estimator here")
    a = d.get("ace")
    ace = f"; ΔACE {fmt_ci(a['difference'], a['ci_low'], a['ci_high'])}" if a else ""
    if failed := few_dev_precondition(t.fits, "sca_tuned", "answer_sum"):
        shown = f"ΔBrier {fmt_ci(b['difference'], b['ci_low'], b['ci_high'])}{ace}"
        return _not_testable(key, t, subject, f"{failed} ({shown}; {'; '.join(notes)})")
    return [
        Finding(
            key,
            t.model_id,
            subject,
            verdict,
            b["difference"],
            b["ci_low"],
            b["ci_high"],
            b["n"],
            f"ΔBrier {fmt_ci(b['difference'], b['ci_low'], b['ci_high'])}{ace}",
            "; ".join(notes),
        )
    ]


# --- 6. Consistency ------------------------------------------------------------------------------


@claim(
    "consistency_far_from_one",
    section="6",
    title="A probe's accept/reject decisions are far from consistent under a typo or a one-shot "
    "prefix: IoU_cons far from 1",
    paper="Zhao et al. 2025, Do We Know What LLMs Don't Know? A Study of Consistency in Knowledge "
    "Probing (arXiv 2505.21701)",
    setting="Multiple-choice MMLU and HellaSwag on 7–8B LLMs (Mistral, Llama 3, OLMo), six probing "
    "methods; minimal prompt changes cut intra-method consistency sharply (shuffled options: agreement "
    "near 40 %).",
    rule=f"Base's intra-method rows of the consistency table (headline template against the variant, "
    f"thresholds tuned on dev, all relations pooled), one IoU_cons per draw (the typo once per "
    f"perturbation seed; the one-shot prefix, the fixed knowledge-free demonstration context-fixed, "
    f"once): holds (far from 1) if every draw's IoU_cons is < "
    f"{FAR_FROM_ONE}, does not hold if every draw's is ≥ {FAR_FROM_ONE}, else inconclusive; an undefined "
    "IoU_cons (an empty accepted or rejected set) is inconclusive. The mean and spread over seeds are shown.",
    reads="consistency (kind intra, estimator base, reduction sum, relation_id null, statistic value)",
)
def consistency_far_from_one(t: StoreTables) -> list[Finding]:
    key = "consistency_far_from_one"
    c = t.consistency
    if c.is_empty():
        return [
            Finding(
                key,
                t.model_id,
                f"IoU_cons, {s}",
                NOT_TESTABLE,
                note="no consistency table: materialize it (kcal demo)",
            )
            for s in CONSISTENCY_SETUPS
        ]
    rows = c.filter(
        (pl.col("kind") == "intra")
        & (pl.col("estimator_a") == BASELINE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("relation_id").is_null()
        & (pl.col("statistic") == "value")
    )
    out = []
    for setup, kind in CONSISTENCY_SETUPS.items():
        subject = f"IoU_cons, {setup}"
        g = rows.filter(pl.col("setup_b") == setup).sort("seed", nulls_last=True)
        if g.is_empty():
            out += _not_testable(
                key, t, subject, f"no {setup} variants were scored: run with --template-kinds "
                f"curated,question,{kind}"
            )  # fmt: skip
            continue
        values = g["iou_cons"].to_numpy().astype(np.float64)
        seeds = g["seed"].to_list()
        draws = ", ".join(  # a setup that is not drawn (context-fixed) has one row, seed null
            f"{'not drawn' if s is None else f'seed {s}'}: {fmt(v)}"
            for s, v in zip(seeds, values, strict=True)
        )
        undefined = int(np.isnan(values).sum())
        notes = [
            *([f"IoU_cons undefined on {undefined} draw(s): nothing rejected (or accepted) in both setups"]
              if undefined else []),
            *(["a threshold fell back to 0.5 (degenerate on dev)"]
              if g["fallback_a"].any() or g["fallback_b"].any() else []),
        ]  # fmt: skip
        if np.isnan(values).any():
            verdict = INCONCLUSIVE
        elif (values < FAR_FROM_ONE).all():
            verdict = HOLDS
        elif (values >= FAR_FROM_ONE).all():
            verdict = FAILS
        else:
            verdict = INCONCLUSIVE
        finite = values[~np.isnan(values)]
        mean = float(finite.mean()) if finite.size else math.nan
        spread = f", std {fmt(float(finite.std(ddof=1)))}" if finite.size > 1 else ""
        out.append(
            Finding(
                key,
                t.model_id,
                subject,
                verdict,
                mean,
                float(finite.min()) if finite.size else math.nan,
                float(finite.max()) if finite.size else math.nan,
                int(g["n"].max()),
                f"IoU_cons mean {fmt(mean)}{spread} over {len(values)} draw(s) ({draws}); "
                f"DecCons mean {fmt(float(np.nanmean(g['dec_cons'].to_numpy().astype(np.float64))))}",
                "; ".join(notes),
            )
        )
    return out


# --- 7. What kcal adds ---------------------------------------------------------------------------


@claim(
    "recalibration_lowers_ace",
    section="7",
    title="Recalibrating Base on the dev split lowers its test ACE",
    paper="kcal; temperature scaling (Guo et al. 2017), Platt scaling (Platt 1999), isotonic "
    "regression (Zadrozny & Elkan 2002)",
    setting="Not a claim of the seed papers: what kcal adds. A fit on the dev split corrects a "
    "systematic over- or underconfidence at any model size, given enough dev instances.",
    rule="Paired bootstrap (metric_differences) of ACE(recalibrated Base) − ACE(Base) per method: holds "
    "if the 95 % interval lies below 0, does not hold if above, else inconclusive.",
    reads="metric_differences (base_temperature, base_platt, base_isotonic − base, ace, scope all, "
    "test split, reduction sum)",
)
def recalibration_lowers_ace(t: StoreTables) -> list[Finding]:
    key = "recalibration_lowers_ace"
    out = []
    for name in RECALIBRATED:
        subject = f"ACE({_label(name)}) − ACE(Base)"
        row = _difference(t, name, "ace")
        if row is None:
            out += _not_testable(
                key, t, subject, f"no {name} − base row in metric_differences: {name} wrote no test rows; "
                "it is fitted on the dev split (--dev-fraction > 0, dev instances in each relation); "
                f"estimator_status says why per relation (kcal sql \"select * from estimator_status where "
                f"estimator = '{name}'\")"
            )  # fmt: skip
            continue
        if failed := few_dev_precondition(t.fits, name):
            shown = f"ΔACE {fmt_ci(row['difference'], row['ci_low'], row['ci_high'])}"
            out += _not_testable(key, t, subject, f"{failed} ({shown}; {_dev_size_note(t.fits, name)})")
            continue
        out.append(
            Finding(
                key,
                t.model_id,
                subject,
                difference_verdict(row["ci_low"], row["ci_high"], "negative"),
                row["difference"],
                row["ci_low"],
                row["ci_high"],
                row["n"],
                f"ΔACE {fmt_ci(row['difference'], row['ci_low'], row['ci_high'])}",
                _dev_size_note(t.fits, name),
            )
        )
    return out


# Fewer dev instances per fit than this and a recalibration is fitted to noise: the note says so.
FEW_DEV = 20


def _fits_of(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> pl.DataFrame:
    """The estimator's dev-split fits under one reduction, full answer spaces."""
    if fits.is_empty():
        return fits
    return fits.filter(
        (pl.col("estimator") == estimator)
        & (pl.col("reduction") == reduction)
        & (pl.col("answer_space_k") == 0)
    )


def _dev_size_note(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> str:
    """How many dev instances the estimator's fits saw (one reduction, full answer spaces), how
    many temperatures ended on a bound and which τ were tuned: a fit on a handful of instances
    explains a recalibration that makes ACE worse, or a tuned τ equal to τ = 0."""
    own = _fits_of(fits, estimator, reduction)
    if own.is_empty():
        return ""
    per_relation = own.group_by("relation_id").agg(pl.col("n_dev").max())
    low, high = int(per_relation["n_dev"].min()), int(per_relation["n_dev"].max())
    note = (
        f"fitted per relation on {low}–{high} dev instances"
        if low != high
        else f"fitted on {low} dev instances per relation"
    )
    temperatures = own.filter(pl.col("parameter") == "temperature")["value"]
    if temperatures.len():
        at_bound = int(temperatures.is_in(list(TEMPERATURE_BOUNDS)).sum())
        note += f"; temperature on a bound {TEMPERATURE_BOUNDS} in {at_bound} of {temperatures.len()} fits"
    taus = own.filter(pl.col("parameter") == "tau")["value"]
    if taus.len():
        note += f"; tuned τ {', '.join(fmt(v) for v in sorted(set(taus.to_list())))}"
    if high < FEW_DEV:
        note += (
            f": fewer than {FEW_DEV} dev instances per fit, so the fit follows noise "
            "(raise --max-instances or --dev-fraction)"
        )
    return note


def few_dev_precondition(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> str:
    """The failed precondition of a claim behind a fitted parameter (temperature, Platt, isotonic,
    τ): every relation's fit saw fewer than FEW_DEV dev instances, so the comparison reads a fit
    to noise; "" when the fits are large enough or there are none to judge."""
    own = _fits_of(fits, estimator, reduction)
    if own.is_empty():
        return ""
    most = int(own["n_dev"].max())
    if most >= FEW_DEV:
        return ""
    return (
        f"too few dev instances: {estimator} was fitted on at most {most} per relation, fewer than "
        f"{FEW_DEV} (raise --max-instances or --dev-fraction)"
    )


@claim(
    "model_beats_answer_prior",
    section="7",
    title="The model reads the subject: Base is more accurate than the answer-prior null model",
    paper="kcal (null model: Base with the subject masked, as TemplateDiff masks it in Yoshikawa "
    "& Okazaki 2023)",
    setting="Not a claim of the seed papers. The null model shows how much of the accuracy the prior "
    "over answers alone gives; the less a model knows, the more it leans on that prior.",
    rule="Paired bootstrap (metric_differences) of accuracy(answer prior) − accuracy(Base): holds if the "
    "95 % interval lies below 0, does not hold if above, else inconclusive. The null model's share of "
    "the accuracy (accuracy(answer prior) / accuracy(Base)) is shown beside it.",
    reads="metric_differences (answer_prior − base, accuracy), metrics (both accuracies)",
)
def model_beats_answer_prior(t: StoreTables) -> list[Finding]:
    key, subject = "model_beats_answer_prior", "accuracy(answer prior) − accuracy(Base)"
    row = _difference(t, "answer_prior", "accuracy")
    if row is None:
        return _not_testable(
            key,
            t,
            subject,
            "no answer-prior estimates: score with the subject masked (kcal demo --subject-mask)",
        )
    acc = {e: _metric(t, e, "accuracy") for e in (BASELINE, "answer_prior")}
    share = ""
    if all(acc.values()) and acc[BASELINE]["value"]:
        share = (
            f"; share of accuracy {fmt(acc['answer_prior']['value'] / acc[BASELINE]['value'])} "
            f"({fmt(acc['answer_prior']['value'])} / {fmt(acc[BASELINE]['value'])})"
        )
    return [
        Finding(
            key,
            t.model_id,
            subject,
            difference_verdict(row["ci_low"], row["ci_high"], "negative"),
            row["difference"],
            row["ci_low"],
            row["ci_high"],
            row["n"],
            f"Δaccuracy {fmt_ci(row['difference'], row['ci_low'], row['ci_high'])}{share}",
        )
    ]


@claim(
    "ace_depends_on_bins",
    section="7",
    title=f"The bin count alone moves ACE by more than its 95 % interval spans "
    f"({min(BIN_SWEEP)}–{max(BIN_SWEEP)} bins)",
    paper="kcal; ACE as in Nixon et al. 2019 with the seeds' 20 quantile bins",
    setting="Not a claim of the seed papers: the papers fix 20 bins. On a few hundred test instances a "
    "bin holds a handful of them, so the bin count can matter at any model size.",
    rule="Per main estimator: the range (max − min) of ACE over "
    f"{', '.join(map(str, sorted((*BIN_SWEEP, BINS))))} "
    f"quantile bins against the width of the {BINS}-bin ACE's 95 % bootstrap interval: holds if the "
    "range exceeds the width, does not hold otherwise.",
    reads=f"metrics (ace, ace_b{{{','.join(map(str, BIN_SWEEP))}}}, scope all, test split, reduction sum)",
)
def ace_depends_on_bins(t: StoreTables) -> list[Finding]:
    key = "ace_depends_on_bins"
    out = []
    for spec in summary_estimators():
        subject = f"ACE range over bin counts, {spec.label}"
        ace = _metric(t, spec.name, "ace")
        sweep = {b: _metric(t, spec.name, f"ace_b{b}") for b in BIN_SWEEP}
        if ace is None or not all(sweep.values()):
            out += _not_testable(
                key,
                t,
                subject,
                f"the metrics table lacks {spec.name}'s ACE bin sweep: materialize metrics (kcal demo)",
            )
            continue
        values = {BINS: ace["value"], **{b: r["value"] for b, r in sweep.items()}}
        spread = max(values.values()) - min(values.values())
        width = (
            (ace["ci_high"] - ace["ci_low"])
            if ace["ci_low"] is not None and ace["ci_high"] is not None
            else math.nan
        )
        verdict = INCONCLUSIVE if math.isnan(width) else (HOLDS if spread > width else FAILS)
        listing = ", ".join(f"{b}: {fmt(v)}" for b, v in sorted(values.items()))
        out.append(
            Finding(
                key,
                t.model_id,
                subject,
                verdict,
                spread,
                n=ace["n"],
                numbers=f"range {fmt(spread)} against interval width {fmt(width)} "
                f"(ACE {fmt_ci(ace['value'], ace['ci_low'], ace['ci_high'])}); ACE by bins {listing}",
            )
        )
    return out


# --- all claims, the store, the document ---------------------------------------------------------


# The claims whose rows are differences tested against 0 by difference_verdict: an inconclusive one
# shows its MDE, and several rows of one claim on one model form a Holm–Bonferroni family.
DIFFERENCE_CLAIMS = (
    "margin_lowers_ace",
    "min_average_best_brier",
    "vote_trades_coverage_for_accuracy",
    "markers_lower_accuracy_raise_ace",
    "selective_lama_best_function",
    "mace_accuracy_rises_with_golds",
    "mace_confidence_falls_with_golds",
    "recalibration_lowers_ace",
    "model_beats_answer_prior",
)
# The paper's own effect size per claim, in the finding's units, where the paper states one.
PAPER_EFFECTS: dict[str, float] = {}


def evaluate_claims(models: Sequence[StoreTables], claims: Iterable[str] | None = None) -> list[Finding]:
    """Every registered claim (or the named ones) on every model, in registry then model order;
    difference claims Holm-adjusted within each model's family, inconclusive ones with their MDE."""
    keys = list(CLAIMS) if claims is None else list(claims)
    unknown = [k for k in keys if k not in CLAIMS]
    if unknown:
        raise ValueError(f"unknown claim(s) {unknown}; known: {list(CLAIMS)}")
    out = []
    for k in keys:
        for t in models:
            rows = CLAIMS[k].fn(t)
            if k in DIFFERENCE_CLAIMS:
                rows = [_with_power(f, PAPER_EFFECTS.get(k)) for f in holm_family(rows)]
            out += rows
    return out


def store_models(home: Path) -> list[str]:
    """The model keys that have a metrics table in the store."""
    return sorted(
        p.parent.name.split("=", 1)[1] for p in (Path(home) / "metrics").glob("model=*/part.parquet")
    )


def _relation_partitions(home: Path, table: str, key: str | None = None) -> list[dict[str, str]]:
    base = Path(home) / table / (f"model={key}" if key else "")
    parts = []
    for p in sorted(base.glob("relation=*/part.parquet")):
        partition = {"relation": p.parent.name.split("=", 1)[1]}
        parts.append({"model": key, **partition} if key else partition)
    return parts


def _optional(home: Path, table: str, key: str) -> pl.DataFrame:
    """A model-partitioned table, or an empty frame where the store has none for the model."""
    try:
        return read_partition(home, table, {"model": key})
    except FileNotFoundError:
        return pl.DataFrame()


# The estimates columns the claims read (predicted_id is not needed).
ESTIMATE_COLUMNS = tuple(c for c in OUTPUT_SCHEMA if c != "predicted_id")


# The reductions the claims read: the headline one, and SCA's own.
CLAIMED_REDUCTIONS = (REDUCTION, "answer_sum")


def _claimed_estimates(home: Path, partition: dict[str, str]) -> pl.DataFrame:
    """One estimates partition, only the rows the claims read (test split, full answer spaces,
    CLAIMED_REDUCTIONS), filtered while scanning: a store with every template kind holds millions
    of estimate rows per model. A damaged file is named with how to rebuild it, as storage does."""
    path = partition_path(home, "estimates", partition)
    try:
        present = pl.read_parquet_schema(path)
        return (
            pl.scan_parquet(path)
            .select([c for c in ESTIMATE_COLUMNS if c in present])
            .filter(
                (pl.col("split") == HEADLINE_SPLIT)
                & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
                & pl.col("reduction").is_in(CLAIMED_REDUCTIONS)
            )
            .collect()
        )
    except (OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadFileError(
            f"{path}: not a readable Parquet file ({reason}); {rebuild_hint('estimates', partition)}"
        ) from exc


def read_store_tables(home: Path, models: Sequence[str] | None = None) -> list[StoreTables]:
    """Each model's tables (every model with metrics, or the given keys or ids), read from the
    store's Parquet files; estimates kept on the test split and full answer spaces only."""
    home = Path(home)
    keys = store_models(home)
    if not keys:
        raise FileNotFoundError(f"{home}: no metrics table; run kcal demo (with --home {home}) first")
    wanted = list(dict.fromkeys(model_key(m) for m in models)) if models else keys
    unknown = [m for m in wanted if m not in keys]
    if unknown:
        raise ValueError(
            f"--model {', '.join(unknown)}: no metrics for it in {home}; models in the store: "
            f"{', '.join(keys)}"
        )
    templates = read_partition(home, "templates")
    relations = _optional_unpartitioned(home, "relations", ["relation_id", "domain"])
    instance_parts = _relation_partitions(home, "probe_instances")
    instances = (
        read_partitions(home, "probe_instances", instance_parts, ["relation_id", "instance_id", "n_gold"])
        if instance_parts
        else pl.DataFrame()
    )
    out = []
    for key in wanted:
        metrics = read_partition(home, "metrics", {"model": key})
        parts = _relation_partitions(home, "estimates", key)
        estimates = (
            pl.concat([_claimed_estimates(home, p) for p in parts], how="diagonal_relaxed")
            if parts
            else pl.DataFrame()
        )
        fit_parts = _relation_partitions(home, "estimator_fits", key)
        out.append(
            StoreTables(
                model_id=metrics["model_id"][0] if metrics.height else key,
                fits=read_partitions(home, "estimator_fits", fit_parts, FIT_COLUMNS)
                if fit_parts
                else pl.DataFrame(),
                metrics=metrics,
                differences=_optional(home, "metric_differences", key),
                consistency=_optional(home, "consistency", key),
                estimates=estimates,
                templates=templates,
                instances=instances,
                relations=relations,
            )
        )
    return out


def _optional_unpartitioned(home: Path, table: str, columns: Sequence[str]) -> pl.DataFrame:
    try:
        return read_partition(home, table, columns=columns)
    except FileNotFoundError:
        return pl.DataFrame()


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _shown_verdict(f: Finding) -> str:
    """The verdict as a cell: not testable with its failed precondition, inconclusive with its MDE."""
    if f.verdict == NOT_TESTABLE:
        return f"{NOT_TESTABLE} on this store: {f.note}"
    if f.verdict == INCONCLUSIVE and not math.isnan(f.mde):
        return f"**{f.verdict}** (MDE {fmt(f.mde)})"
    return f"**{f.verdict}**"


def _here(findings: list[Finding], models: Sequence[str]) -> str:
    """One sentence per model on what this store shows for a claim."""
    parts = []
    for model in models:
        verdicts = [f.verdict for f in findings if f.model_id == model]
        counts = {v: verdicts.count(v) for v in VERDICTS if v in verdicts}
        if set(counts) == {HOLDS}:
            what = "the effect is present"
        elif set(counts) == {NOT_TESTABLE}:
            what = "it cannot be tested on this store"
        elif set(counts) == {FAILS}:
            what = "the claim does not hold here (the opposite is shown)"
        elif HOLDS in counts:
            what = "the effect is present in part"
        elif FAILS in counts:
            what = "the claim does not hold in part, the rest is inconclusive or not testable"
        else:
            what = "inconclusive at this sample size"
        listing = ", ".join(f"{n} {v}" for v, n in counts.items())
        parts.append(f"{model}: {what} ({listing}).")
    return " ".join(parts)


# --- provenance --------------------------------------------------------------------------------

# A GGUF file's quantization type as its name states it (llama.cpp's naming: …Q4_1.gguf, …F16.gguf).
_GGUF_TYPE = re.compile(r"[.-]((?:I?Q\d\w*)|BF16|F16|F32)\.gguf$", re.IGNORECASE)
_INSTRUCT = re.compile(r"instruct|chat|[-_]it(?:\b|[-_])|sft", re.IGNORECASE)


def model_provenance(entry: ModelEntry | None, model_id: str) -> str:
    """What the numbers were computed with, read from the model's registry entry: file, quantization
    and dtype (a GGUF is de-quantised to float32 by scoring.models.gguf), instruct or base (from
    the id's naming, e.g. '-Instruct', '-it', '-chat'). No entry: the model left the registry."""
    if entry is None:
        return f"`{model_id}`: not in the store's model registry (file, dtype unknown)"
    if entry.source == "gguf_package":
        where, gguf = f"{entry.file} from the Python package {entry.package}", entry.file
    elif entry.source == "gguf_file":
        where, gguf = str(entry.path), str(entry.path)
    elif entry.source == "hf":
        where, gguf = f"hub {entry.id} at revision {entry.revision}", None
    else:
        where, gguf = str(entry.path), None
    if gguf:
        kind = _GGUF_TYPE.search(gguf)
        weights = f"GGUF {kind[1].upper() if kind else 'of unstated type'}, de-quantised to float32"
    else:
        weights = f"not quantized, {entry.dtype}"
    tuned = "instruction-tuned" if _INSTRUCT.search(entry.id) else "base (no instruct/chat/-it in the id)"
    return f"`{entry.id}` ({entry.kind}): {where}; {weights}; {tuned}"


def kcal_commit(root: Path | None = None) -> str:
    """The checkout's commit (with '+changes' when the tree differs from it), 'unknown' outside one."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{'+changes' if dirty else ''}" if head else "unknown"


def store_data_version(home: Path) -> str:
    """One hash over every stored partition's data version (core.versions, in the Parquet metadata)
    and its path: equal hashes mean the findings read the same data."""
    home = Path(home)
    pairs = sorted(
        (str(p.relative_to(home)), stored_version(p) or "unreadable") for p in home.rglob("part.parquet")
    )
    if not pairs:
        return "no partitions"
    digest = hashlib.sha256("\n".join(f"{path} {version}" for path, version in pairs).encode())
    return f"{digest.hexdigest()[:20]} over {len(pairs)} partitions"


def machine_description() -> str:
    """CPU cores and model, and the GPUs nvidia-smi lists (none without it)."""
    cpu = platform.processor() or platform.machine()
    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    except OSError:
        pass
    gpus = "none detected"
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.split("\n")  # fmt: skip
            gpus = ", ".join(g.strip() for g in listed if g.strip()) or gpus
        except (OSError, subprocess.SubprocessError):
            pass
    return f"{os.cpu_count()} CPU cores ({cpu}); GPU: {gpus}"


def provenance(
    home: Path,
    models: Sequence[str],
    entries: Mapping[str, ModelEntry | None],
    command: Sequence[str],
    *,
    commit: str | None = None,
    machine: str | None = None,
    when: datetime | None = None,
) -> list[str]:
    """The document's header lines: each model as its registry entry describes it, the kcal commit,
    the store's data version, the exact command, date and machine. `commit`, `machine`, `when`
    default to this checkout, this machine and now (tests pin them)."""
    when = when or datetime.now(UTC)
    lines = [f"- Model {model_provenance(entries.get(m), m)}" for m in models]
    return [
        *lines,
        f"- kcal commit: {commit or kcal_commit()}",
        f"- Store: `{home}`, data version {store_data_version(home)}",
        f"- Command: `{shlex.join(command)}`",
        f"- Date: {when.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {machine or machine_description()}",
    ]


def describe_sample(t: StoreTables) -> str:
    """What one model's findings rest on: test instances per relation, paraphrase templates, the
    template kinds scored (what makes a claim testable or not)."""
    head = _head(t)
    base = head.filter(pl.col("estimator") == BASELINE) if not head.is_empty() else head
    if base.is_empty():
        return "no test-split estimates"
    per_relation = base.group_by("relation_id").len().sort("relation_id")
    counts = ", ".join(f"{r} {n}" for r, n in per_relation.iter_rows())
    counts += f"; {per_relation.height} relation clusters (the bootstrap's resampling units)"
    scored = t.estimates.filter(pl.col("estimator") == BASELINE).select("relation_id", "template_id").unique()
    kinds = scored.join(
        t.templates.select("relation_id", "template_id", "kind"), on=["relation_id", "template_id"]
    )
    levels = _vote_levels(_present(head))
    scored_kinds = ", ".join(sorted(kinds["kind"].unique().to_list()))
    return (
        f"test instances {base.height} ({counts}); paraphrase templates per instance: up to "
        f"{max(levels, default=1)}; template kinds scored: {scored_kinds}"
    )


def render_findings(
    findings: Sequence[Finding],
    models: Sequence[str],
    samples: Mapping[str, str] | None = None,
    header: Sequence[str] | None = None,
) -> str:
    """The findings document (Markdown): its provenance (`header`: provenance's lines), the verdict
    rule, what each model's findings rest on (`samples`: model → describe_sample), a summary table
    (claim, model, verdict, numbers), then one section per claim group with each claim's source,
    the paper's setting, the test and the rows."""
    by_claim: dict[str, list[Finding]] = {}
    for f in findings:
        by_claim.setdefault(f.claim, []).append(f)
    lines = [
        "# Findings: the seed papers' claims re-tested",
        "",
        "Generated by `kcal findings` from the tables of a kcal store; models: "
        + ", ".join(f"`{m}`" for m in models)
        + ". Every number is on the test split and full answer spaces (the dev split only tunes "
        "thresholds and recalibration), reduction Sum unless a claim says otherwise. Regenerate "
        "after a run: `kcal findings --out docs/findings.md`.",
        "",
        *(["**Provenance.**", "", *header, ""] if header else []),
        "**Verdicts.** A claim about a difference **holds** when the 95 % interval of the difference "
        "(a paired bootstrap where both sides are on the same instances: the same resamples for both, "
        f"relations then instances drawn, B = {N_RESAMPLES}, seed {SEED}) excludes 0 in the claimed "
        "direction, **does not hold** when it excludes 0 in the other direction, and is **inconclusive "
        "at this sample size** otherwise; an inconclusive difference shows its minimum detectable "
        "effect (MDE = (z₀.₉₇₅ + z₀.₈₀) · sd, sd = interval width / (2 · 1.96): the smallest effect this "
        "n finds with 80 % power) and, where the paper states its effect, whether that lies inside the "
        "interval. Several comparisons of one claim on one model are Holm–Bonferroni adjusted (p from "
        "each interval by the normal approximation); a verdict that does not survive becomes "
        "inconclusive. A claim that is not a difference states its numeric criterion in its section. "
        "**Not testable on this store** names the precondition that failed (e.g. fewer than "
        f"{FEW_DEV} dev instances behind a fitted parameter) and which setting would enable it.",
        "",
        *(f"- `{m}`: {samples[m]}" for m in models if samples and m in samples),
        *([""] if samples else []),
        "## Summary",
        "",
    ]
    summary = []
    for key, claim_ in CLAIMS.items():
        for f in by_claim.get(key, []):
            numbers = f.numbers.split("; ")[0] if f.verdict != NOT_TESTABLE else ""
            summary.append(
                (f"{claim_.section}. {claim_.title}", f.model_id, f.subject, _shown_verdict(f), numbers)
            )
    lines += _table(["claim", "model", "compared", "verdict", "number [95 % interval]"], summary)
    for section, title in SECTIONS.items():
        lines += ["", f"## {section}. {title}"]
        for key, claim_ in CLAIMS.items():
            if claim_.section != section:
                continue
            rows = by_claim.get(key, [])
            lines += [
                "",
                f"### {claim_.title}",
                "",
                f"- **Source.** {claim_.paper}.",
                f"- **The paper's setting.** {claim_.setting}",
                f"- **Test.** {claim_.rule}",
                f"- **Reads.** {claim_.reads}.",
                f"- **Here.** {_here(rows, models)}",
                "",
            ]
            lines += _table(
                ["model", "compared", "verdict", "numbers", "note"],
                [
                    (
                        f.model_id,
                        f.subject,
                        _shown_verdict(f),
                        f.numbers,
                        f.note if f.verdict != NOT_TESTABLE else "",
                    )
                    for f in rows
                ],
            )
    return "\n".join(lines) + "\n"
