"""Claims of seed 003, Wang et al. 2026 (MACE): questions with several correct answers; the gold-count
claims here, SCA's in mace_sca.py.

kcal's MACE is a closed set: a question with n golds has n + 5 options (its golds and the stage's 5
distractors), so chance accuracy n/(n + 5) and a know-nothing model's confidence 1/(n + 5) move with
the gold count by themselves. Every gold-count claim is therefore read against chance or with the
option count held fixed, and every gold count's statistic on one resample plan over all test
questions (relations, then questions): the relation draw is shared, so domain differences cancel."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.resampled_metrics import batched_metrics
from kcal_pipeline.evaluation.resamples import PAD, Resamples
from kcal_pipeline.evaluation.scopes import MACE_DOMAIN
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    Citation,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    fmt,
    fmt_ci,
    fmt_signed,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import bc_interval, headline_rows, relation_resamples

MACE = Paper(
    "003",
    "MACE, Wang et al. 2026 (seed 003)",
    "Wang et al. 2026, Evaluating and Calibrating LLM Confidence on Questions with Multiple Correct "
    "Answers (MACE, arXiv 2602.07842)",
    file="wang-mace-multiple-correct-answers.txt",
)
MACE_SETTING = (
    "MACE: 12,000 open questions in six domains with 1, 2, 4 or 6 correct answers (500 per count and "
    "domain), answers sampled and judged by GPT-4o, metrics macro-averaged over domains; §5 reports "
    "LLaMA-3.1-70B-Instruct. kcal's MACE is a closed set (the golds plus 5 distractors, so n + 5 "
    "options) scored by likelihood, not by sampling."
)
LLAMA_70B = "LLaMA-3.1-70B-Instruct"
MACE_DISTRACTORS = 5  # the mace stage's n_negatives (ProbeOptions' default): n golds → n + 5 options
NO_MACE = (
    "no MACE relation in this store: run kcal findings --build (stage mace), or kcal demo "
    "--relation mace-award (or another mace-* relation)"
)
MACE_PRECONDITIONS = (
    "a MACE relation in the store (stage mace: the embedded MACE domains)",
    "test questions of at least two gold counts",
)
MACE_READS = (
    "estimates (base, headline template, MACE relations, test split), probe_instances (n_gold), "
    "relations (domain)"
)
CLIP = 1e-6  # confidence clipped to [CLIP, 1 − CLIP] before its log-odds

# --- the paper's words ---------------------------------------------------------------------------
TABLE3_HEAD = Citation("§5.1", "Method 1a 2a 4a 6a Accuracy 48.0 55.4 59.9 61.7", "Table 3")
TABLE3_CONSIS = Citation("§5.1", "Consis 51.3 48.9 40.2 35.9", "Table 3")
TABLE3_PERPLEXITY = Citation("§5.1", "Perplexity 77.6 76.4 73.0 71.0", "Table 3")
ABSTRACT_TREND = Citation(
    "Abstract",
    "while accuracy increases with answer cardinality, estimated confidence consistently decreases, "
    "causing severe miscalibration for questions with mixed answer counts",
)
TABLE4_HEAD = Citation("§6.1", "Method [1] [1,2] [1,2,4] [1,2,4,6]", "Table 4")
TABLE4_PERPLEXITY = Citation("§6.1", "Perplexity 80.9 79.4 76.5 73.8", "Table 4")
CHANCE_WHY = (
    "chance-corrected accuracy (accuracy − chance)/(1 − chance), chance = n/(n + 5): 0 for a guesser "
    "and constant for a model that knows a fixed share of the questions and guesses the rest, so the "
    "rise of chance from 1/6 to 6/11 (0.379) cannot make it rise"
)
LOGODDS_WHY = (
    "confidence as log-odds over the uniform share, logit(c) + log(K − 1) with K = n + 5 options: a "
    "softmax that raises its top option by a logit margin d over the others gives c = e^d/(e^d + "
    "K − 1) and this statistic d at every K, so the growth from 6 to 11 options cannot move it (no "
    "subset at a fixed option count exists: K = n + 5 for every question); a model that splits its "
    "probability over several golds lowers it"
)


def options(n_gold) -> np.ndarray:
    return np.asarray(n_gold, dtype=np.float64) + MACE_DISTRACTORS


def chance_accuracy(n_gold) -> np.ndarray:
    return np.asarray(n_gold, dtype=np.float64) / options(n_gold)


def uniform_log_odds(confidence, n_gold) -> np.ndarray:
    """logit(c) + log(K − 1): 0 for the uniform share 1/K, d for a logit margin d at any K; rounded
    to 1e-12, so that the float noise of an exact uniform share is 0, not a trend."""
    c = np.clip(np.asarray(confidence, dtype=np.float64), CLIP, 1 - CLIP)
    return np.round(np.log(c / (1 - c)) + np.log(options(n_gold) - 1), 12)


def _mace_relations(t: StoreTables) -> list[str]:
    if t.relations.is_empty():
        return []
    return sorted(t.relations.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].to_list())


def with_gold(t: StoreTables, frame: pl.DataFrame) -> pl.DataFrame:
    """The rows with their question's gold count, sorted by relation and instance (resample order)."""
    gold = t.instances.select("relation_id", "instance_id", "n_gold")
    return frame.join(gold, on=["relation_id", "instance_id"]).sort("relation_id", "instance_id")


def _mace_base(t: StoreTables) -> pl.DataFrame | str:
    """Base on the headline template of the MACE relations' test questions with their gold count;
    or why there are none, or only one gold count."""
    head = headline_rows(t)
    if head.is_empty() or t.instances.is_empty():
        return NO_MACE
    rows = head.filter((pl.col("estimator") == BASELINE) & pl.col("relation_id").is_in(_mace_relations(t)))
    if rows.is_empty():
        return NO_MACE
    rows = with_gold(t, rows)
    counts = sorted(rows["n_gold"].unique().to_list())
    if len(counts) < 2:
        return (
            f"the MACE test questions have one gold count only ({counts}): probe more questions "
            "(--max-instances)"
        )
    return rows


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


def restricted_means(values: np.ndarray, sub: Resamples) -> np.ndarray:
    """The mean of values over each restricted resample's rows ([B]; NaN where it drew none)."""
    inside = np.arange(sub.indices.shape[1]) < sub.sizes[:, None]
    sums = np.where(inside, values[sub.indices], 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / sub.sizes


def gold_means(values: np.ndarray, gold: np.ndarray, res: Resamples) -> dict[int, tuple[float, np.ndarray]]:
    """Per gold count: the mean of values on its questions and on each resample's (one plan)."""
    return {
        int(n): (float(values[gold == n].mean()), restricted_means(values, restricted(res, gold == n)))
        for n in np.unique(gold)
    }


def _monotone_note(points: list[float], label: str, claimed: str) -> str:
    steps = np.diff(points)
    rising = claimed == "positive"
    if (steps >= 0).all() if rising else (steps <= 0).all():
        return f"{label} {'rises' if rising else 'falls'} at every step (monotone)"
    return f"not monotone: {label} does not {'rise' if rising else 'fall'} at every step"


def _gold_subject(label: str, lo: int, hi: int) -> str:
    return f"{label}: {hi} golds − {lo} gold{'s' if lo > 1 else ''}"


TREND_RULE = (
    "Base on each MACE relation's headline template, test questions grouped by gold count; one "
    "resample plan over all of them (relations, then questions), each gold count's statistic read "
    "on that resample's questions of that count, so the relation draw is shared. The difference "
    "largest − smallest gold count with its 95 % bias-corrected interval: holds if it excludes 0 on "
    "the claimed side, does not hold if on the other, else inconclusive. Whether the sequence over "
    "all gold counts is monotone is reported beside it."
)


@claim(
    "mace_accuracy_rises_with_golds",
    sources=(
        ABSTRACT_TREND,
        Citation(
            "§5.1",
            "increasing the number of ground-truth answers leads to a steady improvement in accuracy, "
            "suggesting that the questions become empirically easier",
        ),
        TABLE3_HEAD,
    ),
    stage="mace",
    title="Accuracy rises with the number of correct answers, beyond what chance gives",
    paper=MACE,
    setting=MACE_SETTING + " In kcal's closed set chance accuracy rises with the gold count too (n of "
    "n + 5 options: 1/6 → 6/11); the paper's open questions have no such floor.",
    rule=TREND_RULE + f" Statistic: the {CHANCE_WHY}. Claimed: > 0. Each gold count's accuracy − "
    "chance is shown with its interval.",
    reads=MACE_READS,
    number=PaperNumber(
        "accuracy 48.0, 55.4, 59.9, 61.7 at 1a, 2a, 4a, 6a",
        LLAMA_70B,
        effect=0.137,
        derived="(61.7 − 48.0)/100 (LLaMA-3.1-70B-Instruct, Table 3); open questions have chance ≈ 0, "
        "so the rise is the rise of the chance-corrected accuracy",
        setting="open questions, macro-average over six domains",
    ),
    preconditions=MACE_PRECONDITIONS,
)
def mace_accuracy_rises_with_golds(t: StoreTables) -> list[Finding]:
    key, label = "mace_accuracy_rises_with_golds", "chance-corrected accuracy"
    rows = _mace_base(t)
    if isinstance(rows, str):
        return not_testable(key, t, f"{label}: most golds − one gold", rows)
    gold = rows["n_gold"].to_numpy()
    res = relation_resamples(rows["relation_id"].to_numpy())
    acc = gold_means(rows["correct"].cast(pl.Float64).to_numpy(), gold, res)
    kappa, shown, below = {}, [], []
    for n, (point, resampled) in acc.items():
        chance = float(chance_accuracy(n))
        kappa[n] = ((point - chance) / (1 - chance), (resampled - chance) / (1 - chance))
        low, high = bc_interval(resampled - chance, point - chance)
        shown.append(
            f"{n}: accuracy {fmt(point)}, chance {fmt(chance)}, accuracy − chance "
            f"{fmt_ci(point - chance, low, high)} (n = {int((gold == n).sum())})"
        )
        if not low > 0:
            below.append(str(n))
    lo, hi = min(acc), max(acc)
    value = kappa[hi][0] - kappa[lo][0]
    low, high = bc_interval(kappa[hi][1] - kappa[lo][1], value)
    notes = [_monotone_note([kappa[n][0] for n in kappa], label, "positive")]
    if below:
        notes.append(f"accuracy not above chance (interval not above 0) at {', '.join(below)} gold(s)")
    raw = acc[hi][0] - acc[lo][0]
    by_chance = float(chance_accuracy(hi) - chance_accuracy(lo))
    return [
        interval_finding(
            key, t, _gold_subject(label, lo, hi), "positive", value, low, high, rows.height,
            f"Δ{label}", f"; raw Δaccuracy {fmt_signed(raw)}, chance alone "
            f"{fmt_signed(by_chance)}; by gold count {'; '.join(shown)}",
            "; ".join(notes),
        )
    ]  # fmt: skip


@claim(
    "mace_confidence_falls_with_golds",
    sources=(
        ABSTRACT_TREND,
        Citation("§5.1", "reveals a consistent downward trend in confidence across most estimation methods"),
        TABLE3_HEAD,
        TABLE3_PERPLEXITY,
        TABLE3_CONSIS,
    ),
    stage="mace",
    title="Confidence falls with the number of correct answers, the option count held fixed",
    paper=MACE,
    setting=MACE_SETTING + " kcal reads Base, the top option's probability: the nearest to the paper's "
    "Perplexity (the answer's generation probability). In kcal's closed set the option count grows "
    "with the gold count (6 → 11), which lowers a softmax's top probability by itself.",
    rule=TREND_RULE + f" Statistic: Base's mean {LOGODDS_WHY}. Claimed: < 0. Base's raw mean "
    "confidence and the uniform share 1/K are shown per gold count.",
    reads=MACE_READS,
    number=PaperNumber(
        "Perplexity 77.6, 76.4, 73.0, 71.0 and Consis 51.3, 48.9, 40.2, 35.9 at 1a, 2a, 4a, 6a",
        LLAMA_70B,
        setting="open questions, macro-average over six domains; confidence in %, not kcal's log-odds",
    ),
    preconditions=MACE_PRECONDITIONS,
)
def mace_confidence_falls_with_golds(t: StoreTables) -> list[Finding]:
    key, label = "mace_confidence_falls_with_golds", "confidence log-odds over uniform"
    rows = _mace_base(t)
    if isinstance(rows, str):
        return not_testable(key, t, f"{label}: most golds − one gold", rows)
    gold = rows["n_gold"].to_numpy()
    confidence = rows["confidence"].cast(pl.Float64).to_numpy()
    res = relation_resamples(rows["relation_id"].to_numpy())
    odds = gold_means(uniform_log_odds(confidence, gold), gold, res)
    lo, hi = min(odds), max(odds)
    value = odds[hi][0] - odds[lo][0]
    low, high = bc_interval(odds[hi][1] - odds[lo][1], value)
    shown = "; ".join(
        f"{n}: log-odds {fmt(odds[n][0])}, confidence {fmt(float(confidence[gold == n].mean()))} "
        f"(uniform 1/{int(options(n))} = {fmt(1 / float(options(n)))}; n = {int((gold == n).sum())})"
        for n in odds
    )
    return [
        interval_finding(
            key, t, _gold_subject(label, lo, hi), "negative", value, low, high, rows.height, f"Δ{label}",
            f"; by gold count {shown}", _monotone_note([odds[n][0] for n in odds], label, "negative"),
        )
    ]  # fmt: skip


@claim(
    "mace_overconfident_one_gold_overprudent_many",
    sources=(
        Citation(
            "§5.1",
            "On single-answer questions, consistent with prior studies, the estimated confidence exceeds "
            "QA performance, indicating overconfidence. However, when the ground-truth answers become "
            "more, the estimated confidence changes from overconfident to over-prudent.",
        ),
        Citation("§5.1", "Notably, consistency-based methods exhibit the best calibration performance"),
        TABLE3_HEAD,
        TABLE3_CONSIS,
    ),
    stage="mace",
    title="Over-confident on one-gold questions, over-prudent (under-confident) on many-gold ones",
    paper=MACE,
    setting=MACE_SETTING + " The paper says it of its consistency-based methods. kcal reads Base (the "
    "top option's probability), whose gap a know-nothing model puts at exactly 0 on one-gold questions; "
    "a consistency share over a few templates has a floor above chance (templates agree by chance), "
    "which would make the one-gold over-confidence mechanical.",
    rule="Base on each MACE relation's headline template, test questions; per gold count n the mean of "
    "confidence − correct (the calibration gap) minus the gap of a uniform guesser, (1 − n)/(n + 5) "
    "(confidence 1/K, accuracy n/K; 0 at one gold): kcal's closed set makes even a guesser "
    "under-confident on many-gold questions, since its probability is split over the golds. Two rows, "
    "one resample plan (relations, then questions): the smallest gold count, claimed > 0 "
    "(over-confident), and the largest, claimed < 0 (more over-prudent than a guesser); 95 % "
    "bias-corrected intervals, Holm over the two. The raw gaps are shown beside.",
    reads=MACE_READS,
    number=PaperNumber(
        "Consis 51.3 vs accuracy 48.0 at 1a; 35.9 vs 61.7 at 6a",
        LLAMA_70B,
        setting="open questions, macro-average over six domains (Consis: agreement of sampled answers)",
    ),
    preconditions=MACE_PRECONDITIONS,
)
def mace_overconfident_one_gold_overprudent_many(t: StoreTables) -> list[Finding]:
    key = "mace_overconfident_one_gold_overprudent_many"
    rows = _mace_base(t)
    if isinstance(rows, str):
        return not_testable(key, t, "confidence − accuracy by gold count", rows)
    gold = rows["n_gold"].to_numpy()
    gap = rows["confidence"].cast(pl.Float64).to_numpy() - rows["correct"].cast(pl.Float64).to_numpy()
    res = relation_resamples(rows["relation_id"].to_numpy())
    gaps = gold_means(gap, gold, res)
    out = []
    for n, claimed, word in (
        (min(gaps), "positive", "over-confident"),
        (max(gaps), "negative", "over-prudent"),
    ):
        point, resampled = gaps[n]
        floor = float((1 - n) / options(n))
        low, high = bc_interval(resampled - floor, point - floor)
        out.append(
            interval_finding(
                key, t, f"Base confidence − accuracy − a guesser's, {n} gold{'s' if n > 1 else ''} ({word})",
                claimed, point - floor, low, high, int((gold == n).sum()), "Δgap vs guesser",
                f"; raw confidence − accuracy {fmt_signed(point)}, a uniform guesser's {fmt_signed(floor)}",
            )
        )  # fmt: skip
    return out


# --- AUROC on mixed gold counts ------------------------------------------------------------------


def _gold_set(counts) -> str:
    return "{" + ",".join(str(n) for n in counts) + "}"


@claim(
    "mace_auroc_falls_with_mixed_golds",
    sources=(
        Citation(
            "§5.2",
            "consistent downward trend in AUROC as questions become more heterogeneous in the number of "
            "correct answers for most of the methods",
            "Fig. 3",
        ),
        TABLE4_HEAD,
        TABLE4_PERPLEXITY,
    ),
    stage="mace",
    title="AUROC falls as questions with more correct answers are mixed in",
    paper=MACE,
    setting=MACE_SETTING + " Fig. 3 and Table 4 pool the questions cumulatively, [1], [1,2], [1,2,4], "
    "[1,2,4,6]; §5.2 traces the fall to accuracy rising while confidence falls with the gold count. "
    "Base is compared with Perplexity, the paper's method nearest to it.",
    rule="AUROC (the registry's auroc) of Base on each MACE relation's headline template, on the test "
    "questions of the cumulative gold-count sets (the smallest gold count, then each next one added). "
    "The confidence is read with the option count held fixed, as log-odds over the uniform share (as "
    "mace_confidence_falls_with_golds reads it; within one gold count it ranks as the raw confidence "
    "does): on the raw confidence a know-nothing model's AUROC falls by itself, its confidence 1/K "
    "falling and its chance accuracy n/K rising with the gold count. Tested: AUROC(all gold counts) − "
    "AUROC(smallest gold count only), both computed on the same resample of the pooled questions "
    "(relations, then questions, drawn with replacement; the smallest-count statistic on the "
    "resample's rows of that count), 95 % bias-corrected interval: holds if it lies below 0, does not "
    "hold if above, else inconclusive. Each cumulative set's AUROC is shown with its interval, and the "
    "same on Base's raw confidence beside it.",
    reads=MACE_READS,
    number=PaperNumber(
        "Perplexity AUROC 80.9, 79.4, 76.5, 73.8 on [1], [1,2], [1,2,4], [1,2,4,6]",
        LLAMA_70B,
        effect=-0.071,
        derived="(73.8 − 80.9)/100, Perplexity, LLaMA-3.1-70B-Instruct, Table 4",
        setting="open questions, test split (80 %), macro-average over six domains",
    ),
    preconditions=MACE_PRECONDITIONS,
)
def mace_auroc_falls_with_mixed_golds(t: StoreTables) -> list[Finding]:
    key = "mace_auroc_falls_with_mixed_golds"
    pooled = _mace_base(t)
    if isinstance(pooled, str):
        return not_testable(key, t, "AUROC(all gold counts) − AUROC(one gold)", pooled)
    y = pooled["correct"].cast(pl.Boolean).to_numpy()
    gold = pooled["n_gold"].to_numpy()
    raw = pooled["confidence"].cast(pl.Float64).to_numpy()
    odds = uniform_log_odds(raw, gold)
    res = relation_resamples(pooled["relation_id"].to_numpy())
    counts = sorted(int(n) for n in np.unique(gold))
    sets = [np.isin(gold, counts[:k]) for k in range(1, len(counts) + 1)]
    names = [_gold_set(counts[:k]) for k in range(1, len(counts) + 1)]
    points = {"held": [], "raw": []}
    resampled = {"held": [], "raw": []}
    for keep in sets:
        for which, score, kind in (("held", odds, "score"), ("raw", raw, "probability")):
            points[which].append(float(METRICS["auroc"](score[keep], y[keep], kind)))
            resampled[which].append(batched_metrics(["auroc"], score, y, restricted(res, keep))["auroc"])
    shown = []
    for which in ("held", "raw"):
        cells = []
        for name, keep, point, values in zip(names, sets, points[which], resampled[which], strict=True):
            cells.append(f"{name} {fmt_ci(point, *bc_interval(values, point))} (n = {int(keep.sum())})")
        shown.append(", ".join(cells))
    value = points["held"][-1] - points["held"][0]
    low, high = bc_interval(resampled["held"][-1] - resampled["held"][0], value)
    if math.isnan(value):
        low = high = math.nan  # one class in a set: AUROC undefined there, nothing to test
    plain = points["raw"][-1] - points["raw"][0]
    plain_ci = bc_interval(resampled["raw"][-1] - resampled["raw"][0], plain)
    notes = []
    if np.isnan(points["held"]).any():
        notes.append("AUROC undefined where a set has only right or only wrong answers")
    else:
        notes.append(_monotone_note(points["held"], "AUROC", "negative"))
    if counts[0] != 1:
        notes.append(f"no one-gold question: the smallest gold count is {counts[0]}")
    return [
        interval_finding(
            key, t, f"AUROC{names[-1]} − AUROC{names[0]}, option count held fixed", "negative", value, low,
            high, pooled.height, "ΔAUROC", f"; AUROC by cumulative gold-count set: {shown[0]}; on Base's "
            f"raw confidence (as the paper reads its methods): ΔAUROC {fmt_ci(plain, *plain_ci)}, {shown[1]}",
            "; ".join(notes),
        )
    ]  # fmt: skip
