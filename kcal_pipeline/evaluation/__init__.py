"""The evaluation stage (and cross_model's family comparison): the metric registry (one family per
module), breakdowns, bootstrap intervals, curves and the consistency of decisions; `tables` builds
what the assets write.

Importing the package registers every family in a fixed order (accuracy, calibration,
selective, decisions, bias), so `METRICS` is complete and ordered wherever it is read.
"""

from kcal_pipeline.evaluation import accuracy, calibration, selective  # isort: skip
from kcal_pipeline.evaluation import decisions  # isort: skip
from kcal_pipeline.evaluation import bias  # isort: skip
from kcal_pipeline.evaluation.bootstrap import bootstrap_intervals, paired_differences
from kcal_pipeline.evaluation.consistency import compute_consistency, seed_spread
from kcal_pipeline.evaluation.curves import CURVES, compute_curves
from kcal_pipeline.evaluation.engine import compute_metrics, compute_template_metrics, tuned_thresholds
from kcal_pipeline.evaluation.families import family_comparison, model_families, pair_models_by_accuracy
from kcal_pipeline.evaluation.registry import METRICS, summary_metrics
from kcal_pipeline.evaluation.scopes import (
    attach_attributes,
    breakdown_scopes,
    macro_average,
    macro_average_mixtures,
)

__all__ = [
    "CURVES",
    "METRICS",
    "accuracy",
    "attach_attributes",
    "bias",
    "bootstrap_intervals",
    "breakdown_scopes",
    "calibration",
    "compute_consistency",
    "compute_curves",
    "compute_metrics",
    "compute_template_metrics",
    "decisions",
    "family_comparison",
    "macro_average",
    "macro_average_mixtures",
    "model_families",
    "pair_models_by_accuracy",
    "paired_differences",
    "seed_spread",
    "selective",
    "summary_metrics",
    "tuned_thresholds",
]
