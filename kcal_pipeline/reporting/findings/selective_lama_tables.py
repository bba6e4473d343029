"""Claims of seed 002, Yoshikawa & Okazaki 2023 (Selective-LAMA), Tables 3 and 5: where Gap and
TemplateDiff beat Token by relation difficulty, and a function's quality as predictor against its
quality as estimator."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.resamples import N_RESAMPLES, Resamples
from kcal_pipeline.reporting.findings.core import (
    DESCRIPTIVE_KIND,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    estimator_label,
    fmt,
    fmt_signed,
    interval_finding,
    not_testable,
    not_testable_here,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    estimators_in,
    headline_rows,
)
from kcal_pipeline.reporting.findings.selective_lama import LAMA, MODELS, SELECTIVE_LAMA, SELECTIVE_STAGE
from kcal_pipeline.reporting.findings.selective_lama_blocks import (
    RelationBlocks,
    block_metrics,
    dev_headline_rows,
    group_contrast,
    paper_functions_in,
    side_by_side,
)

# --- Gap on easy relations, TemplateDiff on hard ones (Table 3) ----------------------------------

TABLE_3 = ("token", "gap", "template_diff")


def relation_difficulty(dev: pl.DataFrame, head: pl.DataFrame, needed: tuple[str, ...]) -> dict[str, float]:
    """Each relation's dev accuracy (of the prediction every function shares, read from Gap's rows),
    for the relations whose test rows have every `needed` function: {relation: accuracy}."""
    if dev.is_empty() or "gap" not in estimators_in(dev):
        return {}
    tested = set(side_by_side(head, list(needed))["relation_id"].to_list())
    accuracy = dev.filter(pl.col("estimator") == "gap").group_by("relation_id").agg(pl.col("correct").mean())
    return {r: float(a) for r, a in accuracy.iter_rows() if r in tested}


@claim(
    "gap_easy_templatediff_hard",
    stage="selective",
    sources=(
        Citation(
            "§4.3",
            "The results in Table 3 show that Gap is preferred over Token for easier relations with high "
            "accuracy and low RC-AUC for BERT-base, whereas TemplateDiff is preferred over Token for "
            "more difficult relations for RoBERTa-base.",
        ),
        Citation("§4.3", "All Token-win Gap-win Δ", "Table 3"),
        Citation("§4.3", "Accuracy 0.311 0.283 0.413 -0.130", "Table 3"),
        Citation("§4.3", "All Token-win TD-win Δ", "Table 3"),
        Citation("§4.3", "Accuracy 0.242 0.315 0.231 0.085", "Table 3"),
    ),
    number=PaperNumber(
        "mean accuracy of the Token-win vs the Gap-win relations 0.283 vs 0.413 (Δ -0.130, BERT-base); "
        "of the Token-win vs the TD-win relations 0.315 vs 0.231 (Δ 0.085, RoBERTa-base)",
        model="BERT-base (Gap), RoBERTa-base (TemplateDiff)",
        setting="T-REx relations, each function against Token per relation",
    ),
    preconditions=(
        "Token, Gap and TemplateDiff on the test split (TemplateDiff needs the subject mask) and a dev "
        "split, with relations on both sides of the dev median accuracy",
    ),
    title="Gap beats Token on easy relations, TemplateDiff on hard ones (Table 3): relations split at "
    "the median dev accuracy, mean over easy minus mean over hard of AURC(Gap) − AURC(Token) < 0, and "
    "mean over hard minus mean over easy of AURC(TemplateDiff) − AURC(Token) < 0",
    paper=SELECTIVE_LAMA,
    setting="LAMA T-REx: per relation, which of Token and Gap (BERT-base), of Token and TemplateDiff "
    "(RoBERTa-base), has the lower RC-AUC; Table 3 averages accuracy, RC-AUC and coverage over the "
    "relations each wins. kcal has one model, so both halves are read on it, and conditions the other "
    "way round: relations are grouped by difficulty on dev, then the functions compared on test (a "
    "grouping by who wins on test would select on the rows it judges).",
    rule="Dev split, headline selection: each relation's accuracy (the shared prediction, read from "
    "Gap's rows); relations above the median are easy, below it hard, at it left out. Test split, on "
    "the instances Token, Gap and TemplateDiff all answer: per relation ΔGap = AURC(Gap) − AURC(Token) "
    "and ΔTD = AURC(TemplateDiff) − AURC(Token). Rows: mean ΔGap over easy − over hard, and mean ΔTD "
    "over hard − over easy, each claimed < 0. Interval: the relation_resamples plan (relations, then "
    "instances within each drawn relation; groups fixed by dev; a resample without an easy or a hard "
    "relation left out), bias-corrected. Holds if the 95 % interval lies below 0, does not hold if "
    "above, else inconclusive; Holm across the two rows. The paper's own reading (mean test accuracy "
    "of the relations each function wins) is shown beside.",
    reads="estimates and dev_estimates (token, gap, template_diff; headline selection, full answer "
    "spaces, reduction sum)",
)
def gap_easy_templatediff_hard(t: StoreTables) -> list[Finding]:
    key = "gap_easy_templatediff_hard"
    subjects = {
        "gap": "mean over easy − over hard relations of AURC(Gap) − AURC(Token)",
        "template_diff": "mean over hard − over easy relations of AURC(TemplateDiff) − AURC(Token)",
    }
    head, dev = headline_rows(t), dev_headline_rows(t)
    missing = [estimator_label(e) for e in TABLE_3 if e not in estimators_in(head)]
    if missing:
        why = (
            f"no {', '.join(missing)} estimates on the headline template (Token needs an answer-conditional "
        )
        why += f"template, TemplateDiff the subject mask): {SELECTIVE_STAGE}"
        return [f for s in subjects.values() for f in not_testable(key, t, s, why)]
    levels = relation_difficulty(dev, head, TABLE_3)
    median = float(np.median(list(levels.values()))) if levels else math.nan
    at_median = sorted(r for r, v in levels.items() if v == median)
    levels = {r: v for r, v in levels.items() if v != median}
    if not any(v > median for v in levels.values()) or not any(v < median for v in levels.values()):
        why = (
            "relations on both sides of the median dev accuracy, each with dev rows of Gap and test "
            f"rows of Token, Gap and TemplateDiff ({len(levels)} off the median here; a dev split: "
            "--dev-fraction > 0)"
        )
        return [f for s in subjects.values() for f in not_testable(key, t, s, f"needs {why}")]
    wide = side_by_side(head, list(TABLE_3)).filter(pl.col("relation_id").is_in(list(levels)))
    blocks = RelationBlocks.of(wide)
    easy_code = np.array([levels[r] > median for r in blocks.names.tolist()])

    def deltas(res: Resamples) -> dict[str, np.ndarray]:
        aurc = {e: block_metrics(wide, e, res)["aurc"] for e in TABLE_3}
        return {e: aurc[e] - aurc["token"] for e in ("gap", "template_diff")}

    n_rel = blocks.names.size
    sample, boot = deltas(blocks.sample), deltas(blocks.boot)
    accuracy = block_metrics(wide, "token", blocks.sample)["accuracy"]
    per_relation = "; ".join(
        f"{r} dev accuracy {fmt(levels[r])} ({'easy' if e else 'hard'}): "
        f"ΔGap {fmt_signed(g)}, ΔTD {fmt_signed(d)}"
        for r, e, g, d in zip(
            blocks.names.tolist(), easy_code, sample["gap"], sample["template_diff"], strict=True
        )
    )
    out = []
    for e, subject in subjects.items():
        first = easy_code if e == "gap" else ~easy_code
        value = float(group_contrast(sample[e], first, np.zeros(n_rel, dtype=np.int64), 1)[0])
        low, high = bc_interval(
            group_contrast(boot[e], first[blocks.relation], blocks.owner, N_RESAMPLES), value
        )
        wins = sample[e] < 0
        paper_way = (
            f"; the paper's reading: mean test accuracy of the relations {estimator_label(e)} wins "
            f"{fmt(float(accuracy[wins].mean())) if wins.any() else 'n/a'} ({int(wins.sum())}) vs Token wins "
            f"{fmt(float(accuracy[~wins].mean())) if (~wins).any() else 'n/a'} ({int((~wins).sum())})"
        )
        out.append(
            interval_finding(
                key, t, subject, "negative", value, low, high, wide.height, "Δ",
                f"; median dev accuracy {fmt(median)}, {int(easy_code.sum())} easy and "
                f"{int((~easy_code).sum())} hard relations; {per_relation}{paper_way}",
                note=f"left out, at the median: {', '.join(at_median)}" if at_median else "",
            )
        )  # fmt: skip
    return out


# --- predictor against estimator (Table 5) -------------------------------------------------------


@claim(
    "predictor_estimator_uncorrelated",
    stage="selective",
    kind=DESCRIPTIVE_KIND,
    sources=(
        Citation(
            "§4.3",
            "In the experiments above, model predictions are always determined by the token log "
            "probability as in (3).",
        ),
        Citation(
            "§4.3",
            "Furthermore, there is no strong correlation between the performance of each confidence "
            "function as a predictor and a confidence estimator.",
            "Table 5",
        ),
        Citation("§4.3", "Table 5: P@1 based on different prediction scores for each dataset.", "Table 5"),
        Citation("§4.3", "BERT-base T 10.3 29.6 15.8 14.1 24.3", "Table 5"),
        Citation("§4.3", "S 10.5 29.6 14.6 14.4 24.1", "Table 5"),
        Citation("§4.3", "G 9.7 28.6 15.3 15.1 23.5", "Table 5"),
        Citation("§4.3", "DM 10.3 29.8 15.4 14.1 24.4", "Table 5"),
        Citation("§4.3", "DV 0.2 0.1 0.1 0.0 0.1", "Table 5"),
        Citation(
            "§6",
            "There is no strong correlation between the performance of each confidence function as a "
            "predictor and a confidence estimator (Table 5).",
        ),
    ),
    number=PaperNumber(
        "P@1 on all data, BERT-base: T 24.3, S 24.1, G 23.5, DM 24.4, DV 0.1 (Table 5), beside the RC-AUC"
        " of the same functions; no correlation coefficient is printed",
        model=MODELS,
        setting=LAMA + "; each function also used as the predictor (Gap extended by eq. 13, Sent over "
        "the top 100 Token candidates)",
    ),
    preconditions=("each confidence function's own prediction (its argmax over the options)",),
    title="A confidence function's quality as a predictor (P@1 when it picks the answer, Table 5) and "
    "as a confidence estimator (RC-AUC, Table 2) are not strongly correlated across functions",
    paper=SELECTIVE_LAMA,
    setting="LAMA on masked language models: every function but Reranking (the same prediction as "
    "Sent) is used once to pick the answer (P@1, Table 5) and once to rank the Token prediction "
    "(RC-AUC, Table 2); the paper reads the two tables side by side.",
    rule="Across the paper's functions: Pearson's r of P@1 (each function predicting) with −AURC "
    "(each ranking the shared prediction), shown without a verdict ('no strong correlation' has no "
    "threshold). Not testable here: kcal's functions all keep Base's prediction.",
    reads="estimates (the paper's functions, headline selection, test split)",
)
def predictor_estimator_uncorrelated(t: StoreTables) -> list[Finding]:
    key = "predictor_estimator_uncorrelated"
    head = headline_rows(t)
    present = paper_functions_in(head)
    shared = ""
    if present:
        rows = head.filter(pl.col("estimator") == present[0])
        shared = f" (here P@1 {fmt(float(rows['correct'].mean()))} for every function on its instances)"
    return not_testable_here(
        key,
        t,
        "r(P@1 as a predictor, −AURC as an estimator) across the confidence functions",
        "each confidence function's own prediction (its argmax over the options; Gap's by eq. 13): kcal's "
        "functions all keep Base's prediction (estimation/selective_lama.py), so their P@1 is one number"
        + shared,
        "none yet: a predicting variant of each function in estimation/selective_lama.py, then kcal "
        "findings --build (stage selective)",
    )
