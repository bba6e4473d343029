"""Claims of seed 000, Kissling, Merdjanovska & Akbik 2026 (Self-Aware Knowledge Probing): Margin
against Base, the aggregations over paraphrase templates (Table 1, App. C's Table 4), selective
prediction with C^Vote_Average (§5.2) and epistemic markers (§7, App. E); the claims about Base
itself (overconfidence, reductions, option counts, ACE against accuracy) are in kissling_base.py.

The paper's plurality vote is Vote(2) (App. C: "2 for plurality"; Table 1's C^Vote_Average Brier
column is Table 4's column 2). A failed vote is "no answer and zero calibration error" (§3.2): kcal
stores it as confidence 0, counted wrong, so it adds (0 − 0)² = 0 to the Brier score — the paper's
convention. Where a vote is set against an estimator that always answers, a second row compares
them on the instances both answer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS, NO_ANSWER
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    Citation,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    estimator_label,
    fmt,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import (
    difference_row,
    estimators_in,
    headline_rows,
    metric_row,
    paired_difference,
)
from kcal_pipeline.reporting.findings.verdicts import ace_floor_note

KISSLING = Paper(
    "000",
    "Kissling et al. 2026 (seed 000)",
    "Kissling, Merdjanovska & Akbik 2026, Self-Aware Knowledge Probing: Evaluating Language Models' "
    "Relational Knowledge through Confidence Calibration (arXiv 2601.18901)",
    file="kissling-self-aware-knowledge-probing.txt",
)
KISSLING_SETTING = (
    "BEAR's closed-set probe (7,731 instances, 60 relations, 5 paraphrase templates per relation, Sum "
    "reduction), ten causal LMs (GPT-2 137M to 1.6B, OPT-125M to 6.7B, Gemma 2B and 7B) and six masked "
    "LMs (BERT, RoBERTa and XLM-R, base and large)."
)
GPT2 = "gpt2 (137M, App. A Table 3: the paper's model closest to SmolLM2-135M)"

# --- the paper's text that several claims rest on ------------------------------------------------

TABLE1_COLUMNS = Citation(
    "§5.1",
    r"C_{Base} C_{Margin} $C_{\text{Average}}^{\text{Vote}}$ $C_{\text{Average}}^{\text{Min}}$ C_{Base} "
    r"C_{Margin} $C_{\text{Average}}^{\text{Vote}}$ $C_{\text{Average}}^{\text{Min}}$ "
    r"$C_{\text{Consistency}}^{\text{Vote}}$ $C_{\text{Consistency}}^{\text{Min}}$",
    "Table 1",
)
TABLE1_GPT2 = Citation("§5.1", "gpt2 0.295 0.157 0.158 0.100 0.237 0.181 0.140 0.117 0.315 0.259", "Table 1")
TABLE4_COLUMNS = Citation("App. C", "Model Min Max 2 3 4 5", "Table 4")
TABLE4_GPT2 = Citation("App. C", "gpt2 0.117 0.147 0.140 0.124 0.072 0.032", "Table 4")
PLURALITY_IS_VOTE2 = Citation(
    "App. C",
    "Integers denote how many of the five answers must match for a successful vote, e.g., 2 for "
    "plurality, 3 for absolute majority and 5 for unanimity.",
)
VOTE_FAILURES = Citation(
    "§3.2",
    "Voting schemes reject predictions with insufficient agreement, yielding no answer and zero "
    "calibration error by design.",
)


def printed_cells(citation: Citation, columns: Sequence[str], skip: int = 0) -> dict[str, str]:
    """A quoted table row's cells by column (estimator), exactly as printed, after its label and
    `skip` cells."""
    return dict(zip(columns, citation.quote.split()[1 + skip :], strict=True))


# Table 1's Brier columns and Table 4's (Brier of C_Average by aggregation), gpt2.
TABLE1_BRIER = printed_cells(
    TABLE1_GPT2,
    ("base", "margin", "vote2_average", "min_average", "vote2_consistency", "min_consistency"),
    skip=4,  # the ACE columns
)
TABLE4_BRIER = printed_cells(
    TABLE4_GPT2, ("min_average", "max_average", *(f"vote{k}_average" for k in range(2, 6)))
)


def vote_levels(present: Iterable[str]) -> list[int]:
    """The k of every vote{k}_average present: 2 … T, T the number of paraphrase templates."""
    levels = []
    for name in present:
        if name.startswith("vote") and name.endswith("_average") and name[4:-8].isdigit():
            levels.append(int(name[4:-8]))
    return sorted(levels)


ONE_TEMPLATE = (
    "a single paraphrase template per instance, so there is nothing to aggregate: run with "
    "--max-templates 2 or more (default 5; `kcal findings --build`, stage bear)"
)


def missing_estimators(key: str, t: StoreTables, subject: str, head: pl.DataFrame, needed) -> list[Finding]:
    """[] when every needed estimator has rows, else the not-testable row naming the absent ones (an
    aggregation is absent with a single paraphrase template)."""
    absent = [e for e in needed if e not in estimators_in(head)]
    if not absent:
        return []
    aggregated = any(ESTIMATORS[e].family == "aggregation" for e in absent)
    why = ONE_TEMPLATE if aggregated else "not computed in this store: `kcal findings --build` (stage bear)"
    return not_testable(key, t, subject, f"no {', '.join(map(estimator_label, absent))} estimates: {why}")


def both_answered(head: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
    """a's and b's rows on the instances neither abstained on (a failed vote is NO_ANSWER)."""
    keys = ["relation_id", "instance_id"]
    pair = head.filter(pl.col("estimator").is_in([a, b]))
    failed = pair.filter(pl.col("predicted_index") == NO_ANSWER).select(keys).unique()
    return pair.join(failed, on=keys, how="anti")


def brier_of(frame: pl.DataFrame, estimator: str) -> float:
    g = frame.filter(pl.col("estimator") == estimator)
    return METRICS["brier"](g["confidence"].to_numpy(), g["correct"].to_numpy())


def brier_comparisons(
    key: str,
    t: StoreTables,
    head: pl.DataFrame,
    pairs: Sequence[tuple[str, str]],
    claimed: str,
    paper: Mapping[str, str],
    where: str,
    answered_too: Sequence[tuple[str, str]] = (),
) -> list[Finding]:
    """Brier(a) − Brier(b), paired bootstrap on every test instance (the paper's convention: a failed
    vote adds 0), and for the pairs in `answered_too` again on the instances both answer; each row
    shows both Brier scores and the paper's printed cells for gpt2."""
    out = []
    for (a, b), answered in [*((p, False) for p in pairs), *((p, True) for p in answered_too)]:
        frame = both_answered(head, a, b) if answered else head.filter(pl.col("estimator").is_in([a, b]))
        la, lb = estimator_label(a), estimator_label(b)
        subject = f"Brier({la}) − Brier({lb})" + (" on the instances both answer" if answered else "")
        if estimators_in(frame) != {a, b}:
            out += not_testable(key, t, subject, f"no instance that both {la} and {lb} answer")
            continue
        extra = f"; Brier {la} {fmt(brier_of(frame, a))}, {lb} {fmt(brier_of(frame, b))}"
        if a in paper and b in paper:
            extra += f"; paper, gpt2 ({where}): {paper[a]} vs {paper[b]}"
        if not answered and (NO_ANSWER in frame["predicted_index"].to_list()):
            extra += "; failed votes count with zero error, as the paper's"
        d = paired_difference(frame, a, b, ["brier"])["brier"]
        out.append(difference_finding(key, t, subject, d, claimed, "Brier", extra))
    return out


# --- 1. Intrinsic confidence: Margin against Base ------------------------------------------------


@claim(
    "margin_lowers_ace",
    sources=(
        Citation("§5.1", "C_{Margin} strongly improves over C_{Base} ."),
        Citation(
            "§5.1",
            "we find that C_{Margin} consistently performs well in terms of *ACE* and *Brier Score* "
            "across all LMs.",
        ),
        TABLE1_COLUMNS,
        TABLE1_GPT2,
    ),
    title="Margin is better calibrated than Base: ACE(Margin) − ACE(Base) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Table 1's ACE of C_Base and C_Margin on each model's first template; "
    "Margin is below Base for every model. Margin removes the confidence that near-ties get under Base.",
    rule="Paired bootstrap (metric_differences: same resamples for both, clustered by relation) of "
    "ACE(Margin) − ACE(Base): holds if the 95 % interval lies below 0, does not hold if it lies above 0, "
    "else inconclusive.",
    reads="metric_differences (margin − base, ace, scope all, test split, full answer spaces, reduction "
    "sum); metrics (each one's ACE)",
    number=PaperNumber(
        "ACE C_Base 0.295, C_Margin 0.157",
        model=GPT2,
        effect=-0.138,
        derived="0.157 − 0.295 (gpt2, Table 1)",
        setting="BEAR, Sum reduction, first template",
    ),
    preconditions=(
        "a test split (--dev-fraction < 1)",
        "metric_differences materialized (Margin − Base ACE row)",
    ),
)
def margin_lowers_ace(t: StoreTables) -> list[Finding]:
    key, subject = "margin_lowers_ace", "ACE(Margin) − ACE(Base)"
    row = difference_row(t, "margin", "ace")
    if row is None:
        return not_testable(
            key, t, subject, "metric_differences has no Margin − Base ACE row on the test split: "
            "materialize metric_differences (kcal demo) with a test split (--dev-fraction < 1)"
        )  # fmt: skip
    ace = {e: metric_row(t, e, "ace") for e in (BASELINE, "margin")}
    context = ", ".join(f"ACE {estimator_label(e)} {fmt(r['value'])}" for e, r in ace.items() if r)
    floor = ace_floor_note(t, BASELINE)
    context += f"; {floor}" if context and floor else floor
    return [difference_finding(key, t, subject, row, "negative", "ACE", f"; {context}" if context else "")]


# --- 2. Aggregation over paraphrase templates ----------------------------------------------------

AVERAGES = ("vote2_average", "min_average")


@claim(
    "average_estimates_best_brier",
    sources=(
        Citation("§5.1", r"The structural consistency estimates $C_{\text{Average}}^{\text{Vote}}$ and"),
        Citation(
            "§5.1",
            r"$C_{\text{Average}}^{\text{Min}}$ clearly outperform the other approaches across all models "
            "in terms of *Brier Score*",
        ),
        VOTE_FAILURES,
        PLURALITY_IS_VOTE2,
        TABLE1_COLUMNS,
        TABLE1_GPT2,
    ),
    title="The Average estimates beat the single-template ones on Brier: Brier(Vote(2) Average or "
    "Min Average) − Brier(Base or Margin) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Table 1: C^Vote_Average and C^Min_Average have a lower Brier score than "
    "C_Base, C_Margin and the C_Consistency columns for all 16 models (against Consistency: "
    "consistency_poor_brier).",
    rule="For each Average (Vote(2), Min) against each of Base and Margin: paired bootstrap (same "
    "resamples, clustered by relation) of the Brier difference on every test instance (a failed vote "
    "adds 0, as the paper's), and for Vote(2) again on the instances it answers; holds if the 95 % "
    "interval lies below 0, does not hold if above, else inconclusive; Holm over the rows.",
    reads="estimates (vote2_average, min_average, base, margin; headline template, test split, full "
    "answer spaces, reduction sum)",
    number=PaperNumber(
        "Brier C_Base 0.237, C_Margin 0.181, C^Vote_Average 0.140, C^Min_Average 0.117",
        model=GPT2,
        setting="BEAR, Sum reduction",
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def average_estimates_best_brier(t: StoreTables) -> list[Finding]:
    key = "average_estimates_best_brier"
    head = headline_rows(t)
    gap = missing_estimators(
        key, t, "Brier(Average) − Brier(Base, Margin)", head, (*AVERAGES, BASELINE, "margin")
    )
    if gap:
        return gap
    pairs = [(a, b) for a in AVERAGES for b in (BASELINE, "margin")]
    answered = [p for p in pairs if p[0] == "vote2_average"]
    return brier_comparisons(key, t, head, pairs, "negative", TABLE1_BRIER, "Table 1", answered)


@claim(
    "consistency_poor_brier",
    sources=(
        Citation(
            "§5.1",
            r"Finally, $C_{\text{Consistency}}$ performs very poorly in terms of *Brier Score*, "
            "showing that confidence is much better captured by aggregating log-likelihoods than through "
            "answer agreement.",
        ),
        TABLE1_COLUMNS,
        TABLE1_GPT2,
    ),
    title="Consistency is worse on Brier than Average with the same aggregation: Brier(Consistency) − "
    "Brier(Average) > 0, for Vote(2) and Min",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Table 1: C^Vote_Consistency and C^Min_Consistency have the highest Brier "
    "scores of the six estimates for most models. Consistency and Average of one aggregation give the "
    "same answer, so they fail the same votes.",
    rule="For Vote(2) and Min: paired bootstrap (same resamples, clustered by relation) of "
    "Brier(Consistency) − Brier(Average) on every test instance (both answer the same instances); "
    "holds if the 95 % interval lies above 0, does not hold if below, else inconclusive; Holm over the rows.",
    reads="estimates (vote2_/min_ consistency and average, test split, full answer spaces, reduction sum)",
    number=PaperNumber(
        "Brier C^Vote_Consistency 0.315 vs C^Vote_Average 0.140; C^Min_Consistency 0.259 vs "
        "C^Min_Average 0.117",
        model=GPT2,
        setting="BEAR, Sum reduction",
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def consistency_poor_brier(t: StoreTables) -> list[Finding]:
    key = "consistency_poor_brier"
    head = headline_rows(t)
    pairs = [(f"{a}_consistency", f"{a}_average") for a in ("vote2", "min")]
    gap = missing_estimators(
        key, t, "Brier(Consistency) − Brier(Average)", head, [e for p in pairs for e in p]
    )
    return gap or brier_comparisons(key, t, head, pairs, "positive", TABLE1_BRIER, "Table 1")


@claim(
    "min_average_vs_vote2_brier",
    sources=(
        Citation(
            "§5.1",
            "Minimum confidence aggregation reduces *ACE* and *Brier Score* more effectively than plurality "
            "voting, even though we hard code vote failures with zero calibration error.",
        ),
        VOTE_FAILURES,
        PLURALITY_IS_VOTE2,
        TABLE1_COLUMNS,
        TABLE1_GPT2,
    ),
    title="Min Average has a lower Brier score than the plurality vote: Brier(Min Average) − "
    "Brier(Vote(2) Average) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " The paper's plurality vote is Vote(2) (App. C); Table 1 scores a failed "
    "vote with zero calibration error, and Min Average still has the lower Brier for every model.",
    rule="Paired bootstrap (same resamples, clustered by relation) of Brier(Min Average) − Brier(Vote(2) "
    "Average), (1) on every test instance, a failed vote adding 0 (the paper's convention), (2) on the "
    "instances Vote(2) answers; holds if the 95 % interval lies below 0, does not hold if above, else "
    "inconclusive; Holm over the two rows.",
    reads="estimates (min_average and vote2_average, instance-grain rows, test split, full answer "
    "spaces, reduction sum)",
    number=PaperNumber(
        "Brier C^Min_Average 0.117 vs C^Vote_Average 0.140",
        model=GPT2,
        effect=-0.023,
        derived="0.117 − 0.140 (gpt2, Table 1; failed votes with zero error)",
        setting="BEAR, Sum reduction",
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def min_average_vs_vote2_brier(t: StoreTables) -> list[Finding]:
    key, pair = "min_average_vs_vote2_brier", ("min_average", "vote2_average")
    head = headline_rows(t)
    gap = missing_estimators(key, t, "Brier(Min Average) − Brier(Vote(2) Average)", head, pair)
    return gap or brier_comparisons(key, t, head, [pair], "negative", TABLE1_BRIER, "Table 1", [pair])


@claim(
    "max_aggregation_worst_brier",
    sources=(
        Citation(
            "App. C",
            "As expected, maximum-confidence aggregation performs worst overall. This is unsurprising, as "
            "LMs were shown to be overconfident and maximum-confidence aggregation will only introduce more "
            "overconfidence.",
        ),
        VOTE_FAILURES,
        TABLE4_COLUMNS,
        TABLE4_GPT2,
    ),
    title="Max is the worst aggregation on Brier: Brier(Max Average) − Brier(Min or Vote(k) Average) > 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Table 4: Brier of C_Average under Min, Max and Vote(k), k = 2 … 5 "
    "(failed votes with zero error); Max's is the highest for every model.",
    rule="Max Average against Min Average and each Vote(k) Average: paired bootstrap (same resamples, "
    "clustered by relation) of the Brier difference on every test instance (a failed vote adds 0), and "
    "for k below the largest again on the instances Vote(k) answers (at the largest k, unanimity, Max "
    "gives the same answer and confidence wherever the vote answers, so there is nothing to compare); "
    "holds if the 95 % interval lies above 0, does not hold if below, else inconclusive; Holm over the rows.",
    reads="estimates (max_average, min_average, vote{k}_average, test split, full answer spaces, "
    "reduction sum)",
    number=PaperNumber(
        "Brier of C_Average: Min 0.117, Max 0.147, Vote(2) 0.140, Vote(3) 0.124, Vote(4) 0.072, "
        "Vote(5) 0.032",
        model=GPT2,
        setting="BEAR, Sum reduction, five templates",
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def max_aggregation_worst_brier(t: StoreTables) -> list[Finding]:
    key = "max_aggregation_worst_brier"
    head = headline_rows(t)
    levels = vote_levels(estimators_in(head))
    gap = missing_estimators(
        key, t, "Brier(Max Average) − Brier(other)", head, ("max_average", "min_average")
    )
    if gap:
        return gap
    pairs = [("max_average", b) for b in ("min_average", *(f"vote{k}_average" for k in levels))]
    answered = [("max_average", f"vote{k}_average") for k in levels[:-1]]
    return brier_comparisons(key, t, head, pairs, "positive", TABLE4_BRIER, "Table 4", answered)
