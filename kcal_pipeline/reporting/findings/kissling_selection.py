"""Claims of seed 000 (Kissling et al.) that read what a stricter vote, a confidence threshold or an
epistemic marker withdraws or changes: Vote(k) against chance withdrawal (App. C, Table 4), accuracy
among the answers a vote keeps (App. C, Fig. 10), the 0.1 threshold on C^Vote_Average (§5.2) and the
markers (§7, App. E). The paper, its shared citations and helpers are in kissling.py."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS, NO_ANSWER
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    estimator_label,
    fmt,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.kissling import (
    GPT2,
    KISSLING,
    KISSLING_SETTING,
    ONE_TEMPLATE,
    PLURALITY_IS_VOTE2,
    TABLE4_BRIER,
    TABLE4_COLUMNS,
    TABLE4_GPT2,
    VOTE_FAILURES,
    missing_estimators,
    printed_cells,
    vote_levels,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    estimators_in,
    headline_rows,
    join_instances,
    pair_key,
    paired_difference,
    ratio,
    relation_resamples,
    resample_ratio,
    resample_sums,
    template_rows,
)

# --- 1. What a stricter vote withdraws -----------------------------------------------------------


def vote_frame(head: pl.DataFrame, levels: Sequence[int]) -> pl.DataFrame:
    """Vote(k) Average per instance side by side: correct{k}, answered{k}, squared error err{k}."""
    return join_instances(
        head.filter(pl.col("estimator") == f"vote{k}_average").select(
            "relation_id",
            "instance_id",
            pl.col("correct").cast(pl.Float64).alias(f"correct{k}"),
            (pl.col("predicted_index") != NO_ANSWER).cast(pl.Float64).alias(f"answered{k}"),
            ((pl.col("confidence") - pl.col("correct").cast(pl.Float64)) ** 2).alias(f"err{k}"),
        )
        for k in levels
    )


@claim(
    "stricter_vote_lowers_brier",
    sources=(
        Citation(
            "App. C",
            "Since the *Brier Score* also captures an estimate’s discriminative power, it is unsurprising "
            "that voting-based aggregation minimizes it. As expected, stricter voting further increases the "
            "discriminative power. Despite the relatively small number of candidate answers, vote failures "
            "are highly effective in doing so.",
        ),
        VOTE_FAILURES,
        TABLE4_COLUMNS,
        TABLE4_GPT2,
    ),
    title="A stricter vote lowers Brier by withdrawing the wrong answers: Brier(Vote(k+1) Average) − "
    "Brier(Vote(k) Average with as many answers withdrawn at random) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Table 4: Brier of C^Vote(k)_Average falls from k = 2 to 5 for every "
    "model. Vote(k+1) answers a subset of Vote(k)'s instances with the same answer and confidence and a "
    "failed vote adds 0, so Brier cannot rise with k; what the paper credits is that the withdrawn "
    "answers are the badly scored ones (discriminative power), which chance would not give.",
    rule="Per step k → k+1 over the vote levels present: Brier(Vote(k+1)) minus the Brier that Vote(k) "
    "would have with the same number of its answers withdrawn at random, i.e. −(Σ_withdrawn e − "
    "n_withdrawn · mean e over Vote(k)'s answers) / N, e the squared error (C − correct)²; bootstrap over "
    "the same resamples (relations, then instances): holds if the 95 % interval lies below 0, does not "
    "hold if above, else inconclusive; Holm over the steps.",
    reads="estimates (vote{k}_average, test split, full answer spaces, reduction sum)",
    number=PaperNumber(
        "Brier of C_Average under Vote(2) 0.140, Vote(3) 0.124, Vote(4) 0.072, Vote(5) 0.032",
        model=GPT2,
        setting="BEAR, Sum reduction, five templates, failed votes with zero error",
    ),
    preconditions=("at least 3 paraphrase templates per instance (--max-templates 3 or more)",),
)
def stricter_vote_lowers_brier(t: StoreTables) -> list[Finding]:
    key = "stricter_vote_lowers_brier"
    levels = vote_levels(estimators_in(head := headline_rows(t)))
    if len(levels) < 2:
        why = ONE_TEMPLATE if not levels else "one vote level (k = 2): run with --max-templates 3 or more"
        return not_testable(key, t, "Brier(Vote(k+1) Average) − chance withdrawal", why)
    wide = vote_frame(head, levels)
    res = relation_resamples(wide["relation_id"].to_numpy())
    out = []
    for k in levels[:-1]:
        err, kept = wide[f"err{k}"].to_numpy(), wide[f"answered{k}"].to_numpy()
        withdrawn = kept * (1 - wide[f"answered{k + 1}"].to_numpy())
        columns = (err * withdrawn, withdrawn, err * kept, kept)
        sums = [float(c.sum()) for c in columns]
        value = -(sums[0] - sums[1] * sums[2] / sums[3]) / wide.height if sums[3] else float("nan")
        s = [resample_sums(c, res) for c in columns]
        with np.errstate(divide="ignore", invalid="ignore"):
            low, high = bc_interval(-(s[0] - s[1] * s[2] / s[3]) / res.sizes, value)
        brier = {j: float(wide[f"err{j}"].mean()) for j in (k, k + 1)}
        extra = (
            f"; Brier Vote({k}) {fmt(brier[k])} → Vote({k + 1}) {fmt(brier[k + 1])}; withdrawn "
            f"{int(sums[1])} of {int(sums[3])} answers, mean squared error {fmt(ratio(*columns[:2]))} vs "
            f"{fmt(ratio(*columns[2:]))} over Vote({k})'s answers"
        )
        paper = [TABLE4_BRIER.get(f"vote{j}_average") for j in (k, k + 1)]
        extra += f"; paper, gpt2 (Table 4): {paper[0]} → {paper[1]}" if all(paper) else ""
        subject = f"Brier(Vote({k + 1}) Average) − Brier(Vote({k}) Average, as many withdrawn at random)"
        out.append(
            interval_finding(key, t, subject, "negative", value, low, high, wide.height, "ΔBrier", extra)
        )
    return out


@claim(
    "vote_trades_coverage_for_accuracy",
    sources=(
        Citation(
            "App. C",
            "We observe that moving from a plurality vote (relative majority) to an unanimous vote (all "
            "answers match) increases accuracy among the non-rejected answers by roughly 20 percentage "
            "points",
        ),
        Citation(
            "App. C",
            "Even for a large model like gemma-7b, only about 40% of instances have matching answers across "
            "all templates. For opt-6.7b, this drops to 30%, and for gpt2-xl, only 16%.",
        ),
        PLURALITY_IS_VOTE2,
    ),
    title="Vote(k) trades answers for accuracy: from plurality to unanimity, fewer answers, more of "
    "them right",
    paper=KISSLING,
    setting=KISSLING_SETTING + " App. C, Fig. 10: accuracy-rejection curves of Vote(2) … Vote(5), where "
    "answers are rejected only by vote failures; the rise holds for the models shown there except "
    "xlm-roberta-large.",
    rule="Per k: the answered share and the accuracy among answered instances (Vote(k) Average; an "
    "abstention is no answer). The answered share cannot rise with k (Vote(k+1)'s answers are a subset "
    "of Vote(k)'s); a random subset would keep the accuracy. Tested: accuracy among answered at the "
    "largest k minus at k = 2, paired bootstrap over the same resampled instances: holds if the 95 % "
    "interval lies above 0, does not hold if below, else inconclusive.",
    reads="estimates (vote{k}_average, test split, full answer spaces, reduction sum)",
    number=PaperNumber(
        "accuracy among the non-rejected answers roughly +20 percentage points from plurality to "
        "unanimity; answers retained at unanimity about 40% (gemma-7b), 30% (opt-6.7b), 16% (gpt2-xl)",
        model="the models of Fig. 10, xlm-roberta-large excepted",
        effect=0.2,
        derived="roughly 20 percentage points (App. C) as a fraction",
        setting="BEAR, five templates",
    ),
    preconditions=("at least 3 paraphrase templates per instance (--max-templates 3 or more)",),
)
def vote_trades_coverage_for_accuracy(t: StoreTables) -> list[Finding]:
    key = "vote_trades_coverage_for_accuracy"
    head = headline_rows(t)
    levels = vote_levels(estimators_in(head))
    if len(levels) < 2:
        why = (
            ONE_TEMPLATE
            if not levels
            else (
                "two paraphrase templates give one vote level (k = 2): run with --max-templates 3 "
                "or more (default 5)"
            )
        )
        return not_testable(key, t, "accuracy among answered: Vote(T) − Vote(2)", why)
    wide = vote_frame(head, levels)
    column = {c: wide[c].to_numpy() for c in wide.columns if c.startswith(("correct", "answered"))}
    per_k = "; ".join(
        f"k={k}: answered {fmt(column[f'answered{k}'].mean())}, accuracy among answered "
        f"{fmt(ratio(column[f'correct{k}'], column[f'answered{k}']))}"
        for k in levels
    )
    lo, hi = levels[0], levels[-1]
    res = relation_resamples(wide["relation_id"].to_numpy())
    # nothing answered in a resample: NaN, left out
    diff = resample_ratio(column[f"correct{hi}"], column[f"answered{hi}"], res) - resample_ratio(
        column[f"correct{lo}"], column[f"answered{lo}"], res
    )
    value = ratio(column[f"correct{hi}"], column[f"answered{hi}"]) - ratio(
        column[f"correct{lo}"], column[f"answered{lo}"]
    )
    low, high = bc_interval(diff, value)
    subject = f"accuracy among answered: Vote({hi}) − Vote({lo})"
    return [
        interval_finding(
            key, t, subject, "positive", value, low, high, wide.height, "Δaccuracy", f"; {per_k}"
        )
    ]


# --- 2. Selective prediction ---------------------------------------------------------------------

THRESHOLD = 0.1  # the paper's threshold on C^Vote_Average (§5.2): an answer below it is rejected


@claim(
    "vote_threshold_raises_accuracy",
    sources=(
        Citation(
            "§5.2",
            "For gemma-7b, applying a confidence threshold of 0.1 to $C_{Average}^{Vote}$ increases accuracy "
            "by 8 percentage points while rejecting only 10% of the dataset.",
        ),
        Citation(
            "§5.2", "These curves show that the confidence estimates are effective for selective prediction."
        ),
        VOTE_FAILURES,
    ),
    title="Rejecting C^Vote_Average below 0.1 raises accuracy: accuracy(kept) − accuracy(all) > 0, with the "
    "share rejected",
    paper=KISSLING,
    setting=KISSLING_SETTING + " §5.2, Fig. 3: accuracy-rejection curves of C_Margin and C^Vote_Average "
    "for the two largest models at thresholds 0.1 … 0.9; a failed vote has confidence 0 and no answer, so "
    "the threshold rejects it.",
    rule="Vote(2) Average on the test split, an answer kept when its confidence is ≥ 0.1 (the paper's "
    "threshold, not tuned): accuracy of the kept minus accuracy of all, (1) over every instance (a "
    "failed vote is wrong and rejected, the paper's convention), (2) over the instances the vote "
    "answers; bootstrap (relations, then instances) of the difference: holds if the 95 % interval lies "
    "above 0, does not hold if below, else inconclusive; Holm over the two rows. The share "
    "rejected is shown.",
    reads="estimates (vote2_average, test split, full answer spaces, reduction sum)",
    number=PaperNumber(
        "accuracy +8 percentage points, 10% of the dataset rejected, at threshold 0.1",
        model="gemma-7b",
        effect=0.08,
        derived="8 percentage points (§5.2) as a fraction",
        setting="BEAR, five templates, C^Vote_Average",
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def vote_threshold_raises_accuracy(t: StoreTables) -> list[Finding]:
    key, subject = "vote_threshold_raises_accuracy", "accuracy(C^Vote_Average ≥ 0.1) − accuracy(all)"
    head = headline_rows(t)
    gap = missing_estimators(key, t, subject, head, ["vote2_average"])
    if gap:
        return gap
    vote = head.filter(pl.col("estimator") == "vote2_average").sort("relation_id", "instance_id")
    correct = vote["correct"].cast(pl.Float64).to_numpy()
    kept = (vote["confidence"] >= THRESHOLD).cast(pl.Float64).to_numpy()
    answered = (vote["predicted_index"] != NO_ANSWER).cast(pl.Float64).to_numpy()
    res = relation_resamples(vote["relation_id"].to_numpy())
    out = []
    for scope, base in (("", np.ones_like(kept)), (" on the instances the vote answers", answered)):
        value = ratio(correct * kept, kept) - ratio(correct * base, base)
        diff = resample_ratio(correct * kept, kept, res) - resample_ratio(correct * base, base, res)
        low, high = bc_interval(diff, value)
        extra = (
            f"; accuracy {fmt(ratio(correct * kept, kept))} kept vs {fmt(ratio(correct * base, base))}; "
            f"rejected {fmt(1 - ratio(kept, base))} ({int(base.sum() - kept.sum())} of {int(base.sum())})"
        )
        out.append(
            interval_finding(
                key, t, subject + scope, "positive", value, low, high, int(base.sum()), "Δaccuracy", extra
            )
        )
    return out


# --- 3. Markers ----------------------------------------------------------------------------------

MARKER_COLUMNS = (
    "marker_possibly",
    "marker_certainly",
    *(f"marker_numeric_{p}" for p in (0, 25, 50, 75, 100)),
)
FIG6_GPT2 = Citation("§7", "gpt2 0.019 0.037 0.030 0.042 0.035 0.037 0.025", "Fig. 6")
FIG6_AVERAGE = Citation("§7", "Average 0.006 0.021 0.029 0.032 0.023 0.022 0.023", "Fig. 6")
FIG11_GPT2 = Citation("App. E", "gpt2 -0.013 -0.012 -0.015 -0.012 -0.010 -0.011 -0.008", "Fig. 11")
FIG11_AVERAGE = Citation("App. E", "Average -0.023 -0.016 -0.043 -0.046 -0.042 -0.037 -0.037", "Fig. 11")
# metric → (gpt2's cells, the models' average cells) per marker estimator, as printed
MARKER_PAPER = {
    "accuracy": (printed_cells(FIG11_GPT2, MARKER_COLUMNS), printed_cells(FIG11_AVERAGE, MARKER_COLUMNS)),
    "ace": (printed_cells(FIG6_GPT2, MARKER_COLUMNS), printed_cells(FIG6_AVERAGE, MARKER_COLUMNS)),
}


@claim(
    "markers_lower_accuracy_raise_ace",
    sources=(
        Citation(
            "§7",
            "Figure 6 indicates that for most models *ACE* actually increases under these injections. "
            "Verbalized strengthening injections consistently increase *ACE* across all models.",
        ),
        Citation(
            "§7",
            "Additionally, we found that the markers hurt model accuracy on the BEAR probe in all settings "
            "(see Appendix E).",
        ),
        Citation(
            "App. E", "we find that the injections significantly reduce accuracy, as shown in Figure 11."
        ),
        Citation("§7", "possibly certainly 0% 25% 50% 75% 100%", "Fig. 6"),
        FIG6_GPT2,
        FIG6_AVERAGE,
        FIG11_GPT2,
        FIG11_AVERAGE,
    ),
    stage="markers",
    title="Epistemic markers lower accuracy and raise ACE (marked template against its unmarked parent)",
    paper=KISSLING,
    setting=KISSLING_SETTING + " §7 injects 'possibly', 'certainly' and \"I'm x% confident\" (x = 0 … 100) "
    "into the templates; Fig. 6 prints ACE(injected) − ACE(original), Fig. 11 accuracy(injected) − "
    "accuracy(original), per model and injection.",
    rule="Each marker estimator (Base on the marked variant, stored on its parent template's row) "
    "against Base on the parent, paired on the same (instance, template) pairs of every marked "
    "template: paired bootstrap (relations, then pairs, resampled) of accuracy(marked) − "
    "accuracy(unmarked), claimed < 0, and ACE(marked) − ACE(unmarked), claimed > 0: holds if the 95 % "
    "interval excludes 0 on the claimed side, does not hold if on the other, else inconclusive; Holm "
    "over the rows. Each row shows the paper's cell for gpt2 and the models' average.",
    reads="estimates (marker_* and base on the marked parents, test split, full answer spaces, "
    "reduction sum), templates",
    number=PaperNumber(
        "gpt2: ΔACE +0.019 … +0.042, Δaccuracy −0.008 … −0.015 over the injections; the models' "
        "average: ΔACE +0.006 … +0.032, Δaccuracy −0.016 … −0.046",
        model=GPT2,
        setting="BEAR, C_Base, one template with and without the marker",
    ),
    preconditions=("marker templates scored (--template-kinds …,marker_verbal,marker_numeric)",),
)
def markers_lower_accuracy_raise_ace(t: StoreTables) -> list[Finding]:
    key = "markers_lower_accuracy_raise_ace"
    markers = [n for n, s in ESTIMATORS.items() if s.family == "markers"]
    est = t.estimates
    if est.is_empty():
        return not_testable(key, t, "markers", "no estimates on the test split")
    est = template_rows(t, [*markers, BASELINE])
    present = [m for m in markers if m in estimators_in(est)]
    if not present:
        return not_testable(
            key, t, "markers", "no marker templates were scored: run with --template-kinds "
            "curated,question,marker_verbal,marker_numeric (`kcal findings --build`, stage markers)"
        )  # fmt: skip
    # A pair (instance, parent template) is the unit, as the template-kind breakdown counts it.
    pairs = est.with_columns(instance_id=pair_key("template_id"))
    out = []
    for m in present:
        d = paired_difference(pairs, m, BASELINE, ["accuracy", "ace"])
        for metric, claimed, label in (("accuracy", "negative", "accuracy"), ("ace", "positive", "ACE")):
            r = d[metric]
            subject = f"{estimator_label(m)}: {label}(marked) − {label}(unmarked)"
            gpt2, average = (cells.get(m) for cells in MARKER_PAPER[metric])
            extra = f" over {r['n']} pairs"
            extra += f"; paper Δ{label}: gpt2 {gpt2}, average {average}" if gpt2 else ""
            out.append(difference_finding(key, t, subject, r, claimed, label, extra))
    return out
