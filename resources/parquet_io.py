"""The Parquet IO manager: every asset is a hive-partitioned Parquet table under KCAL_HOME."""

from __future__ import annotations

import polars as pl
from dagster import (
    ConfigurableIOManager,
    DynamicPartitionsDefinition,
    InputContext,
    MultiPartitionsDefinition,
    OutputContext,
    PartitionsDefinition,
)

from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.storage import partition_path, read_partitions, table_has_data, write_parquet_atomic
from kcal_pipeline.core.warehouse import refresh_views


def partition_dims(pdef: PartitionsDefinition | None, key: str | None) -> dict[str, str]:
    """Dagster partition key -> {'model': ..., 'relation': ...} for the hive path."""
    if pdef is None or key is None:
        return {}
    if isinstance(pdef, MultiPartitionsDefinition):
        return dict(pdef.get_partition_key_from_str(str(key)).keys_by_dimension)
    if isinstance(pdef, DynamicPartitionsDefinition):
        return {"model": key}
    return {"relation": key}


def table_name(context: InputContext | OutputContext) -> str:
    return context.asset_key.path[-1]


class ParquetIOManager(ConfigurableIOManager):
    """Atomic writes (temp file + rename); an unchanged partition keeps its file untouched.

    Inputs load the upstream partitions Dagster maps to the step (one relation, or every
    materialized relation of one model), concatenated in key order.
    """

    home: str = ""

    def handle_output(self, context: OutputContext, obj: pl.DataFrame) -> None:
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(
                f"asset {table_name(context)!r} must return a polars DataFrame, got {type(obj).__name__}"
            )
        key = context.asset_partition_key if context.has_asset_partitions else None
        pdef = context.asset_partitions_def if context.has_asset_partitions else None
        home, table = kcal_home(self.home or None), table_name(context)
        path = partition_path(home, table, partition_dims(pdef, key))
        first_file = not table_has_data(home, table)
        changed = write_parquet_atomic(obj, path)
        if first_file:
            # DuckDB cannot create a view over a glob that matches nothing, so a table's view
            # appears with its first file; later partitions are picked up by the glob itself.
            refresh_views(home)
        context.add_output_metadata({"path": str(path), "rows": obj.height, "file_changed": changed})

    def load_input(self, context: InputContext) -> pl.DataFrame:
        home = kcal_home(self.home or None)
        if not context.has_asset_partitions:
            return read_partitions(home, table_name(context), [{}])
        pdef, table = context.asset_partitions_def, table_name(context)
        dims = [partition_dims(pdef, k) for k in sorted(context.asset_partition_keys)]
        if len(dims) > 1:
            # A per-model step reads every relation of the model: it summarises the relations
            # that are materialized and says which are not, rather than refusing to run.
            present = [d for d in dims if partition_path(home, table, d).exists()]
            missing = [d for d in dims if d not in present]
            if missing and present:
                context.log.warning(
                    f"{table}: {len(missing)} of {len(dims)} upstream partitions are not "
                    f"materialized and are left out: {missing}"
                )
                dims = present
        return read_partitions(home, table, dims)
