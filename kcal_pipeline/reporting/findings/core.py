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
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl

from kcal_pipeline.estimation.catalog import headline_reductions
from kcal_pipeline.estimation.recalibration import METHODS as RECALIBRATION_METHODS
from kcal_pipeline.estimation.registry import BASELINE
from kcal_pipeline.reporting.selection import label

HOLDS = "holds"
FAILS = "does not hold"
INCONCLUSIVE = "inconclusive at this sample size"
NOT_TESTABLE = "not testable"
DESCRIPTIVE = "descriptive, no verdict"  # a number reported beside the paper's, with no test
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE, DESCRIPTIVE)
# The full texts of the seed papers every citation is checked against (../shared/papers/).
PAPERS_DIR = Path(__file__).resolve().parents[4] / "shared" / "papers"
SEED = 0  # the resample seed, as the metrics tables use
# The headline reduction every claim is read under (SCA has its own): the baseline's (Base's), from
# the estimator catalog (estimation/catalog.py headline_reduction), never typed here.
REDUCTION = headline_reductions()[BASELINE]
# "far from 1" (consistency): every seed's IoU_cons below this; "close to 1": every seed's at or above.
FAR_FROM_ONE = 0.9
MULTI_TEMPLATE_FAMILIES = ("aggregation", "template_marginal")
SELECTIVE_LAMA_FAMILY = "selective_lama"
# Base's recalibrations (base_temperature, base_platt, base_isotonic): the recalibration family's
# estimator of each method (estimation/recalibration.py METHODS) over the baseline.
RECALIBRATED = tuple(f"{BASELINE}_{method}" for method in RECALIBRATION_METHODS)
# Zhao et al.'s one-shot prefix is a knowledge-free demonstration ("What is 2+2? 4"): context-fixed.
# Each setup with the template kind that scores it.
CONSISTENCY_SETUPS = {"typo": "perturbation", "context-fixed": "context_fixed"}
FIT_COLUMNS = ["relation_id", "estimator", "reduction", "answer_space_k", "parameter", "value", "n_dev"]


@dataclass(frozen=True)
class StoreTables:
    """One model's tables as the claims read them; a table the store lacks is an empty frame.

    `estimates` holds what the claims read: the test split on full answer spaces (read_store_tables
    keeps the reductions Sum and Sum(A) only);
    `instances` is probe_instances' (relation_id, instance_id, n_gold, n_options), `relations` the
    relations table's (relation_id, domain), `fits` estimator_fits' (relation_id, estimator, reduction,
    answer_space_k, parameter, value, n_dev): how many dev instances each recalibration saw;
    `dev_estimates` the same rows as `estimates` on the dev split: where a claim picks something
    (a comparator, a threshold), it picks on these, never on the test rows it then judges."""

    model_id: str
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    differences: pl.DataFrame = field(default_factory=pl.DataFrame)
    consistency: pl.DataFrame = field(default_factory=pl.DataFrame)
    estimates: pl.DataFrame = field(default_factory=pl.DataFrame)
    dev_estimates: pl.DataFrame = field(default_factory=pl.DataFrame)
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
    mde: float = math.nan  # the minimum detectable effect of an interval row (_with_power)
    p_holm: float = math.nan  # the Holm-adjusted p of an interval row (holm_family)
    m_holm: int = 0  # how many comparisons that Holm adjustment ran over
    paper_inside: bool | None = None  # the paper's effect inside kcal's interval (None: no effect stated)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(
                f"finding {self.claim!r}: verdict {self.verdict!r} is not one of {list(VERDICTS)}"
            )


ClaimFn = Callable[[StoreTables], list[Finding]]


@dataclass(frozen=True)
class Paper:
    """A seed paper: its number in the seed list (000 … 004; "kcal" for what kcal adds), the short
    name the document's section carries, the full citation and `file`, its full text in
    ../shared/papers/ that every citation of its claims is checked against ("" for kcal's own)."""

    seed: str
    short: str
    citation: str
    file: str = ""


def normalise_text(text: str) -> str:
    """Whitespace runs (tabs of a table row, line breaks) as one space: how quotes are matched."""
    return " ".join(text.split())


@cache
def paper_text(file: str) -> str:
    """A paper's full text, whitespace-normalised; a missing file is an error naming it."""
    path = PAPERS_DIR / file
    if not path.is_file():
        raise FileNotFoundError(f"paper file {file!r}: not found in {PAPERS_DIR}")
    return normalise_text(path.read_text("utf-8"))


@dataclass(frozen=True)
class Citation:
    """What a claim rests on in its paper: `section` (e.g. "§5.1", "App. C", "Abstract"), `locus`
    the table or figure ("Table 1", "Fig. 4"; "" for running text) and `quote`, the sentence or the
    table cells copied verbatim from the paper's file (whitespace may differ: tests match it
    normalised). A table quote is a row as printed, e.g. "gpt2 0.295 0.157"."""

    section: str
    quote: str
    locus: str = ""

    def where(self) -> str:
        return f"{self.section}, {self.locus}" if self.locus else self.section


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_BARE_DECIMAL = re.compile(r"(?<![\d.])\.(\d)")  # ".470", as tables print it, is 0.470


def _leading_zero(text: str) -> str:
    return _BARE_DECIMAL.sub(r"0.\1", text)


def printed_numbers(text: str) -> list[str]:
    """The numbers a text shows, without sign or unit ("−0.14" → "0.14", "80.5 %" → "80.5", ".470"
    → "0.470")."""
    return _NUMBER.findall(_leading_zero(text))


def number_in(number: str, text: str) -> bool:
    """Whether `number` occurs in `text` as a whole number (0.5 is not in 0.55 nor in 10.5; 0.470 is
    in a table's ".470")."""
    pattern = rf"(?<![\d.]){re.escape(_leading_zero(number))}(?!\d|\.\d)"
    return re.search(pattern, _leading_zero(text)) is not None


@dataclass(frozen=True)
class PaperNumber:
    """What the paper prints for a claim: `text` as the document shows it, every number in it
    exactly as printed in one of the claim's quotes (a test checks), `model` and `setting` what it
    was measured on, `effect` the number in the finding's unit where one follows from the printed
    ones (None otherwise) and `derived` how (e.g. "0.157 − 0.295, gpt2"): a derived effect is
    shown as derived, never as printed. `released` cites numbers from the authors' released code or
    data by repository and path, shown beside and never as the paper's."""

    text: str
    model: str = ""
    effect: float | None = None
    derived: str = ""
    setting: str = ""
    released: str = ""

    def shown(self) -> str:
        about = ", ".join(x for x in (self.model, self.setting) if x)
        out = f"{self.text} ({about})" if about else self.text
        if self.effect is not None and self.derived:
            out += f"; effect {fmt_signed(self.effect)} derived: {self.derived}"
        if self.released:
            out += f"; beside the paper, from the authors' release: {self.released}"
        return out


NO_NUMBER = PaperNumber("no number stated")
FIGURE_ONLY = PaperNumber("figure only, no number printed")
DIFFERENCE, CRITERION = "difference", "criterion"
DESCRIPTIVE_KIND = "descriptive"  # rows with numbers and no verdict
KINDS = (DIFFERENCE, CRITERION, DESCRIPTIVE_KIND)


@dataclass(frozen=True)
class Claim:
    """One claim of a seed paper, as data: what it rests on in the paper (`sources`: section,
    table or figure and a verbatim quote each; kcal's own claims name their literature in
    `reference` instead), the paper's setting and number, the comparison (`title`), the test
    (`rule`, a difference against 0, a stated criterion or descriptive: `kind`), its
    preconditions, the tables it reads and the profile `stage` whose store decides it (kcal
    findings --build); `fn` computes its rows on one model."""

    key: str
    paper: Paper
    title: str
    setting: str
    rule: str
    reads: str
    fn: ClaimFn
    stage: str = "bear"
    kind: str = DIFFERENCE
    number: PaperNumber = NO_NUMBER
    preconditions: tuple[str, ...] = ()
    sources: tuple[Citation, ...] = ()
    reference: str = ""

    @property
    def where(self) -> str:
        """The sections, tables and figures the claim rests on ("§5.1, Table 1; App. C")."""
        if self.sources:
            return "; ".join(dict.fromkeys(c.where() for c in self.sources))
        return self.reference


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
    title: str,
    setting: str,
    rule: str,
    reads: str,
    sources: Sequence[Citation] = (),
    reference: str = "",
    stage: str = "bear",
    kind: str = DIFFERENCE,
    number: PaperNumber = NO_NUMBER,
    preconditions: Sequence[str] = (),
):
    """Register a claim; a second one under the same key, an unknown kind, or a claim with neither
    a citation (a paper's claim) nor a reference (kcal's own) is a bug."""

    def add(fn: ClaimFn) -> ClaimFn:
        if key in CLAIMS:
            raise ValueError(f"claim {key!r} is already registered")
        if kind not in KINDS:
            raise ValueError(f"claim {key!r}: kind {kind!r} is not one of {list(KINDS)}")
        if not sources and not reference:
            raise ValueError(f"claim {key!r}: give its sources (a paper's claim) or a reference (kcal's)")
        PAPERS.setdefault(paper.seed, paper)
        CLAIMS[key] = Claim(
            key, paper, title, setting, rule, reads, fn, stage, kind, number, tuple(preconditions),
            tuple(sources), reference,
        )  # fmt: skip
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


def fmt_signed(value: float | None, digits: int = 3) -> str:
    """A difference with its sign ("+0.120", "−0.140"); NaN and None as 'n/a'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:+.{digits}f}".replace("-", "−")


def fmt_ci(value: float, low: float, high: float) -> str:
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


# An estimator's label: reporting/selection.py's `label`, under the name the claims' modules import.
estimator_label = label


def not_testable(key: str, t: StoreTables, subject: str, why: str) -> list[Finding]:
    return [Finding(key, t.model_id, subject, NOT_TESTABLE, note=why)]


def not_testable_here(key: str, t: StoreTables, subject: str, needs: str, command: str) -> list[Finding]:
    """A claim kcal cannot test with what can be had here (other models, a dataset kcal lacks):
    what it needs and the command that would test it."""
    return not_testable(key, t, subject, f"needs {needs}; to test it: `{command}`")


def descriptive_finding(
    key: str,
    t: StoreTables,
    subject: str,
    numbers: str,
    value: float = math.nan,
    low: float = math.nan,
    high: float = math.nan,
    n: int | None = None,
    note: str = "",
) -> Finding:
    """Numbers shown beside the paper's with no verdict (a criterion that cannot fail here, or a
    sensitivity table)."""
    return Finding(key, t.model_id, subject, DESCRIPTIVE, value, low, high, n, numbers, note)  # fmt: skip


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
