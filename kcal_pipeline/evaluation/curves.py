"""Curves over (confidence, correct), per estimator and scope (METHODS §3), in one long table.

`curve` says which: calibration (reliability: per bin conf_b, acc_b, n_b, binned as ACE), rejection
(accuracy–rejection at τ = 0.1 … 0.9), risk_coverage (risk of the k most confident), roc (FPR, TPR
with correct as the positive class). The first two read a confidence as a probability; the other two
use only the order, so score-valued estimators have them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.calibration import BINS, calibration_curve
from kcal_pipeline.evaluation.registry import SCOPE_KEY_SCHEMA, as_arrays, scopes

# Accuracy–rejection thresholds: τ = k/10 (k/10 is the float nearest the decimal, as the literal 0.3).
REJECTION_THRESHOLDS = tuple(k / 10 for k in range(1, 10))
# Risk–coverage is drawn at coverages q = 1 % … 100 % (k = ⌈q·N⌉, repeated k once), not at all N
# points, so the table stays small however many instances a scope has.
RISK_COVERAGE_PERCENTS = tuple(range(1, 101))

# (curve, needs probabilities)
CURVES = {"calibration": True, "rejection": True, "risk_coverage": False, "roc": False}

SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "curve": pl.String,
    "x": pl.Float64,
    "y": pl.Float64,
    "n": pl.Int64,
    "bin": pl.Int64,
    "threshold": pl.Float64,
}
_POINT_SCHEMA = {k: SCHEMA[k] for k in ("x", "y", "n", "bin", "threshold")}


def _points(x, y, n, threshold=None, bins=None) -> pl.DataFrame:
    size = len(x)
    return pl.DataFrame(
        {
            "x": x,
            "y": y,
            "n": n,
            "bin": [None] * size if bins is None else bins,
            "threshold": [None] * size if threshold is None else threshold,
        },
        schema=_POINT_SCHEMA,
    )


def rejection_curve(confidence, correct) -> pl.DataFrame:
    """Accuracy–rejection (METHODS §3): at τ = 0.1 … 0.9, x = share rejected (C < τ), y = accuracy of
    the kept (NaN when none is kept), n = kept, threshold = τ."""
    c, y = as_arrays(confidence, correct)
    tau = np.array(REJECTION_THRESHOLDS)
    kept = c[None, :] >= tau[:, None]
    n_kept = kept.sum(axis=1)
    right = (kept & y[None, :]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(n_kept > 0, right / n_kept, np.nan)
    return _points((c.size - n_kept) / c.size, acc, n_kept, threshold=tau)


def risk_coverage_curve(confidence, correct, output_kind: str = "probability") -> pl.DataFrame:
    """Risk–coverage (METHODS §3): x = k/N, y = error rate among the k most confident (stable sort,
    as AURC), n = k, for k = ⌈q·N⌉ at q = 1 % … 100 % (each k once: at most 100 points)."""
    c, y = as_arrays(confidence, correct, output_kind)
    errors = np.cumsum(~y[np.argsort(-c, kind="stable")])
    k = np.unique((np.array(RISK_COVERAGE_PERCENTS) * c.size + 99) // 100)
    return _points(k / c.size, errors[k - 1] / k, k)


def roc_curve(confidence, correct, output_kind: str = "probability") -> pl.DataFrame:
    """ROC of confidence separating correct (positive) from wrong: (FPR, TPR) of "accept C ≥ t" at
    every distinct confidence t, descending, after a first point (0, 0) at t = +inf (as
    sklearn.metrics.roc_curve(drop_intermediate=False)); n = accepted. A rate whose class is
    absent is NaN."""
    c, y = as_arrays(confidence, correct, output_kind)
    values, inverse, counts = np.unique(c, return_inverse=True, return_counts=True)
    right = np.bincount(inverse, weights=y.astype(np.float64), minlength=values.size)
    # descending thresholds; accepted at t = everything at or above it
    tp = np.concatenate([[0.0], np.cumsum(right[::-1])])
    accepted = np.concatenate([[0], np.cumsum(counts[::-1])])
    fp = accepted - tp
    n_pos, n_neg = tp[-1], fp[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tp / n_pos if n_pos else np.full(tp.size, np.nan)
        fpr = fp / n_neg if n_neg else np.full(fp.size, np.nan)
    return _points(fpr, tpr, accepted, threshold=np.concatenate([[np.inf], values[::-1]]))


def _calibration(c: np.ndarray, y: np.ndarray, bins: int, strategy: str) -> pl.DataFrame:
    curve = calibration_curve(c, y, bins, strategy)
    return _points(curve["conf"], curve["acc"], curve["n"], bins=curve["bin"])


def compute_curves(
    estimates: pl.DataFrame,
    bins: int = BINS,
    strategy: str = "quantile",
    curves: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Every curve of every (model, estimator, reduction, split, answer space) × scope, long: keys,
    curve, x, y, n, bin (calibration only), threshold (rejection: τ; roc: t; null otherwise).

    Reliability curves are binned as ACE by default. Calibration and rejection curves read
    probabilities, so score-valued estimators have risk–coverage and ROC curves only.
    """
    names = list(CURVES) if curves is None else list(curves)
    unknown = [name for name in names if name not in CURVES]
    if unknown:
        raise ValueError(f"unknown curve(s) {unknown}; known: {list(CURVES)}")
    frames = []
    for key, scope, value, c, y in scopes(estimates):
        probability = key["output_kind"] == "probability"
        for name in names:
            if CURVES[name] and not probability:
                continue
            if name == "calibration":
                points = _calibration(c, y, bins, strategy)
            elif name == "rejection":
                points = rejection_curve(c, y)
            elif name == "risk_coverage":
                points = risk_coverage_curve(c, y, key["output_kind"])
            else:
                points = roc_curve(c, y, key["output_kind"])
            frames.append(
                points.with_columns(
                    model_id=pl.lit(key["model_id"], pl.String),
                    estimator=pl.lit(key["estimator"], pl.String),
                    reduction=pl.lit(key["reduction"], pl.String),
                    split=pl.lit(key["split"], pl.String),
                    answer_space_k=pl.lit(key["answer_space_k"], pl.Int32),
                    scope=pl.lit(scope, pl.String),
                    scope_value=pl.lit(value, pl.String),
                    curve=pl.lit(name, pl.String),
                )
            )
    if not frames:
        raise ValueError(f"estimates: no probability-valued estimator to draw {', '.join(names)} curves for")
    return pl.concat(frames).select(list(SCHEMA))
