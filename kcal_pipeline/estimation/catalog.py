"""The estimator registry as a table: what the store's estimator_catalog holds.

SQL reports and pages select estimators by these columns (`main`, `baseline`, `family_line`,
`family_order`) instead of listing names, so a new estimator reaches them by its spec alone.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS, family_rank

ESTIMATOR_CATALOG_SCHEMA = {
    "name": pl.String,
    "label": pl.String,
    "family": pl.String,
    "family_order": pl.Int32,  # the family's place in FAMILY_ORDER (reports group by it)
    "registry_order": pl.Int32,  # the estimator's place in the registry
    "grain": pl.String,
    "output_kind": pl.String,
    "reductions": pl.List(pl.String),
    "headline_reduction": pl.String,  # its spec's first reduction
    "needs": pl.List(pl.String),
    "template_kinds": pl.List(pl.String),
    "paper": pl.String,
    "in_summary": pl.Boolean,
    "main": pl.Boolean,
    "baseline": pl.Boolean,
    "family_line": pl.Boolean,
}


def estimator_catalog() -> pl.DataFrame:
    """One row per registered estimator, in registry order."""
    rows = [
        {
            "name": s.name,
            "label": s.label,
            "family": s.family,
            "family_order": family_rank(s.family),
            "registry_order": k,
            "grain": s.grain,
            "output_kind": s.output_kind,
            "reductions": list(s.reductions),
            "headline_reduction": s.reductions[0],
            "needs": list(s.needs),
            "template_kinds": list(s.template_kinds),
            "paper": s.paper,
            "in_summary": s.in_summary,
            "main": s.main,
            "baseline": s.baseline,
            "family_line": s.family_line,
        }
        for k, s in enumerate(ESTIMATORS.values())
    ]
    return pl.DataFrame(rows, schema=ESTIMATOR_CATALOG_SCHEMA)
