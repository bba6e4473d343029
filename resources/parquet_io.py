"""The Parquet IO manager: every asset is a hive-partitioned Parquet table under KCAL_HOME."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from dagster import (
    ConfigurableIOManager,
    DataVersion,
    DynamicPartitionsDefinition,
    InputContext,
    MultiPartitionsDefinition,
    OutputContext,
    PartitionsDefinition,
)
from pydantic import PrivateAttr

from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.storage import (
    partition_path,
    read_partitions,
    table_has_data,
    upgrade_file,
    write_parquet_atomic,
)
from kcal_pipeline.core.store_upgrades import upgrade_frame
from kcal_pipeline.core.versions import DATA_VERSION_KEY, data_version, input_versions
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.relations import relation_label
from kcal_pipeline.scoring.checkpoints import CHECKPOINTED_TABLES, discard_partition
from resources.settings import (
    GenerationResource,
    ProbeSettings,
    ScoringSettings,
    declared_reads,
    resolve_reads,
)
from resources.store_lock import StoreLock


def partition_dims(pdef: PartitionsDefinition | None, key: str | None) -> dict[str, str]:
    """Dagster partition key -> {'model': ..., 'relation': ...} for the hive path."""
    if pdef is None or key is None:
        return {}
    if isinstance(pdef, MultiPartitionsDefinition):
        return dict(pdef.get_partition_key_from_str(str(key)).keys_by_dimension)
    if isinstance(pdef, DynamicPartitionsDefinition):
        return {"model" if pdef.name == "model" else "relation": key}  # catalog or probe relations
    return {"relation": key}


def table_name(context: InputContext | OutputContext) -> str:
    return context.asset_key.path[-1]


class ParquetIOManager(ConfigurableIOManager):
    """Atomic writes (temp file + rename); an unchanged partition keeps its file untouched.

    Inputs load the upstream partitions Dagster maps to the step (one relation, or every
    materialized relation of one model), concatenated in key order. A cross-model step reads every
    model, so its input metadata can keep it to what it uses:
    `AssetIn(metadata={"columns": [...]})` reads only those columns;
    `{"where": {"split": "test", ...}}` only the rows equal to those literal values (a predicate
    pushed into the Parquet scan: no full table is held); `{"lazy": True}` loads nothing and hands
    the step one polars LazyFrame per partition file (key → scan, in key order), so it reads the
    files one at a time. The files count as read either way (the data version depends on them all).
    """

    home: str = ""
    probe_settings: ProbeSettings
    scoring_settings: ScoringSettings
    generation_settings: GenerationResource
    # The store is written only while the run holds its lock (resources/store_lock.py).
    store_lock: StoreLock

    # Input files each step of each run read ((run id, step key) -> paths): a partition's data
    # version is computed from exactly the files that went into it.
    _read: dict[tuple[str, str], list[Path]] = PrivateAttr(default_factory=dict)

    def _version(self, context: OutputContext, home: Path, dims: dict[str, str]) -> str:
        """The partition's data version (kcal_pipeline/core/versions.py)."""
        values, extra = resolve_reads(
            declared_reads(context.asset_key.to_user_string()),
            dims,
            self.probe_settings,
            self.scoring_settings,
            home,
            self.generation_settings,
        )
        node = context.step_context.job_def.asset_layer.get(context.asset_key)
        # A multi-asset's step reads the inputs of all its outputs; each output's version counts
        # only the tables it depends on (what the runner's expected_version counts too).
        parents = {key.path[-1] for key in node.parent_keys}  # table names, as table_name gives them
        read = [
            p
            for p in self._read.get((context.run_id, context.step_key), [])
            if p.relative_to(home).parts[0] in parents
        ]
        inputs = input_versions(home, [*read, *extra])
        code = node.code_version
        return data_version(table_name(context), code, values, inputs)

    def handle_output(self, context: OutputContext, obj: pl.DataFrame) -> None:
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(
                f"asset {table_name(context)!r} must return a polars DataFrame, got {type(obj).__name__}"
            )
        key = context.asset_partition_key if context.has_asset_partitions else None
        pdef = context.asset_partitions_def if context.has_asset_partitions else None
        home, table = kcal_home(self.home or None), table_name(context)
        dims = partition_dims(pdef, key)
        path = partition_path(home, table, dims)
        first_file = not table_has_data(home, table)
        version = self._version(context, home, dims)
        changed = write_parquet_atomic(obj, path, metadata={DATA_VERSION_KEY: version})
        if table in CHECKPOINTED_TABLES:
            # Only now, the final file written, flushed and renamed, are the checkpoints redundant.
            discard_partition(home, table, dims)
        if first_file:
            # DuckDB cannot create a view over a glob that matches nothing, so a table's view
            # appears with its first file; later partitions are picked up by the glob itself.
            refresh_views(home)
        # Dagster's data version of the materialization is kcal's: a rerun that gives the same file
        # keeps it, so the automation (which follows data versions) does not re-run what reads it.
        context.step_context.set_data_version(context.asset_key, DataVersion(version))
        meta = {"path": str(path), "rows": obj.height, "file_changed": changed, "kcal_data_version": version}
        if "relation" in dims:
            meta["relation"] = relation_label(dims["relation"])
        context.add_output_metadata(meta)

    def load_input(self, context: InputContext) -> pl.DataFrame:
        home = kcal_home(self.home or None)
        step = context.step_context
        read = self._read.setdefault((step.run_id, step.step.key), [])
        options = context.definition_metadata or {}
        columns, where, lazy = options.get("columns"), options.get("where"), options.get("lazy", False)
        if not context.has_asset_partitions:
            read.append(partition_path(home, table_name(context)))
            return read_partitions(home, table_name(context), [{}], columns)
        pdef, table = context.asset_partitions_def, table_name(context)
        keys = sorted(context.asset_partition_keys)
        dims = [partition_dims(pdef, k) for k in keys]
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
                keys = [k for k, d in zip(keys, dims, strict=True) if d in present]
                dims = present
        read.extend(partition_path(home, table, d) for d in dims)
        if lazy:
            return {k: scan_partition(home, table, d, columns) for k, d in zip(keys, dims, strict=True)}
        return read_partitions(home, table, dims, columns, where)


def scan_partition(
    home: Path, table: str, dims: dict[str, str], columns: list[str] | None = None
) -> pl.LazyFrame:
    """One partition file as a lazy scan (only `columns` of it, those the file has, when given)."""
    path = partition_path(home, table, dims)
    if upgrade_file(path, table):  # an older form in a read-only store: upgraded in memory
        scan = upgrade_frame(table, pl.read_parquet(path)).lazy()
    else:
        scan = pl.scan_parquet(path)
    if columns is not None:
        present = scan.collect_schema()
        scan = scan.select([c for c in columns if c in present])
    return scan
