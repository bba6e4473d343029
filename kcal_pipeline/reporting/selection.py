"""What the report pages show, chosen by the registries' flags: the main estimators, each
estimator's headline reduction, the headline rows of a metrics or curves table, and the metrics
that play the report roles (REPORT_ROLES), with the selection of sql/views/headline_metrics.sql."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from kcal_pipeline.estimation.catalog import headline_reduction, headline_reductions
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    main_estimator_specs,
)
from kcal_pipeline.evaluation.registry import METRICS, metric_for

# The metrics a report quotes, by role (evaluation/registry.py REPORT_ROLES), and the four of the
# intervals table (`kcal sql --query intervals`).
ACCURACY = metric_for("correctness")
CALIBRATION = metric_for("calibration")
PROPER_SCORE = metric_for("proper_score")
RANKING = metric_for("ranking")
CONFIDENCE_LEVEL = metric_for("confidence_level")
INTERVAL_METRICS = tuple((m, METRICS[m].label) for m in (ACCURACY, CALIBRATION, PROPER_SCORE, RANKING))
# The only metrics rows the page across models reads (the headline selection over all relations,
# before each estimator's headline reduction): its asset reads just these from every model's file.
OVERALL_ROWS = {"split": HEADLINE_SPLIT, "answer_space_k": FULL_ANSWER_SPACE, "scope": "all"}


def main_estimators(present: Iterable[str]) -> list[str]:
    """The main estimators (spec flag `main`) among `present`, family by family (FAMILY_ORDER: the
    seeds' estimators first), in registry order within a family; probability-valued ones only."""
    have = set(present)
    return [s.name for s in main_estimator_specs() if s.output_kind == "probability" and s.name in have]


def accuracy_n(rows: pl.DataFrame) -> int | None:
    """The instances behind one estimator's scope rows: its accuracy row's n (the statement-level
    metrics count (instance, option) pairs instead)."""
    hit = rows.filter(pl.col("metric") == ACCURACY)["n"]
    return int(hit[0]) if hit.len() else None


def label(estimator: str) -> str:
    """An estimator's label as the pages, tables and claims show it: its spec's; a name the
    registry does not know as itself. The one such helper: the pages and the claims
    (findings/core.py estimator_label) use it."""
    spec = ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def at_headline_reduction(frame: pl.DataFrame, column: str = "estimator") -> pl.DataFrame:
    """The rows of each estimator (named in `column`) under its headline reduction (the estimator
    catalog's, estimation/catalog.py headline_reduction; sql/views/headline_reductions.sql)."""
    if "reduction" not in frame.columns or frame.is_empty():
        return frame
    have: dict[str, list[str | None]] = {}
    for estimator, reduction in frame.select(column, "reduction").unique().iter_rows():
        have.setdefault(estimator, []).append(reduction)
    catalog = headline_reductions()
    keep = pl.DataFrame(
        {column: list(have), "reduction": [headline_reduction(e, r, catalog) for e, r in have.items()]},
        schema={column: pl.String, "reduction": pl.String},
    )
    return frame.join(keep, on=[column, "reduction"], how="semi", nulls_equal=True)


def headline(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows of a metrics or curves table on the test split, full answer spaces and each estimator's
    headline reduction (sql/views/headline_metrics.sql)."""
    rows = frame.filter((pl.col("split") == HEADLINE_SPLIT) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE))
    if "metric" in rows.columns:  # metrics computed without intervals (compute_metrics) have none
        rows = rows.with_columns(
            pl.lit(None, pl.Float64).alias(c) for c in ("ci_low", "ci_high") if c not in rows.columns
        )
    return at_headline_reduction(rows)


def one_model(frame: pl.DataFrame, what: str) -> None:
    """Refuse a table of several models where a model's page reads one."""
    models = frame["model_id"].unique().to_list() if "model_id" in frame.columns else []
    if len(models) > 1:
        raise ValueError(f"{what}: a model's page reads one model, got {sorted(models)}")
