"""Claims of seed 003, Wang et al. 2026 (MACE): questions with several correct answers."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.evaluation.bootstrap import PAD, Resamples, batched_metrics
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.scopes import MACE_DOMAIN
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    REDUCTION,
    SEED,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    difference_finding,
    estimator_label,
    fmt,
    fmt_ci,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import (
    bc_interval,
    dev_size_note,
    estimators_in,
    few_dev_precondition,
    fits_of,
    headline_rows,
    paired_difference,
    relation_resamples,
    resample_means,
)

MACE = Paper(
    "003",
    "MACE, Wang et al. 2026 (seed 003)",
    "Wang et al. 2026, Evaluating and Calibrating LLM Confidence on Questions with Multiple Correct "
    "Answers (MACE, arXiv 2602.07842)",
    file="wang-mace-multiple-correct-answers.txt",
)
MACE_SETTING = (
    "12,000 open questions in six domains with 1, 2, 4 or 6 correct answers, 15 calibration methods, "
    "four LLM families of 7B to 72B parameters (larger models were affected more). kcal's MACE is a "
    "closed set (the golds plus 5 distractors) scored by likelihood, not by sampling."
)
MACE_MODELS = "four LLM families, 7B–72B"
ABSTRACT_ONLY = "no number available to kcal (only the abstract was accessible)"
NO_MACE = (
    "no MACE relation in this store: run kcal findings --build (stage mace), or kcal demo "
    "--relation mace-award (or another mace-* relation)"
)
# "τ = 0 is as good as a tuned τ": non-inferiority on AUROC (the paper's metric) with this margin.
AUROC_MARGIN = 0.02
MULTI_ANSWER_FAMILY = "multi_answer"  # SCA, SNCA, SFCA: scored under their own reduction
MULTI_ANSWER_REDUCTION = "answer_sum"
SCA = ("sca_tuned", "sca_tau0")
# Not confidence estimators of the question asked: a marker reads another sentence, the answer
# prior ignores the subject.
NOT_COMPETING_FAMILIES = ("markers", "null_model")
MACE_PRECONDITIONS = (
    "a MACE relation in the store (stage mace: the embedded MACE domains)",
    "test questions of at least two gold counts",
)


def _mace_relations(t: StoreTables) -> list[str]:
    if t.relations.is_empty():
        return []
    return sorted(t.relations.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].to_list())


def _mace_groups(t: StoreTables) -> dict[int, pl.DataFrame] | str:
    """Base on the headline template of the MACE relations' test questions, by gold count (sorted
    by relation and instance, as resample plans need); or why there are none."""
    head = headline_rows(t)
    if head.is_empty() or t.instances.is_empty():
        return NO_MACE
    rows = head.filter((pl.col("estimator") == BASELINE) & pl.col("relation_id").is_in(_mace_relations(t)))
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
        res = relation_resamples(g["relation_id"].to_numpy(), SEED + n_gold)
        means[n_gold] = float(values.mean())
        resampled[n_gold] = resample_means(values, res)
    lo, hi = min(groups), max(groups)
    value = means[hi] - means[lo]
    low, high = bc_interval(resampled[hi] - resampled[lo], value)
    steps = np.diff([means[n] for n in groups])
    monotone = bool((steps >= 0).all()) if claimed == "positive" else bool((steps <= 0).all())
    per_n = ", ".join(f"{n}: {fmt(means[n])} (n = {groups[n].height})" for n in groups)
    direction = "rises" if claimed == "positive" else "falls"
    return [
        interval_finding(
            key,
            t,
            f"{label}: {hi} golds − {lo} gold{'s' if lo > 1 else ''}",
            claimed,
            value,
            low,
            high,
            sum(g.height for g in groups.values()),
            f"Δ{label}",
            f"; by gold count {per_n}",
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
ABSTRACT_TREND = (
    '"while accuracy increases with answer cardinality, estimated confidence consistently decreases, '
    'causing severe miscalibration for questions with mixed answer counts" (abstract)'
)


@claim(
    "mace_accuracy_rises_with_golds",
    reference="abstract",
    stage="mace",
    title="Accuracy rises as the number of correct answers grows",
    paper=MACE,
    setting=MACE_SETTING + " In a closed set, more golds among the options also raise chance accuracy "
    "(n golds of n + 5 options), so a model near chance shows this rise mechanically.",
    rule=TREND_RULE + " Claimed: > 0.",
    reads=MACE_READS,
    number=PaperNumber(f"{ABSTRACT_ONLY}; accuracy rises: {ABSTRACT_TREND}", MACE_MODELS),
    preconditions=MACE_PRECONDITIONS,
)
def mace_accuracy_rises_with_golds(t: StoreTables) -> list[Finding]:
    return _gold_count_trend(t, "mace_accuracy_rises_with_golds", "correct", "positive", "accuracy")


@claim(
    "mace_confidence_falls_with_golds",
    reference="abstract",
    stage="mace",
    title="Confidence in the top answer falls as the number of correct answers grows",
    paper=MACE,
    setting=MACE_SETTING + " The fall needs a model that spreads its probability over the several "
    "correct answers; a model that does not know them may not spread it, so the effect can be absent.",
    rule=TREND_RULE + " Confidence = Base's mean confidence. Claimed: < 0.",
    reads=MACE_READS,
    number=PaperNumber(f"{ABSTRACT_ONLY}; confidence falls: {ABSTRACT_TREND}", MACE_MODELS),
    preconditions=MACE_PRECONDITIONS,
)
def mace_confidence_falls_with_golds(t: StoreTables) -> list[Finding]:
    return _gold_count_trend(t, "mace_confidence_falls_with_golds", "confidence", "negative", "confidence")


# --- AUROC on mixed gold counts ------------------------------------------------------------------


def restricted(resamples: Resamples, keep: np.ndarray) -> Resamples:
    """Each resample's rows that `keep` marks (a boolean per row), in draw order: a statistic on a
    subset of the rows read from the very resamples of the whole (the {1}-gold AUROC on the
    questions each pooled resample drew). The cells past a resample's size repeat the first kept
    row instead of PAD: the batched metrics mask them by size, and a PAD would index a row outside
    the span of kept rows that batched_metrics ranks."""
    keep = np.asarray(keep, dtype=bool)
    if not keep.any():
        raise ValueError("keep: no row is kept")
    idx = resamples.indices
    kept = (idx != PAD) & keep[np.where(idx != PAD, idx, 0)]
    order = np.argsort(~kept, axis=1, kind="stable")  # kept cells first, in draw order
    sizes = kept.sum(axis=1)
    filler = int(np.flatnonzero(keep)[0])
    inside = np.arange(idx.shape[1]) < sizes[:, None]
    packed = np.where(inside, np.take_along_axis(idx, order, axis=1), filler)
    return Resamples(packed.astype(np.int32), sizes.astype(np.int64))


def _gold_set(counts) -> str:
    return "{" + ",".join(str(n) for n in counts) + "}"


@claim(
    "mace_auroc_falls_with_mixed_golds",
    reference="§4, Fig. 3",
    stage="mace",
    title="AUROC falls as questions with more correct answers are mixed in",
    paper=MACE,
    setting=MACE_SETTING + " Their evaluation pools questions cumulatively, {1}, {1,2}, {1,2,4}, "
    "{1,2,4,6}: confidence that falls with the gold count while accuracy rises ranks the many-gold "
    "questions, often right, below the one-gold ones, so discrimination over the pooled set degrades.",
    rule="AUROC (the registry's auroc) of Base on each MACE relation's headline template, on the test "
    "questions of the cumulative gold-count sets (the smallest gold count, then each next one added). "
    "Tested: AUROC(all gold counts) − AUROC(smallest gold count only), both computed on the same "
    "resample of the pooled questions (relations, then questions, drawn with replacement; the "
    "smallest-count statistic on the resample's rows of that count), 95 % bias-corrected interval: "
    "holds if it lies below 0, does not hold if above, else inconclusive. Each cumulative set's AUROC "
    "is shown with its interval.",
    reads=MACE_READS,
    number=PaperNumber(
        f"{ABSTRACT_ONLY}; AUROC degrades: severe miscalibration for questions with mixed answer "
        "counts (abstract)",
        MACE_MODELS,
    ),
    preconditions=MACE_PRECONDITIONS,
)
def mace_auroc_falls_with_mixed_golds(t: StoreTables) -> list[Finding]:
    key = "mace_auroc_falls_with_mixed_golds"
    groups = _mace_groups(t)
    if isinstance(groups, str):
        return not_testable(key, t, "AUROC(all gold counts) − AUROC(one gold)", groups)
    pooled = pl.concat(list(groups.values())).sort("relation_id", "instance_id")
    c = pooled["confidence"].cast(pl.Float64).to_numpy()
    y = pooled["correct"].cast(pl.Boolean).to_numpy()
    gold = pooled["n_gold"].to_numpy()
    res = relation_resamples(pooled["relation_id"].to_numpy())
    counts = list(groups)
    points, resampled, shown = [], [], []
    for k in range(1, len(counts) + 1):
        keep = np.isin(gold, counts[:k])
        point = float(METRICS["auroc"](c[keep], y[keep]))
        values = batched_metrics(["auroc"], c, y, restricted(res, keep))["auroc"]
        points.append(point)
        resampled.append(values)
        low, high = bc_interval(values, point)
        shown.append(f"{_gold_set(counts[:k])} {fmt_ci(point, low, high)} (n = {int(keep.sum())})")
    value = points[-1] - points[0]
    low, high = bc_interval(resampled[-1] - resampled[0], value)
    if math.isnan(value):
        low = high = math.nan  # one class in a set: AUROC undefined there, nothing to test
    steps = np.diff(points)
    notes = []
    if np.isnan(points).any():
        notes.append("AUROC undefined where a set has only right or only wrong answers")
    elif (steps <= 0).all():
        notes.append("AUROC falls at every step (monotone)")
    else:
        notes.append("not monotone: AUROC does not fall at every step")
    if counts[0] != 1:
        notes.append(f"no one-gold question: the smallest gold count is {counts[0]}")
    return [
        interval_finding(
            key,
            t,
            f"AUROC{_gold_set(counts)} − AUROC{_gold_set(counts[:1])}",
            "negative",
            value,
            low,
            high,
            pooled.height,
            "ΔAUROC",
            f"; AUROC by cumulative gold-count set: {', '.join(shown)}",
            "; ".join(notes),
        )
    ]


# --- SCA -----------------------------------------------------------------------------------------


def _mace_estimates(t: StoreTables) -> pl.DataFrame | str:
    """Every confidence estimator's headline-selection rows on the MACE relations' test questions,
    one reduction per estimator (SCA, SNCA, SFCA their own answer_sum; the others the headline
    Sum), the reduction relabelled to one value so that paired differences join them; or why none."""
    mace = _mace_relations(t)
    if not mace:
        return NO_MACE
    head = headline_rows(t, reduction=None)
    if head.is_empty():
        return NO_MACE
    multi = [n for n, s in ESTIMATORS.items() if s.family == MULTI_ANSWER_FAMILY]
    excluded = [n for n, s in ESTIMATORS.items() if s.family in NOT_COMPETING_FAMILIES]
    own = pl.col("estimator").is_in(multi)
    rows = head.filter(
        pl.col("relation_id").is_in(mace)
        & ~pl.col("estimator").is_in(excluded)
        & pl.when(own)
        .then(pl.col("reduction") == MULTI_ANSWER_REDUCTION)
        .otherwise(pl.col("reduction") == REDUCTION)
    )
    if rows.is_empty():
        return NO_MACE
    return rows.with_columns(reduction=pl.lit(REDUCTION))


def _mace_fits(t: StoreTables) -> pl.DataFrame:
    if t.fits.is_empty():
        return t.fits
    return t.fits.filter(pl.col("relation_id").is_in(_mace_relations(t)))


NO_SCA = (
    "no SCA estimates on a MACE relation: SCA needs answer-conditional question templates (kcal "
    "findings --build, stage mace; or kcal demo --relation mace-award --template-kinds curated,question)"
)


@claim(
    "sca_beats_others",
    reference="§5, Table 4",
    stage="mace",
    title="SCA discriminates best: AUROC(SCA) above every other confidence estimator's on MACE questions",
    paper=MACE,
    setting=MACE_SETTING + " SCA sums the absolute probabilities of the answers above τ, so several "
    "correct answers add up instead of competing.",
    rule="AUROC of SCA (τ tuned; τ = 0 where no tuned SCA is scored or its τ was fitted on fewer than "
    "20 dev questions) and of every other confidence estimator scored on the same MACE test questions "
    "(the headline template's and the instance-grain ones: Base, Margin, the template marginal, "
    "SNCA, SFCA, recalibrations, …; not the markers, which read another sentence, nor the answer "
    "prior, which ignores the subject; a fitted one only if its fits saw ≥ 20 dev questions; each on "
    "its own prediction). Paired bootstrap (relations, then questions) of AUROC(SCA) − AUROC(the best "
    "other), the best chosen on the point estimate: holds if the 95 % interval lies above 0, does not "
    "hold if below, else inconclusive.",
    reads="estimates (headline selection on the MACE relations, test split, full answer spaces; "
    "reduction answer_sum for SCA/SNCA/SFCA, sum for the others), estimator_fits (n_dev), relations",
    number=PaperNumber(
        f'{ABSTRACT_ONLY}; "SCA achieves state-of-the-art calibration performance under mixed-answer '
        'settings" (abstract)',
        MACE_MODELS,
    ),
    preconditions=(
        "a MACE relation in the store (stage mace)",
        "SCA scored (question templates)",
        "a second confidence estimator on the same questions",
    ),
)
def sca_beats_others(t: StoreTables) -> list[Finding]:
    key, subject = "sca_beats_others", "AUROC(SCA) − AUROC(the best other estimator)"
    rows = _mace_estimates(t)
    if isinstance(rows, str):
        return not_testable(key, t, subject, rows)
    present = estimators_in(rows)
    fits = _mace_fits(t)
    notes = []
    sca = "sca_tuned" if "sca_tuned" in present else "sca_tau0"
    if sca == "sca_tuned" and (failed := few_dev_precondition(fits, sca, MULTI_ANSWER_REDUCTION)):
        sca = "sca_tau0"
        notes.append(f"SCA at τ = 0: the tuned τ is not used ({failed})")
    if sca not in present:
        return not_testable(key, t, subject, NO_SCA)
    questions = rows.filter(pl.col("estimator") == sca).select("relation_id", "instance_id")
    scored, partial, unfit = {}, [], []
    for name in sorted(present - set(SCA)):
        spec = ESTIMATORS.get(name)
        reduction = MULTI_ANSWER_REDUCTION if spec and spec.family == MULTI_ANSWER_FAMILY else REDUCTION
        if few_dev_precondition(fits, name, reduction):
            unfit.append(estimator_label(name))
            continue
        g = rows.filter(pl.col("estimator") == name).join(questions, on=["relation_id", "instance_id"])
        if g.height < questions.height:
            partial.append(f"{estimator_label(name)} (n = {g.height})")
            continue
        kind = g["output_kind"][0] if "output_kind" in g.columns else "probability"
        auroc = float(METRICS["auroc"](g["confidence"].to_numpy(), g["correct"].to_numpy(), kind))
        if not math.isnan(auroc):
            scored[name] = auroc
    if unfit:
        notes.append(f"left out, fitted on fewer than 20 dev questions: {', '.join(unfit)}")
    if partial:
        notes.append(f"left out, defined on fewer questions than SCA: {', '.join(partial)}")
    if not scored:
        return not_testable(
            key, t, subject, "no other confidence estimator with a defined AUROC on SCA's questions"
            + (f" ({'; '.join(notes)})" if notes else "")
        )  # fmt: skip
    best = max(scored, key=lambda n: (scored[n], n))
    d = paired_difference(rows, sca, best, ["auroc"])["auroc"]
    ranking = ", ".join(
        f"{estimator_label(n)} {fmt(v)}" for n, v in sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    subject = f"AUROC({estimator_label(sca)}) − AUROC({estimator_label(best)})"
    ranking = f"; AUROC of the others: {ranking}"
    return [difference_finding(key, t, subject, d, "positive", "AUROC", ranking, "; ".join(notes))]


@claim(
    "sca_tau0_as_good_as_tuned",
    reference="§5, Table 4",
    stage="mace",
    title="SCA with τ = 0 is as good as SCA with τ tuned on the dev split",
    paper=MACE,
    setting=MACE_SETTING + " The claim is about the threshold, not the model: it can be tested at any "
    "size, given enough dev questions to tune τ on.",
    rule=f"Non-inferiority on AUROC (the paper's metric), margin {AUROC_MARGIN}, on the MACE relations' "
    "test questions only: paired bootstrap (relations, then questions) of AUROC(SCA τ = 0) − "
    f"AUROC(SCA tuned); holds if the 95 % interval's lower end is ≥ −{AUROC_MARGIN} (τ = 0 loses at "
    f"most {AUROC_MARGIN}), does not hold if its upper end is < −{AUROC_MARGIN} (tuning clearly helps), "
    "else inconclusive. Not testable where τ was tuned on fewer than 20 dev questions. ΔBrier (the "
    "criterion τ is tuned on) is shown beside it.",
    reads="estimates (sca_tau0, sca_tuned: instance grain, reduction answer_sum, MACE relations, test "
    "split, full answer spaces), estimator_fits (τ, n_dev), relations (domain)",
    number=PaperNumber(f"{ABSTRACT_ONLY}; no statement on τ found", MACE_MODELS),
    preconditions=(
        "a MACE relation in the store (stage mace)",
        "SCA τ = 0 and τ tuned scored (question templates, a dev split)",
        "τ tuned on ≥ 20 dev questions per relation",
    ),
)
def sca_tau0_as_good_as_tuned(t: StoreTables) -> list[Finding]:
    key, subject = "sca_tau0_as_good_as_tuned", "AUROC(SCA τ = 0) − AUROC(SCA tuned)"
    rows = _mace_estimates(t)
    if isinstance(rows, str):
        return not_testable(key, t, subject, rows)
    present = estimators_in(rows)
    if not set(SCA) <= present:
        why = (
            NO_SCA
            if "sca_tau0" not in present
            else "no SCA (τ tuned) on a MACE relation: it needs a dev split (--dev-fraction > 0)"
        )
        return not_testable(key, t, subject, why)
    d = paired_difference(rows, "sca_tau0", "sca_tuned", ["auroc", "brier"])
    a = d["auroc"]
    if math.isnan(a["ci_low"]) or math.isnan(a["ci_high"]):
        verdict = INCONCLUSIVE
    elif a["ci_low"] >= -AUROC_MARGIN:
        verdict = HOLDS
    elif a["ci_high"] < -AUROC_MARGIN:
        verdict = FAILS
    else:
        verdict = INCONCLUSIVE
    compared = sorted(set(rows.filter(pl.col("estimator") == "sca_tuned")["relation_id"].to_list()))
    notes = [f"compared on {', '.join(compared)}"]
    fits = _mace_fits(t)
    if fitted_note := dev_size_note(fits, "sca_tuned", MULTI_ANSWER_REDUCTION):
        notes.append(fitted_note)
    fitted = fits_of(fits, "sca_tuned", MULTI_ANSWER_REDUCTION)
    taus = fitted.filter(pl.col("parameter") == "tau")["value"] if not fitted.is_empty() else pl.Series([])
    if taus.len() and (taus == 0).all():
        notes.append("τ was tuned to 0 everywhere, so both are the same estimator here")
    b = d.get("brier")
    brier = f"; ΔBrier {fmt_ci(b['difference'], b['ci_low'], b['ci_high'])}" if b else ""
    shown = f"ΔAUROC {fmt_ci(a['difference'], a['ci_low'], a['ci_high'])}{brier}"
    if failed := few_dev_precondition(fits, "sca_tuned", MULTI_ANSWER_REDUCTION):
        return not_testable(key, t, subject, f"{failed} ({shown}; {'; '.join(notes)})")
    return [
        Finding(
            key,
            t.model_id,
            subject,
            verdict,
            a["difference"],
            a["ci_low"],
            a["ci_high"],
            a["n"],
            shown,
            "; ".join(notes),
        )
    ]
