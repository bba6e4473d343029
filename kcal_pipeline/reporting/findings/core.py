"""The claims' machinery: one Claim spec per claim in a registry, the verdict rules, power,
multiplicity and the ACE noise floor; the papers' modules register their claims here.

A claim is data (paper, table or figure, the paper's setting and number with the model it was
measured on, the comparison, the test, its preconditions, the profile stage whose store it reads)
plus one small function that reads one model's tables (`StoreTables`) and returns `Finding` rows.

Verdicts (VERDICTS): a claim about a difference **holds** when the 95 % interval of the (paired
where possible) difference excludes 0 in the claimed direction, **does not hold** when it excludes 0
in the other direction, and is **inconclusive at this sample size** otherwise. A claim that is not
a difference states its numeric criterion. A claim the store cannot test says which precondition
failed and which setting would enable it, never a made-up verdict.

Intervals come from kcal_pipeline.evaluation.bootstrap (the same seeded resample plans and
bias-corrected intervals as the metrics tables). An inconclusive difference carries its minimum
detectable effect; several comparisons of one claim on one model are Holm–Bonferroni adjusted
(evaluate_claims); simulated_ace_floor draws seeded calibrated outcomes for the ACE a perfectly
calibrated scorer would show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from kcal_pipeline.estimation.fitting import TEMPERATURE_BOUNDS
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    headline_template_estimates,
)
from kcal_pipeline.evaluation.bootstrap import (
    N_RESAMPLES,
    PAD,
    Resamples,
    bias_corrected_interval,
    paired_differences,
    resample_plan,
)
from kcal_pipeline.evaluation.calibration import BINS, _bin_ids

if TYPE_CHECKING:
    pass

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
class Paper:
    """A seed paper: its number in the seed list (000 … 004; "kcal" for what kcal adds), the short
    name the document's section carries, and the full citation."""

    seed: str
    short: str
    citation: str


@dataclass(frozen=True)
class PaperNumber:
    """What the paper reports for a claim, in the finding's metric and unit where it gives one:
    `text` as the document shows it, `model` the model(s) it was measured on, `effect` the number
    in the finding's unit (None where the paper states none): an inconclusive verdict says whether
    it lies inside kcal's interval."""

    text: str
    model: str = ""
    effect: float | None = None

    def shown(self) -> str:
        return f"{self.text} ({self.model})" if self.model else self.text


NO_NUMBER = PaperNumber("no number stated")
DIFFERENCE, CRITERION = "difference", "criterion"


@dataclass(frozen=True)
class Claim:
    """One claim of a seed paper, as data: where it comes from (paper, table or figure), the
    paper's setting and number, the comparison (`title`), the test (`rule`, a difference against 0
    or a stated criterion: `kind`), its preconditions, the tables it reads and the profile `stage`
    whose store decides it (kcal findings --build); `fn` computes its rows on one model."""

    key: str
    paper: Paper
    where: str
    title: str
    setting: str
    rule: str
    reads: str
    fn: ClaimFn
    stage: str = "bear"
    kind: str = DIFFERENCE
    number: PaperNumber = NO_NUMBER
    preconditions: tuple[str, ...] = ()


CLAIMS: dict[str, Claim] = {}
PAPERS: dict[str, Paper] = {}


def ordered_claims() -> list[Claim]:
    """The claims in document order: by paper (seed 000 … 004, then kcal's own), each paper's in
    the order its module registers them."""
    return sorted(CLAIMS.values(), key=lambda c: c.paper.seed)


def claim(
    key: str,
    *,
    paper: Paper,
    where: str,
    title: str,
    setting: str,
    rule: str,
    reads: str,
    stage: str = "bear",
    kind: str = DIFFERENCE,
    number: PaperNumber = NO_NUMBER,
    preconditions: Sequence[str] = (),
):
    """Register a claim; a second one under the same key, or an unknown kind, is a bug."""

    def add(fn: ClaimFn) -> ClaimFn:
        if key in CLAIMS:
            raise ValueError(f"claim {key!r} is already registered")
        if kind not in (DIFFERENCE, CRITERION):
            raise ValueError(f"claim {key!r}: kind {kind!r} is not one of {[DIFFERENCE, CRITERION]}")
        PAPERS.setdefault(paper.seed, paper)
        CLAIMS[key] = Claim(
            key, paper, where, title, setting, rule, reads, fn, stage, kind, number, tuple(preconditions)
        )
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


def estimator_label(estimator: str) -> str:
    spec = ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def not_testable(key: str, t: StoreTables, subject: str, why: str) -> list[Finding]:
    return [Finding(key, t.model_id, subject, NOT_TESTABLE, note=why)]


def interval_finding(
    key: str,
    t: StoreTables,
    subject: str,
    claimed: str,
    value: float,
    low: float,
    high: float,
    n: int | None,
    prefix: str,
    extra: str = "",
    note: str = "",
) -> Finding:
    """A statistic with its 95 % interval, judged by difference_verdict on the `claimed` side; its
    numbers lead with `prefix` and the interval, then `extra`: the one shape of every interval claim."""
    return Finding(
        key,
        t.model_id,
        subject,
        difference_verdict(low, high, claimed),
        value,
        low,
        high,
        n,
        f"{prefix} {fmt_ci(value, low, high)}{extra}",
        note,
    )


def difference_finding(
    key: str,
    t: StoreTables,
    subject: str,
    row: Mapping,
    claimed: str,
    label: str,
    extra: str = "",
    note: str = "",
) -> Finding:
    """interval_finding of a difference row (difference, ci_low, ci_high, n: metric_differences',
    paired_difference's), its numbers led by "Δ<label>"."""
    return interval_finding(
        key,
        t,
        subject,
        claimed,
        row["difference"],
        row["ci_low"],
        row["ci_high"],
        row["n"],
        f"Δ{label}",
        extra,
        note,
    )


# --- selections --------------------------------------------------------------------------------


def headline_rows(t: StoreTables, reduction: str | None = REDUCTION) -> pl.DataFrame:
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


def template_rows(t: StoreTables, estimators: Sequence[str]) -> pl.DataFrame:
    """The estimators' template-grain rows as the claims read them: test split, full answer
    spaces, the headline reduction."""
    return t.estimates.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("template_id").is_not_null()
        & pl.col("estimator").is_in(list(estimators))
    )


def pair_key(template_column: str) -> pl.Expr:
    """An instance_id naming the (instance, template) pair, so that a paired difference pairs one
    statement with and without a variant (a marker, a context) rather than the bare instance."""
    return pl.col("instance_id") + "|" + pl.col(template_column)


def join_instances(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """Several selections side by side on their shared (relation, instance), sorted so that a
    resample plan over the rows is reproducible."""
    keys = ["relation_id", "instance_id"]
    it = iter(frames)
    wide = next(it)
    for frame in it:
        wide = wide.join(frame, on=keys)
    return wide.sort(*keys)


def estimators_in(frame: pl.DataFrame) -> set[str]:
    return set(frame["estimator"].unique().to_list()) if "estimator" in frame.columns else set()


def difference_row(t: StoreTables, estimator: str, metric: str) -> dict | None:
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


def metric_row(t: StoreTables, estimator: str, metric: str) -> dict | None:
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


def paired_difference(frame: pl.DataFrame, a: str, b: str, metrics: Sequence[str]) -> dict[str, dict]:
    """metric(a) − metric(b) on their shared instances with a paired bootstrap interval (the
    library's paired_differences, scope all): {metric: row}."""
    rows = paired_differences(
        frame.filter(pl.col("estimator").is_in([a, b])), [(a, b)], metrics, n_resamples=N_RESAMPLES, seed=SEED
    ).filter(pl.col("scope") == "all")
    return {r["metric"]: r for r in rows.iter_rows(named=True)}


def resample_sums(values: np.ndarray, resamples: Resamples) -> np.ndarray:
    """Σ values over each resample's rows (padding excluded): [B]. A statistic that the batched
    metrics do not cover (a mean confidence, an accuracy among answered) is read from these."""
    idx = resamples.indices
    return np.where(idx != PAD, values[idx], 0.0).sum(axis=1)


def relation_resamples(relation_ids: np.ndarray, seed: int = SEED) -> Resamples:
    """The seeded two-stage resample plan (relations, then rows; scope all) as the metrics tables
    draw it, for a statistic computed here over rows sorted by relation."""
    return resample_plan(relation_ids, N_RESAMPLES, seed)[0].resamples


def resample_means(values: np.ndarray, resamples: Resamples) -> np.ndarray:
    """The mean of values on each resample: [B]."""
    return resample_sums(values, resamples) / resamples.sizes


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> float:
    """Σ numerator / Σ denominator (an accuracy among the answered or asserted); NaN when the
    denominator sums to 0."""
    return float(numerator.sum() / denominator.sum()) if denominator.sum() else math.nan


def resample_ratio(numerator: np.ndarray, denominator: np.ndarray, resamples: Resamples) -> np.ndarray:
    """ratio on every resample ([B]; NaN where the denominator sums to 0 there, which
    bc_interval leaves out)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return resample_sums(numerator, resamples) / resample_sums(denominator, resamples)


def bc_interval(values: np.ndarray, point: float) -> tuple[float, float]:
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


# Fewer dev instances per fit than this and a recalibration is fitted to noise: the note says so.
FEW_DEV = 20


def fits_of(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> pl.DataFrame:
    """The estimator's dev-split fits under one reduction, full answer spaces."""
    if fits.is_empty():
        return fits
    return fits.filter(
        (pl.col("estimator") == estimator)
        & (pl.col("reduction") == reduction)
        & (pl.col("answer_space_k") == 0)
    )


def dev_size_note(fits: pl.DataFrame, estimator: str, reduction: str = REDUCTION) -> str:
    """How many dev instances the estimator's fits saw (one reduction, full answer spaces), how
    many temperatures ended on a bound and which τ were tuned: a fit on a handful of instances
    explains a recalibration that makes ACE worse, or a tuned τ equal to τ = 0."""
    own = fits_of(fits, estimator, reduction)
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
    own = fits_of(fits, estimator, reduction)
    if own.is_empty():
        return ""
    most = int(own["n_dev"].max())
    if most >= FEW_DEV:
        return ""
    return (
        f"too few dev instances: {estimator} was fitted on at most {most} per relation, fewer than "
        f"{FEW_DEV} (raise --max-instances or --dev-fraction)"
    )


# --- all claims, the store, the document ---------------------------------------------------------


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
                rows = [_with_power(f, spec.number.effect) for f in holm_family(rows)]
            out += rows
    return out
