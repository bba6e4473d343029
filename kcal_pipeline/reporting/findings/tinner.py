"""Claims of seed 001, Tinner's thesis (Probabilistic Prompting of Language Models): selective
precision of the facts asserted above 0.5, what paraphrase templates do to it and to coverage, and
which relations are easy (this module, stage bear); demonstrations and context (tinner_context.py)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.estimation.cube import PARAPHRASE_KINDS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    Citation,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    fmt,
    fmt_signed,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    headline_rows,
    join_instances,
    ratio,
    relation_resamples,
    resample_means,
    resample_ratio,
    template_rows,
)

TINNER = Paper(
    "001",
    "Tinner (seed 001)",
    "Tinner, Probabilistic Prompting of Language Models (MSc thesis): P(o(r) | r, s(r)) over "
    "paraphrase templates and sampled negative objects, selective precision at P > 0.5, demonstrations "
    "and context",
    file="tinner-probabilistic-prompting-thesis.txt",
)
TINNER_SETTING = (
    "The thesis probes Mistral-7B-Instruct-v0.2 and GPT-2-L on LAMA T-REx, PopQA and a hypernym set "
    "(50 subjects per relation, each object scored against about 50 objects: the relation's own, "
    "topped up with objects sampled from other relations), up to 20 paraphrase templates; "
    "P(o(r) | r, s(r)) averages each template's softmax over the objects (§4.1.5). A sequence is "
    "asserted when P(o(r) | r, s(r)) > 0.5 (§4.1.7); only the argmax object can exceed 0.5, so its "
    "selective precision is kcal's precision among the instances whose confidence exceeds 0.5, and "
    "its coverage (share of sequences) is kcal's share of instances divided by the option count."
)
MARGINAL = "template_marginal"
THRESHOLD = 0.5  # Tinner's "asserted": P(o(r) | r, s(r)) > 0.5, strictly (§4.1.7)
NO_MARGINAL = (
    "no template-marginal estimates over two or more paraphrase templates (with one, P(o | r, s) is "
    "Base): run kcal findings --build (stage bear), or kcal demo with --max-templates 2 or more "
    "(default 5)"
)
SELECTIVE_RULE = (
    "selective precision at 0.5 = accuracy among the instances whose confidence is strictly above 0.5 "
    "(Tinner's asserted facts, §4.1.7; kcal's registry metric precision_t050 accepts C ≥ 0.5), "
    "coverage at 0.5 = the share of instances above 0.5"
)
DEFINITION = Citation(
    "§4.1.7",
    "takes only into account values of $P(o(r)|r, s(r)) > t$ . Every $P(o(r)|r, s(r)) < t$ "
    "receives no predicted label.",
)


# --- selections and statistics --------------------------------------------------------------------


def marginal_rows(t: StoreTables) -> pl.DataFrame:
    """The template marginal's test rows (headline selection) in the relations whose instances Base
    scored on two or more paraphrase templates: with one, P(o | r, s) is that template's Base and
    aggregates nothing. Sorted by relation and instance; empty when there are none."""
    head = headline_rows(t)
    if head.is_empty():
        return head
    rows = head.filter((pl.col("estimator") == MARGINAL) & pl.col("relation_id").is_in(_paraphrased(t)))
    return rows.sort("relation_id", "instance_id")


def _paraphrased(t: StoreTables) -> list[str]:
    paraphrases = t.templates.filter(pl.col("kind").is_in(PARAPHRASE_KINDS))
    scored = _paraphrase_base(t).join(paraphrases, on=["relation_id", "template_id"], how="semi")
    counts = scored.group_by("relation_id").agg(pl.col("template_id").n_unique().alias("n"))
    return counts.filter(pl.col("n") >= 2)["relation_id"].to_list()


def _paraphrase_base(t: StoreTables) -> pl.DataFrame:
    paraphrases = t.templates.filter(pl.col("kind").is_in(PARAPHRASE_KINDS))
    return template_rows(t, [BASELINE]).join(paraphrases, on=["relation_id", "template_id"], how="semi")


def above_half(confidence: np.ndarray) -> np.ndarray:
    return (np.asarray(confidence) > THRESHOLD).astype(np.float64)


def side_by_side(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Each named selection's (confidence, correct) as c_<name>, y_<name>, on the (relation,
    instance) keys all of them share, sorted (a reproducible resample plan)."""
    return join_instances(
        f.select(
            "relation_id",
            "instance_id",
            pl.col("confidence").alias(f"c_{name}"),
            pl.col("correct").cast(pl.Float64).alias(f"y_{name}"),
        )
        for name, f in frames.items()
    )


def selective_difference(wide: pl.DataFrame, a: str, b: str, statistic: str) -> dict:
    """statistic(a) − statistic(b) on the same rows, `statistic` "precision" (selective precision at
    0.5) or "coverage" (at 0.5): the point, its paired bootstrap interval (one resample plan for
    both, clustered by relation; a resample where either side asserts nothing left out; bias-
    corrected), n and each side's value, as a difference row (difference, ci_low, ci_high, n)."""
    res = relation_resamples(wide["relation_id"].to_numpy())
    point, resampled = {}, {}
    for side in (a, b):
        above = above_half(wide[f"c_{side}"].to_numpy())
        if statistic == "coverage":
            point[side], resampled[side] = float(above.mean()), resample_means(above, res)
        else:
            hits = wide[f"y_{side}"].to_numpy() * above
            point[side], resampled[side] = ratio(hits, above), resample_ratio(hits, above, res)
    value = point[a] - point[b]
    low, high = bc_interval(resampled[a] - resampled[b], value) if math.isfinite(value) else (math.nan,) * 2
    return {"difference": value, "ci_low": low, "ci_high": high, "n": wide.height, a: point[a], b: point[b]}


def relative(new: float, old: float) -> str:
    """A change as the thesis states them: new / old − 1, in per cent."""
    if not (math.isfinite(new) and math.isfinite(old)) or old == 0:
        return "n/a"
    return f"{fmt_signed(100 * (new / old - 1), 1)} %"


def option_counts(t: StoreTables) -> pl.DataFrame:
    """Per test instance its option count (probe_instances.n_options); empty where the store's
    instances lack it."""
    if t.instances.is_empty() or "n_options" not in t.instances.columns:
        return pl.DataFrame()
    return t.instances.select("relation_id", "instance_id", "n_options")


# --- precision at 0.5 --------------------------------------------------------------------------


@claim(
    "few_facts_above_half_high_precision",
    sources=(
        Citation(
            "§5.2.1",
            "In Figure 5.3 a threshold of 0.5 limits coverage significantly to approximately 1.7% per "
            "dataset.",
            "Fig. 5.3",
        ),
        Citation(
            "§5.2.1",
            "However, in these instances, the selective approach outperformed the ranking based "
            "approach. Using selective prediction compared to argmax precision leads to a relative "
            "increase of precision by 10 - 115%.",
            "Fig. 5.3",
        ),
        Citation(
            "§5.2.1",
            "At this threshold, the selective precision based on predictions from $P(o(r)|r, s(r))$ is "
            "at least 0.82 on all datasets.",
        ),
        DEFINITION,
    ),
    title="Few facts get P(o | r, s) > 0.5, but selective precision on them beats argmax precision: "
    "selective precision at 0.5 − accuracy > 0 (template marginal)",
    paper=TINNER,
    setting=TINNER_SETTING + " Argmax (ranking) precision over the paraphrase-aggregated "
    "probabilities (§4.1.7, version 1) is the template marginal's accuracy.",
    rule=f"Template marginal (instance grain) on the test instances: {SELECTIVE_RULE}; selective "
    "precision minus the accuracy over all instances. Paired bootstrap (one resample plan, clustered "
    "by relation; the ratio per resample, a resample asserting nothing left out; bias-corrected "
    "interval): holds if the 95 % interval lies above 0, does not hold if below, else inconclusive. "
    'The coverage (the thesis\'s "few") and the relative increase are shown, not tested.',
    reads="estimates (template_marginal, instance grain, test split, full answer spaces, reduction "
    "sum); probe_instances n_options where the store tables carry it (coverage per sequence)",
    number=PaperNumber(
        "coverage at 0.5 approximately 1.7% of sequences per dataset; selective precision vs argmax "
        "precision: relative increase 10 - 115%; selective precision at least 0.82 on all datasets",
        model="Mistral-7B-Instruct-v0.2 and GPT-2-L (0.82: Mistral-7B-Instruct-v0.2 with all paraphrase "
        "templates)",
        setting="T-REx, PopQA, hypernym; Fig. 5.3",
    ),
    preconditions=("two or more paraphrase templates per instance (the template marginal)",),
)
def few_facts_above_half_high_precision(t: StoreTables) -> list[Finding]:
    key, subject = "few_facts_above_half_high_precision", "Template marginal: precision at 0.5 − accuracy"
    rows = marginal_rows(t)
    if rows.is_empty():
        return not_testable(key, t, subject, NO_MARGINAL)
    correct = rows["correct"].cast(pl.Float64).to_numpy()
    above = above_half(rows["confidence"].to_numpy())
    precision, accuracy = ratio(correct * above, above), float(correct.mean())
    value = precision - accuracy
    res = relation_resamples(rows["relation_id"].to_numpy())
    diff = resample_ratio(correct * above, above, res) - resample_means(correct, res)
    low, high = bc_interval(diff, value)
    n_above = int(above.sum())
    options = option_counts(t)
    per_sequence = ""
    if not options.is_empty():
        n_options = rows.join(options, on=["relation_id", "instance_id"], how="left")["n_options"]
        if n_options.null_count() == 0:
            per_sequence = f"; coverage per sequence {fmt(100 * n_above / n_options.sum(), 2)} %"
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
            f"; coverage at 0.5 {fmt(n_above / rows.height)} ({n_above} of {rows.height} instances)"
            f"{per_sequence}; selective precision at 0.5 {fmt(precision)}; accuracy {fmt(accuracy)}; "
            f"relative increase {relative(precision, accuracy)}",
            "" if n_above else "no instance has P(o | r, s) > 0.5: precision at 0.5 is undefined",
        )
    ]


# --- paraphrase templates ----------------------------------------------------------------------

PARAPHRASE_QUOTE = Citation(
    "§5.2.1",
    "Between using no paraphrased templates and using 20 paraphrased templates, the coverage "
    "decreased between 0.4% for hypernym dataset and 55.6% for PopQA data, with similar changes for "
    "the two models.",
)


def _marginal_and_headline(t: StoreTables) -> pl.DataFrame:
    """The template marginal beside Base on each relation's headline template (the thesis's
    "no paraphrased templates": the original one), on the test instances both answer."""
    marginal = marginal_rows(t)
    if marginal.is_empty():
        return marginal
    headline = headline_rows(t).filter(pl.col("estimator") == BASELINE)
    return side_by_side({"marginal": marginal, "headline": headline})


@claim(
    "aggregation_raises_precision",
    sources=(
        PARAPHRASE_QUOTE,
        Citation(
            "§5.2.1",
            "Precision increases consistently between 30% - 100%, where PopQA results increased most "
            "across the two models.",
        ),
        DEFINITION,
    ),
    title="Aggregating paraphrases raises selective precision at 0.5: template marginal − Base on "
    "the headline template > 0",
    paper=TINNER,
    setting=TINNER_SETTING + " No paraphrases = the original template alone: kcal's headline "
    "template, on which the template marginal is Base.",
    rule=f"On the test instances both answer: {SELECTIVE_RULE}; selective precision of the template "
    "marginal minus that of Base on each relation's headline template. Paired bootstrap (the same "
    "resampled instances for both, clustered by relation; a resample where either asserts nothing "
    "left out; bias-corrected interval): holds if the 95 % interval lies above 0, does not hold if "
    "below, else inconclusive. The relative change (the thesis's unit) is shown.",
    reads="estimates (template_marginal and base on the headline template, test split, full answer "
    "spaces, reduction sum), templates",
    number=PaperNumber(
        "selective precision: relative increase between 30% - 100% from no paraphrased templates to "
        "20 paraphrased templates",
        model="Mistral-7B-Instruct-v0.2 and GPT-2-L",
        setting="T-REx, PopQA, hypernym; Fig. 5.3",
    ),
    preconditions=("two or more paraphrase templates per instance (the template marginal)",),
)
def aggregation_raises_precision(t: StoreTables) -> list[Finding]:
    key = "aggregation_raises_precision"
    subject = "precision at 0.5: Template marginal − Base"
    if marginal_rows(t).is_empty():
        return not_testable(key, t, subject, NO_MARGINAL)
    wide = _marginal_and_headline(t)
    if wide.is_empty():
        return not_testable(key, t, subject, "no Base estimates on the template marginal's test instances")
    d = selective_difference(wide, "marginal", "headline", "precision")
    cover = selective_difference(wide, "marginal", "headline", "coverage")
    return [
        interval_finding(
            key,
            t,
            subject,
            "positive",
            d["difference"],
            d["ci_low"],
            d["ci_high"],
            d["n"],
            "Δprecision",
            f"; selective precision at 0.5: Template marginal {fmt(d['marginal'])} (coverage "
            f"{fmt(cover['marginal'])}), Base {fmt(d['headline'])} (coverage {fmt(cover['headline'])}); "
            f"relative {relative(d['marginal'], d['headline'])}",
            ""
            if math.isfinite(d["difference"])
            else "one side asserts nothing above 0.5: precision is undefined",
        )
    ]


@claim(
    "paraphrases_cut_coverage",
    sources=(PARAPHRASE_QUOTE, DEFINITION),
    title="Aggregating paraphrases cuts coverage at 0.5: template marginal − single templates < 0",
    paper=TINNER,
    setting=TINNER_SETTING + " Averaging the templates' distributions takes mass from an object "
    "that only some wordings favour, so fewer facts reach 0.5.",
    rule="Coverage at 0.5 (the share of test instances whose confidence is strictly above 0.5) of the "
    "template marginal minus that of Base on single templates, on the instances both answer, two "
    "rows: (1) Base on each relation's headline template (the thesis's no-paraphrase run: the "
    "original template); (2) Base on every paraphrase template the marginal averages (per instance "
    "the share of its templates above 0.5). Paired bootstrap (relations, then instances; "
    "bias-corrected interval): holds if the 95 % interval lies below 0, does not hold if above, else "
    "inconclusive; Holm across the two rows. The relative change (the thesis's unit) is shown.",
    reads="estimates (template_marginal, instance grain; base on every paraphrase template; test "
    "split, full answer spaces, reduction sum), templates",
    number=PaperNumber(
        "coverage decreased between 0.4% (hypernym) and 55.6% (PopQA), relative, from no paraphrased "
        "templates to 20 paraphrased templates",
        model="Mistral-7B-Instruct-v0.2 and GPT-2-L (similar changes)",
        setting="T-REx, PopQA, hypernym; Fig. 5.3",
    ),
    preconditions=("two or more paraphrase templates per instance (the template marginal)",),
)
def paraphrases_cut_coverage(t: StoreTables) -> list[Finding]:
    key = "paraphrases_cut_coverage"
    subjects = (
        "coverage at 0.5: Template marginal − Base on the headline template",
        "coverage at 0.5: Template marginal − Base on each single template (mean)",
    )
    marginal = marginal_rows(t)
    if marginal.is_empty():
        return [f for s in subjects for f in not_testable(key, t, s, NO_MARGINAL)]
    share = (
        _paraphrase_base(t)
        .group_by("relation_id", "instance_id")
        .agg(pl.col("confidence").gt(THRESHOLD).mean().alias("share"))
    )
    sides = {
        subjects[0]: _marginal_and_headline(t),
        subjects[1]: join_instances(
            [marginal.select("relation_id", "instance_id", pl.col("confidence").alias("c_marginal")), share]
        ),
    }
    out = []
    for subject, wide in sides.items():
        if wide.is_empty():
            out += not_testable(
                key, t, subject, "no Base estimates on the template marginal's test instances"
            )
            continue
        if "share" in wide.columns:
            d = _coverage_against_share(wide)
        else:
            d = selective_difference(wide, "marginal", "headline", "coverage")
        out.append(
            interval_finding(
                key,
                t,
                subject,
                "negative",
                d["difference"],
                d["ci_low"],
                d["ci_high"],
                d["n"],
                "Δcoverage",
                f"; coverage at 0.5: Template marginal {fmt(d['marginal'])}, single template "
                f"{fmt(d['headline'])}; relative {relative(d['marginal'], d['headline'])}",
            )
        )
    return out


def _coverage_against_share(wide: pl.DataFrame) -> dict:
    """coverage(marginal) − the mean over instances of the share of their templates above 0.5,
    paired per instance (the same resamples for both)."""
    res = relation_resamples(wide["relation_id"].to_numpy())
    marginal = above_half(wide["c_marginal"].to_numpy())
    share = wide["share"].to_numpy().astype(np.float64)
    value = float(marginal.mean() - share.mean())
    low, high = bc_interval(resample_means(marginal - share, res), value)
    return {
        "difference": value,
        "ci_low": low,
        "ci_high": high,
        "n": wide.height,
        "marginal": float(marginal.mean()),
        "headline": float(share.mean()),
    }
