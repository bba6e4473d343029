"""Tinner's relation-difficulty claim (thesis §5.2.2, stage bear): relations with fewer objects are
less challenging, read as accuracy above chance against the option count across relations.
Registered after tinner.py's paraphrase claims (it imports this module last)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy.stats import spearmanr

from kcal_pipeline.reporting.findings.core import (
    SEED,
    Citation,
    Finding,
    PaperNumber,
    StoreTables,
    claim,
    fmt,
    interval_finding,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import bc_interval
from kcal_pipeline.reporting.findings.tinner import (
    NO_MARGINAL,
    TINNER,
    TINNER_SETTING,
    marginal_rows,
    option_counts,
)

# --- relations with fewer objects ----------------------------------------------------------------

FEWER_OBJECTS_SUBJECT = "Spearman ρ(option count, accuracy above chance) across relations (template marginal)"


def above_chance(rows: pl.DataFrame) -> pl.DataFrame:
    """Per relation: option count, accuracy, chance (the mean of 1/n_options) and the accuracy above
    chance as a share of what is above chance, (accuracy − chance) / (1 − chance): 0 at chance, 1
    when every answer is right, whatever the option count."""
    return (
        rows.group_by("relation_id")
        .agg(
            pl.col("n_options").mean().alias("options"),
            pl.col("correct").cast(pl.Float64).mean().alias("accuracy"),
            (1.0 / pl.col("n_options")).mean().alias("chance"),
            pl.len().alias("n"),
        )
        .with_columns(skill=(pl.col("accuracy") - pl.col("chance")) / (1.0 - pl.col("chance")))
        .sort("relation_id")
    )


def _rho(options: np.ndarray, skill: np.ndarray) -> float:
    if np.unique(options).size < 2 or np.unique(skill).size < 2:
        return math.nan
    return float(spearmanr(options, skill).statistic)


def resampled_rho(rows: pl.DataFrame, n_resamples: int = 1000, seed: int = SEED) -> np.ndarray:
    """ρ on two-stage resamples: relations drawn with replacement, then each drawn relation's
    instances; NaN where the drawn relations share one option count."""
    groups = [
        (g["n_options"].to_numpy(), g["correct"].cast(pl.Float64).to_numpy())
        for _, g in rows.sort("relation_id", "instance_id").group_by("relation_id", maintain_order=True)
    ]
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples)
    for b in range(n_resamples):
        drawn = rng.integers(0, len(groups), len(groups))
        options, skill = [], []
        for r in drawn:
            n_options, correct = groups[r]
            pick = rng.integers(0, correct.size, correct.size)
            chance = float(np.mean(1.0 / n_options[pick]))
            options.append(float(n_options[pick].mean()))
            skill.append((correct[pick].mean() - chance) / (1.0 - chance))
        out[b] = _rho(np.array(options), np.array(skill))
    return out


@claim(
    "fewer_objects_easier",
    sources=(
        Citation(
            "§5.2.2",
            "By the precision AUC, Mistral-7B-Instruct-v0.2 on the individual relations of T-REx "
            "performs best on the religion relation, followed by the music label relation (Figure "
            "5.5). On PopQA data the *color-of* relation is the outlier (Figure 5.6). These relations "
            "have in the original data fewer objects than most other relations (Table A.1).",
            "Fig. 5.5, Fig. 5.6",
        ),
        Citation(
            "§5.2.2",
            "We compensated for this by sampling additional objects from other relations to achieve an "
            "equivalent set size of $(O(r)^-)$ .",
        ),
        Citation("App. A.4.1", "S's religion, O. 0.102 0.204 0.128 0.238 0.994 0.861", "Table A.6"),
        Citation("App. A.4.1", "S repr. by label O. 0.144 0.117 0.208 0.183 -0.182 -0.121", "Table A.6"),
        Citation("App. A.4.1", "The color of S, O. 0.148 0.151 0.197 0.154 0.020 -0.218", "Table A.6"),
        Citation("App. A.1.1", "S is affiliated with the O religion. 12 467 0 0 473 0 473", "Table A.1"),
        Citation("App. A.1.1", "S is represented by music label O. 16 421 0 0 429 0 429", "Table A.1"),
        Citation("App. A.1.1", "The color of S is O. 5 34 0 0 34 0 34", "Table A.2"),
    ),
    title="Relations with fewer objects are less challenging: across relations, the option count and "
    "the accuracy above chance are negatively rank-correlated",
    paper=TINNER,
    setting=TINNER_SETTING + " The thesis keeps the option set at about 50 for every relation (a "
    "relation with few objects of its own is topped up from other relations, distractors it finds "
    "easy to reject); BEAR's relations answer over their own objects only (5–25 options in stage "
    "bear), so fewer objects means fewer options and a higher chance 1/n: kcal tests the accuracy "
    "above chance, not the raw accuracy, and cannot reproduce the thesis's topped-up distractors.",
    rule="Template marginal on the test instances, per relation: accuracy above chance as a share of "
    "what is above chance, (accuracy − c) / (1 − c) with c the mean of 1/n_options (0 at chance, 1 "
    "when all right), and the option count. Spearman ρ between them across the relations (at least 3 "
    "with two option counts); 95 % interval from 1000 two-stage resamples (relations, then their "
    "instances; seed 0; bias-corrected, a resample whose relations share one option count left "
    "out): holds if it lies below 0, does not hold if above, else inconclusive. Each relation's "
    "numbers are shown.",
    reads="estimates (template_marginal, instance grain, test split, full answer spaces, reduction "
    "sum), probe_instances (n_options)",
    number=PaperNumber(
        "precision AUC: T-REx religion 0.238 (12 original objects) and music label 0.183 (16 original "
        "objects) best; PopQA color 0.154 (5 original objects) the outlier",
        model="Mistral-7B-Instruct-v0.2",
        setting="all paraphrase templates; objects per relation from Tables A.1, A.2",
    ),
    preconditions=(
        "two or more paraphrase templates per instance (the template marginal)",
        "three or more relations with at least two option counts (n_options in the instances table)",
    ),
)
def fewer_objects_easier(t: StoreTables) -> list[Finding]:
    key, subject = "fewer_objects_easier", FEWER_OBJECTS_SUBJECT
    rows = marginal_rows(t)
    if rows.is_empty():
        return not_testable(key, t, subject, NO_MARGINAL)
    options = option_counts(t)
    if options.is_empty():
        return not_testable(
            key, t, subject, "the store tables carry no option counts (probe_instances.n_options)"
        )
    rows = rows.join(options, on=["relation_id", "instance_id"]).filter(pl.col("n_options") > 1)
    per = above_chance(rows) if rows.height else pl.DataFrame()
    if per.height < 3 or per["options"].n_unique() < 2:
        return not_testable(
            key, t, subject, f"{per.height} relation(s) with option counts: needs 3 or more with two counts"
        )
    value = _rho(per["options"].to_numpy(), per["skill"].to_numpy())
    low, high = bc_interval(resampled_rho(rows), value) if math.isfinite(value) else (math.nan,) * 2
    shown = ", ".join(
        f"{r['relation_id']} {r['options']:g} options: accuracy {fmt(r['accuracy'])}, chance "
        f"{fmt(r['chance'])}, above chance {fmt(r['skill'])}"
        for r in per.sort("options", "relation_id").iter_rows(named=True)
    )
    return [
        interval_finding(
            key,
            t,
            subject,
            "negative",
            value,
            low,
            high,
            per.height,
            "ρ",
            f" over {per.height} relations; {shown}",
        )
    ]
