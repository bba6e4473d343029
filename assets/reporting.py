"""Per-model report: the summary table and the HTML page, from the metrics and curves."""

import polars as pl
from dagster import AssetExecutionContext, MetadataValue, asset

from assets.partitions import model_partitions
from kcal_pipeline.core.paths import kcal_home, report_path
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.reporting.html import format_summary, render_html, summary_table, write_report
from resources import DuckDBWarehouse, ModelProvider
from resources.settings import reads

GROUP = "reporting"


@asset(group_name=GROUP, partitions_def=model_partitions, code_version="4", metadata=reads("model"))
def report(
    context: AssetExecutionContext,
    metrics: pl.DataFrame,
    curves: pl.DataFrame,
    models: ModelProvider,
    warehouse: DuckDBWarehouse,
) -> pl.DataFrame:
    """The per-relation summary table; also writes the HTML report."""
    key = context.partition_key
    entry = models.entry(key)
    home = kcal_home(warehouse.home or None)
    summary = summary_table(metrics)
    html_path = report_path(home, key)
    meta = {
        "model_id": entry.id,
        "model_key": key,
        "KCAL_HOME": str(home),
        "duckdb": warehouse.path,
        "metrics": str(partition_path(home, "metrics", {"model": key})),
    }
    write_report(html_path, render_html(summary, metrics, curves, meta))
    context.add_output_metadata(
        {
            "report": MetadataValue.path(str(html_path)),
            "duckdb": MetadataValue.path(warehouse.path),
            "summary": MetadataValue.md(f"```\n{format_summary(summary)}\n```"),
        }
    )
    return summary.with_columns(model_id=pl.lit(entry.id))
