"""The metric registry as a table: what the store's metric_catalog holds.

SQL reports and pages pick metric columns by these columns (`role`, `report_order`, `headline`,
`needs`) instead of listing names, so a metric's place in the reports is set in its spec.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.evaluation.registry import METRICS, REPORT_ROLES

METRIC_CATALOG_SCHEMA = {
    "name": pl.String,
    "label": pl.String,
    "family": pl.String,
    "registry_order": pl.Int32,
    "needs": pl.String,  # "probability" or "any"
    "input": pl.String,
    "higher_is_better": pl.Boolean,  # null: descriptive, no better direction
    "tuned": pl.Boolean,  # a threshold tuned on the dev split
    "in_summary": pl.Boolean,
    "headline": pl.Boolean,
    "role": pl.String,  # one of REPORT_ROLES, or null
    "report_order": pl.Int32,  # the role's place in REPORT_ROLES (1 first), the column order of reports
}


def metric_catalog() -> pl.DataFrame:
    """One row per registered metric, in registry order."""
    rows = [
        {
            "name": m.name,
            "label": m.label,
            "family": m.family,
            "registry_order": k,
            "needs": m.needs,
            "input": m.input,
            "higher_is_better": m.higher_is_better,
            "tuned": m.tuned,
            "in_summary": m.in_summary,
            "headline": m.headline,
            "role": m.role,
            "report_order": REPORT_ROLES.index(m.role) + 1 if m.role else None,
        }
        for k, m in enumerate(METRICS.values())
    ]
    return pl.DataFrame(rows, schema=METRIC_CATALOG_SCHEMA)
