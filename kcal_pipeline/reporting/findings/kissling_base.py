"""Claims of seed 000, Kissling et al. 2026, about Base itself: overconfidence, the reduction, the
number of answer options, and ACE against accuracy across relations (registered after
kissling.py's, whose paper and setting they share)."""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.dataset.instances.variants import SUBSAMPLE_SUFFIX
from kcal_pipeline.estimation.registry import (
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    headline_template_estimates,
)
from kcal_pipeline.evaluation.bootstrap import N_RESAMPLES, batched_metrics, instance_resamples
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    REDUCTION,
    SEED,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.kissling import KISSLING, KISSLING_SETTING
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    headline_rows,
    join_instances,
    metric_row,
    paired_difference,
    relation_resamples,
)


@claim(
    "models_overconfident",
    reference="Abstract; §4",
    title="Base is overconfident: mean confidence − accuracy > 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " They found most models overconfident, the masked LMs most; a "
    "signed gap, so over- and under-confident instances cancel in it (ACE measures their sum).",
    rule="The metrics table's confidence gap of Base (mean confidence − accuracy, scope all) with its "
    "95 % bias-corrected bootstrap interval (clustered by relation): holds if the interval lies above "
    "0, does not hold if it lies below 0, else inconclusive.",
    reads="metrics (base: confidence_gap, mean_confidence, accuracy; scope all, test split, full "
    "answer spaces, reduction sum)",
    number=PaperNumber(
        "+0.336 (GPT-2 124M), +0.347 (OPT-125M), CLM mean +0.240, 60-option 1:1 relations, from the "
        "authors' released files",
        effect=0.336,
    ),
    preconditions=("a test split (--dev-fraction < 1)",),
)
def models_overconfident(t: StoreTables) -> list[Finding]:
    key, subject = "models_overconfident", "mean confidence(Base) − accuracy(Base)"
    row = metric_row(t, BASELINE, "confidence_gap")
    if row is None:
        return not_testable(
            key, t, subject, "metrics has no confidence_gap row of Base on the test split: "
            "materialize metrics (kcal demo) with a test split (--dev-fraction < 1)"
        )  # fmt: skip
    parts = ""
    for metric, label in (("mean_confidence", "mean confidence"), ("accuracy", "accuracy")):
        r = metric_row(t, BASELINE, metric)
        if r is not None:
            parts += f"; {label} {fmt(r['value'])}"
    value, low, high = row["value"], row["ci_low"], row["ci_high"]
    return [interval_finding(key, t, subject, "positive", value, low, high, row["n"], "gap", parts)]


def _metric(name: str, frame: pl.DataFrame) -> float:
    """A registered metric on a frame's confidence and correct columns."""
    return METRICS[name](frame["confidence"].to_numpy(), frame["correct"].to_numpy())


REDUCTION_LABELS = {"sum": "Sum", "mean": "Mean", "answer_sum": "Sum(A)", "answer_mean": "Mean(A)"}


def _h_from(accuracy: np.ndarray, ace: np.ndarray) -> np.ndarray:
    """H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE) (calibration.h_score), 0 where Acc = 0 and ACE = 1."""
    good = 1.0 - ace
    total = accuracy + good
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total == 0.0, 0.0, 2.0 * accuracy * good / np.where(total == 0.0, 1.0, total))


@claim(
    "sum_best_reduction",
    reference="App. B (reductions)",
    title="Sum is the best reduction of Base: H(Sum) − H(the best other reduction) > 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " They chose the reduction by H, the harmonic mean of accuracy and "
    "1 − ACE: Mean has the lowest ACE but about half the accuracy, the answer-only Sum(A) is close to "
    "Sum.",
    rule="H of Base under Sum against H under the best other reduction (Mean, Sum(A), Mean(A); best "
    "by H on the test instances), on the instances all reductions answered; paired bootstrap (the "
    "same resamples for every reduction, clustered by relation) of the difference, H read from each "
    "resample's accuracy and ACE: holds if the 95 % interval lies above 0, does not hold if it lies "
    "below 0, else inconclusive.",
    reads="estimates (base under sum, mean, answer_sum, answer_mean; headline template, test split, "
    "full answer spaces)",
    number=PaperNumber(
        "H Sum 0.246 vs Sum(A) 0.247 (GPT-2 124M), CLM mean Sum 0.441 vs Sum(A) 0.440: Sum ties Sum(A) "
        "and beats Mean and Mean(A), from the authors' released files",
        effect=-0.001,
    ),
    preconditions=("Base scored under Sum and at least one other reduction",),
)
def sum_best_reduction(t: StoreTables) -> list[Finding]:
    key, subject = "sum_best_reduction", "H(Base, Sum) − H(Base, best other reduction)"
    head = headline_rows(t, reduction=None)
    base = head.filter(pl.col("estimator") == BASELINE) if not head.is_empty() else head
    present = [r for r in REDUCTION_LABELS if not base.is_empty() and r in set(base["reduction"])]
    if REDUCTION not in present or len(present) < 2:
        return not_testable(
            key, t, subject, f"Base is stored under {', '.join(present) or 'no'} reduction(s) only; "
            f"the claim needs Sum and another of {', '.join(REDUCTION_LABELS)}: run kcal findings "
            "--build (stage bear), whose store keeps Base under every reduction"
        )  # fmt: skip
    wide = join_instances(
        base.filter(pl.col("reduction") == r).select(
            "relation_id",
            "instance_id",
            pl.col("confidence").alias(f"c_{r}"),
            pl.col("correct").alias(f"y_{r}"),
        )
        for r in present
    )
    if wide.is_empty():
        return not_testable(key, t, subject, "no test instance has Base under every stored reduction")
    res = relation_resamples(wide["relation_id"].to_numpy())
    point, boot, shown = {}, {}, []
    for r in present:
        c, y = wide[f"c_{r}"].to_numpy(), wide[f"y_{r}"].to_numpy()
        point[r] = METRICS["h_score"](c, y)  # the registry's H, the point the interval is read around
        b = batched_metrics(["accuracy", "ace"], c, y, res)
        boot[r] = _h_from(b["accuracy"], b["ace"])
        shown.append(
            f"{REDUCTION_LABELS[r]}: H {fmt(point[r])}, accuracy {fmt(METRICS['accuracy'](c, y))}, "
            f"ACE {fmt(METRICS['ace'](c, y))}"
        )
    best = max((r for r in present if r != REDUCTION), key=lambda r: (point[r], r))
    value = point[REDUCTION] - point[best]
    low, high = bc_interval(boot[REDUCTION] - boot[best], value)
    subject = f"H(Base, Sum) − H(Base, {REDUCTION_LABELS[best]})"
    shown = "; " + "; ".join(shown)
    return [interval_finding(key, t, subject, "positive", value, low, high, wide.height, "ΔH", shown)]


NO_SWEEP = (
    "no option-count sweep in this store (no Base rows with answer_space_k > 0): run kcal findings "
    "--build (stage sweep) or kcal demo --answer-space-k 5,10,20 --answer-space-draws 2"
)


def _sweep_rows(t: StoreTables) -> pl.DataFrame:
    """Base's headline-template rows on the test split under the headline reduction, on full and
    cut answer spaces, with each row's parent instance (the `#k<k>d<draw>` suffix removed)."""
    if t.estimates.is_empty() or t.templates.is_empty():
        return pl.DataFrame()
    est = t.estimates.filter(
        (pl.col("split") == HEADLINE_SPLIT)
        & (pl.col("estimator") == BASELINE)
        & (pl.col("reduction") == REDUCTION)
    )
    return headline_template_estimates(est, t.templates).with_columns(
        parent=pl.col("instance_id").str.replace(SUBSAMPLE_SUFFIX, "")
    )


@claim(
    "more_options_lower_ace",
    reference="§5.4, Fig. 5",
    stage="sweep",
    title="More answer options lower ACE: ACE(Base, full answer space) − ACE(Base, smallest k) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " They cut the 1:1 relations' 60 options to k = 5 … 60 (3 draws): "
    "the causal LMs' ACE fell with more options, the masked LMs' rose; a few options leave Base "
    "confident on near-guesses.",
    rule="ACE of Base on each instance's full answer space against its cut copy at the sweep's "
    "smallest k, on the instances that k cut, paired by instance (the same resamples for both, "
    "clustered by relation). Verdict on draw 1: holds if the 95 % interval lies below 0, does not "
    "hold if it lies above 0, else inconclusive; the other draws' differences and every k's ACE are "
    "shown.",
    reads="estimates (base, test split, full answer spaces and the `#k<k>d<draw>` copies, reduction "
    "sum, headline template)",
    number=PaperNumber(
        "GPT-2 124M ACE 0.448 (k = 5) → 0.335 (k = 60), −0.113; OPT-125M −0.066; CLM mean 0.296 → 0.240; "
        "masked LMs rise (BERT-base 0.489 → 0.549), from the authors' released files",
        effect=-0.113,
    ),
    preconditions=("an option-count sweep (--answer-space-k, e.g. 5,10,20)",),
)
def more_options_lower_ace(t: StoreTables) -> list[Finding]:
    key = "more_options_lower_ace"
    rows_ = _sweep_rows(t)
    cut = rows_.filter(pl.col("answer_space_k") > FULL_ANSWER_SPACE) if not rows_.is_empty() else rows_
    if cut.is_empty():
        return not_testable(key, t, "ACE(Base, full answer space) − ACE(Base, smallest k)", NO_SWEEP)
    full = rows_.filter(pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    k_min = int(cut["answer_space_k"].min())
    subject = f"ACE(Base, full answer space) − ACE(Base, k = {k_min})"
    shown, verdict_draw, found = [], None, None
    draws = sorted(set(cut.filter(pl.col("answer_space_k") == k_min)["answer_space_draw"].to_list()))
    for draw in draws:
        copies = cut.filter((pl.col("answer_space_k") == k_min) & (pl.col("answer_space_draw") == draw))
        pair = pl.concat(
            [
                full.join(
                    copies.select("relation_id", "parent"), on=["relation_id", "parent"], how="semi"
                ).with_columns(estimator=pl.lit("full")),
                copies.with_columns(estimator=pl.lit("cut")),
            ]
        ).with_columns(
            instance_id=pl.col("parent"),
            answer_space_k=pl.lit(FULL_ANSWER_SPACE, dtype=pl.Int32),
            answer_space_draw=pl.lit(FULL_ANSWER_SPACE, dtype=pl.Int32),
        )
        if pair.filter(pl.col("estimator") == "full").is_empty():
            shown.append(f"draw {draw}: no full-answer-space rows of the cut instances")
            continue
        d = paired_difference(pair, "full", "cut", ["ace"])["ace"]
        if verdict_draw is None:  # the verdict's draw: the first (draw 1 in a sweep), the others shown
            verdict_draw, found = draw, d
        else:
            shown.append(f"draw {draw}: ΔACE {fmt_ci(d['difference'], d['ci_low'], d['ci_high'])}")
    if found is None:
        return not_testable(
            key, t, subject, "the store has the sweep's cut copies but not their full answer spaces: "
            "rebuild with kcal findings --build (stage sweep)"
        )  # fmt: skip
    per_k = []
    for k in sorted(set(cut["answer_space_k"].to_list())):
        g = cut.filter(pl.col("answer_space_k") == k)
        aces = ", ".join(
            f"{fmt(_metric('ace', h))} (draw {draw})"
            for (draw,), h in sorted(g.group_by(["answer_space_draw"]), key=lambda kv: kv[0])
        )
        on_full = full.join(g.select("relation_id", "parent"), on=["relation_id", "parent"], how="semi")
        full_ace = f"; full answer space on them {fmt(_metric('ace', on_full))}" if on_full.height else ""
        per_k.append(f"k={k}: ACE {aces}, {g['parent'].n_unique()} instances cut{full_ace}")
    shown = f" over {found['n']} instances; " + "; ".join([*shown, *per_k])
    return [difference_finding(key, t, f"{subject}, draw {verdict_draw}", found, "negative", "ACE", shown)]


MIN_RELATIONS = 5  # fewer relations and a correlation across them means little


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis; NaN where either side is constant."""
    dx = x - x.mean(axis=-1, keepdims=True)
    dy = y - y.mean(axis=-1, keepdims=True)
    sxx, syy = (dx * dx).sum(axis=-1), (dy * dy).sum(axis=-1)
    tiny = 1e-24
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((sxx > tiny) & (syy > tiny), (dx * dy).sum(axis=-1) / np.sqrt(sxx * syy), np.nan)


@claim(
    "ace_falls_with_accuracy",
    reference="Fig. 4",
    title="ACE falls as accuracy grows: Pearson r(accuracy, ACE) of Base across relations < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Fig. 4 plots ACE against accuracy across models: within each family "
    "ACE falls as accuracy grows. The paper's r is across models; kcal's is across the relations of "
    "one model (a different unit of analysis), which asks whether what a model knows better it is "
    "also better calibrated on.",
    rule=f"Pearson r between per-relation accuracy and per-relation ACE of Base (headline template, "
    f"test split) across the store's relations (at least {MIN_RELATIONS}); bootstrap over relations "
    "(relations resampled with replacement, seeded; a resample with a constant side is left out), "
    "bias-corrected 95 % interval: holds if it lies below 0, does not hold if it lies above 0, else "
    "inconclusive.",
    reads="estimates (base, headline template, test split, full answer spaces, reduction sum)",
    number=PaperNumber(
        "r −0.99 over the 10 causal LMs (Base, derived from the authors' released files; no coefficient "
        "printed)"
    ),
    preconditions=(f"at least {MIN_RELATIONS} relations with test instances",),
)
def ace_falls_with_accuracy(t: StoreTables) -> list[Finding]:
    key, subject = "ace_falls_with_accuracy", "Pearson r(accuracy, ACE) of Base across relations"
    head = headline_rows(t)
    base = head.filter(pl.col("estimator") == BASELINE) if not head.is_empty() else head
    groups = sorted(base.group_by(["relation_id"]), key=lambda kv: kv[0]) if base.height else []
    if len(groups) < MIN_RELATIONS:
        return not_testable(
            key, t, subject, f"{len(groups)} relation(s) with Base test rows, fewer than {MIN_RELATIONS}: "
            "run kcal findings --build (stage bear, 9 relations) or kcal demo with more --relation"
        )  # fmt: skip
    names = [name for (name,), _ in groups]
    acc = np.array([_metric("accuracy", g) for _, g in groups])
    ace = np.array([_metric("ace", g) for _, g in groups])
    value = float(_pearson(acc, ace))
    idx = instance_resamples(len(groups), N_RESAMPLES, SEED).indices
    low, high = bc_interval(_pearson(acc[idx], ace[idx]), value)
    per_relation = ", ".join(f"{n} {fmt(a)}/{fmt(c)}" for n, a, c in zip(names, acc, ace, strict=True))
    shown = f" over {len(groups)} relations; accuracy/ACE per relation: {per_relation}"
    return [interval_finding(key, t, subject, "negative", value, low, high, len(groups), "r", shown)]
