"""What an asset's results show in the Dagster UI without a click: plots as small PNG files under
KCAL_HOME/reports, linked over http (the report server of `kcal ui` serves them; a data: URI makes
the markdown too long for the UI to show in place), and narrow summary tables (a wide one was
clipped with no scrollbar). The full tables and every figure are in the report itself."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kcal_pipeline.core.report_server import report_url
from kcal_pipeline.core.storage import write_bytes_atomic

PLOTS_FOLDER = "plots"  # beside the page the previews belong to


def served_images(home: Path, page: Path, figures: dict) -> str:
    """The figures as PNG files in the page's plots/ folder (written atomically: the report
    server never serves half an image), and markdown images linking them over http."""
    from kcal_pipeline.reporting.canvas import png_bytes  # matplotlib: only where a page is drawn

    images = []
    for name, fig in figures.items():
        path = write_bytes_atomic(Path(page).parent / PLOTS_FOLDER / f"{name}.png", png_bytes(fig, name))
        images.append(f"![{name}]({report_url(home, path)})")
    note = "*Plots served by `kcal ui` (port: KCAL_REPORTS_PORT); every figure is in the report.*"
    return "\n\n".join([*images, note])


def narrow_summary(summary: pl.DataFrame) -> pl.DataFrame:
    """The summary's relation, instances, accuracy and ACE per summary estimator (Brier and the
    template mean are in the report)."""
    return summary.select(
        "relation", "instances", "accuracy", *[c for c in summary.columns if c.startswith("ace_")]
    )


def narrow_intervals(intervals: pl.DataFrame) -> pl.DataFrame:
    """Each main estimator's accuracy and ACE with their 95 % intervals (Brier and AUROC, and the
    reduction, are in the report)."""
    return intervals.select("estimator", pl.col("instances").alias("n"), "accuracy", "ACE")


def narrow_leaderboard(board: pl.DataFrame) -> pl.DataFrame:
    """Per model: accuracy and the best-calibrated estimator's ACE with their intervals, and Base's
    ACE (Brier and AUROC are on reports/index.html)."""
    from kcal_pipeline.reporting.canvas import interval_text

    def with_interval(metric: str) -> pl.Expr:
        parts = pl.struct(metric, f"{metric}_ci_low", f"{metric}_ci_high")
        return parts.map_elements(lambda r: interval_text(*r.values()), return_dtype=pl.String)

    return board.select(
        "model_id",
        "instances",
        with_interval("accuracy").alias("accuracy"),
        "best_calibrated",
        with_interval("ace").alias("ACE"),
        pl.col("base_ace").alias("Base ACE"),
    )
