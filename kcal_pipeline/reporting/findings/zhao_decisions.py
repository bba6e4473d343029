"""Zhao et al.'s decisions as the seed-004 claims read them: each setup's accept/reject decisions
recomputed from the estimates (test rows; thresholds tuned on the dev rows of the same setup,
pooled over relations, as evaluation/consistency.py tunes them, so a point equals the consistency
table's), the aligned items of two setups, and their measures on the metrics' seeded two-stage
resample plan (relations, then instances): every measure gets a bias-corrected 95 % interval, and
the setups of one item share each resample, so their differences are paired."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import (
    BASELINE,
    DEV_SPLIT,
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    headline_template_estimates,
)
from kcal_pipeline.evaluation.consistency_measures import measures_from_counts
from kcal_pipeline.evaluation.consistency_setups import ORIGINAL, decision_thresholds, setup_rows
from kcal_pipeline.evaluation.resamples import PAD
from kcal_pipeline.reporting.findings.core import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    REDUCTION,
    Finding,
    Paper,
    StoreTables,
    fmt,
    not_testable,
)
from kcal_pipeline.reporting.findings.selections import bc_interval, relation_resamples

ZHAO = Paper(
    "004",
    "Zhao et al. 2025 (seed 004)",
    "Zhao et al. 2025, Do We Know What LLMs Don't Know? A Study of Consistency in Knowledge Probing "
    "(arXiv 2505.21701)",
    file="zhao-consistency-in-knowledge-probing.txt",
)
TABLE1_MODELS = "Mistral-7B, LLaMA-3.1-8B, OLMo-2-7B"
# kcal's zero-shot variants of Zhao et al.'s three (space, shuffled options, typo): a statement shows
# no option list, so there is nothing to shuffle. Their one-shot prefix is a knowledge-free
# demonstration ("What is 2+2?"): kcal's context-fixed.
ZERO_SHOT = ("typo", "extra-space")
ONE_SHOT = "context-fixed"
VARIANT_KIND = {"typo": "perturbation", "extra-space": "perturbation", ONE_SHOT: "context_fixed"}
BUILD = "kcal findings --build (stage context)"
# The paper's printed extremes each criterion reads (quoted in the claims' sources).
ZERO_SHOT_MAX_IOU, ONE_SHOT_MAX_IOU = 0.86, 0.97  # §5.1: the highest IoU_cons of any method and model
SEED_STD_MAX = 0.069  # Table 8: the largest standard deviation of IoU_cons over seeds in Tables 7–10
MOST_CONSISTENT_PAIR = 0.89  # §5.2: NOTA and MoreInfo, "DecCons between 0.62 and 0.89"
# A recalibration is a monotone refit of another estimator's own signal, not another method.
SAME_SIGNAL_FAMILIES = ("recalibration", "markers")

_ITEM = ["relation_id", "instance", "anchor"]
_CHUNK = 100  # resamples per matrix product in the cross-method bootstrap


# --- decisions -----------------------------------------------------------------------------------


def decided_rows(
    t: StoreTables, estimators: Sequence[str] | None = None, original_only: bool = False
) -> pl.DataFrame:
    """The estimators' rows (dev and test, full answer spaces, the headline reduction) with their
    setup, seed and item keys (consistency.setup_rows), the dev-tuned threshold of their setup and
    seed (`tau`, `fallback`: consistency.decision_thresholds, 0.5 where the tuned one is degenerate)
    and the decision `accept` = C ≥ τ; empty without estimates. `original_only` keeps the headline
    setup alone (what cross-method pairs read), which spares setting up every variant."""
    frames = [f for f in (t.estimates, t.dev_estimates) if not f.is_empty()]
    if not frames or t.templates.is_empty():
        return pl.DataFrame()
    est = pl.concat(frames, how="diagonal_relaxed").filter(
        (pl.col("reduction") == REDUCTION) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    )
    if estimators is not None:
        est = est.filter(pl.col("estimator").is_in(list(estimators)))
    if original_only:
        est = headline_template_estimates(est, t.templates)
    if est.is_empty():
        return pl.DataFrame()
    if "predicted_id" not in est.columns:  # the store keeps the option's index: the same option
        est = est.with_columns(predicted_id=pl.col("predicted_index").cast(pl.String))
    rows = setup_rows(est, t.templates)
    keys = ["model_id", "estimator", "reduction", "setup", "seed"]
    thresholds = decision_thresholds(rows).select(*keys, "tau", "fallback", "n_dev")
    return rows.join(thresholds, on=keys, how="left", nulls_equal=True).with_columns(
        accept=pl.col("confidence") >= pl.col("tau")
    )


def best_split_tau(confidence: np.ndarray, correct: np.ndarray) -> float:
    """The dev threshold consistency.py tunes before its safeguard: the split of the dev rows with
    the best decision accuracy (accept C ≥ u_j, at the midpoint below u_j; ties to the lowest);
    NaN without dev rows."""
    if confidence.size == 0:
        return math.nan
    values, inverse = np.unique(confidence, return_inverse=True)
    count = np.bincount(inverse, minlength=values.size)
    right = np.bincount(inverse, weights=correct.astype(np.float64), minlength=values.size)
    wrong = count - right
    accuracy = (np.cumsum(right[::-1])[::-1] + np.cumsum(wrong) - wrong) / confidence.size
    j = int(np.argmax(accuracy))
    return float(values[0] if j == 0 else (values[j - 1] + values[j]) / 2)


def without_safeguard(decided: pl.DataFrame) -> pl.DataFrame:
    """The decisions at the best dev split itself, where the safeguard did not replace it by 0.5."""
    keys = ["estimator", "setup", "seed"]
    dev = decided.filter(pl.col("split") == DEV_SPLIT)
    raw = [
        {
            **dict(zip(keys, key, strict=True)),
            "raw_tau": best_split_tau(g["confidence"].to_numpy(), g["correct"].to_numpy()),
        }
        for key, g in dev.group_by(keys)
    ]
    if not raw:
        return decided.with_columns(accept=pl.lit(None, pl.Boolean))
    frame = pl.DataFrame(
        raw, schema={"estimator": pl.String, "setup": pl.String, "seed": pl.Int64, "raw_tau": pl.Float64}
    )
    return decided.join(frame, on=keys, how="left", nulls_equal=True).with_columns(
        accept=pl.col("confidence") >= pl.col("raw_tau")
    )


def intra_items(decided: pl.DataFrame, estimator: str, setup: str) -> tuple[pl.DataFrame, list]:
    """The estimator's test items on "original" and on every seed of `setup` side by side (columns
    accept_o, pred_o, right_o, then accept_<k>, pred_<k>, right_<k> per seed k in `seeds`), only
    the items every one of them has, sorted by relation: (table, seeds; a setup that is not drawn
    has the one seed None)."""
    if decided.is_empty():
        return pl.DataFrame(), []
    d = decided.filter((pl.col("estimator") == estimator) & (pl.col("split") == HEADLINE_SPLIT))

    def side(frame: pl.DataFrame, k: str) -> pl.DataFrame:
        return frame.select(
            *_ITEM,
            pl.col("accept").alias(f"accept_{k}"),
            pl.col("predicted_id").alias(f"pred_{k}"),
            pl.col("correct").alias(f"right_{k}"),
        )

    variant = d.filter(pl.col("setup") == setup)
    seeds = sorted(variant["seed"].unique().to_list(), key=lambda s: (s is None, s or 0))
    wide = side(d.filter(pl.col("setup") == ORIGINAL), "o")
    for k, seed in enumerate(seeds):
        draw = variant.filter(pl.col("seed").is_null() if seed is None else pl.col("seed") == seed)
        wide = wide.join(side(draw, str(k)), on=_ITEM, how="inner", nulls_equal=True)
    return (wide.sort(_ITEM, nulls_last=True) if seeds else pl.DataFrame()), seeds


def resample_weights(relation_ids: np.ndarray) -> np.ndarray:
    """[B, n]: how often each item (sorted by relation) is drawn in each resample of the seeded
    two-stage plan the metrics tables use."""
    idx = relation_resamples(relation_ids).indices
    b = np.repeat(np.arange(idx.shape[0]), idx.shape[1]).reshape(idx.shape)
    n = relation_ids.size
    keep = idx != PAD
    return np.bincount(b[keep] * n + idx[keep], minlength=idx.shape[0] * n).reshape(-1, n).astype(float)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(np.shape(num), np.nan), where=np.asarray(den) > 0)


def intra_measures(wide: pl.DataFrame, n_seeds: int) -> tuple[dict, dict]:
    """Per seed, original against the variant: IoU_cons, DecCons, Agreement and the Abstain F1
    of each side (abstain = reject, positive = a wrong answer: 2|R ∩ W| / (|R| + |W|), Feng et
    al.'s, §5.4), as (points {name: [S]}, resamples {name: [B, S]})."""
    a = wide["accept_o"].to_numpy()
    wrong_o = ~wide["right_o"].to_numpy()
    blocks = []
    for k in range(n_seeds):
        b = wide[f"accept_{k}"].to_numpy()
        same = (wide["pred_o"] == wide[f"pred_{k}"]).fill_null(False).to_numpy()
        wrong = ~wide[f"right_{k}"].to_numpy()
        blocks.append(
            np.stack(
                [
                    a & b,
                    ~a & ~b,
                    a & ~b,
                    ~a & b,
                    a & b & same,
                    ~a & wrong_o,
                    ~a,
                    wrong_o,
                    ~b & wrong,
                    ~b,
                    wrong,
                ],
                axis=1,
            )
        )
    x = np.stack(blocks).astype(np.float64)  # [S, n, 11]
    w = resample_weights(wide["relation_id"].to_numpy())

    def measures(c: np.ndarray) -> dict:
        m = measures_from_counts(*(c[..., i] for i in range(5)))
        return {
            "iou_cons": m["iou_cons"],
            "dec_cons": m["dec_cons"],
            "agreement": m["agreement"],
            "f1_o": _ratio(2 * c[..., 5], c[..., 6] + c[..., 7]),
            "f1_v": _ratio(2 * c[..., 8], c[..., 9] + c[..., 10]),
        }

    return measures(x.sum(axis=1)), measures(np.einsum("bn,snk->bsk", w, x))


def _interval(boot: np.ndarray, point: float) -> tuple[float, float]:
    return (math.nan, math.nan) if math.isnan(point) else bc_interval(boot, point)


def _seed_mean(points: np.ndarray, boot: np.ndarray) -> tuple[float, float, float]:
    """The mean over seeds (NaN if a seed's is undefined) and its interval."""
    point = float(points.mean())
    return (point, *_interval(boot.mean(axis=1), point))


def _draws(seeds: list, values: np.ndarray) -> str:
    return ", ".join(
        f"{'not drawn' if s is None else f'seed {s}'}: {fmt(v)}" for s, v in zip(seeds, values, strict=True)
    )


def _fallback_note(decided: pl.DataFrame, estimator: str, setups: Sequence[str]) -> str:
    fell = decided.filter(
        (pl.col("estimator") == estimator) & pl.col("setup").is_in([ORIGINAL, *setups]) & pl.col("fallback")
    )
    if fell.is_empty():
        return ""
    no_dev = sorted(set(fell.filter(pl.col("n_dev") == 0)["setup"].to_list()))
    degenerate = sorted(set(fell.filter(pl.col("n_dev") > 0)["setup"].to_list()))
    notes = [f"no dev rows, τ = 0.5 on {', '.join(no_dev)}"] if no_dev else []
    if degenerate:
        notes.append(
            f"the dev-tuned threshold was degenerate and set to 0.5 (Zhao et al.'s safeguard) on "
            f"{', '.join(degenerate)}"
        )
    return "; ".join(notes)


def _no_variant(key: str, t: StoreTables, subject: str, setup: str) -> list[Finding]:
    extra = " --perturbation-seeds 4,44,99" if setup in ZERO_SHOT else ""
    return not_testable(
        key,
        t,
        subject,
        f"no {setup} variant of the headline template was scored beside the original: "
        f"{BUILD}, or kcal run --template-kinds curated,{VARIANT_KIND[setup]}{extra}",
    )


def per_variant(
    key: str,
    t: StoreTables,
    decided: pl.DataFrame,
    setups: Sequence[str],
    subject: Callable[[str], str],
    measure: Callable[[str, str, pl.DataFrame, list], list[Finding]],
    required: Sequence[str] | None = None,
) -> list[Finding]:
    """Base's findings per variant in `setups`: `measure(setup, subject, wide, seeds)` on the items
    the original and the variant share (intra_items); a variant not scored is not testable (only
    those in `required`, where given; the others are left out)."""
    out = []
    for setup in setups:
        name = subject(setup)
        wide, seeds = intra_items(decided, BASELINE, setup)
        if wide.is_empty():
            if required is None or setup in required:
                out += _no_variant(key, t, name, setup)
            continue
        out += measure(setup, name, wide, seeds)
    return out


def _bound_verdict(low: float, high: float, bound: float) -> str:
    """Below `bound` if the whole interval is, above if the whole interval is, else undecided."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    return HOLDS if high < bound else FAILS if low > bound else INCONCLUSIVE


# --- cross-method decisions ----------------------------------------------------------------------


def _eligible(decided: pl.DataFrame) -> list[str]:
    """Estimators whose decisions read the row's own prompt (not the marker estimators, which read a
    marked variant) and whose threshold means something: a score-valued estimator whose dev
    threshold fell back to 0.5 decides at an arbitrary point of its scale."""
    fell = decided.filter(pl.col("setup") == ORIGINAL).group_by("estimator").agg(pl.col("fallback").any())
    out = []
    for name, fallback in fell.iter_rows():
        spec = ESTIMATORS.get(name)
        if spec and (spec.template_kinds or (fallback and spec.output_kind == "score")):
            continue
        out.append(name)
    return sorted(out)


def decision_matrix(decided: pl.DataFrame, split: str, estimators: Sequence[str]) -> tuple:
    """Per item (relation, instance) of `split` on "original": presence P and decision D (+1 accept,
    −1 reject, 0 absent) of each estimator present, [n, E], the item's relation, the estimators'
    names and grains (True: instance grain). Pairs of one grain read the same prompt (the headline
    template, or the instance)."""
    rows = decided.filter(
        (pl.col("split") == split)
        & (pl.col("setup") == ORIGINAL)
        & pl.col("estimator").is_in(list(estimators))
    )
    if rows.is_empty():
        return np.zeros((0, 0)), np.zeros((0, 0)), np.array([]), [], []
    wide = (
        rows.select("relation_id", "instance", "estimator", d=pl.when(pl.col("accept")).then(1).otherwise(-1))
        .pivot(on="estimator", index=["relation_id", "instance"], values="d", aggregate_function="first")
        .sort("relation_id", "instance")
    )
    names = [e for e in estimators if e in wide.columns]
    d = wide.select(names).fill_null(0).to_numpy().astype(np.float64)
    grain = dict(rows.group_by("estimator").agg(pl.col("anchor").is_null().first()).iter_rows())
    return (d != 0).astype(np.float64), d, wide["relation_id"].to_numpy(), names, [grain[e] for e in names]


def pair_deccons(p: np.ndarray, d: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """DecCons of every pair of estimators, [E, E] (or [B, E, E] with resample weights w [B, n]):
    the share of the items both decided on that they decided alike; NaN without a shared item."""
    if w is None:
        return _ratio((p.T @ p + d.T @ d) / 2, p.T @ p)
    out = []
    for start in range(0, w.shape[0], _CHUNK):
        wc = w[start : start + _CHUNK, :, None]
        shared = np.matmul(np.swapaxes(p[None] * wc, 1, 2), p)
        alike = (shared + np.matmul(np.swapaxes(d[None] * wc, 1, 2), d)) / 2
        out.append(_ratio(alike, shared))
    return np.concatenate(out)


def _pairs(names: list[str], grains: list) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if grains[i] == grains[j]]
