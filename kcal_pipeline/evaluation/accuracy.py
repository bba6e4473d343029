"""Accuracy (METHODS §3): the share of correct predictions."""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import register
from kcal_pipeline.evaluation.segments import Segments


def per_segment(frame: pl.DataFrame, value: pl.Expr, count: int) -> np.ndarray:
    """[count] array of `value` aggregated per `segment` of `frame` (NaN for a segment it lacks)."""
    out = np.full(count, np.nan)
    got = frame.group_by("segment").agg(value.alias("value"))
    out[got["segment"].to_numpy()] = got["value"].cast(pl.Float64).to_numpy()
    return out


def _accuracy_batched(seg: Segments) -> np.ndarray:
    return seg.mean(seg.y.astype(np.float64))


def _accuracy_macro_batched(frame: pl.DataFrame, count: int) -> np.ndarray:
    hit = pl.col("gold_ids").list.contains(pl.col("predicted_id")).fill_null(False)
    return per_segment(frame, hit.mean(), count)


@register(
    "accuracy",
    label="accuracy",
    family="accuracy",
    needs="any",
    higher_is_better=True,
    in_summary=True,
    batched=_accuracy_batched,
    role="correctness",
    headline=True,
)
def accuracy(c: np.ndarray, y: np.ndarray) -> float:
    """Share of correct predictions (micro-average over the instances in scope); confidence unused,
    so it applies to any estimator."""
    return y.mean()


@register(
    "accuracy_macro",
    label="accuracy (macro over relations)",
    family="accuracy",
    needs="any",
    higher_is_better=True,
    input="predictions",
    batched=_accuracy_macro_batched,
)
def accuracy_macro(predicted: pl.Series, gold: pl.Series) -> float:
    """Accuracy macro-averaged over relations (METHODS §3): per relation the share of predictions
    among the gold ids (= `accuracy` there); scope "all" is the unweighted mean over relations,
    where `accuracy` itself is the micro average over instances."""
    return predicted.is_in(gold).fill_null(False).mean()
