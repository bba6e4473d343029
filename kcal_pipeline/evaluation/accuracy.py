"""Accuracy (METHODS §3): the share of correct predictions."""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.registry import register


@register(
    "accuracy", label="accuracy", family="accuracy", needs="any", higher_is_better=True, in_summary=True
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
)
def accuracy_macro(predicted: pl.Series, gold: pl.Series) -> float:
    """Accuracy macro-averaged over relations (METHODS §3): per relation the share of predictions
    among the gold ids (= `accuracy` there); scope "all" is the unweighted mean over relations,
    where `accuracy` itself is the micro average over instances."""
    return predicted.is_in(gold).fill_null(False).mean()
