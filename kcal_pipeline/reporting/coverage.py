"""Which estimators ran on a model and which were skipped, and why (the estimator_status table).

An estimator whose inputs a run lacks (no dropout passes scored, no marker templates) is skipped,
not failed; the demo and the report say so in a few lines, so a reader never wonders why an
estimator is missing from a table.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.frames import require_columns


def estimator_coverage_lines(status: pl.DataFrame) -> list[str]:
    """Lines for a terminal: how many estimators ran per family, then one line per skip reason
    naming the estimators (and the relations) it kept out. An estimator counts as run when it ran
    under some reduction on some relation."""
    require_columns(status, ["relation_id", "estimator", "family", "status"], "estimator_status")
    ran = status.filter(pl.col("status") == "ran")
    ran_names = set(ran["estimator"].to_list())
    per_family = (
        ran.group_by("family").agg(pl.col("estimator").n_unique().alias("n")).sort("family").iter_rows()
    )
    total = status["estimator"].n_unique()
    lines = [
        f"estimators: {len(ran_names)} of {total} ran ("
        + ", ".join(f"{family} {n}" for family, n in per_family)
        + ")"
    ]
    skipped = (
        status.filter(pl.col("status") == "skipped")
        .group_by("estimator")
        .agg(pl.col("reason").unique().sort().str.join("; "), pl.col("relation_id").unique().sort())
        .with_columns(pl.col("estimator").is_in(sorted(ran_names)).alias("ran_elsewhere"))
    )
    by_reason = (
        skipped.explode("relation_id")
        .group_by("ran_elsewhere", "reason")
        .agg(pl.col("estimator").unique().sort(), pl.col("relation_id").unique().sort())
        .sort("ran_elsewhere", "reason")
    )
    for elsewhere, reason, estimators, relations in by_reason.iter_rows():
        verb = "skipped on some relations" if elsewhere else "not run"
        lines.append(f"  {verb}, {reason} ({', '.join(relations)}): {', '.join(estimators)}")
    return lines
