"""Claims of seed 002, Yoshikawa & Okazaki 2023 (Selective-LAMA): which confidence function ranks
answers best (RC-AUC = kcal's AURC), RC-AUC against template bias (Table 1), Sent and Reranking
against Token (Table 2); Tables 3 and 5 are in selective_lama_tables.py, shared helpers in
selective_lama_blocks.py.

Every kcal confidence function keeps Base's prediction (estimation/selective_lama.py), as the paper
keeps the Token prediction (3) in §4.2–4.3: so accuracy, and which answer each instance gets, are the
same for every function, and the functions differ only in how they rank those answers."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.resamples import N_RESAMPLES, Resamples
from kcal_pipeline.reporting.findings.core import (
    NOT_TESTABLE,
    Citation,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    descriptive_finding,
    difference_finding,
    estimator_label,
    fmt,
    interval_finding,
    not_testable,
    not_testable_here,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    estimators_in,
    headline_rows,
    paired_difference,
)
from kcal_pipeline.reporting.findings.selective_lama_blocks import (
    MIN_RELATIONS,
    PAPER_FUNCTIONS,
    TOP_PREDICTIONS,
    RelationBlocks,
    aurc_of,
    block_metrics,
    dev_headline_rows,
    paper_functions_in,
    pearson_by,
    prediction_coverage,
    side_by_side,
)

SELECTIVE_LAMA = Paper(
    "002",
    "Selective-LAMA, Yoshikawa & Okazaki 2023 (seed 002)",
    "Yoshikawa & Okazaki 2023, Selective-LAMA: Selective Prediction for Confidence-Aware Evaluation of "
    "Language Models (Findings of EACL 2023)",
    file="yoshikawa-selective-lama.txt",
)
SELECTIVE_STAGE = (
    "run kcal findings --build (stage selective: one template, subject mask and dropout passes), or "
    "kcal demo --subject-mask --dropout"
)
MODELS = "BERT-base, BERT-large, RoBERTa-base"
LAMA = "LAMA probe (Google-RE, T-REx, ConceptNet, SQuAD), top-1 over the vocabulary"


# --- Token is not always the best ----------------------------------------------------------------


@claim(
    "selective_lama_best_function",
    stage="selective",
    sources=(
        Citation(
            "Abstract",
            "Our evaluation reveals the importance of the choice of confidence functions by showing "
            "that simply relying on token probabilities is not always the best choice.",
        ),
        Citation(
            "§4.3",
            "While the simple Token metric constantly performs well, the best confidence function "
            "depends on the model and dataset.",
            "Table 2",
        ),
        Citation("§4.3", "BERT-base Token .775 .118 .434 .611 .478 .686 .755 .545", "Table 2"),
        Citation("§4.3", "Gap .798 .133 .422 .604 .470 .714 .794 .548", "Table 2"),
        Citation(
            "§6",
            "The token log probability is not always the best choice, and the best confidence function "
            "depends on the language model and the dataset (Table 2).",
        ),
    ),
    number=PaperNumber(
        "Token does not have the lowest RC-AUC in every column of Table 2: Gap, DropoutMean and "
        "TemplateDiff each beat it in some column",
        model=MODELS,
        setting=LAMA,
        effect=-0.008,
        derived=".470 − .478, Gap − Token (BERT-base, T-REx All; Gap is that column's lowest, Table 2)",
    ),
    preconditions=(
        "Token (an answer-conditional headline template) and another of the paper's functions on the "
        "dev and the test split",
    ),
    title="Token is not always the best confidence function: the paper's function with the lowest dev "
    "AURC other than Token beats Token on test, AURC(it) − AURC(Token) < 0; which function is lowest "
    "per relation is shown beside",
    paper=SELECTIVE_LAMA,
    setting="LAMA's open-vocabulary cloze questions on masked language models, every function ranking "
    "the Token prediction; Table 2 prints RC-AUC per dataset and model and the best function changes "
    "with both. kcal adapts the functions to a closed answer set (estimation/selective_lama.py): Token "
    "is the log-probability of the predicted answer's tokens after the subject, every function keeps "
    "Base's prediction; one model here, so 'depends on the model' is not tested, and relations stand "
    "in for the paper's datasets.",
    rule="On the dev split's headline selection, each of the paper's functions other than Token "
    "(Sent, Gap, Reranking, DropoutMean, DropoutVar, TemplateDiff, those present) is scored by AURC "
    "(Selective-LAMA's RC-AUC, lower better) on the instances Token answers too; the lowest is the "
    "comparator. On the test split, paired bootstrap (metric_differences' resampling: relations, "
    "then instances; bias-corrected) of AURC(comparator) − AURC(Token) on the instances both answer: "
    "holds if the 95 % interval lies below 0 (Token is not the best here), does not hold if above "
    "(Token beats it), else inconclusive. Each function's AURC on all its own test instances (the "
    "paper's convention) is shown beside. A descriptive row names the lowest-AURC function per "
    "relation (on the test instances every function there answers).",
    reads="estimates and dev_estimates (the paper's functions, headline selection, full answer "
    "spaces, reduction sum)",
)
def selective_lama_best_function(t: StoreTables) -> list[Finding]:
    key, subject = "selective_lama_best_function", "AURC(dev's best other function) − AURC(Token)"
    head, dev = headline_rows(t), dev_headline_rows(t)
    if "token" not in estimators_in(head):
        return not_testable(
            key, t, subject, "no Token estimates on the headline template: Token needs the object "
            f"after the subject (an answer-conditional template); {SELECTIVE_STAGE}"
        )  # fmt: skip
    others = [e for e in paper_functions_in(head) if e != "token" and e in estimators_in(dev)]
    if "token" not in estimators_in(dev) or not others:
        return not_testable(
            key, t, subject, "no dev rows of Token and another of the paper's functions to choose the "
            f"comparator on (a dev split: --dev-fraction > 0); {SELECTIVE_STAGE}"
        )  # fmt: skip
    token_dev = dev.filter(pl.col("estimator") == "token")
    on_dev = {e: aurc_of(dev, e, token_dev) for e in others}
    chosen = min(others, key=lambda e: math.inf if math.isnan(on_dev[e][0]) else on_dev[e][0])
    d = paired_difference(head, chosen, "token", ["aurc"])["aurc"]
    dev_listing = ", ".join(f"{estimator_label(e)} {fmt(v)}" for e, (v, _) in on_dev.items())
    own = ", ".join(
        f"{estimator_label(e)} {fmt(v)} (n = {n})"
        for e in paper_functions_in(head)
        for v, n in [aurc_of(head, e)]
    )
    extra = (
        f" on the {d['n']} test instances both answer; chosen on dev (AURC on the {on_dev[chosen][1]} "
        f"dev instances Token answers: {dev_listing}); each on its own test instances (the paper's "
        f"convention): {own}"
    )
    subject = f"AURC({estimator_label(chosen)}) − AURC(Token)"
    return [
        difference_finding(key, t, subject, d, "negative", "AURC", extra),
        lowest_per_relation(key, t, head),
    ]


def lowest_per_relation(key: str, t: StoreTables, head: pl.DataFrame) -> Finding:
    """Which of the paper's functions has the lowest test AURC in each relation, on the instances
    every function present there answers: does the best function depend on the data?"""
    shown, winners = [], []
    for (relation,), rows in head.filter(pl.col("estimator").is_in(PAPER_FUNCTIONS)).group_by(
        "relation_id", maintain_order=True
    ):
        functions = paper_functions_in(rows)
        shared = side_by_side(rows, functions)
        scores = {e: aurc_of(rows, e, shared)[0] for e in functions}
        best = min(functions, key=lambda e: scores[e])
        winners.append(best)
        listing = ", ".join(f"{estimator_label(e)} {fmt(v)}" for e, v in scores.items())
        shown.append((relation, f"{relation} {estimator_label(best)} ({listing}; n = {shared.height})"))
    listing = "; ".join(s for _, s in sorted(shown))
    numbers = f"lowest: {len(set(winners))} distinct function(s) over {len(winners)} relation(s): {listing}"
    return descriptive_finding(
        key, t, "the lowest-AURC function per relation (test)", numbers, n=len(winners)
    )


# --- RC-AUC against template bias (Table 1) ------------------------------------------------------

TABLE_1_ROWS = (
    "Accuracy 0.387 -0.247 0.469 -0.244 0.512 -0.224",
    "Token 0.344 ↓ -0.316 ↓ 0.438 ↓ -0.292 ↓ 0.484 ↓ -0.277 ↓",
    "Sent 0.355 ↓ -0.290 ↓ 0.441 ↓ -0.285 ↓ 0.499 ↓ -0.249 ↓",
    "Gap 0.351 ↓ -0.314 ↓ 0.430 ↓ -0.294 ↓ 0.474 ↓ -0.285 ↓",
    "Reranking 0.350 ↓ -0.286 ↓ 0.452 ↓ -0.283 ↓ 0.498 ↓ -0.266 ↓",
    "DropoutMean 0.338 ↓ -0.319 ↓ 0.433 ↓ -0.293 ↓ 0.486 ↓ -0.280 ↓",
    "DropoutVar 0.419 ↑ -0.125 ↑ 0.470 ↑ -0.124 ↑ 0.456 ↓ -0.166 ↑",
    "TemplateDiff 0.349 ↓ -0.317 ↓ 0.427 ↓ -0.299 ↓ 0.486 ↓ -0.271 ↓",
)
COV_A_NEEDS = (
    "each test instance's gold option: Cov^A (eq. 12) counts the gold answers among a relation's five "
    "most frequent predictions, and StoreTables.instances carries n_gold only (a wrong prediction does "
    "not reveal its gold)"
)


@claim(
    "rcauc_less_template_biased",
    sources=(
        Citation(
            "§4.2",
            "Compared to the conventional accuracy metric, all RC-AUC metrics except DropoutVar show a "
            "weaker positive correlation with answer coverage and a stronger negative correlation with "
            "prediction coverage, indicating that the RC-AUC metrics are less likely to overestimate "
            "template-biased predictions and results from intrinsically biased test examples.",
        ),
        Citation(
            "§4.2",
            r"For each relation subset \mathcal{D}_r , we first identify five most frequent tokens "
            r"$\mathcal{W}^{\text{freq}}(r)$ predicted by a model. Prediction coverage is the proportion "
            "of predicted tokens covered by these tokens:",
        ),
        Citation(
            "§4.2",
            "Answer coverage is calculated as the proportion of gold answers covered by the frequently "
            "predicted tokens:",
        ),
        Citation("§4.2", "which contains 34k facts about 41 different relations"),
        Citation(
            "§4.2",
            "Table 1: Correlation between evaluation metrics and template bias metrics: answer coverage "
            "(Cov^A) and prediction coverage (Cov^P) on the T-REx dataset. Here, we use the sign-reversed "
            "RC-AUC values for easier interpretation.",
            "Table 1",
        ),
        *(Citation("§4.2", row, "Table 1") for row in TABLE_1_ROWS),
    ),
    number=PaperNumber(
        "correlation with Cov^P, BERT-base: accuracy -0.247; sign-reversed RC-AUC with Token -0.316, "
        "Sent -0.290, Gap -0.314, Reranking -0.286, DropoutMean -0.319, TemplateDiff -0.317, and "
        "DropoutVar -0.125 (the exception)",
        model="BERT-base (BERT-large and RoBERTa-base in the same rows)",
        setting="T-REx, 41 relations, one template each",
    ),
    preconditions=(
        "three or more relations, each with one option list in one order (BEAR's own answer space), so "
        "that the predicted option index names the answer Cov^P counts",
    ),
    title="RC-AUC is less template-biased than accuracy (Table 1): over relations, the sign-reversed "
    "AURC correlates more negatively with prediction coverage than accuracy does, ρ(−AURC, Cov^P) − "
    "ρ(accuracy, Cov^P) < 0, per confidence function; the answer-coverage half is not testable here",
    paper=SELECTIVE_LAMA,
    setting="LAMA T-REx on masked language models: per relation, Cov^P is the share of its "
    "predictions that are one of its five most frequent predictions (eq. 11), Cov^A the share of its "
    "gold answers among those five (eq. 12); Table 1 correlates them over the 41 relations with "
    "accuracy and with each function's sign-reversed RC-AUC. kcal: BEAR relations with 5–25 options, "
    "each relation's headline template; a relation with at most five options has Cov^P = 1 by "
    "construction. The paper does not name its correlation: Pearson's is used.",
    rule="Per function (those of the paper present; DropoutVar, the paper's exception, descriptive), on "
    "the test instances of the headline selection it answers: per relation its accuracy, its AURC "
    "(= RC-AUC) and Cov^P of the shared prediction; Pearson's r over relations of −AURC with Cov^P "
    "minus that of accuracy with Cov^P, claimed < 0. Interval: the relation_resamples plan (relations, "
    "then instances within each drawn relation; every statistic, Cov^P included, recomputed on each "
    "drawn relation's resampled instances; a resample whose r is undefined left out), bias-corrected. "
    "Holds if the 95 % interval lies below 0, does not hold if above, else inconclusive; Holm across "
    "the functions. Cov^A: not testable here.",
    reads="estimates (the paper's functions, headline selection, test split, full answer spaces, "
    "reduction sum; predicted_index)",
)
def rcauc_less_template_biased(t: StoreTables) -> list[Finding]:
    key = "rcauc_less_template_biased"
    head = headline_rows(t)
    out = []
    for estimator in paper_functions_in(head):
        out.append(coverage_correlation(key, t, head, estimator))
    if not out:
        out = not_testable(
            key, t, "ρ(−AURC, Cov^P) − ρ(accuracy, Cov^P)", "none of the paper's confidence functions in "
            "the estimates: run kcal findings --build (stage bear)"
        )  # fmt: skip
    return out + not_testable_here(
        key,
        t,
        "ρ(−AURC, Cov^A) − ρ(accuracy, Cov^A)",
        COV_A_NEEDS,
        "kcal findings --build, once read_store_tables carries probe_instances' gold option indices",
    )


def coverage_correlation(key: str, t: StoreTables, head: pl.DataFrame, estimator: str) -> Finding:
    """One function's row of Table 1's Cov^P column against accuracy's, with its interval."""
    label = estimator_label(estimator)
    subject = f"ρ(−AURC({label}), Cov^P) − ρ(accuracy, Cov^P)"
    wide = side_by_side(head, [estimator])
    blocks = RelationBlocks.of(wide) if wide.height else None
    if blocks is None or blocks.names.size < MIN_RELATIONS:
        found = 0 if blocks is None else blocks.names.size
        return Finding(
            key, t.model_id, subject, NOT_TESTABLE,
            note=f"{label} answers in {found} relation(s); a correlation over relations needs "
            f"{MIN_RELATIONS} or more",
        )  # fmt: skip
    predicted = wide["predicted_index"].to_numpy()

    def difference(res: Resamples, group: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
        m = block_metrics(wide, estimator, res)
        cov = prediction_coverage(predicted, res)
        rc = pearson_by(-m["aurc"], cov, group, n)
        acc = pearson_by(m["accuracy"], cov, group, n)
        return rc - acc, rc, acc, m["accuracy"], m["aurc"], cov

    n_rel = blocks.names.size
    point, rc, acc, accuracy, aurc, cov = difference(blocks.sample, np.zeros(n_rel, dtype=np.int64), 1)
    per_relation = ", ".join(
        f"{r} {fmt(a)}/{fmt(u)}/{fmt(c)}"
        for r, a, u, c in zip(blocks.names.tolist(), accuracy, aurc, cov, strict=True)
    )
    numbers = (
        f"ρ(−AURC, Cov^P) {fmt(float(rc[0]))}, ρ(accuracy, Cov^P) {fmt(float(acc[0]))} over {n_rel} "
        f"relations; per relation accuracy/AURC/Cov^P: {per_relation}"
    )
    if math.isnan(point[0]):
        return Finding(
            key, t.model_id, subject, NOT_TESTABLE, n=wide.height, numbers=numbers,
            note="a correlation is undefined: Cov^P, accuracy or AURC is the same in every relation "
            f"(a relation with at most {TOP_PREDICTIONS} options has Cov^P = 1)",
        )  # fmt: skip
    value = float(point[0])
    boot = difference(blocks.boot, blocks.owner, N_RESAMPLES)[0]
    low, high = bc_interval(boot, value)
    if estimator == "dropout_var":
        note = "DropoutVar: the paper's exception (its row goes the other way), shown without a verdict"
        return descriptive_finding(key, t, subject, f"Δρ {fmt(value)} [{fmt(low)}, {fmt(high)}]; {numbers}",
                                   value, low, high, wide.height, note)  # fmt: skip
    return interval_finding(key, t, subject, "negative", value, low, high, wide.height, "Δρ", f"; {numbers}")


# --- Token against Sent and Reranking ------------------------------------------------------------


@claim(
    "sent_reranking_worse_than_token",
    stage="selective",
    sources=(
        Citation("§4.3", "Table 2: RC-AUC calculated on each dataset (lower is better).", "Table 2"),
        Citation("§4.3", "BERT-base Token .775 .118 .434 .611 .478 .686 .755 .545", "Table 2"),
        Citation("§4.3", "Sent .834 .163 .549 .776 .594 .797 .815 .652", "Table 2"),
        Citation("§4.3", "Reranking .835 .248 .580 .623 .597 .834 .798 .633", "Table 2"),
    ),
    number=PaperNumber(
        "Sent and Reranking have a higher RC-AUC than Token in every column of Table 2, for each of "
        "the three models (the BERT-base rows quoted)",
        model=MODELS,
        setting=LAMA,
    ),
    title="Sent and Reranking rank answers worse than Token: AURC(Sent) − AURC(Token) > 0 and "
    "AURC(Reranking) − AURC(Token) > 0",
    paper=SELECTIVE_LAMA,
    setting="LAMA's open-vocabulary cloze questions on masked language models, each function ranking "
    "the Token prediction (Table 2; the paper states no sentence on it, its table does); kcal adapts "
    "the confidence functions to a closed answer set (estimation/selective_lama.py): Token is the "
    "log-probability of the predicted answer's tokens given the subject, Sent the length-normalised "
    "log-likelihood of the whole statement, Reranking the predicted answer's rank under a second "
    "scoring rule (the other length treatment, where the paper reranks its top 100 by Sent).",
    rule="On the headline selection's test instances where Token is defined (answer-conditional "
    "templates: the object after the subject), paired bootstrap (metric_differences' resampling: "
    "relations, then instances; bias-corrected) of AURC(Sent) − AURC(Token) and AURC(Reranking) − "
    "AURC(Token), each claimed > 0: holds if the 95 % interval lies above 0, does not hold if below, "
    "else inconclusive; Holm across the two rows. Each function's AURC on all its own instances (the "
    "paper's convention) is shown beside.",
    reads="estimates (token, sent, reranking; headline selection, test split, full answer spaces, "
    "reduction sum)",
    preconditions=("an answer-conditional headline template (Token is defined only there)",),
)
def sent_reranking_worse_than_token(t: StoreTables) -> list[Finding]:
    key = "sent_reranking_worse_than_token"
    head = headline_rows(t)
    present = estimators_in(head)
    out = []
    for other in ("sent", "reranking"):
        subject = f"AURC({estimator_label(other)}) − AURC(Token)"
        if "token" not in present:
            out += not_testable(
                key, t, subject, "no Token estimates on the headline template: Token needs the object "
                f"after the subject (an answer-conditional template); {SELECTIVE_STAGE}"
            )  # fmt: skip
            continue
        if other not in present:
            out += not_testable(key, t, subject, f"no {estimator_label(other)} estimates: {SELECTIVE_STAGE}")
            continue
        d = paired_difference(head, other, "token", ["aurc"])["aurc"]
        own = ", ".join(
            f"{estimator_label(e)} {fmt(v)} (n = {n})"
            for e in (other, "token")
            for v, n in [aurc_of(head, e)]
        )
        shown = (
            f" on the {d['n']} instances Token is defined on; each on its own instances (the paper's "
            f"convention): {own}"
        )
        out.append(difference_finding(key, t, subject, d, "positive", "AURC", shown))
    return out
