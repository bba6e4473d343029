"""Claims of seed 001, Tinner 2024: precision of the facts asserted above 0.5, paraphrase
aggregation, demonstrations and context."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.estimation.cube import PARAPHRASE_KINDS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    headline_rows,
    join_instances,
    pair_key,
    paired_difference,
    ratio,
    relation_resamples,
    resample_means,
    resample_ratio,
    template_rows,
)

TINNER = Paper(
    "001",
    "Tinner 2024 (seed 001)",
    "Tinner 2024, master's thesis on calibrated knowledge probing with template paraphrases (cited by "
    "kcal's METHODS for the template marginal and sampled negatives)",
    file="tinner-probabilistic-prompting-thesis.txt",
)
TINNER_NUMBER = PaperNumber("no number available to kcal (the thesis was not accessible)")
TINNER_SETTING = (
    "Closed-set knowledge probing of language models with several paraphrase templates per relation "
    "and sampled negative objects (METHODS §2, §5); the thesis itself was not accessible to kcal, so "
    "the setting is the one kcal's METHODS cites it for."
)
MARGINAL = "template_marginal"
THRESHOLD = 0.5  # Tinner's "asserted": P(o | r, s) > 0.5, strictly (METHODS §2)
NO_MARGINAL = (
    "no template-marginal estimates over two or more paraphrase templates (with one, P(o | r, s) is "
    "Base): run kcal findings --build (stage bear), or kcal demo with --max-templates 2 or more "
    "(default 5)"
)
CONTEXT_KINDS_COMMAND = (
    "run kcal findings --build (stage context), or kcal demo --template-kinds "
    "curated,context_1shot,context_3shot,context_wrong,context_fixed"
)


def marginal_rows(t: StoreTables) -> pl.DataFrame:
    """The template marginal's test rows (headline selection) in the relations whose instances Base
    scored on two or more paraphrase templates: with one, P(o | r, s) is that template's Base and
    aggregates nothing. Sorted by relation and instance; empty when there are none."""
    head = headline_rows(t)
    if head.is_empty():
        return head
    paraphrases = t.templates.filter(pl.col("kind").is_in(PARAPHRASE_KINDS))
    scored = template_rows(t, [BASELINE]).join(paraphrases, on=["relation_id", "template_id"], how="semi")
    counts = scored.group_by("relation_id").agg(pl.col("template_id").n_unique().alias("n"))
    several = counts.filter(pl.col("n") >= 2)["relation_id"].to_list()
    rows = head.filter((pl.col("estimator") == MARGINAL) & pl.col("relation_id").is_in(several))
    return rows.sort("relation_id", "instance_id")


def _above(confidence: np.ndarray) -> np.ndarray:
    return (confidence > THRESHOLD).astype(np.float64)


def _precision(correct: np.ndarray, above: np.ndarray) -> float:
    """Accuracy among the instances asserted (confidence > 0.5); NaN when none is."""
    return ratio(correct * above, above)


def _resampled_precision(correct: np.ndarray, above: np.ndarray, resamples) -> np.ndarray:
    """The precision at 0.5 on every resample ([B]; NaN where a resample asserts nothing)."""
    return resample_ratio(correct * above, above, resamples)


PRECISION_RULE = (
    "precision at 0.5 = accuracy among the instances whose confidence is strictly above 0.5 (Tinner's "
    "asserted facts; kcal's registry metric precision_t050 accepts C ≥ 0.5 and has no paired "
    "bootstrap, so the claim computes it here)"
)


@claim(
    "few_facts_above_half_high_precision",
    reference="Fig. 5.3",
    title="Few facts get P(o | r, s) > 0.5, but those are mostly right: precision at 0.5 − accuracy > 0",
    paper=TINNER,
    setting=TINNER_SETTING + " The template marginal averages each option's probability over the "
    "templates; a fact whose templates disagree cannot reach 0.5.",
    rule=f"Template marginal (instance grain) on the test instances: {PRECISION_RULE}, minus the "
    "accuracy over all instances. Paired bootstrap (one resample plan, clustered by relation; the "
    "ratio per resample, a resample asserting nothing left out; bias-corrected interval): holds if the "
    "95 % interval lies above 0, does not hold if below, else inconclusive. The share above 0.5 (the "
    'paper\'s "few") is shown, not tested.',
    reads="estimates (template_marginal, instance grain, test split, full answer spaces, reduction sum)",
    number=TINNER_NUMBER,
    preconditions=("two or more paraphrase templates per instance (the template marginal)",),
)
def few_facts_above_half_high_precision(t: StoreTables) -> list[Finding]:
    key, subject = "few_facts_above_half_high_precision", "Template marginal: precision at 0.5 − accuracy"
    rows = marginal_rows(t)
    if rows.is_empty():
        return not_testable(key, t, subject, NO_MARGINAL)
    correct = rows["correct"].cast(pl.Float64).to_numpy()
    above = _above(rows["confidence"].to_numpy())
    precision, accuracy = _precision(correct, above), float(correct.mean())
    value = precision - accuracy
    res = relation_resamples(rows["relation_id"].to_numpy())
    diff = _resampled_precision(correct, above, res) - resample_means(correct, res)
    low, high = bc_interval(diff, value)
    n_above = int(above.sum())
    return [
        interval_finding(
            key,
            t,
            subject,
            "positive",
            value,
            low,
            high,
            rows.height,
            "Δ",
            f"; share above 0.5 {fmt(n_above / rows.height)} ({n_above} of {rows.height}); precision at "
            f"0.5 {fmt(precision)}; accuracy {fmt(accuracy)}",
            "" if n_above else "no instance has P(o | r, s) > 0.5: precision at 0.5 is undefined",
        )
    ]


@claim(
    "aggregation_raises_precision",
    reference="Fig. 5.3, Table 5.1",
    title="Aggregating paraphrases raises precision at 0.5: template marginal − Base on the headline "
    "template > 0",
    paper=TINNER,
    setting=TINNER_SETTING + " Averaging over paraphrases takes confidence away from facts that only "
    "one wording supports.",
    rule=f"On the test instances both answer: {PRECISION_RULE}, of the template marginal minus that of "
    "Base on each relation's headline template. Paired bootstrap (the same resampled instances for "
    "both, clustered by relation; a resample where either asserts nothing left out; bias-corrected "
    "interval): holds if the 95 % interval lies above 0, does not hold if below, else inconclusive.",
    reads="estimates (template_marginal and base on the headline template, test split, full answer "
    "spaces, reduction sum), templates",
    number=TINNER_NUMBER,
    preconditions=("two or more paraphrase templates per instance (the template marginal)",),
)
def aggregation_raises_precision(t: StoreTables) -> list[Finding]:
    key = "aggregation_raises_precision"
    subject = "precision at 0.5: Template marginal − Base"
    marginal = marginal_rows(t)
    if marginal.is_empty():
        return not_testable(key, t, subject, NO_MARGINAL)
    head = pl.concat([marginal, headline_rows(t).filter(pl.col("estimator") == BASELINE)])
    sides = [
        head.filter(pl.col("estimator") == e).select(
            "relation_id",
            "instance_id",
            pl.col("confidence").alias(f"c{i}"),
            pl.col("correct").alias(f"y{i}"),
        )
        for i, e in enumerate((MARGINAL, BASELINE))
    ]
    wide = join_instances(sides)
    if wide.is_empty():
        return not_testable(key, t, subject, "no Base estimates on the template marginal's test instances")
    res = relation_resamples(wide["relation_id"].to_numpy())
    precision, resampled, shares = [], [], []
    for i in (0, 1):
        correct = wide[f"y{i}"].cast(pl.Float64).to_numpy()
        above = _above(wide[f"c{i}"].to_numpy())
        precision.append(_precision(correct, above))
        resampled.append(_resampled_precision(correct, above, res))
        shares.append(float(above.mean()))
    value = precision[0] - precision[1]
    low, high = bc_interval(resampled[0] - resampled[1], value)
    return [
        interval_finding(
            key,
            t,
            subject,
            "positive",
            value,
            low,
            high,
            wide.height,
            "Δprecision",
            f"; precision at 0.5: Template marginal {fmt(precision[0])} (share above 0.5 "
            f"{fmt(shares[0])}), Base {fmt(precision[1])} (share above 0.5 {fmt(shares[1])})",
            "" if math.isfinite(value) else "one side asserts nothing above 0.5: precision is undefined",
        )
    ]


# --- demonstrations and context ------------------------------------------------------------------


def context_pairs(t: StoreTables, kind: str) -> pl.DataFrame:
    """Base on every `kind` context variant (estimator renamed to the kind) and Base on its parent
    template, each row keyed by (instance, parent template) in instance_id, so that a paired
    difference pairs a statement with and without its context; empty when none was scored."""
    tpl = t.templates
    if t.estimates.is_empty() or tpl.is_empty() or "parent_id" not in tpl.columns:
        return pl.DataFrame()
    variants = tpl.filter((pl.col("kind") == kind) & pl.col("parent_id").is_not_null()).select(
        "relation_id", "template_id", "parent_id"
    )
    base = template_rows(t, [BASELINE])
    variant = base.join(variants, on=["relation_id", "template_id"]).with_columns(
        estimator=pl.lit(kind), instance_id=pair_key("parent_id")
    )
    parents = variants.select("relation_id", pl.col("parent_id").alias("template_id")).unique()
    parent = base.join(parents, on=["relation_id", "template_id"], how="semi").with_columns(
        instance_id=pair_key("template_id")
    )
    keys = ["relation_id", "instance_id"]
    shared = variant.select(keys).join(parent.select(keys), on=keys)
    if shared.is_empty():
        return pl.DataFrame()
    return pl.concat([parent, variant.drop("parent_id")], how="diagonal_relaxed").join(
        shared, on=keys, how="semi"
    )


def _context_difference(t: StoreTables, kind: str) -> dict | None:
    """accuracy(Base with the kind's context) − accuracy(Base on the parent), paired; None if absent."""
    pairs = context_pairs(t, kind)
    if pairs.is_empty():
        return None
    d = paired_difference(pairs, kind, BASELINE, ["accuracy"])["accuracy"]
    accuracy = pairs.group_by("estimator").agg(pl.col("correct").mean())
    acc = dict(zip(accuracy["estimator"].to_list(), accuracy["correct"].to_list(), strict=True))
    return {**d, "accuracy": acc[kind], "accuracy_parent": acc[BASELINE]}


def _context_numbers(d: dict) -> str:
    """What a context difference shows after its interval: the pairs and both accuracies."""
    return f" over {d['n']} pairs; accuracy {fmt(d['accuracy'])} with, {fmt(d['accuracy_parent'])} without"


CONTEXT_RULE = (
    "Base on each context variant (the parent template's statement, conditioned on the demonstrations, "
    "which are not scored) against Base on its parent template, paired on the (instance, parent "
    "template) pairs that have both: paired bootstrap (relations, then pairs, resampled; "
    "bias-corrected interval) of accuracy(with context) − accuracy(plain)"
)


@claim(
    "demonstrations_raise_accuracy",
    reference="Table 6.1",
    stage="context",
    title="Demonstrations (1 or 3 true facts of the relation before the statement) raise Base's accuracy",
    paper=TINNER,
    setting=TINNER_SETTING + " A demonstration shows the relation's answer format and type; it names "
    "neither the instance's subject nor any of its options (kcal's context variants).",
    rule=CONTEXT_RULE + ", one row per kind (context_1shot, context_3shot), claimed > 0: holds if the "
    "95 % interval lies above 0, does not hold if below, else inconclusive; Holm across the two rows.",
    reads="estimates (base on the context_1shot and context_3shot variants and on their parents, test "
    "split, full answer spaces, reduction sum), templates (kind, parent_id)",
    number=TINNER_NUMBER,
    preconditions=("context variants scored (template kinds context_1shot, context_3shot)",),
)
def demonstrations_raise_accuracy(t: StoreTables) -> list[Finding]:
    key = "demonstrations_raise_accuracy"
    out = []
    for kind in ("context_1shot", "context_3shot"):
        subject = f"{kind}: accuracy(with demonstrations) − accuracy(plain)"
        d = _context_difference(t, kind)
        if d is None:
            out += not_testable(key, t, subject, f"no {kind} variants were scored: {CONTEXT_KINDS_COMMAND}")
            continue
        out.append(difference_finding(key, t, subject, d, "positive", "accuracy", _context_numbers(d)))
    return out


@claim(
    "wrong_context_lowers_accuracy",
    reference="Table 6.4",
    stage="context",
    title="A wrong demonstration (a false fact of the relation) lowers Base's accuracy",
    paper=TINNER,
    setting=TINNER_SETTING + " The wrong fact is the 1-shot demonstration with an object that is not "
    'its subject\'s; the knowledge-free one (context_fixed, "What is 2+2? 4") separates the effect '
    "of a false fact from that of any prefix.",
    rule=CONTEXT_RULE + " for context_wrong, claimed < 0: holds if the 95 % interval lies below 0, "
    "does not hold if above, else inconclusive. context_fixed's difference (same test) is shown "
    "beside it, not tested.",
    reads="estimates (base on the context_wrong and context_fixed variants and on their parents, "
    "test split, full answer spaces, reduction sum), templates (kind, parent_id)",
    number=TINNER_NUMBER,
    preconditions=("context variants scored (template kind context_wrong; context_fixed for the control)",),
)
def wrong_context_lowers_accuracy(t: StoreTables) -> list[Finding]:
    key = "wrong_context_lowers_accuracy"
    subject = "context_wrong: accuracy(with a wrong fact) − accuracy(plain)"
    d = _context_difference(t, "context_wrong")
    if d is None:
        return not_testable(
            key, t, subject, f"no context_wrong variants were scored: {CONTEXT_KINDS_COMMAND}"
        )
    fixed = _context_difference(t, "context_fixed")
    control = (
        f"context_fixed (knowledge-free): Δaccuracy "
        f"{fmt_ci(fixed['difference'], fixed['ci_low'], fixed['ci_high'])} over {fixed['n']} pairs"
        if fixed
        else "context_fixed: not scored"
    )
    return [
        difference_finding(key, t, subject, d, "negative", "accuracy", f"{_context_numbers(d)}; {control}")
    ]
