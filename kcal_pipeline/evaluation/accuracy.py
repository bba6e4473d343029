"""Accuracy (METHODS §3): the share of correct predictions."""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.registry import register


@register(
    "accuracy", label="accuracy", family="accuracy", needs="any", higher_is_better=True, in_summary=True
)
def accuracy(c: np.ndarray, y: np.ndarray) -> float:
    """Share of correct predictions (micro-average over the instances in scope); confidence unused,
    so it applies to any estimator."""
    return y.mean()
