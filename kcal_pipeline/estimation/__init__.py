"""The estimation stage: the option-score cube and the estimator registry (one family per module).

Importing the package registers every family, so `ESTIMATORS` is complete wherever it is read.
"""

from kcal_pipeline.estimation import (
    aggregation,
    marginal,
    markers,
    multi_answer,
    null_model,
    recalibration,
    selective_lama,
    single_template,
)
from kcal_pipeline.estimation.cube import OptionScoreCube, build_cube, partition_cubes
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimates, summary_estimators

__all__ = [
    "ESTIMATORS",
    "OptionScoreCube",
    "aggregation",
    "build_cube",
    "compute_estimates",
    "marginal",
    "markers",
    "multi_answer",
    "null_model",
    "partition_cubes",
    "recalibration",
    "selective_lama",
    "single_template",
    "summary_estimators",
]
