"""Parquet tables in hive layout under KCAL_HOME, written atomically.

`<table>/model=<key>/relation=<id>/part.parquet`: DuckDB and polars read the partition columns
straight from the path, and one partition can be replaced without touching the others.
"""

from __future__ import annotations

import filecmp
import os
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from kcal_pipeline.core.keys import check_relation_id
from kcal_pipeline.core.store_upgrades import needs_upgrade, upgrade_frame, upgraded_tables

PART_FILE = "part.parquet"
# Fixed order of partition dimensions in paths, whatever order a caller names them in.
DIMENSIONS = ("model", "relation")
_TABLE_OK = set("abcdefghijklmnopqrstuvwxyz0123456789_")


def _check_table(table: str) -> str:
    if not table or not set(table) <= _TABLE_OK:
        raise ValueError(f"invalid table name {table!r}: use lower-case letters, digits and '_'")
    return table


def _check_partition_value(dim: str, value: str) -> str:
    # Model keys come from keys.model_key and relation ids from the catalog; checking again here
    # means no caller can smuggle a path separator into the tree.
    if dim == "relation":
        return check_relation_id(value, "relation partition")
    if not value or "/" in value or "\\" in value or value.startswith(".") or "=" in value:
        raise ValueError(f"invalid {dim} partition {value!r}: must be one plain path segment")
    return value


def partition_path(home: Path, table: str, partition: Mapping[str, str] | None = None) -> Path:
    """The file of one partition; `partition` maps dimension ('model', 'relation') to value."""
    partition = dict(partition or {})
    unknown = set(partition) - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown partition dimension(s) {sorted(unknown)} for table {table!r}")
    path = Path(home) / _check_table(table)
    for dim in DIMENSIONS:
        if dim in partition:
            path = path / f"{dim}={_check_partition_value(dim, partition[dim])}"
    return path / PART_FILE


def existing_partitions(home: Path, table: str, fixed: Mapping[str, str] | None = None) -> list[Path]:
    """The files of `table` whose partition has the values in `fixed` (e.g. every file of one
    model), sorted; nothing when the table has none."""
    fixed = dict(fixed or {})
    path = partition_path(home, table, fixed).parent  # validates the table, dimensions and values
    return sorted(path.rglob(PART_FILE))


def fsync_dir(directory: Path) -> None:
    """Flush a folder's entries, so a rename into it survives a crash or power cut (POSIX)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet_atomic(frame: pl.DataFrame, path: Path, metadata: dict[str, str] | None = None) -> bool:
    """Write via a temp file and rename; an unchanged file is left untouched.

    Returns True if the file changed. Either the old file or the complete new one is on disk at
    every moment, so a crash or a killed run never leaves half a table behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        frame.write_parquet(tmp, compression="zstd", statistics=True, metadata=metadata)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if path.exists() and filecmp.cmp(tmp, path, shallow=False):
            tmp.unlink()
            return False
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return True
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """Write bytes beside the target and os.replace it: readers (the report server too) never see
    a half-written file.

    mkstemp creates 0600 files; `mode` widens that so e.g. a web server can serve a report.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> Path:
    """write_bytes_atomic of UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"), mode)


class BadFileError(ValueError):
    """A stored or imported file cannot be read; the message names it and says how to rebuild it."""


# Tables `kcal demo` does not build; how each one is rebuilt instead.
_REBUILT_BY = {"generated_templates": "`kcal dataset paraphrase`"}


def rebuild_hint(table: str, partition: Mapping[str, str] | None = None) -> str:
    """How to rebuild one partition of a table: delete its file and re-materialize it."""
    dims = {d: partition[d] for d in DIMENSIONS if d in (partition or {})}
    label = f" [{', '.join(f'{d}={v}' for d, v in dims.items())}]" if dims else ""
    flags = "".join(f" --{d} {v}" for d, v in dims.items())
    command = _REBUILT_BY.get(table, f"`kcal demo{flags}`")
    return (
        f"delete it and re-materialize {table}{label} ({command} with the settings of the run "
        "that made it, or materialize it in the Dagster UI)"
    )


def store_file_hint(home: Path, path: str | Path) -> str | None:
    """rebuild_hint for a Parquet file of the store at `path`, None for any other path."""
    try:
        parts = Path(path).resolve().relative_to(Path(home).resolve()).parts
    except (OSError, ValueError):
        return None
    if len(parts) < 2 or parts[-1] != PART_FILE or not set(parts[0]) <= _TABLE_OK:
        return None
    dims = dict(p.split("=", 1) for p in parts[1:-1] if "=" in p)
    if len(dims) != len(parts) - 2 or not set(dims) <= set(DIMENSIONS):
        return None
    return rebuild_hint(parts[0], dims)


def read_parquet_named(
    path: Path, rebuild: str, columns: Sequence[str] | None = None, where: Mapping[str, object] | None = None
) -> pl.DataFrame:
    """pl.read_parquet, except that a truncated or corrupted file is a BadFileError naming the file
    and saying how to rebuild it (`rebuild`). With `columns`, only those of them the file has: a
    reader that needs a few columns of a wide table reads only them, and a column older files
    lack is left for the reader to report (a concat fills it with nulls). With `where` (column →
    literal value), only the rows equal to every value: the predicate is pushed into the file's
    scan, so a reader of a few rows of a large table never holds the rest."""
    try:
        if columns is None and where is None:
            return pl.read_parquet(path)
        present = pl.read_parquet_schema(path)
        scan = pl.scan_parquet(path)
        if where is not None:
            scan = scan.filter(equal_to(where, present, str(path)))
        if columns is not None:
            scan = scan.select([c for c in columns if c in present])
        return scan.collect()
    except (OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadFileError(f"{path}: not a readable Parquet file ({reason}); {rebuild}") from exc


def equal_to(where: Mapping[str, object], schema: Mapping[str, pl.DataType], what: str) -> pl.Expr:
    """The predicate `column == value` for every item of `where`: literal values only (str, int,
    float, bool), on columns the file has; anything else is an error naming it."""
    if not isinstance(where, Mapping) or not where:
        raise ValueError(
            f"{what}: input filter 'where' must be a non-empty mapping column → value, got {where!r}"
        )
    for column, value in where.items():
        if column not in schema:
            raise ValueError(
                f"{what}: input filter on column {column!r}, which the file lacks (has {list(schema)})"
            )
        if not isinstance(value, bool | int | float | str):
            raise ValueError(
                f"{what}: input filter {column!r} = {value!r}: only str, int, float or bool literals"
            )
        if not _comparable(value, schema[column]):
            raise ValueError(
                f"{what}: input filter {column!r} = {value!r}: a {type(value).__name__} cannot equal "
                f"the column's {schema[column]} values"
            )
    return pl.all_horizontal([pl.col(c) == pl.lit(v) for c, v in where.items()])


def _comparable(value: bool | int | float | str, dtype: pl.DataType) -> bool:
    if isinstance(value, bool):
        return dtype == pl.Boolean
    if isinstance(value, int | float):
        return dtype.is_numeric()
    return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)


def read_partition(
    home: Path,
    table: str,
    partition: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    path = partition_path(home, table, partition)
    if not path.exists():
        at = ", ".join(f"{k}={v}" for k, v in (partition or {}).items()) or "unpartitioned"
        raise FileNotFoundError(f"table {table!r} has no data for partition ({at}): {path} is missing")
    rebuild = rebuild_hint(table, partition)
    if not upgrade_file(path, table):
        return read_parquet_named(path, rebuild, columns, where)
    # A file of an older form that cannot be rewritten (a read-only store) is upgraded in memory.
    frame = upgrade_frame(table, read_parquet_named(path, rebuild))
    if where is not None:
        frame = frame.filter(equal_to(where, frame.schema, str(path)))
    return frame if columns is None else frame.select([c for c in columns if c in frame.columns])


def upgrade_file(path: Path, table: str) -> bool:
    """Rewrite one stored file of an older form in the current one (core/store_upgrades.py),
    keeping its key-value metadata, its data version among them. Returns True when the file is
    still of the older form: it could not be rewritten (read-only store, no permission).

    A writer that replaces the file while it is being upgraded can lose its write to the upgrade's
    rename; the file then carries the older data version, so the next run rebuilds it."""
    if table not in upgraded_tables():
        return False
    try:
        if not needs_upgrade(table, pl.read_parquet_schema(path)):
            return False
    except (OSError, pl.exceptions.PolarsError):
        return False  # read_parquet_named reports an unreadable file, naming it and the rebuild
    frame = upgrade_frame(table, pl.read_parquet(path))
    metadata = pq.read_metadata(path).metadata or {}
    try:
        write_parquet_atomic(
            frame,
            path,
            metadata={k.decode(): v.decode() for k, v in metadata.items() if not k.startswith(b"ARROW:")},
        )
    except OSError:
        return True
    return False


def upgrade_store(home: Path) -> list[Path]:
    """Upgrade every stored file of an older form; returns those rewritten (none in a read-only
    store, whose readers upgrade in memory)."""
    done = []
    for table in upgraded_tables():
        for path in existing_partitions(Path(home), table):
            try:
                older = needs_upgrade(table, pl.read_parquet_schema(path))
            except (OSError, pl.exceptions.PolarsError):
                continue
            if older and not upgrade_file(path, table):
                done.append(path)
    return done


def read_partitions(
    home: Path,
    table: str,
    partitions: Iterable[Mapping[str, str]],
    columns: Sequence[str] | None = None,
    where: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    """Concatenate several partitions (e.g. every relation of one model), in the order given;
    with `columns`, only those, with `where`, only the rows equal to its values (see
    read_parquet_named: one file read at a time, the filter pushed into each)."""
    frames = [read_partition(home, table, p, columns, where) for p in partitions]
    if not frames:
        raise ValueError(f"no partitions of table {table!r} requested")
    return pl.concat(frames, how="diagonal_relaxed")


def table_has_data(home: Path, table: str) -> bool:
    return any((Path(home) / _check_table(table)).rglob(PART_FILE))


def existing_tables(home: Path) -> list[str]:
    """Tables that have at least one Parquet file (these get DuckDB views)."""
    home = Path(home)
    if not home.exists():
        return []
    return sorted(
        p.name
        for p in home.iterdir()
        if p.is_dir() and set(p.name) <= _TABLE_OK and table_has_data(home, p.name)
    )
