"""Stage 5, evaluation: the metric registry (one family per module) and reliability curves.

Importing the package registers every family in a fixed order (accuracy, calibration,
selective), so `METRICS` is complete and ordered wherever it is read.
"""

from kcal_pipeline.evaluation import accuracy, calibration, selective
from kcal_pipeline.evaluation.curves import compute_curves
from kcal_pipeline.evaluation.registry import (
    METRICS,
    compute_metrics,
    compute_template_metrics,
    summary_metrics,
)

__all__ = [
    "METRICS",
    "accuracy",
    "calibration",
    "compute_curves",
    "compute_metrics",
    "compute_template_metrics",
    "selective",
    "summary_metrics",
]
