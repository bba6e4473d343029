"""The estimator registry as a table: what the store's estimator_catalog holds.

SQL reports and pages select estimators by these columns (`main`, `baseline`, `family_line`,
`family_order`) instead of listing names, so a new estimator reaches them by its spec alone.

`headline_reduction` is the one source of each estimator's headline reduction (METHODS §1): the
reduction its headline numbers use, its spec's first. sql/views/headline_reductions.sql reads the
column, and `headline_reduction` here is the rule both follow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields

import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS, EstimatorSpec, family_rank

# The reduction a name the catalog does not know (an estimator since removed from the registry) is
# read under where its rows have it: the first of a spec's default reductions ('sum').
DEFAULT_HEADLINE_REDUCTION: str = next(f for f in fields(EstimatorSpec) if f.name == "reductions").default[0]

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


def headline_reductions() -> dict[str, str]:
    """Each registered estimator's headline reduction: the catalog's `headline_reduction` column."""
    return dict(estimator_catalog().select("name", "headline_reduction").iter_rows())


def headline_reduction(
    estimator: str, reductions: Iterable[str | None], catalog: dict[str, str] | None = None
) -> str | None:
    """The reduction of an estimator's headline numbers among the `reductions` its rows carry: the
    catalog's headline_reduction; where the rows lack it (a name the catalog does not know),
    DEFAULT_HEADLINE_REDUCTION, else the first by name; None when the rows carry no reduction at
    all. sql/views/headline_reductions.sql is the same rule over the estimator_catalog table.
    `catalog`: headline_reductions(), passed in where many estimators are looked up."""
    have = sorted({r for r in reductions if r is not None})
    if not have:
        return None
    own = (headline_reductions() if catalog is None else catalog).get(estimator)
    for choice in (own, DEFAULT_HEADLINE_REDUCTION):
        if choice in have:
            return choice
    return have[0]
