"""Claims of seed 002, Yoshikawa & Okazaki 2023 (Selective-LAMA): confidence functions ranked by
RC-AUC (AURC), template bias."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting.findings.core import (
    BASELINE,
    ESTIMATORS,
    SELECTIVE_LAMA_FAMILY,
    Finding,
    Paper,
    StoreTables,
    claim,
    difference_verdict,
    estimator_label,
    estimators_in,
    fmt,
    fmt_ci,
    headline_rows,
    not_testable,
    paired_difference,
)

SELECTIVE_LAMA = Paper(
    "002",
    "Selective-LAMA, Yoshikawa & Okazaki 2023 (seed 002)",
    "Yoshikawa & Okazaki 2023, Selective-LAMA: Selective Prediction for Confidence-Aware Evaluation of "
    "Language Models (Findings of EACL 2023)",
)


@claim(
    "selective_lama_best_function",
    where="§5, Table 2",
    stage="selective",
    title="The choice of confidence function matters: the one with the lowest AURC beats the runner-up",
    paper=SELECTIVE_LAMA,
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
    head = headline_rows(t)
    names = [n for n, s in ESTIMATORS.items() if (s.family == SELECTIVE_LAMA_FAMILY or n == BASELINE)]
    present = estimators_in(head)
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
        return not_testable(key, t, subject, "fewer than two confidence functions on the test instances")
    (_, best), (_, runner) = ranked[0], ranked[1]
    d = paired_difference(head, best, runner, ["aurc"])["aurc"]
    listing = ", ".join(f"{estimator_label(n)} {fmt(v)}" for v, n in ranked)
    partial = [f"{estimator_label(n)} {fmt(v)} (n = {k})" for n, (v, k) in candidates.items() if k != full]
    note = f"not ranked, defined on fewer instances: {', '.join(partial)}" if partial else ""
    return [
        Finding(
            key,
            t.model_id,
            f"AURC({estimator_label(best)}) − AURC({estimator_label(runner)})",
            difference_verdict(d["ci_low"], d["ci_high"], "negative"),
            d["difference"],
            d["ci_low"],
            d["ci_high"],
            d["n"],
            f"ΔAURC {fmt_ci(d['difference'], d['ci_low'], d['ci_high'])}; AURC: {listing}",
            note,
        )
    ]
