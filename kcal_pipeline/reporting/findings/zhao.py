"""Claims of seed 004, Zhao et al. 2025: consistency of knowledge-gap decisions."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.consistency import ORIGINAL, RANDOM_VARIANTS
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    CONSISTENCY_SETUPS,
    CRITERION,
    FAILS,
    FAR_FROM_ONE,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    REDUCTION,
    Finding,
    Paper,
    PaperNumber,
    StoreTables,
    claim,
    estimator_label,
    fmt,
    not_testable,
)

ZHAO = Paper(
    "004",
    "Zhao et al. 2025 (seed 004)",
    "Zhao et al. 2025, Do We Know What LLMs Don't Know? A Study of Consistency in Knowledge Probing "
    "(arXiv 2505.21701)",
    file="zhao-consistency-in-knowledge-probing.txt",
)
# Where the derived numbers come from: the authors' released per-question accept/reject decisions
# (raoyuanzhao/Consistency-in-Knowledge-Probing), recomputed with their notebook's formulas.
DERIVED = "derived from the authors' released per-question decisions"
ZHAO_1B = "Llama-3.2-1B-Instruct, MMLU, token-probability probe"


@claim(
    "consistency_far_from_one",
    reference="§4, Fig. 2",
    stage="context",
    kind=CRITERION,
    title="A probe's accept/reject decisions are far from consistent under a typo or a one-shot "
    "prefix: IoU_cons far from 1",
    paper=ZHAO,
    setting="Multiple-choice MMLU and HellaSwag on 7–8B LLMs (Mistral, Llama 3, OLMo), six probing "
    "methods; minimal prompt changes cut intra-method consistency sharply (shuffled options: agreement "
    "near 40 %).",
    rule=f"Base's intra-method rows of the consistency table (headline template against the variant, "
    f"thresholds tuned on dev, all relations pooled), one IoU_cons per draw (the typo once per "
    f"perturbation seed; the one-shot prefix, the fixed knowledge-free demonstration context-fixed, "
    f"once): holds (far from 1) if every draw's IoU_cons is < "
    f"{FAR_FROM_ONE}, does not hold if every draw's is ≥ {FAR_FROM_ONE}, else inconclusive; an undefined "
    "IoU_cons (an empty accepted or rejected set) is inconclusive. The mean and spread over seeds are shown.",
    reads="consistency (kind intra, estimator base, reduction sum, relation_id null, statistic value)",
    number=PaperNumber(
        f"IoU_cons typo 0.54–0.56, one-shot 0.80–0.82 ({DERIVED}); shuffled options ≈ 0.40 (abstract: "
        '"around 40%")',
        ZHAO_1B,
    ),
)
def consistency_far_from_one(t: StoreTables) -> list[Finding]:
    key = "consistency_far_from_one"
    c = t.consistency
    if c.is_empty():
        return [
            Finding(
                key,
                t.model_id,
                f"IoU_cons, {s}",
                NOT_TESTABLE,
                note="no consistency table: materialize it (kcal demo)",
            )
            for s in CONSISTENCY_SETUPS
        ]
    rows = c.filter(
        (pl.col("kind") == "intra")
        & (pl.col("estimator_a") == BASELINE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("relation_id").is_null()
        & (pl.col("statistic") == "value")
    )
    out = []
    for setup, kind in CONSISTENCY_SETUPS.items():
        subject = f"IoU_cons, {setup}"
        g = rows.filter(pl.col("setup_b") == setup).sort("seed", nulls_last=True)
        if g.is_empty():
            out += not_testable(
                key, t, subject, f"no {setup} variants were scored: run with --template-kinds "
                f"curated,question,{kind}"
            )  # fmt: skip
            continue
        values = g["iou_cons"].to_numpy().astype(np.float64)
        seeds = g["seed"].to_list()
        draws = ", ".join(  # a setup that is not drawn (context-fixed) has one row, seed null
            f"{'not drawn' if s is None else f'seed {s}'}: {fmt(v)}"
            for s, v in zip(seeds, values, strict=True)
        )
        undefined = int(np.isnan(values).sum())
        notes = [
            *([f"IoU_cons undefined on {undefined} draw(s): nothing rejected (or accepted) in both setups"]
              if undefined else []),
            *(["a threshold fell back to 0.5 (degenerate on dev)"]
              if g["fallback_a"].any() or g["fallback_b"].any() else []),
        ]  # fmt: skip
        if np.isnan(values).any():
            verdict = INCONCLUSIVE
        elif (values < FAR_FROM_ONE).all():
            verdict = HOLDS
        elif (values >= FAR_FROM_ONE).all():
            verdict = FAILS
        else:
            verdict = INCONCLUSIVE
        finite = values[~np.isnan(values)]
        mean = float(finite.mean()) if finite.size else math.nan
        spread = f", std {fmt(float(finite.std(ddof=1)))}" if finite.size > 1 else ""
        out.append(
            Finding(
                key,
                t.model_id,
                subject,
                verdict,
                mean,
                float(finite.min()) if finite.size else math.nan,
                float(finite.max()) if finite.size else math.nan,
                int(g["n"].max()),
                f"IoU_cons mean {fmt(mean)}{spread} over {len(values)} draw(s) ({draws}); "
                f"DecCons mean {fmt(float(np.nanmean(g['dec_cons'].to_numpy().astype(np.float64))))}",
                "; ".join(notes),
            )
        )
    return out


NO_CONSISTENCY = "no consistency table: materialize it (kcal findings --build, stage context; or kcal demo)"


@claim(
    "cross_method_deccons_low",
    reference="§4, Fig. 3",
    stage="context",
    kind=CRITERION,
    title="Confidence methods disagree on which facts the model knows: the lowest cross-method DecCons "
    "is far from 1",
    paper=ZHAO,
    setting="Multiple-choice MMLU and HellaSwag, six probing methods (token probability, calibration, "
    "none-of-the-above, reflection, more information, embedding); two methods on the same prompt "
    "accept and reject different questions. kcal's estimators are likelihood-based confidences, "
    "closer to each other than Zhao et al.'s methods (prompting, fine-tuned probes).",
    rule="The consistency table's cross-method rows (two estimators on the same headline setup, "
    "thresholds tuned on dev, all relations pooled, reduction sum; estimators of one grain are paired): "
    f"every pair's DecCons is listed; pairs where a threshold fell back to 0.5 (degenerate on dev) are "
    f"listed but not judged; holds if the lowest pair's DecCons is < {FAR_FROM_ONE} (the "
    "methods disagree on some decisions far more than a typo would make one method disagree with "
    f"itself), does not hold if every pair's is ≥ {FAR_FROM_ONE}, inconclusive if every defined pair "
    f"is ≥ {FAR_FROM_ONE} and some pair's DecCons is undefined (no aligned decision), or no pair has "
    "tuned thresholds.",
    reads="consistency (kind cross, setup original against original, reduction sum, relation_id null, "
    "statistic value)",
    number=PaperNumber(
        'cross-method DecCons "as low as 7%" (abstract); calibration vs none-of-the-above 0.057, token '
        f"vs calibration 0.184 ({DERIVED})",
        "Llama-3.2-1B-Instruct, MMLU",
    ),
    preconditions=("the consistency table", "two confidence estimators on the headline setup"),
)
def cross_method_deccons_low(t: StoreTables) -> list[Finding]:
    key, subject = "cross_method_deccons_low", "DecCons of the least consistent estimator pair"
    c = t.consistency
    if c.is_empty():
        return not_testable(key, t, subject, NO_CONSISTENCY)
    rows = c.filter(
        (pl.col("kind") == "cross")
        & (pl.col("setup_a") == ORIGINAL)
        & (pl.col("setup_b") == ORIGINAL)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("relation_id").is_null()
        & (pl.col("statistic") == "value")
    )
    if rows.is_empty():
        return not_testable(
            key, t, subject, "no cross-method rows: fewer than two estimators of one grain on the "
            "headline setup (kcal findings --build, stage context)"
        )  # fmt: skip
    rows = rows.with_columns(
        pl.col("dec_cons").fill_nan(None), fallback=pl.col("fallback_a") | pl.col("fallback_b")
    ).sort("fallback", "dec_cons", "estimator_a", "estimator_b", nulls_last=True)
    # A pair with a fallback threshold reads an arbitrary 0.5 (a score-valued function's is not
    # even on its scale): listed, but no verdict rests on it.
    tuned = rows.filter(~pl.col("fallback"))
    values = tuned["dec_cons"].to_numpy().astype(np.float64)
    finite = values[~np.isnan(values)]
    undefined = int(np.isnan(values).sum())
    if finite.size and finite.min() < FAR_FROM_ONE:
        verdict = HOLDS
    elif undefined or tuned.is_empty():
        verdict = INCONCLUSIVE
    else:
        verdict = FAILS
    pairs = [
        f"{estimator_label(r['estimator_a'])} vs {estimator_label(r['estimator_b'])} {fmt(r['dec_cons'])}"
        + (" (fallback threshold)" if r["fallback"] else "")
        for r in rows.iter_rows(named=True)
    ]
    lowest = tuned.row(0, named=True) if finite.size else None
    first = (
        f"lowest DecCons {fmt(lowest['dec_cons'])} ({pairs[0].rsplit(' ', 1)[0]}, n = {lowest['n']})"
        if lowest
        else "DecCons undefined on every pair with tuned thresholds"
    )
    notes = (
        [f"{int((finite < FAR_FROM_ONE).sum())} of {tuned.height} tuned pairs below {FAR_FROM_ONE}"]
        if tuned.height
        else []
    )
    if undefined:
        notes.append(f"DecCons undefined on {undefined} pair(s)")
    if fallen := rows.height - tuned.height:
        notes.append(
            f"{fallen} pair(s) left out of the verdict: a threshold fell back to 0.5 (degenerate on dev)"
        )
    return [
        Finding(
            key,
            t.model_id,
            subject,
            verdict,
            float(finite.min()) if finite.size else math.nan,
            n=int(rows["n"].max()),
            numbers=f"{first}; every pair: {', '.join(pairs)}",
            note="; ".join(notes),
        )
    ]


# The spread over draws that says one draw is not enough: Zhao et al.'s own typo draws (seeds 4, 44,
# 99) span 0.02 in IoU_cons, their shuffled options 0.04; a range above this is a draw effect.
DRAW_SPREAD = 0.02
DRAWN_SETUPS = RANDOM_VARIANTS  # typo, extra-space and the context demonstrations


def _one_draw(setup: str, seeds: list) -> str:
    had = f"one draw only ({', '.join(f'seed {s}' for s in seeds) or 'no seed'})"
    if setup in ("typo", "extra-space"):
        return f"{had}: run with --perturbation-seeds 4,44,99 (kcal findings --build, stage context)"
    return (
        f"{had}: the context demonstrations are drawn once per store, with the probe seed; build "
        "stores with --seed 4, 44 and 99 to compare their draws"
    )


@claim(
    "consistency_varies_over_draws",
    reference="seeds 4, 44, 99 (their draws)",
    stage="context",
    kind=CRITERION,
    title="Intra-method consistency depends on the random draw of the perturbation: one draw is not enough",
    paper=ZHAO,
    setting="Zhao et al. draw every random perturbation with seeds 4, 44 and 99 and report the mean "
    "over the draws; how far the draws differ says whether one draw can stand for the perturbation.",
    rule="Base's intra-method rows of the consistency table (headline template against the variant, "
    "thresholds tuned on dev per draw, all relations pooled, reduction sum), one IoU_cons per draw, "
    "for the typo and every other drawn setup present (extra-space, context-1shot, context-3shot, "
    f"context-wrong): holds (one draw is not enough) if the range over draws exceeds {DRAW_SPREAD} "
    f"absolute, does not hold if it is at most {DRAW_SPREAD}, inconclusive if fewer than two draws "
    "have a defined IoU_cons; not testable with fewer than two draws. The draws' standard deviation "
    "(the table's std row) is shown beside it.",
    reads="consistency (kind intra, estimator base, reduction sum, relation_id null, statistic value "
    "and std)",
    number=PaperNumber(
        f"IoU_cons typo 0.54–0.56 (range 0.02), shuffled options 0.39–0.43 (range 0.04) ({DERIVED}; "
        "no spread from the paper's text)",
        ZHAO_1B,
    ),
    preconditions=(
        "the consistency table",
        "a drawn setup with at least two draws (--perturbation-seeds 4,44,99)",
    ),
)
def consistency_varies_over_draws(t: StoreTables) -> list[Finding]:
    key = "consistency_varies_over_draws"
    c = t.consistency
    if c.is_empty():
        return not_testable(key, t, "IoU_cons range over draws, typo", NO_CONSISTENCY)
    base = c.filter(
        (pl.col("kind") == "intra")
        & (pl.col("estimator_a") == BASELINE)
        & (pl.col("reduction") == REDUCTION)
        & pl.col("relation_id").is_null()
    )
    present = set(base["setup_b"].unique().to_list()) if base.height else set()
    setups = ["typo", *(s for s in DRAWN_SETUPS if s != "typo" and s in present)]
    out = []
    for setup in setups:
        subject = f"IoU_cons range over draws, {setup}"
        g = base.filter(
            (pl.col("setup_b") == setup) & (pl.col("statistic") == "value") & pl.col("seed").is_not_null()
        ).sort("seed")
        if g.is_empty():
            out += not_testable(
                key, t, subject, f"no {setup} variants were scored: run with --template-kinds "
                "curated,perturbation --perturbation-seeds 4,44,99 (kcal findings --build, stage context)"
            )  # fmt: skip
            continue
        seeds = g["seed"].to_list()
        if len(seeds) < 2:
            out += not_testable(key, t, subject, _one_draw(setup, seeds))
            continue
        values = g["iou_cons"].to_numpy().astype(np.float64)
        finite = values[~np.isnan(values)]
        draws = ", ".join(f"seed {s}: {fmt(v)}" for s, v in zip(seeds, values, strict=True))
        std_row = base.filter((pl.col("setup_b") == setup) & (pl.col("statistic") == "std"))
        std = float(std_row["iou_cons"][0]) if std_row.height else math.nan
        spread = float(finite.max() - finite.min()) if finite.size >= 2 else math.nan
        # rounded: 0.56 − 0.54 is 0.020000000000000018 in floating point
        exceeds = not math.isnan(spread) and round(spread, 10) > DRAW_SPREAD
        verdict = INCONCLUSIVE if math.isnan(spread) else (HOLDS if exceeds else FAILS)
        dec = g["dec_cons"].to_numpy().astype(np.float64)
        dec_range = float(np.nanmax(dec) - np.nanmin(dec)) if (~np.isnan(dec)).sum() >= 2 else math.nan
        undefined = int(np.isnan(values).sum())
        out.append(
            Finding(
                key,
                t.model_id,
                subject,
                verdict,
                spread,
                n=int(g["n"].max()),
                numbers=f"IoU_cons range {fmt(spread)} over {len(seeds)} draws ({draws}); std {fmt(std)}; "
                f"DecCons range {fmt(dec_range)}",
                note=f"IoU_cons undefined on {undefined} draw(s)" if undefined else "",
            )
        )
    return out
