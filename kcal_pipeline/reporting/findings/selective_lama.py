"""Claims of seed 002, Yoshikawa & Okazaki 2023 (Selective-LAMA): confidence functions ranked by
RC-AUC (AURC), template bias."""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS, FULL_ANSWER_SPACE, HEADLINE_SPLIT
from kcal_pipeline.evaluation.bootstrap import N_RESAMPLES, PAD, Resamples, batched_metrics
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    REDUCTION,
    SELECTIVE_LAMA_FAMILY,
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
    estimators_in,
    headline_rows,
    paired_difference,
    relation_resamples,
)

SELECTIVE_LAMA = Paper(
    "002",
    "Selective-LAMA, Yoshikawa & Okazaki 2023 (seed 002)",
    "Yoshikawa & Okazaki 2023, Selective-LAMA: Selective Prediction for Confidence-Aware Evaluation of "
    "Language Models (Findings of EACL 2023)",
    file="yoshikawa-selective-lama.txt",
)
ABSTRACT_ONLY = "no number available to kcal (only the abstract was accessible)"
SELECTIVE_STAGE = (
    "run kcal findings --build (stage selective: one template, subject mask and dropout passes), or "
    "kcal demo --subject-mask --dropout"
)


@claim(
    "selective_lama_best_function",
    reference="Table 2; abstract",
    stage="selective",
    number=PaperNumber(
        f'{ABSTRACT_ONLY}; the abstract: "simply relying on token probabilities is not always the best '
        'choice" (which function wins where is not stated)'
    ),
    preconditions=(
        "two or more confidence functions scored on the same test instances (Base, Sent, Gap, "
        "Reranking; TemplateDiff needs the subject mask, DropoutMean and DropoutVar the dropout passes)",
    ),
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
    subject = f"AURC({estimator_label(best)}) − AURC({estimator_label(runner)})"
    return [difference_finding(key, t, subject, d, "negative", "AURC", f"; AURC: {listing}", note)]


# --- template bias -------------------------------------------------------------------------------

ONE_CURATED = (
    "fewer than two curated templates in every relation, so there is no spread over templates: run "
    "kcal findings --build (stage bear), or kcal demo with --max-templates 2 or more (default 5)"
)


def relation_blocks(res: Resamples, relation: np.ndarray, sizes: np.ndarray) -> tuple[Resamples, np.ndarray]:
    """Each two-stage resample of resample_plan's scope "all" cut into its drawn relations: one
    block of rows per drawn relation (as clustered_resamples lays them out: the drawn relations in
    turn, each with as many rows as it has), as Resamples [blocks, width], and each block's resample
    number. A relation drawn twice gives two blocks, each with its own resampled instances.
    `relation` is every row's relation code, `sizes` each code's row count."""
    blocks, owner = [], []
    for b in range(res.n_resamples):
        rows, pos = res.rows(b), 0
        while pos < rows.size:
            block = rows[pos : pos + sizes[relation[rows[pos]]]]
            if (relation[block] != relation[block[0]]).any() or block.size != sizes[relation[block[0]]]:
                raise ValueError(f"resample {b}: rows at {pos} are not one drawn relation's block")
            blocks.append(block)
            owner.append(b)
            pos += block.size
    lengths = np.array([blk.size for blk in blocks], dtype=np.int64)
    indices = np.full((len(blocks), int(lengths.max())), PAD, dtype=np.int32)
    indices[np.arange(indices.shape[1]) < lengths[:, None]] = np.concatenate(blocks)
    return Resamples(indices, lengths), np.array(owner)


def _coefficient_of_variation(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row: population standard deviation / mean over the valid columns; NaN where the mean is 0."""
    count = valid.sum(axis=1)
    mean = np.where(valid, values, 0.0).sum(axis=1) / count
    sd = np.sqrt(np.where(valid, (values - mean[:, None]) ** 2, 0.0).sum(axis=1) / count)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean > 0, sd / mean, np.nan)


def template_spread(
    confidence: np.ndarray,
    correct: np.ndarray,
    slots: np.ndarray,
    blocks: Resamples,
    block_relation: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """CV over each block's relation's templates of accuracy and of 1 − AURC: ([blocks], [blocks]).
    `confidence`, `correct` [rows, T] per template slot; `slots` each relation code's template count."""
    n_templates = confidence.shape[1]
    acc = np.empty((blocks.n_resamples, n_templates))
    selective = np.empty_like(acc)
    for k in range(n_templates):
        values = batched_metrics(["accuracy", "aurc"], confidence[:, k], correct[:, k], blocks)
        acc[:, k], selective[:, k] = values["accuracy"], 1.0 - values["aurc"]
    valid = np.arange(n_templates) < slots[block_relation][:, None]
    return _coefficient_of_variation(acc, valid), _coefficient_of_variation(selective, valid)


def _per_resample_mean(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """The mean of each resample's blocks (NaN if any is NaN: that resample is left out)."""
    return np.bincount(owner, weights=values, minlength=n) / np.bincount(owner, minlength=n)


def curated_base_wide(t: StoreTables) -> tuple[pl.DataFrame, dict[str, list[str]]]:
    """Base on every curated template, one row per test instance that every curated template of its
    relation scored, columns c<k>, y<k> per template slot k (the relation's templates by rank);
    relations with fewer than two such templates left out. Also each kept relation's templates."""
    est, tpl = t.estimates, t.templates
    if est.is_empty() or tpl.is_empty():
        return pl.DataFrame(), {}
    curated = tpl.filter(pl.col("kind") == "curated").select("relation_id", "template_id", "rank")
    base = est.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
        & (pl.col("estimator") == BASELINE)
    ).join(curated, on=["relation_id", "template_id"])
    slots = (
        base.select("relation_id", "template_id", "rank")
        .unique()
        .sort("relation_id", "rank", "template_id")
        .with_columns(slot=pl.col("template_id").cum_count().over("relation_id") - 1)
    )
    counts = slots.group_by("relation_id").agg(pl.len().alias("n_templates"))
    base = (
        base.join(slots, on=["relation_id", "template_id", "rank"])
        .join(counts.filter(pl.col("n_templates") >= 2), on="relation_id")
        .filter(pl.len().over("relation_id", "instance_id") == pl.col("n_templates"))
    )
    if base.is_empty():
        return pl.DataFrame(), {}
    wide = base.select("relation_id", "instance_id").unique().sort("relation_id", "instance_id")
    for k in range(int(base["slot"].max()) + 1):
        side = base.filter(pl.col("slot") == k).select(
            "relation_id",
            "instance_id",
            pl.col("confidence").alias(f"c{k}"),
            pl.col("correct").alias(f"y{k}"),
        )
        wide = wide.join(side, on=["relation_id", "instance_id"], how="left", maintain_order="left")
    names = slots.join(counts.filter(pl.col("n_templates") >= 2), on="relation_id")
    return wide, {r: g.sort("slot")["template_id"].to_list() for (r,), g in names.group_by("relation_id")}


@claim(
    "rcauc_less_template_biased",
    reference="Table 1; abstract",
    title="The selective score (1 − AURC) varies less over a relation's templates than accuracy: "
    "CV(1 − AURC) − CV(accuracy) < 0",
    paper=SELECTIVE_LAMA,
    setting="LAMA's cloze templates on pretrained language models: accuracy rewards an answer a template "
    "makes likely whatever the subject (a guess), RC-AUC only where the model is also confident in it; "
    "kcal reads this as: a score less biased by the template moves less from one paraphrase template "
    "to another.",
    rule="Base on every curated template of a relation, on the test instances that every one of them "
    "scored: per template its accuracy and its selective score 1 − AURC (AURC = Selective-LAMA's "
    "RC-AUC, lower better; 1 − AURC is the area under precision vs coverage, higher better, on the "
    "accuracy's own scale: equal to it when confidence ranks nothing); per relation the coefficient "
    "of variation (population standard deviation / mean) of each over its templates; the mean over "
    "relations of CV(1 − AURC) − that of CV(accuracy), claimed < 0. Interval: resample_plan's "
    "two-stage resamples (relations, then instances within each drawn relation), one plan shared by "
    "every template, which score the same instances; bias-corrected. Holds if the 95 % interval lies "
    "below 0, does not hold if above, else inconclusive. A relation with no correct answer on any "
    "template (CV undefined) is left out and named.",
    reads="estimates (base on every curated template, test split, full answer spaces, reduction sum), "
    "templates (kind, rank)",
    number=PaperNumber(
        f'{ABSTRACT_ONLY}; the abstract: Selective-LAMA is "more robust to the effect of simple guesses '
        'than the conventional accuracy-based evaluation"'
    ),
    preconditions=("two or more curated templates per relation, scored on the same test instances",),
)
def rcauc_less_template_biased(t: StoreTables) -> list[Finding]:
    key, subject = "rcauc_less_template_biased", "mean over relations: CV(1 − AURC) − CV(accuracy)"
    wide, templates = curated_base_wide(t)
    if wide.is_empty():
        return not_testable(key, t, subject, ONE_CURATED)
    correct_any = wide.group_by("relation_id").agg(
        pl.any_horizontal(pl.col(c) for c in wide.columns if c.startswith("y")).any().alias("any")
    )
    dropped = sorted(correct_any.filter(~pl.col("any"))["relation_id"].to_list())
    wide = wide.filter(~pl.col("relation_id").is_in(dropped))
    if wide.is_empty():
        return not_testable(key, t, subject, f"no correct answer on any template in {', '.join(dropped)}")
    width = len([c for c in wide.columns if c.startswith("c")])
    confidence = np.column_stack([wide[f"c{k}"].fill_null(0.0).to_numpy() for k in range(width)])
    correct = np.column_stack([wide[f"y{k}"].fill_null(False).to_numpy() for k in range(width)])
    names, relation = np.unique(wide["relation_id"].to_numpy(), return_inverse=True)
    sizes = np.bincount(relation)
    slots = np.array([len(templates[r]) for r in names.tolist()])
    starts = np.cumsum(sizes) - sizes
    whole = np.full((names.size, int(sizes.max())), PAD, dtype=np.int32)
    for i, (start, size) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
        whole[i, :size] = np.arange(start, start + size)
    each_once = Resamples(whole, sizes)  # the sample itself: one block per relation
    cv_acc, cv_sel = template_spread(confidence, correct, slots, each_once, np.arange(names.size))
    value = float(cv_sel.mean() - cv_acc.mean())
    plan = relation_resamples(relation)
    blocks, owner = relation_blocks(plan, relation, sizes)
    b_acc, b_sel = template_spread(confidence, correct, slots, blocks, relation[blocks.indices[:, 0]])
    diff = _per_resample_mean(b_sel, owner, N_RESAMPLES) - _per_resample_mean(b_acc, owner, N_RESAMPLES)
    low, high = bc_interval(diff, value)
    per_relation = ", ".join(
        f"{r} {fmt(s)} vs {fmt(a)}"
        for r, s, a in zip(names.tolist(), cv_sel.tolist(), cv_acc.tolist(), strict=True)
    )
    counts = sorted(set(slots.tolist()))
    return [
        interval_finding(
            key,
            t,
            subject,
            "negative",
            value,
            low,
            high,
            wide.height,
            "ΔCV",
            f"; mean CV(1 − AURC) {fmt(float(cv_sel.mean()))}, mean CV(accuracy) {fmt(float(cv_acc.mean()))} "
            f"over {names.size} relations with {'–'.join(map(str, counts))} templates; per relation "
            f"CV(1 − AURC) vs CV(accuracy): {per_relation}",
            f"left out, no correct answer on any template: {', '.join(dropped)}" if dropped else "",
        )
    ]


# --- Token against Sent and Reranking ------------------------------------------------------------


@claim(
    "sent_reranking_worse_than_token",
    reference="Table 2",
    stage="selective",
    title="Sent and Reranking rank answers worse than Token: AURC(Sent) − AURC(Token) > 0 and "
    "AURC(Reranking) − AURC(Token) > 0",
    paper=SELECTIVE_LAMA,
    setting="LAMA's open-vocabulary cloze questions on pretrained language models; kcal adapts the "
    "confidence functions to a closed answer set (METHODS §2): Token is the log-probability of the "
    "predicted answer's tokens given the subject, Sent the length-normalised log-likelihood of the "
    "whole statement, Reranking the predicted answer's rank under a second scoring rule.",
    rule="On the headline selection's test instances where Token is defined (answer-conditional "
    "templates: the object after the subject), paired bootstrap (metric_differences' resampling: "
    "relations, then instances; bias-corrected) of AURC(Sent) − AURC(Token) and AURC(Reranking) − "
    "AURC(Token), each claimed > 0: holds if the 95 % interval lies above 0, does not hold if below, "
    "else inconclusive; Holm across the two rows.",
    reads="estimates (token, sent, reranking; headline selection, test split, full answer spaces, "
    "reduction sum)",
    number=PaperNumber(f"{ABSTRACT_ONLY}; the abstract does not rank Token, Sent and Reranking"),
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
        shown = f" on the {d['n']} instances Token is defined on"
        out.append(difference_finding(key, t, subject, d, "positive", "AURC", shown))
    return out
