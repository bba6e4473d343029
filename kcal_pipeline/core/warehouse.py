"""DuckDB views over the Parquet tables, created from the project's sql/ files.

Views read the hive tree with a glob, so new partitions show up without recreating anything; a
view is (re)created only for tables that already have files, since DuckDB refuses a glob that
matches nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from kcal_pipeline.core.paths import duckdb_path, repo_sql_dir
from kcal_pipeline.core.storage import existing_tables

TABLE_VIEW = "_table.sql"
# Views built on other views, created after the table views they read.
DERIVED_VIEWS = {"headline_estimates": ("estimates", "templates")}


def sql_literal(text: str) -> str:
    """A single-quoted SQL string literal; the only way a path enters SQL text."""
    if "\x00" in text:
        raise ValueError("NUL byte in SQL literal")
    return "'" + text.replace("'", "''") + "'"


def view_sql(sql_dir: Path, table: str, home: Path) -> str:
    """The view of one table: its own sql/views/<table>.sql if there is one, else the default."""
    own = sql_dir / "views" / f"{table}.sql"
    template = (own if own.exists() else sql_dir / "views" / TABLE_VIEW).read_text("utf-8")
    return template.replace("{view}", table).replace("{root}", sql_literal(str(Path(home) / table)))


def _connect(path: Path, read_only: bool, attempts: int = 20) -> duckdb.DuckDBPyConnection:
    """DuckDB allows one writer process; wait a little rather than fail when a run holds the lock."""
    for i in range(attempts):
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or i == attempts - 1:
                raise
            time.sleep(0.25 * (i + 1))
    raise AssertionError("unreachable")


def refresh_views(home: Path, sql_dir: Path | None = None) -> list[str]:
    """Create or replace the view of every table that has data; returns the view names."""
    sql_dir = sql_dir or repo_sql_dir()
    tables = existing_tables(home)
    derived = [v for v, needs in DERIVED_VIEWS.items() if set(needs) <= set(tables)]
    path = duckdb_path(Path(home))
    path.parent.mkdir(parents=True, exist_ok=True)
    con = _connect(path, read_only=False)
    try:
        for table in tables:
            con.execute(view_sql(sql_dir, table, home))
        for view in derived:
            con.execute((sql_dir / "views" / f"{view}.sql").read_text("utf-8"))
    finally:
        con.close()
    return tables + derived


def connect_readonly(home: Path) -> duckdb.DuckDBPyConnection:
    path = duckdb_path(Path(home))
    if not path.exists():
        raise FileNotFoundError(f"no DuckDB file at {path}: run `kcal demo` (or materialize assets) first")
    return _connect(path, read_only=True)


def query(home: Path, sql: str):
    """Run one statement on a read-only connection; returns (column names, rows)."""
    con = connect_readonly(home)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    finally:
        con.close()


def named_query(name: str, sql_dir: Path | None = None) -> str:
    """A report query from sql/queries/<name>.sql."""
    sql_dir = sql_dir or repo_sql_dir()
    return (sql_dir / "queries" / f"{name}.sql").read_text("utf-8")
