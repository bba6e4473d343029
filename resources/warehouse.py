"""The DuckDB resource: views over the Parquet tables, from sql/."""

from __future__ import annotations

from dagster import ConfigurableResource

from kcal_pipeline.core.paths import duckdb_path, kcal_home
from kcal_pipeline.core.warehouse import refresh_views


class DuckDBWarehouse(ConfigurableResource):
    home: str = ""

    def refresh(self) -> list[str]:
        return refresh_views(kcal_home(self.home or None))

    @property
    def path(self) -> str:
        return str(duckdb_path(kcal_home(self.home or None)))
