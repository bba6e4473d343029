"""Claims of seed 000, Kissling, Merdjanovska & Akbik 2026 (Self-Aware Knowledge Probing): Margin
against Base, aggregating paraphrase templates, epistemic markers; the claims about Base itself
(overconfidence, reductions, option counts, ACE against accuracy) are in kissling_base.py."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    NO_ANSWER,
)
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    MULTI_TEMPLATE_FAMILIES,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    estimator_label,
    fmt,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    difference_row,
    estimators_in,
    headline_rows,
    join_instances,
    metric_row,
    pair_key,
    paired_difference,
    ratio,
    relation_resamples,
    resample_ratio,
    template_rows,
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
    "BEAR's closed-set probe (7,731 instances, 5 paraphrase templates per relation), ten causal LMs "
    "(GPT-2 124M to 1.5B, OPT-125M to 6.7B, Gemma 2B and 7B) and six masked LMs (BERT, RoBERTa and "
    "XLM-R, base and large)."
)


@claim(
    "margin_lowers_ace",
    reference="§4, Table 1 (intrinsic confidence); Fig. 4",
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
    number=PaperNumber(
        "−0.14 (GPT-2 124M, read off Fig. 4); −0.060 (Gemma 2B), −0.085 (OPT-6.7B), exact, from the "
        "figure legends in the authors' released notebooks",
        effect=-0.14,
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


# --- 2. Aggregation ------------------------------------------------------------------------------


def vote_levels(present: Iterable[str]) -> list[int]:
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
    "min_average_vs_vote2_brier",
    reference="§4, Table 1; App. C (Brier by aggregation)",
    title="Average^Min has a lower Brier score than the plurality vote: Brier(Min Average) − "
    "Brier(Vote(2) Average) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Average^Min was their best-calibrated estimator; the paper sets it "
    "against the plurality vote, Vote(2) Average (Table 1, App. C). Both need paraphrase templates "
    "that disagree; with few templates there is little to aggregate.",
    rule="Paired bootstrap (same resamples for both, clustered by relation) of Brier(Min Average) − "
    "Brier(Vote(2) Average) on the test instances both answered: holds if the 95 % interval lies "
    "below 0, does not hold if it lies above 0, else inconclusive.",
    reads="estimates (min_average and vote2_average, instance-grain rows, test split, full answer "
    "spaces, reduction sum)",
    number=PaperNumber(
        "no Brier released; on ACE, Average^Min vs Vote(2) Average 0.032 vs 0.068 (Gemma 2B), 0.024 vs "
        "0.029 (OPT-6.7B), 0.042 vs 0.081 (Gemma 7B), from the figure legends in the authors' released "
        "notebooks"
    ),
    preconditions=("at least 2 paraphrase templates per instance (--max-templates 2 or more)",),
)
def min_average_vs_vote2_brier(t: StoreTables) -> list[Finding]:
    key, subject = "min_average_vs_vote2_brier", "Brier(Min Average) − Brier(Vote(2) Average)"
    head = headline_rows(t)
    present = estimators_in(head)
    if "min_average" not in present:
        return not_testable(key, t, subject, "no Min Average estimates: " + ONE_TEMPLATE)
    if "vote2_average" not in present:
        return not_testable(key, t, subject, "no Vote(2) Average estimates: " + ONE_TEMPLATE)
    d = paired_difference(head, "min_average", "vote2_average", ["brier"])["brier"]
    multi = sorted(n for n, s in ESTIMATORS.items() if s.family in MULTI_TEMPLATE_FAMILIES and n in present)
    brier = {}
    for name in multi:
        g = head.filter(pl.col("estimator") == name)
        brier[name] = METRICS["brier"](g["confidence"].to_numpy(), g["correct"].to_numpy())
    ranking = ", ".join(
        f"{estimator_label(n)} {fmt(v)}" for n, v in sorted(brier.items(), key=lambda kv: (kv[1], kv[0]))[:4]
    )
    ranking = f"; lowest Brier of the multi-template estimators: {ranking}"
    return [difference_finding(key, t, subject, d, "negative", "Brier", ranking)]


@claim(
    "vote_trades_coverage_for_accuracy",
    reference="§4, Table 1 (Vote(k)); App. C (accuracy–rejection curves)",
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
    number=PaperNumber(
        "accuracy among answered at k = 2 → 5: 0.51 → 0.80, answered share 0.88 → 0.29 (read off App. C)",
        model="OPT-6.7B",
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
    wide = join_instances(
        head.filter(pl.col("estimator") == f"vote{k}_average").select(
            "relation_id",
            "instance_id",
            pl.col("correct").cast(pl.Float64).alias(f"correct{k}"),
            (pl.col("predicted_index") != NO_ANSWER).cast(pl.Float64).alias(f"answered{k}"),
        )
        for k in levels
    )
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


# --- 3. Markers ----------------------------------------------------------------------------------


@claim(
    "markers_lower_accuracy_raise_ace",
    reference="§5, semantic grounding (markers heatmaps: Δaccuracy, ΔACE)",
    stage="markers",
    title="Epistemic markers lower accuracy and raise ACE (marked template against its unmarked parent)",
    paper=KISSLING,
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
    number=PaperNumber(
        "GPT-2 124M: Δaccuracy −0.008 … −0.015, ΔACE +0.019 … +0.042 over the 7 markers; 16-model "
        "average: Δaccuracy −0.016 … −0.046, ΔACE +0.006 … +0.032 (from the annotated heatmaps in the "
        "authors' released notebooks)"
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
            "curated,question,marker_verbal,marker_numeric"
        )  # fmt: skip
    # A pair (instance, parent template) is the unit, as the template-kind breakdown counts it.
    pairs = est.with_columns(instance_id=pair_key("template_id"))
    out = []
    for m in present:
        d = paired_difference(pairs, m, BASELINE, ["accuracy", "ace"])
        for metric, claimed, label in (("accuracy", "negative", "accuracy"), ("ace", "positive", "ACE")):
            r = d[metric]
            subject = f"{estimator_label(m)}: {label}(marked) − {label}(unmarked)"
            out.append(difference_finding(key, t, subject, r, claimed, label, f" over {r['n']} pairs"))
    return out
