"""The decision rule and the five consistency measures (METHODS §4; Zhao et al. 2025) that the
consistency table (consistency.py) and the findings both use: the dev-tuned threshold a setup
decides with (accept = C ≥ τ), and the measures of two setups' decisions on the same items. With A
and R the accepted and rejected test instances of two setups 1 and 2, aligned on the same instances:

    IoU_acc  = |A1 ∩ A2| / |A1 ∪ A2|        IoU_rej = |R1 ∩ R2| / |R1 ∪ R2|
    IoU_cons = harmonic mean of IoU_acc and IoU_rej
    DecCons  = |(A1 ∩ A2) ∪ (R1 ∩ R2)| / |A1 ∪ A2 ∪ R1 ∪ R2|
    Agreement = share of A1 ∩ A2 where both setups predict the same option

An empty denominator gives NaN (IoU_acc when neither setup accepts anything, IoU_rej when neither
rejects anything, Agreement when no instance is accepted by both), and IoU_cons is NaN when either
IoU is; it is 0 when both are 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.decisions import DEGENERATE_SHARE, FIXED_THRESHOLD

# A tuned threshold is degenerate when, on the dev split, it accepts DEGENERATE_SHARE of the
# instances or more, or rejects that share or more (decisions.py's tuned τ uses the same rule):
# such a probe does not separate known from unknown, so FALLBACK_THRESHOLD is used instead and
# `fallback_*` says so (as it does when a setup has no dev rows). The fallback is the same number
# for score-valued estimators, where it is arbitrary: read their fallback rows with that in mind.
FALLBACK_THRESHOLD = FIXED_THRESHOLD
MEASURES = ("iou_acc", "iou_rej", "iou_cons", "dec_cons", "agreement")
# Counts of aligned items: accepted in both, rejected in both, accepted by a only, by b only, and
# accepted by both with the same predicted option. Every measure is a function of them, so
# relations pool by adding counts.
COUNTS = ("n_aa", "n_rr", "n_ar", "n_ra", "n_agree")


# --- the threshold -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A tuned decision threshold: accept when C ≥ tau. `accepted_share` and `dev_accuracy` are
    those of the best dev threshold (before any fallback; NaN without dev rows)."""

    tau: float
    fallback: bool
    n_dev: int
    accepted_share: float
    dev_accuracy: float


def tune_groups(dev: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per group of `keys`: tau, fallback, n_dev, accepted_share, dev_accuracy.

    Candidates are the distinct dev confidences u_0 < … < u_m-1 and the midpoints between
    neighbours; "accept C ≥ u_j" and "accept C ≥ (u_j-1 + u_j)/2" split the dev rows alike, so
    each split is tried once, at the midpoint (at u_0 for j = 0, accept everything). Decision
    accuracy = (accepted and correct + rejected and wrong) / n_dev; the best split wins, ties to
    the lowest threshold. Degenerate (DEGENERATE_SHARE) → FALLBACK_THRESHOLD, fallback True.
    """
    per_value = (
        dev.group_by(*keys, "confidence")
        .agg(pl.len().alias("count"), pl.col("correct").sum().alias("right"))
        .sort(*keys, "confidence")
    )
    over = keys  # every running sum restarts per group
    wrong = pl.col("count") - pl.col("right")
    scored = per_value.with_columns(
        n_dev=pl.col("count").sum().over(over),
        accepted=pl.col("count").cum_sum(reverse=True).over(over),
        right_accepted=pl.col("right").cum_sum(reverse=True).over(over),
        wrong_rejected=(wrong.cum_sum() - wrong).over(over),
        below=pl.col("confidence").shift(1).over(over),
    ).with_columns(
        dev_accuracy=(pl.col("right_accepted") + pl.col("wrong_rejected")) / pl.col("n_dev"),
        tau=pl.when(pl.col("below").is_null())
        .then(pl.col("confidence"))
        .otherwise((pl.col("below") + pl.col("confidence")) / 2),
    )
    best = (
        scored.filter(pl.col("dev_accuracy") == pl.col("dev_accuracy").max().over(over))
        .group_by(keys, maintain_order=True)
        .first()
    )
    share = pl.col("accepted") / pl.col("n_dev")
    degenerate = (share >= DEGENERATE_SHARE) | (1 - share >= DEGENERATE_SHARE)
    return best.select(
        *keys,
        tau=pl.when(degenerate).then(pl.lit(FALLBACK_THRESHOLD)).otherwise(pl.col("tau")),
        fallback=degenerate,
        n_dev=pl.col("n_dev").cast(pl.Int64),
        accepted_share=share,
        dev_accuracy=pl.col("dev_accuracy"),
    )


def tune_threshold(confidence, correct) -> Threshold:
    """The dev-tuned decision threshold of one setup (the rule: see `tune_groups`); no dev rows →
    FALLBACK_THRESHOLD with fallback True."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    if c.shape != y.shape or c.ndim != 1:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"confidence {c[~np.isfinite(c)][0].item()!r} is not a finite number")
    if c.size == 0:
        return Threshold(FALLBACK_THRESHOLD, True, 0, float("nan"), float("nan"))
    row = tune_groups(pl.DataFrame({"g": 0, "confidence": c, "correct": y}), ["g"]).row(0, named=True)
    return Threshold(row["tau"], row["fallback"], row["n_dev"], row["accepted_share"], row["dev_accuracy"])


# --- the measures ------------------------------------------------------------------------------


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def measures_from_counts(n_aa, n_rr, n_ar, n_ra, n_agree) -> dict[str, np.ndarray]:
    """IoU_acc, IoU_rej, IoU_cons, DecCons and Agreement from the counts of aligned items (arrays
    of equal shape, one entry per pair of setups): the one definition every caller uses."""
    n_aa, n_rr, n_ar, n_ra, n_agree = (
        np.asarray(x, dtype=np.float64) for x in (n_aa, n_rr, n_ar, n_ra, n_agree)
    )
    iou_acc = _ratio(n_aa, n_aa + n_ar + n_ra)
    iou_rej = _ratio(n_rr, n_rr + n_ar + n_ra)
    total = iou_acc + iou_rej  # NaN if either is NaN, and so is their harmonic mean
    iou_cons = np.where(total == 0, 0.0, _ratio(2 * iou_acc * iou_rej, total))
    return {
        "iou_acc": iou_acc,
        "iou_rej": iou_rej,
        "iou_cons": iou_cons,
        "dec_cons": _ratio(n_aa + n_rr, n_aa + n_rr + n_ar + n_ra),
        "agreement": _ratio(n_agree, n_aa),
    }


def consistency_measures(accept_a, accept_b, predicted_a=None, predicted_b=None) -> dict[str, float]:
    """The five measures for two setups' decisions on the same items (position i = one instance in
    both). Predictions (option ids; None = no answer, which never agrees) give Agreement, NaN
    without them."""
    a, b = np.asarray(accept_a, dtype=bool), np.asarray(accept_b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"accept_a and accept_b must be 1-D of equal length, got {a.shape} and {b.shape}")
    both = a & b
    if predicted_a is None or predicted_b is None:
        agree = np.nan
    else:
        pa, pb = np.asarray(predicted_a, dtype=object), np.asarray(predicted_b, dtype=object)
        if pa.shape != a.shape or pb.shape != a.shape:
            raise ValueError(
                f"predictions must have the decisions' shape {a.shape}, got {pa.shape} and {pb.shape}"
            )
        same = np.array([x is not None and x == y for x, y in zip(pa, pb, strict=True)], dtype=bool)
        agree = (both & same).sum()
    counts = (both.sum(), (~a & ~b).sum(), (a & ~b).sum(), (~a & b).sum(), agree)
    return {k: float(v) for k, v in measures_from_counts(*counts).items()}
