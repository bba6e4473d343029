"""The report pages: one per model, the last step of the evaluation stage (the summary table, and
report.html with its figures), and one across every model in the cross_model stage (the
leaderboard, and reports/index.html)."""

import math
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from dagster import (
    AllPartitionMapping,
    AssetExecutionContext,
    AssetIn,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from assets.partitions import model_partitions
from kcal_pipeline.core.paths import cross_model_report_path, kcal_home, model_cache_dir, report_path
from kcal_pipeline.core.report_server import report_url
from kcal_pipeline.core.storage import existing_partitions, partition_path, read_partition
from kcal_pipeline.core.versions import code_version
from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting.html import summary_table, write_report
from kcal_pipeline.reporting.previews import (
    narrow_intervals,
    narrow_leaderboard,
    narrow_summary,
    served_images,
)
from kcal_pipeline.reporting.selection import OVERALL_ROWS
from kcal_pipeline.scoring.models.provenance import code_version as code_revision
from kcal_pipeline.scoring.models.provenance import revision as model_revision
from kcal_pipeline.scoring.models.provenance import weights_provenance
from resources import DuckDBWarehouse, ModelProvider
from resources.settings import reads

# The report is the last step of a model's evaluation (the nightly evaluation job rewrites it);
# the leaderboard reads every model, so it runs in the cross_model stage, after them all.
GROUP = "evaluation"
# kcal_pipeline.reporting.pages and .plots import matplotlib (~0.3 s): they are imported in the
# assets that draw, not at the top, since every run, code server and UI process loads this module.


# What the Dagster UI (1.13) shows without a click: markdown metadata shorter than this many
# characters is rendered in place, longer markdown only behind [Show Markdown]; a table (TableMetadata)
# always in place. A plot as a data: URI is tens of kB, so the previews are PNG files under reports/
# shown through the report server (`kcal ui`): their markdown is a few short image links.
INLINE_MARKDOWN_CHARS = 1000
# The UI's "Plots" toggle charts numeric metadata across partitions: these assets add none (the
# IO manager's `rows`, the table's size, is the only number on them).


def report_link(home: Path, page: Path) -> MetadataValue:
    """The page over http, served by `kcal ui` (a browser opens no file:// link from the UI)."""
    return MetadataValue.url(report_url(home, page))


def _cell(value: object) -> str | None:
    """A table cell as text: numbers with 3 decimals, NaN and null empty (JSON has no NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def metadata_table(frame: pl.DataFrame) -> MetadataValue:
    """A few columns as a table the UI shows in place (a wide markdown table was clipped)."""
    schema = TableSchema(columns=[TableColumn(name, "string") for name in frame.columns])
    records = [TableRecord({k: _cell(v) for k, v in row.items()}) for row in frame.iter_rows(named=True)]
    return MetadataValue.table(records, schema=schema)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def run_provenance(entry, home) -> dict[str, str]:
    """Which weights the report's scores came from (as statement_scores records them), the code
    version and the date: the report's Run table."""
    dtype = entry.dtype if entry.dtype == "float32" else f"{entry.dtype} (float32 where it ran on CPU)"
    return {
        **weights_provenance(entry, dtype),
        "dtype": dtype,
        "revision": model_revision(entry, model_cache_dir(home)),
        "code_version": code_revision(),
        "date": _now(),
    }


def generation_report(home, key: str):
    """The model's open-answer results for its page (None: it has none): generation_metrics split
    into the methods' metrics and knowledge coverage, and every relation's generation_status."""
    from kcal_pipeline.evaluation.generation import COVERAGE_ESTIMATOR
    from kcal_pipeline.reporting.generation import GenerationReport

    if not partition_path(home, "generation_metrics", {"model": key}).exists():
        return None
    metrics = read_partition(home, "generation_metrics", {"model": key})
    status_files = existing_partitions(home, "generation_status", {"model": key})
    coverage = pl.col("estimator") == COVERAGE_ESTIMATOR
    return GenerationReport(
        metrics=metrics.filter(~coverage),
        coverage=metrics.filter(coverage),
        status=pl.concat([pl.read_parquet(f) for f in status_files]) if status_files else None,
    )


# 6: the option-count sweep figure; 7, 8: the generation section (when the model has open answers)
# It reads the open-answer tables (on demand, assets/generation.py): they are shown when they exist.
@reads("model", "model_tables:generation_metrics", "model_tables:generation_status")
@asset(
    group_name=GROUP,
    partitions_def=model_partitions,
    code_version=code_version("8", ESTIMATORS, METRICS),  # labels, headline flags, figures
)
def report(
    context: AssetExecutionContext,
    metrics: pl.DataFrame,
    curves: pl.DataFrame,
    consistency: pl.DataFrame,
    templates: pl.DataFrame,
    models: ModelProvider,
    warehouse: DuckDBWarehouse,
) -> pl.DataFrame:
    """The per-relation summary table; also writes the model's HTML report (summary, intervals,
    reliability diagrams with bootstrap bands, selective-prediction curves, marker effects,
    consistency and the gold-count effect, and the open answers where the model has them)."""
    from kcal_pipeline.reporting.figure_data import intervals_table
    from kcal_pipeline.reporting.pages import model_page, preview_figures

    key = context.partition_key
    entry = models.entry(key)
    home = kcal_home(warehouse.home or None)
    summary = summary_table(metrics)
    html_path = report_path(home, key)
    meta = {
        "model_id": entry.id,
        "model_key": key,
        **run_provenance(entry, home),
        "KCAL_HOME": str(home),
        "duckdb": warehouse.path,
        "metrics": str(partition_path(home, "metrics", {"model": key})),
    }
    generation = generation_report(home, key)
    page = model_page(summary, metrics, curves, templates, consistency, meta, generation=generation)
    write_report(html_path, page)
    context.add_output_metadata(
        {
            "report": report_link(home, html_path),
            "report_path": MetadataValue.path(str(html_path)),
            "duckdb": MetadataValue.path(warehouse.path),
            "summary": metadata_table(narrow_summary(summary)),
            "intervals": metadata_table(narrow_intervals(intervals_table(metrics))),
            "plots": MetadataValue.md(served_images(home, html_path, preview_figures(metrics, curves))),
        }
    )
    return summary.with_columns(model_id=pl.lit(entry.id))


@asset(
    group_name="cross_model",
    # only the rows the page reads, filtered in each file's scan (not 1.2 M rows a model)
    ins={"metrics": AssetIn(partition_mapping=AllPartitionMapping(), metadata={"where": OVERALL_ROWS})},
    code_version=code_version("1", ESTIMATORS, METRICS),
)
def cross_model_report(
    context: AssetExecutionContext, metrics: pl.DataFrame, warehouse: DuckDBWarehouse
) -> pl.DataFrame:
    """The leaderboard across every model (Base's accuracy and the best-calibrated estimator, with
    intervals); also writes reports/index.html: the leaderboard linking each model's report, ACE
    against accuracy, and the main estimators compared across models."""
    from kcal_pipeline.reporting.cross_model import (
        cross_model_figures,
        cross_model_page,
        leaderboard,
        overall_headline,
    )

    home = kcal_home(warehouse.home or None)
    html_path = cross_model_report_path(home)
    overall = overall_headline(metrics)  # the headline reduction, once
    board = leaderboard(overall)
    models = metrics["model_id"].n_unique() if "model_id" in metrics.columns else 0
    meta = {"models": models, "code_version": code_revision(), "date": _now(), "KCAL_HOME": str(home),
            "duckdb": warehouse.path}  # fmt: skip
    figures = cross_model_figures(overall)
    write_report(html_path, cross_model_page(overall, meta, board, figures))
    previews = {k: v for k, v in figures.items() if k == "ace-accuracy" and not isinstance(v, str)}
    context.add_output_metadata(
        {
            "report": report_link(home, html_path),
            "report_path": MetadataValue.path(str(html_path)),
            "leaderboard": metadata_table(narrow_leaderboard(board)),
            "plots": MetadataValue.md(
                served_images(home, html_path, previews) if previews else "no model has metrics yet"
            ),
        }
    )
    return board
