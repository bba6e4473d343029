"""Claims of seed 000, Kissling, Merdjanovska & Akbik 2026 (Self-Aware Knowledge Probing): Margin
against Base, aggregating paraphrase templates, reductions, option counts, epistemic markers."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import NO_ANSWER
from kcal_pipeline.evaluation.bootstrap import resample_plan
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting.findings.core import (
    BASELINE,
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    MULTI_TEMPLATE_FAMILIES,
    N_RESAMPLES,
    REDUCTION,
    SEED,
    Finding,
    Paper,
    StoreTables,
    ace_floor_note,
    bc_interval,
    claim,
    difference_row,
    difference_verdict,
    estimator_label,
    estimators_in,
    fmt,
    fmt_ci,
    headline_rows,
    metric_row,
    not_testable,
    paired_difference,
    resample_sums,
)

KISSLING = Paper(
    "000",
    "Kissling et al. 2026 (seed 000)",
    "Kissling, Merdjanovska & Akbik 2026, Self-Aware Knowledge Probing: Evaluating Language Models' "
    "Relational Knowledge through Confidence Calibration (arXiv 2601.18901)",
)
KISSLING_SETTING = (
    "BEAR's closed-set probe (7,731 instances, 5 paraphrase templates per relation), ten causal LMs "
    "(GPT-2 124M to 1.5B, OPT-125M to 6.7B, Gemma 2B and 7B) and six masked LMs (BERT, RoBERTa and "
    "XLM-R, base and large)."
)


@claim(
    "margin_lowers_ace",
    where="§4, Table 1 (intrinsic confidence)",
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
    "min_average_best_brier",
    where="§4, Table 1 (structural consistency)",
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
    head = headline_rows(t)
    present = estimators_in(head)
    if "min_average" not in present:
        return not_testable(key, t, "Min Average", "no Min Average estimates: " + ONE_TEMPLATE)
    if not vote_levels(present):
        return not_testable(key, t, "Min Average", ONE_TEMPLATE)
    multi = [
        n
        for n, s in ESTIMATORS.items()
        if s.family in MULTI_TEMPLATE_FAMILIES and n in present and n != "min_average"
    ]
    if not multi:
        return not_testable(key, t, "Min Average", "no other multi-template estimator to compare with")
    brier = {}
    for name in ["min_average", *multi]:
        g = head.filter(pl.col("estimator") == name)
        brier[name] = METRICS["brier"](g["confidence"].to_numpy(), g["correct"].to_numpy())
    best_other = min(multi, key=lambda n: (brier[n], n))
    d = paired_difference(head, "min_average", best_other, ["brier"])["brier"]
    ranking = ", ".join(
        f"{estimator_label(n)} {fmt(v)}" for n, v in sorted(brier.items(), key=lambda kv: (kv[1], kv[0]))[:4]
    )
    return [
        Finding(
            key,
            t.model_id,
            f"Brier(Min Average) − Brier({estimator_label(best_other)})",
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
    where="§4, Table 1 (Vote(k))",
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
        c: resample_sums(column[c], res)
        for c in (f"correct{lo}", f"answered{lo}", f"correct{hi}", f"answered{hi}")
    }
    with np.errstate(divide="ignore", invalid="ignore"):  # nothing answered in a resample: NaN, left out
        diff = sums[f"correct{hi}"] / sums[f"answered{hi}"] - sums[f"correct{lo}"] / sums[f"answered{lo}"]
    value = _accuracy_among_answered(
        column[f"correct{hi}"], column[f"answered{hi}"]
    ) - _accuracy_among_answered(column[f"correct{lo}"], column[f"answered{lo}"])
    low, high = bc_interval(diff, value)
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
    where="§5, semantic grounding",
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
)
def markers_lower_accuracy_raise_ace(t: StoreTables) -> list[Finding]:
    key = "markers_lower_accuracy_raise_ace"
    markers = [n for n, s in ESTIMATORS.items() if s.family == "markers"]
    est = t.estimates
    if est.is_empty():
        return not_testable(key, t, "markers", "no estimates on the test split")
    est = est.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("template_id").is_not_null()
        & pl.col("estimator").is_in([*markers, BASELINE])
    )
    present = [m for m in markers if m in estimators_in(est)]
    if not present:
        return not_testable(
            key, t, "markers", "no marker templates were scored: run with --template-kinds "
            "curated,question,marker_verbal,marker_numeric"
        )  # fmt: skip
    # A pair (instance, parent template) is the unit, as the template-kind breakdown counts it.
    pairs = est.with_columns(instance_id=pl.col("instance_id") + "|" + pl.col("template_id"))
    out = []
    for m in present:
        d = paired_difference(pairs, m, BASELINE, ["accuracy", "ace"])
        for metric, claimed, label in (("accuracy", "negative", "accuracy"), ("ace", "positive", "ACE")):
            r = d[metric]
            out.append(
                Finding(
                    key,
                    t.model_id,
                    f"{estimator_label(m)}: {label}(marked) − {label}(unmarked)",
                    difference_verdict(r["ci_low"], r["ci_high"], claimed),
                    r["difference"],
                    r["ci_low"],
                    r["ci_high"],
                    r["n"],
                    f"Δ{label} {fmt_ci(r['difference'], r['ci_low'], r['ci_high'])} over {r['n']} pairs",
                )
            )
    return out
