"""Claims of seed 000, Kissling et al. 2026, about Base itself: overconfidence (§5.1), the reduction
(App. B), the number of answer options (§5.4) and ACE against accuracy (§5.3); registered after
kissling.py's, whose paper and setting they share."""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.dataset.instances.variants import SUBSAMPLE_SUFFIX
from kcal_pipeline.estimation.registry import (
    DEV_SPLIT,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    headline_template_estimates,
)
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.resampled_metrics import batched_metrics
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, instance_resamples
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    DESCRIPTIVE_KIND,
    FIGURE_ONLY,
    REDUCTION,
    SEED,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    descriptive_finding,
    estimator_label,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
    not_testable_here,
)
from kcal_pipeline.reporting.findings.kissling import KISSLING, KISSLING_SETTING
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    headline_rows,
    join_instances,
    metric_row,
    relation_resamples,
    resample_means,
)


@claim(
    "models_overconfident",
    sources=(
        Citation(
            "§5.1",
            "By plotting the calibration curves in Figure 2, we see that C_{Base} is markedly overconfident.",
            "Fig. 2",
        ),
        Citation(
            "Abstract",
            "reveals that most models, especially those pre-trained with the masking objective, are "
            "overconfident.",
        ),
    ),
    title="Base is overconfident: mean confidence − accuracy > 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " The paper reads overconfidence off Base's calibration curves (below "
    "the identity line); kcal reads the curve's summary, the signed gap, in which over- and "
    "under-confident bins cancel (ACE measures their sum).",
    rule="The metrics table's confidence gap of Base (mean confidence − accuracy, scope all) with its "
    "95 % bias-corrected bootstrap interval (clustered by relation): holds if the interval lies above "
    "0, does not hold if it lies below 0, else inconclusive.",
    reads="metrics (base: confidence_gap, mean_confidence, accuracy; scope all, test split, full "
    "answer spaces, reduction sum)",
    number=FIGURE_ONLY,
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


def _metric(name: str, frame: pl.DataFrame, prefix: str = "") -> float:
    """A registered metric on a frame's confidence and correct columns (`prefix`: c_<p>, y_<p>)."""
    c, y = (frame[f"c_{prefix}"], frame[f"y_{prefix}"]) if prefix else (frame["confidence"], frame["correct"])
    return METRICS[name](c.to_numpy(), y.to_numpy())


REDUCTION_LABELS = {"sum": "Sum", "mean": "Mean", "answer_sum": "Sum(A)", "answer_mean": "Mean(A)"}


def _h_from(accuracy: np.ndarray, ace: np.ndarray) -> np.ndarray:
    """H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE) (calibration.h_score), 0 where Acc = 0 and ACE = 1."""
    good = 1.0 - ace
    total = accuracy + good
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total == 0.0, 0.0, 2.0 * accuracy * good / np.where(total == 0.0, 1.0, total))


def _base_rows(t: StoreTables, split: str = HEADLINE_SPLIT) -> pl.DataFrame:
    """Base's headline-template rows on full answer spaces under every stored reduction, on the
    test split (t.estimates) or the dev split (t.dev_estimates, where a comparator is picked)."""
    frame = t.dev_estimates if split == DEV_SPLIT else t.estimates
    if frame.is_empty() or t.templates.is_empty():
        return pl.DataFrame()
    est = frame.filter(
        (pl.col("split") == split)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("estimator") == BASELINE)
    )
    return headline_template_estimates(est, t.templates)


def _side_by_side(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Each frame's (confidence, correct) as c_<name>, y_<name> on the (relation, instance) they
    all answered, sorted by relation so that a clustered resample plan runs over the rows."""
    return join_instances(
        f.select("relation_id", "instance_id", c=pl.col("confidence"), y=pl.col("correct")).rename(
            {"c": f"c_{n}", "y": f"y_{n}"}
        )
        for n, f in frames.items()
    )


def _reductions_present(base: pl.DataFrame) -> list[str]:
    return [r for r in REDUCTION_LABELS if not base.is_empty() and r in set(base["reduction"])]


@claim(
    "sum_best_reduction",
    sources=(
        Citation(
            "App. B",
            "We selected the full-sequence summation — *Sum* — as our preferred approach, as it resulted in "
            "highest H scores for both CLMs and MLMs.",
            "Fig. 8",
        ),
        Citation(
            "App. B",
            "*Mean* and *Mean (A)* do result in better calibration scores than the summation variants, "
            "however this comes with a significant decrease in accuracy, making it overall less beneficial.",
            "Fig. 8",
        ),
    ),
    title="Sum gives Base the highest H: H(Sum) − H(the runner-up reduction, picked on dev) > 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " The paper compares the reductions Sum, Mean, Sum (A) and Mean (A) of "
    "Base by H, the harmonic mean of accuracy and 1 − ACE, averaged over CLMs and over MLMs (Fig. 8): "
    "Sum has the highest H; the Mean variants have a lower ACE but a lower accuracy.",
    rule="The runner-up reduction (the highest H of Base among Mean, Sum(A), Mean(A)) is picked on the "
    "dev split; on the test instances every reduction answered, H(Sum) − H(runner-up) with a paired "
    "bootstrap (the same resamples for every reduction, clustered by relation, H read from each "
    "resample's accuracy and ACE): holds if the 95 % interval lies above 0, does not hold if it lies "
    "below 0, else inconclusive. Each reduction's H, accuracy and ACE are shown.",
    reads="estimates and dev_estimates (base under sum, mean, answer_sum, answer_mean; headline "
    "template, full answer spaces)",
    number=FIGURE_ONLY,
    preconditions=("Base scored under Sum and at least one other reduction", "a dev split"),
)
def sum_best_reduction(t: StoreTables) -> list[Finding]:
    key, subject = "sum_best_reduction", "H(Base, Sum) − H(Base, runner-up reduction)"
    base = _base_rows(t)
    present = _reductions_present(base)
    if REDUCTION not in present or len(present) < 2:
        return not_testable(
            key, t, subject, f"Base is stored under {', '.join(present) or 'no'} reduction(s) only; "
            f"the claim needs Sum and another of {', '.join(REDUCTION_LABELS)}: run kcal findings "
            "--build (stage bear), whose store keeps Base under every reduction"
        )  # fmt: skip
    dev = _base_rows(t, DEV_SPLIT)
    dev_h = {
        r: _metric("h_score", dev.filter(pl.col("reduction") == r))
        for r in _reductions_present(dev)
        if r in present and r != REDUCTION
    }
    if not dev_h:
        return not_testable(
            key, t, subject, "no dev rows of Base under another reduction to pick the runner-up on: "
            "give the store a dev split (--dev-fraction > 0; kcal findings --build, stage bear)"
        )  # fmt: skip
    runner = max(dev_h, key=lambda r: (dev_h[r], r))
    wide = _side_by_side({r: base.filter(pl.col("reduction") == r) for r in present})
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
    value = point[REDUCTION] - point[runner]
    low, high = bc_interval(boot[REDUCTION] - boot[runner], value)
    picked = ", ".join(f"{REDUCTION_LABELS[r]} {fmt(h)}" for r, h in dev_h.items())
    shown = f" on {wide.height} test instances; " + "; ".join(shown)
    return [
        interval_finding(
            key, t, f"H(Base, Sum) − H(Base, {REDUCTION_LABELS[runner]})", "positive", value, low, high,
            wide.height, "ΔH", shown, note=f"runner-up picked on the dev split by H: {picked}",
        )
    ]  # fmt: skip


def _skewness(values: np.ndarray) -> float:
    """Fisher–Pearson skewness g1 = m3 / m2^1.5 (central moments over n, as scipy.stats.skew);
    NaN where every value is equal."""
    d = values - values.mean()
    m2, m3 = (d * d).mean(), (d * d * d).mean()
    return float(m3 / m2**1.5) if m2 > 1e-24 else float("nan")


def _resample_skewness(values: np.ndarray, res) -> np.ndarray:
    """g1 on every resample from its raw moments ([B]; NaN where a resample is constant)."""
    mean = resample_means(values, res)
    s2, s3 = resample_means(values**2, res), resample_means(values**3, res)
    m2 = s2 - mean**2
    m3 = s3 - 3 * mean * s2 + 2 * mean**3
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 1e-12, m3 / np.abs(m2) ** 1.5, np.nan)


@claim(
    "mean_reduction_skews_low",
    sources=(
        Citation(
            "App. B",
            "mean reduction yields strongly right-skewed confidence distributions, which can result in "
            "artificially low calibration errors, especially for low-accuracy models.",
            "Fig. 9",
        ),
        Citation(
            "App. B",
            "Under full-sequence mean reduction, the confidences of opt-1.3b do not exceed 0.5.",
            "Fig. 9",
        ),
    ),
    title="Mean reduction skews Base's confidences right and lowers its ACE below Sum's",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Fig. 9 shows C_Base of opt-1.3b under each reduction; the paper "
    "expects the artificially low ACE for low-accuracy models and the reverse for high-accuracy ones "
    "(Base's accuracy under Sum is shown).",
    rule="Two rows on the test instances both reductions answered, one resample plan (clustered by "
    "relation), Holm-adjusted: (1) the skewness g1 = m3/m2^1.5 of Base's confidences under Mean, "
    "holds if its bias-corrected 95 % interval lies above 0, does not hold if below 0; (2) "
    "ACE(Base, Mean) − ACE(Base, Sum), paired: holds if the interval lies below 0, does not hold if "
    "above 0; else inconclusive. Accuracy, mean and largest confidence and skewness under both are "
    "shown.",
    reads="estimates (base under mean and sum; headline template, test split, full answer spaces)",
    number=PaperNumber(
        "confidences under Mean do not exceed 0.5; distributions figure only", model="opt-1.3b"
    ),
    preconditions=("Base scored under Sum and Mean",),
)
def mean_reduction_skews_low(t: StoreTables) -> list[Finding]:
    key = "mean_reduction_skews_low"
    skew_subject, ace_subject = "skewness of C_Base under Mean", "ACE(Base, Mean) − ACE(Base, Sum)"
    base = _base_rows(t)
    present = _reductions_present(base)
    if not {"sum", "mean"} <= set(present):
        why = (
            f"Base is stored under {', '.join(present) or 'no'} reduction(s); the claim needs Sum and Mean: "
            "run kcal findings --build (stage bear), whose store keeps Base under every reduction"
        )
        return not_testable(key, t, skew_subject, why) + not_testable(key, t, ace_subject, why)
    wide = _side_by_side({r: base.filter(pl.col("reduction") == r) for r in ("mean", "sum")})
    res = relation_resamples(wide["relation_id"].to_numpy())
    described, boot = [], {}
    for r in ("mean", "sum"):
        c = wide[f"c_{r}"].to_numpy()
        boot[r] = batched_metrics(["ace"], c, wide[f"y_{r}"].to_numpy(), res)["ace"]
        described.append(
            f"{REDUCTION_LABELS[r]}: accuracy {fmt(_metric('accuracy', wide, r))}, ACE "
            f"{fmt(_metric('ace', wide, r))}, mean confidence {fmt(float(c.mean()))}, largest "
            f"{fmt(float(c.max()))}, skewness {fmt(_skewness(c))}"
        )
    described = f" on {wide.height} instances; " + "; ".join(described)
    c_mean = wide["c_mean"].to_numpy()
    skew = _skewness(c_mean)
    low, high = bc_interval(_resample_skewness(c_mean, res), skew)
    ace = _metric("ace", wide, "mean") - _metric("ace", wide, "sum")
    ace_low, ace_high = bc_interval(boot["mean"] - boot["sum"], ace)
    return [
        interval_finding(key, t, skew_subject, "positive", skew, low, high, wide.height, "g1", described),
        interval_finding(
            key, t, ace_subject, "negative", ace, ace_low, ace_high, wide.height, "ΔACE", described
        ),
    ]  # fmt: skip


NO_SWEEP = (
    "no option-count sweep in this store (no Base rows with answer_space_k > 0): run kcal findings "
    "--build (stage sweep) or kcal demo --answer-space-k 5,10,20,40 --answer-space-draws 3"
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


def _per_k(key: str, t: StoreTables, k: int, rows_: pl.DataFrame) -> Finding:
    """One option count's ACE, mean confidence and accuracy, each the mean over the draws (as
    Fig. 5's points), with every draw's; the full answer space is one draw."""
    by_draw = sorted(rows_.group_by("answer_space_draw"), key=lambda kv: kv[0])
    stats = np.array([[_metric(m, g) for m in ("ace", "mean_confidence", "accuracy")] for _, g in by_draw])
    ace, confidence, accuracy = stats.mean(axis=0)
    numbers = f"ACE {fmt(ace)}, mean confidence {fmt(confidence)}, accuracy {fmt(accuracy)}"
    if k != FULL_ANSWER_SPACE:
        draws = "; ".join(
            f"draw {d}: {fmt(a)}, {fmt(c)}, {fmt(y)}"
            for ((d,), _), (a, c, y) in zip(by_draw, stats, strict=True)
        )
        numbers += f" (mean over {len(by_draw)} draw(s); ACE, confidence, accuracy of {draws})"
    label = "full answer space" if k == FULL_ANSWER_SPACE else f"k = {k}"
    return descriptive_finding(key, t, f"Base at {label}", numbers, float(ace), n=rows_["parent"].n_unique())


@claim(
    "more_options_lower_ace",
    sources=(
        Citation(
            "§5.4",
            "We find that increasing the number of answer options can significantly reduce calibration "
            "error.",
        ),
        Citation(
            "§5.4",
            "In CLMs, confidence drops faster than accuracy, which results in *ACE* decreasing because the "
            "models are overconfident.",
        ),
        Citation(
            "§5.4",
            "We create varying number of options by sampling subsets of the 60 options in the 1:1 "
            "relations in BEAR.",
        ),
        Citation("§5.4", "Each point represents the mean over three repeated samplings.", "Fig. 5"),
    ),
    stage="sweep",
    title="More answer options lower Base's ACE: ACE(full answer space) − ACE(smallest k) < 0",
    paper=KISSLING,
    setting=KISSLING_SETTING + " The paper samples subsets of the 60 options of BEAR's 1:1 relations, "
    "three draws per option count, and plots Base's mean confidence, accuracy and ACE against the "
    "count (gpt2-medium and bert-base-cased): the causal LMs' ACE falls, the masked LMs' rises. kcal's "
    "sweep stage cuts 6 such relations to the profile's k with its draws (the full 60 is the uncut "
    "instance).",
    rule="On the test instances cut at the sweep's smallest k in every draw, paired by instance (one "
    "resample plan for the full answer space and every draw, clustered by relation), each statistic "
    "at the smallest k taken as the mean over the draws, as Fig. 5: (1) ACE(full) − ACE(smallest k) "
    "and (2) the confidence gap's change, (confidence − accuracy)(full) − (confidence − accuracy)"
    "(smallest k), which is below 0 when confidence drops faster than accuracy; each holds if its "
    "bias-corrected 95 % interval lies below 0, does not hold if above 0, else inconclusive (Holm over "
    "the two). Every k's ACE, mean confidence and accuracy are descriptive rows.",
    reads="estimates (base, test split, full answer spaces and their `#k<k>d<draw>` copies "
    "(answer_space_k, answer_space_draw), reduction sum, headline template)",
    number=FIGURE_ONLY,
    preconditions=("an option-count sweep (--answer-space-k, e.g. 5,10,20,40, --answer-space-draws 3)",),
)
def more_options_lower_ace(t: StoreTables) -> list[Finding]:
    key = "more_options_lower_ace"
    rows_ = _sweep_rows(t)
    cut = rows_.filter(pl.col("answer_space_k") > FULL_ANSWER_SPACE) if not rows_.is_empty() else rows_
    if cut.is_empty():
        return not_testable(key, t, "ACE(Base, full answer space) − ACE(Base, smallest k)", NO_SWEEP)
    full = rows_.filter(pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    k_min = int(cut["answer_space_k"].min())
    smallest = cut.filter(pl.col("answer_space_k") == k_min)
    draws = sorted(set(smallest["answer_space_draw"].to_list()))
    sides = {"full": full} | {
        f"d{d}": smallest.filter(pl.col("answer_space_draw") == d) for d in draws
    }  # fmt: skip
    wide = _side_by_side({n: f.with_columns(instance_id=pl.col("parent")) for n, f in sides.items()})
    ace_subject = f"ACE(Base, full answer space) − ACE(Base, k = {k_min}), mean over {len(draws)} draw(s)"
    gap_subject = f"(confidence − accuracy)(full answer space) − (confidence − accuracy)(k = {k_min})"
    if wide.is_empty():
        why = "the store has the sweep's cut copies but not their full answer spaces: rebuild with kcal "
        why += "findings --build (stage sweep)"
        return not_testable(key, t, ace_subject, why)
    res = relation_resamples(wide["relation_id"].to_numpy())
    point, boot = {}, {}
    for n in sides:
        c, y = wide[f"c_{n}"].to_numpy(), wide[f"y_{n}"].to_numpy()
        point[n] = {m: METRICS[m](c, y) for m in ("ace", "confidence_gap")}
        boot[n] = batched_metrics(["ace", "confidence_gap"], c, y, res)
    out = []
    for metric, subject, label in (("ace", ace_subject, "ΔACE"), ("confidence_gap", gap_subject, "Δgap")):
        cut_names = [f"d{d}" for d in draws]
        value = point["full"][metric] - float(np.mean([point[n][metric] for n in cut_names]))
        diffs = boot["full"][metric] - np.mean([boot[n][metric] for n in cut_names], axis=0)
        low, high = bc_interval(diffs, value)
        shown = f" on {wide.height} instances cut in every draw"
        out.append(interval_finding(key, t, subject, "negative", value, low, high, wide.height, label, shown))
    on_cut = set(wide["instance_id"].to_list())
    out.append(_per_k(key, t, FULL_ANSWER_SPACE, full.filter(pl.col("parent").is_in(on_cut))))
    out += [_per_k(key, t, k, g) for (k,), g in sorted(cut.group_by("answer_space_k"), key=lambda kv: kv[0])]
    return out


CORRELATION_MIN_RELATIONS = 5  # fewer relations and a correlation across them means little
DESCRIBED_ESTIMATORS = (BASELINE, "margin", "min_average")  # Base, and Fig. 4's C_Margin and C^Min_Average


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
    sources=(
        Citation(
            "§5.3",
            "We find an overall negative correlation between accuracy and ACE , exemplary shown in Figure 4 "
            "for C_{Margin} and $C_{Average}^{Min}$.",
            "Fig. 4",
        ),
        Citation(
            "§5.3",
            "Since larger models generally achieve higher accuracy, this result also implies a negative "
            "correlation between calibration error and model size.",
        ),
    ),
    kind=DESCRIPTIVE_KIND,
    title="ACE falls as accuracy grows across models (Fig. 4)",
    paper=KISSLING,
    setting=KISSLING_SETTING + " Each point of Fig. 4 is one model (ACE against accuracy for C_Margin "
    "and C^Min_Average); the paper prints no coefficient.",
    rule="The paper's test, a negative correlation of accuracy and ACE across models, needs several "
    "models: not testable here on one. Beside it, kcal's own description, not the paper's test: "
    f"Pearson r between per-relation accuracy and ACE of Base, Margin and Min Average across the "
    f"store's relations (at least {CORRELATION_MIN_RELATIONS}), with a bootstrap interval over relations "
    "(bias-corrected 95 %); no verdict.",
    reads="estimates (base, margin, min_average; headline template, test split, full answer spaces, "
    "reduction sum)",
    number=FIGURE_ONLY,
    preconditions=("two or more models scored on the bear stage",),
)
def ace_falls_with_accuracy(t: StoreTables) -> list[Finding]:
    key = "ace_falls_with_accuracy"
    out = not_testable_here(
        key, t, "Pearson r(accuracy, ACE) across models (the paper's test)",
        "two or more models scored on the same relations (the paper: 10 causal and 6 masked LMs); a "
        "claim reads one model's store at a time",
        "kcal models add ID --path DIR --kind clm && kcal findings --build",
    )  # fmt: skip
    head = headline_rows(t)
    for estimator in DESCRIBED_ESTIMATORS:
        subject = f"Pearson r(accuracy, ACE) of {estimator_label(estimator)} across relations (kcal's own)"
        own = head.filter(pl.col("estimator") == estimator) if not head.is_empty() else head
        groups = sorted(own.group_by(["relation_id"]), key=lambda kv: kv[0]) if own.height else []
        if len(groups) < CORRELATION_MIN_RELATIONS:
            out += not_testable(
                key, t, subject, f"{len(groups)} relation(s) with {estimator} test rows, fewer than "
                f"{CORRELATION_MIN_RELATIONS}: run kcal findings --build (stage bear, 9 relations)"
            )  # fmt: skip
            continue
        acc = np.array([_metric("accuracy", g) for _, g in groups])
        ace = np.array([_metric("ace", g) for _, g in groups])
        value = float(_pearson(acc, ace))
        idx = instance_resamples(len(groups), N_RESAMPLES, SEED).indices
        low, high = bc_interval(_pearson(acc[idx], ace[idx]), value)
        per_relation = ", ".join(
            f"{name} {fmt(a)}/{fmt(c)}" for ((name,), _), a, c in zip(groups, acc, ace, strict=True)
        )
        numbers = f"r {fmt_ci(value, low, high)} over {len(groups)} relations; accuracy/ACE: {per_relation}"
        out.append(descriptive_finding(key, t, subject, numbers, value, low, high, len(groups)))
    return out
