"""Catalog assets: the estimator and metric registries as tables, so SQL reports and pages select
estimators and metrics by their specs' flags (main, baseline, role, …) instead of listing names.

Each asset's code version is a hash of its table: a registry change (a new estimator, a changed
flag) makes it stale by itself, no constant to bump.
"""

import hashlib
import json

import polars as pl
from dagster import asset

import kcal_pipeline.estimation
import kcal_pipeline.evaluation  # noqa: F401  (registers every metric)
from kcal_pipeline.estimation.catalog import estimator_catalog as estimator_table
from kcal_pipeline.evaluation.catalog import metric_catalog as metric_table

GROUP = "dataset"


def table_version(table: pl.DataFrame) -> str:
    """A short hash of a table's rows: the code version of an asset that writes it."""
    text = json.dumps(table.to_dicts(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@asset(group_name=GROUP, code_version=table_version(estimator_table()))
def estimator_catalog() -> pl.DataFrame:
    """Every registered estimator with its label, family, grain, output kind, reductions, paper and
    report flags (main, baseline, family_line), in registry order."""
    return estimator_table()


@asset(group_name=GROUP, code_version=table_version(metric_table()))
def metric_catalog() -> pl.DataFrame:
    """Every registered metric with its label, family, needs, direction and report flags (headline,
    role, report_order), in registry order."""
    return metric_table()
