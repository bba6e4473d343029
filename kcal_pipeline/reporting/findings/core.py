"""The claims' registry: one Claim spec per claim (paper, table or figure, setting, the paper's
number with its model, comparison, test, preconditions, profile stage), the verdict rule and the
Finding rows a claim returns; the papers' modules register their claims here.

A claim is data plus one small function that reads one model's tables (`StoreTables`) and
returns `Finding` rows. Verdicts (VERDICTS): a claim about a difference **holds** when the 95 %
interval of the (paired where possible) difference excludes 0 in the claimed direction, **does not
hold** when it excludes 0 in the other direction, and is **inconclusive at this sample size**
otherwise. A claim that is not a difference states its numeric criterion. A claim the store cannot
test says which precondition failed and which setting would enable it, never a made-up verdict.

What a claim reads of a store is in selections.py; power, multiplicity, the ACE noise floor and
the evaluation of every claim in verdicts.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS

HOLDS = "holds"
FAILS = "does not hold"
INCONCLUSIVE = "inconclusive at this sample size"
NOT_TESTABLE = "not testable"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE)
SEED = 0  # the resample seed, as the metrics tables use
REDUCTION = "sum"  # the headline reduction every claim is read under (SCA has its own)
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
