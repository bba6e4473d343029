"""Claims of seed 003, Wang et al. 2026 (MACE): questions with several correct answers."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.bootstrap import resample_plan
from kcal_pipeline.evaluation.scopes import MACE_DOMAIN
from kcal_pipeline.reporting.findings.core import (
    BASELINE,
    BRIER_MARGIN,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    N_RESAMPLES,
    SEED,
    Finding,
    Paper,
    StoreTables,
    bc_interval,
    claim,
    dev_size_note,
    difference_verdict,
    estimators_in,
    few_dev_precondition,
    fits_of,
    fmt,
    fmt_ci,
    headline_rows,
    not_testable,
    paired_difference,
    resample_sums,
)

MACE = Paper(
    "003",
    "MACE, Wang et al. 2026 (seed 003)",
    "Wang et al. 2026, Evaluating and Calibrating LLM Confidence on Questions with Multiple Correct "
    "Answers (MACE, arXiv 2602.07842)",
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
    head = headline_rows(t)
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
        return not_testable(key, t, subject, groups)
    means, resampled = {}, {}
    for n_gold, g in groups.items():
        values = g[column].cast(pl.Float64).to_numpy()
        res = resample_plan(g["relation_id"].to_numpy(), N_RESAMPLES, SEED + n_gold)[0].resamples
        means[n_gold] = float(values.mean())
        resampled[n_gold] = resample_sums(values, res) / res.sizes
    lo, hi = min(groups), max(groups)
    value = means[hi] - means[lo]
    low, high = bc_interval(resampled[hi] - resampled[lo], value)
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
    where="§4, Fig. 2",
    stage="mace",
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
    where="§4, Fig. 2",
    stage="mace",
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
    where="§5, Table 4",
    stage="mace",
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
    head = headline_rows(t, reduction=None)
    present = estimators_in(head)
    if not {"sca_tau0", "sca_tuned"} <= present:
        why = (
            "no SCA estimates: SCA needs answer-conditional question templates on a MACE relation "
            "(--relation mace-award with --template-kinds including question)"
            if "sca_tau0" not in present
            else "no SCA (τ tuned): it needs a dev split (--dev-fraction > 0)"
        )
        return not_testable(key, t, subject, why)
    d = paired_difference(head, "sca_tuned", "sca_tau0", ["brier", "ace"])
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
    fitted = fits_of(t.fits, "sca_tuned", "answer_sum")
    if fitted_note := dev_size_note(t.fits, "sca_tuned", "answer_sum"):
        notes.append(fitted_note)
    taus = fitted.filter(pl.col("parameter") == "tau")["value"] if not fitted.is_empty() else pl.Series([])
    if taus.len() and (taus == 0).all():
        notes.append("τ was tuned to 0 everywhere, so both are the same estimator here")
    a = d.get("ace")
    ace = f"; ΔACE {fmt_ci(a['difference'], a['ci_low'], a['ci_high'])}" if a else ""
    if failed := few_dev_precondition(t.fits, "sca_tuned", "answer_sum"):
        shown = f"ΔBrier {fmt_ci(b['difference'], b['ci_low'], b['ci_high'])}{ace}"
        return not_testable(key, t, subject, f"{failed} ({shown}; {'; '.join(notes)})")
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
