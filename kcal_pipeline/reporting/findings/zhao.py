"""Claims of seed 004, Zhao et al. 2025: consistency of knowledge-gap decisions."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kcal_pipeline.reporting.findings.core import (
    BASELINE,
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
    StoreTables,
    claim,
    fmt,
    not_testable,
)

ZHAO = Paper(
    "004",
    "Zhao et al. 2025 (seed 004)",
    "Zhao et al. 2025, Do We Know What LLMs Don't Know? A Study of Consistency in Knowledge Probing "
    "(arXiv 2505.21701)",
)


@claim(
    "consistency_far_from_one",
    where="§4, Fig. 2",
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
