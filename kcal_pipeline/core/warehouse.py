"""DuckDB views over the Parquet tables, created from the project's sql/ files.

Views read the hive tree with a glob, so new partitions show up without recreating anything; a
view is (re)created only for tables that already have files, since DuckDB refuses a glob that
matches nothing.

The views hold the store's absolute path with its glob characters escaped (DuckDB resolves a
relative path against the process's working directory, not against the database file). The file
records what its views were made for (kcal_meta.views: the home and a hash of the view
statements), and every read-only connection checks that first: a store that was copied or moved,
or whose tables or view files changed, gets its views recreated before it is read, so it never
reads another folder's files.

`query` is the read-only door of `kcal sql`: one SELECT (or EXPLAIN of one), every other statement
refused by its type, on a connection that may open files only inside KCAL_HOME. The report
queries (sql/queries/<name>.sql, `kcal sql --query NAME`) are plain SELECTs over the views, each
opening with a one-line description (`kcal sql --list`).
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import NoReturn

import duckdb
from filelock import FileLock

from kcal_pipeline.core.filesystem_errors import FULL, storage_failure
from kcal_pipeline.core.paths import duckdb_path, repo_sql_dir
from kcal_pipeline.core.storage import existing_tables, store_file_hint, upgrade_store

TABLE_VIEW = "_table.sql"
# The macros the views and report queries call (e.g. full_answer_space), created before the views.
MACROS = "_macros.sql"
VIEWS_LOCK = ".views.lock"  # beside kcal.duckdb: one process at a time rewrites the views
# Views built on other views, created after the table views they read and in this order (a view
# may read the ones before it); each with the tables it needs.
DERIVED_VIEWS = {
    "headline_estimates": ("estimates", "templates"),
    "headline_reductions": ("metrics", "estimator_catalog"),
    "headline_metrics": ("metrics", "estimator_catalog"),  # reads headline_reductions
}
# Where the file records what its views were made for (not a table of results).
META_TABLE = "kcal_meta.views"
# DuckDB's glob characters; each is escaped as a bracket that holds only itself.
GLOB_CHARS = "[*?"
# DuckDB cuts a database path at '?' (its WAL lands elsewhere) and reads '\' as a separator.
NO_DATABASE_CHARS = "?\\"
WRITABLE_SESSION = (
    "for a writable session open KCAL_HOME/kcal.duckdb with the duckdb CLI or duckdb.connect() "
    "(README, 'Using it')"
)
# A report query's first line: `-- <what it answers>` (kcal sql --list prints the text).
_DESCRIPTION = re.compile(r"--[ \t]*(?P<text>\S.*)")
_MISSING_TABLE = re.compile(r"Table with name (?P<table>\w+) does not exist")
_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?P<inner>.*)", re.IGNORECASE | re.DOTALL)


class RefusedQuery(ValueError):
    """A query the read-only door does not run; the message is one line."""


def sql_literal(text: str) -> str:
    """A single-quoted SQL string literal; the only way a path enters SQL text."""
    if "\x00" in text:
        raise ValueError("NUL byte in SQL literal")
    return "'" + text.replace("'", "''") + "'"


def glob_escape(path: str) -> str:
    """A path as a DuckDB glob that matches only itself: `store[1]` -> `store[[]1]`."""
    return "".join(f"[{c}]" if c in GLOB_CHARS else c for c in path)


def view_sql(sql_dir: Path, table: str, home: Path) -> str:
    """The view of one table: its own sql/views/<table>.sql if there is one, else the default."""
    own = sql_dir / "views" / f"{table}.sql"
    template = (own if own.exists() else sql_dir / "views" / TABLE_VIEW).read_text("utf-8")
    root = sql_literal(glob_escape(str(Path(home).absolute() / table)))
    return template.replace("{view}", table).replace("{root}", root)


def _view_statements(home: Path, sql_dir: Path) -> tuple[list[str], list[str]]:
    """(view names, their CREATE statements) for the tables of `home` that have data; the
    statements open with the macros' (sql/views/_macros.sql) where there is any."""
    tables = existing_tables(home)
    derived = [v for v, needs in DERIVED_VIEWS.items() if set(needs) <= set(tables)]
    statements = [(sql_dir / "views" / MACROS).read_text("utf-8")] if tables else []
    statements += [view_sql(sql_dir, table, home) for table in tables]
    statements += [(sql_dir / "views" / f"{view}.sql").read_text("utf-8") for view in derived]
    return tables + derived, statements


def _fingerprint(statements: list[str]) -> str:
    return hashlib.sha256("\n;\n".join(statements).encode("utf-8")).hexdigest()


def _database(home: Path) -> Path:
    """KCAL_HOME/kcal.duckdb, refused clearly where DuckDB cannot keep a database."""
    bad = sorted({c for c in str(home) if c in NO_DATABASE_CHARS})
    if bad:
        raise ValueError(
            f"KCAL_HOME {home} cannot hold a DuckDB database: its path contains "
            f"{' and '.join(repr(c) for c in bad)}; use a folder whose path has no '?' or '\\'"
        )
    return duckdb_path(home)


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
    """Create or replace the view of every table that has data, and record what they were made
    for (one transaction); returns the view names."""
    home = Path(home).absolute()
    upgrade_store(home)  # a view reads every file: all of one form (core/store_upgrades.py)
    path = _database(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    # DuckDB lets one process write its file: partition writers on several workers (the Celery
    # path, kcal_pipeline/core/partition_lock.py) that each store a table's first file take turns,
    # and each lists the tables inside the lock, so the last one's views include the other's table.
    with FileLock(path.with_name(VIEWS_LOCK)):
        names, statements = _view_statements(home, sql_dir or repo_sql_dir())
        _write_views(path, home, statements)
    return names


def _write_views(path: Path, home: Path, statements: list[str]) -> None:
    con = _connect(path, read_only=False)
    try:
        con.execute("BEGIN TRANSACTION")
        for statement in statements:
            try:
                con.execute(statement)
            except duckdb.Error as exc:  # a view reads every file's schema: a bad one fails here
                _raise_with_hint(home, exc)
        con.execute("CREATE SCHEMA IF NOT EXISTS kcal_meta")
        con.execute(
            f"CREATE OR REPLACE TABLE {META_TABLE} AS SELECT "
            f"{sql_literal(str(home))} AS home, {sql_literal(_fingerprint(statements))} AS fingerprint"
        )
        con.execute("COMMIT")
    finally:
        con.close()


def _recorded_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        row = con.execute(f"SELECT fingerprint FROM {META_TABLE}").fetchone()
    except duckdb.CatalogException:  # a file made before views were recorded
        return None
    return row[0] if row else None


def _confine(con: duckdb.DuckDBPyConnection, home: Path) -> None:
    """Files only inside KCAL_HOME, then no more configuration changes on this connection.

    DuckDB checks allowed_directories against the path as written, so the glob-escaped home of
    the views is allowed too (as a glob it matches only the home; `..` is refused either way).
    """
    allowed = dict.fromkeys([str(home), glob_escape(str(home))])
    con.execute(f"SET allowed_directories = [{', '.join(sql_literal(d) for d in allowed)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def connect_readonly(home: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection on this store's views that may open files only inside KCAL_HOME.

    Views made for another place (a copied or moved store) or for other tables or view files are
    recreated first (a short write), so they read this store's files. Then file access is limited
    to KCAL_HOME and the configuration locked: no /etc/passwd, no extension, no lifting the limits.
    """
    home = Path(home).absolute()
    path = _database(home)
    _, statements = _view_statements(home, repo_sql_dir())
    if not path.exists():
        if not statements:
            raise FileNotFoundError(
                f"no DuckDB file at {path}: run `kcal demo` (or materialize assets) first"
            )
        if not _refreshed(home):
            return _views_in_memory(home, statements)
    con = _connect(path, read_only=True)
    try:
        if _recorded_fingerprint(con) != _fingerprint(statements):
            con.close()
            if not _refreshed(home):
                return _views_in_memory(home, statements)
            con = _connect(path, read_only=True)
        _confine(con, home)
    except BaseException:
        con.close()
        raise
    return con


def _refreshed(home: Path) -> bool:
    """refresh_views, or False where the file system refuses the write (a read-only store, or one
    this user may not write): such a store is still read, through views made in memory."""
    try:
        refresh_views(home)
    except (OSError, duckdb.Error) as exc:
        refused = storage_failure(exc, home)
        if refused is None or refused.kind == FULL:
            raise
        return False
    return True


def _views_in_memory(home: Path, statements: list[str]) -> duckdb.DuckDBPyConnection:
    """The store's views in an in-memory database, confined like the file's (no write anywhere)."""
    con = duckdb.connect(":memory:")
    try:
        for statement in statements:
            try:
                con.execute(statement)
            except duckdb.Error as exc:
                _raise_with_hint(home, exc)
        _confine(con, home)
    except BaseException:
        con.close()
        raise
    return con


def _statement_type(statement) -> str:
    try:
        return statement.type.name
    except ValueError:  # a type this duckdb's Python enum has no name for (e.g. UPDATE EXTENSIONS)
        return "UNKNOWN"


def _explains_a_select(text: str) -> bool:
    """EXPLAIN [ANALYZE] <one SELECT>; anything else (EXPLAIN ANALYZE runs its statement) is not."""
    match = _EXPLAIN.fullmatch(text)
    if match is None:
        return False
    try:
        inner = duckdb.extract_statements(match["inner"])
    except duckdb.ParserException:  # e.g. EXPLAIN (FORMAT json) …: refused as an EXPLAIN
        return False
    return len(inner) == 1 and _statement_type(inner[0]) == "SELECT"


def check_reading(sql: str) -> None:
    """Raise RefusedQuery unless `sql` is exactly one SELECT, or EXPLAIN [ANALYZE] of one
    (DESCRIBE, SHOW, SUMMARIZE and FROM-first queries are SELECTs). Invalid SQL raises DuckDB's
    ParserException."""
    statements = duckdb.extract_statements(sql)
    if not statements:
        raise RefusedQuery("empty query: give one SELECT statement")
    if len(statements) > 1:
        raise RefusedQuery(f"{len(statements)} statements given: kcal sql runs one SELECT at a time")
    kind = _statement_type(statements[0])
    if kind == "SELECT" or (kind == "EXPLAIN" and _explains_a_select(statements[0].query)):
        return
    why = " (a PIVOT without IN (...) is several statements: list its values)" if kind == "MULTI" else ""
    raise RefusedQuery(
        f"kcal sql is read-only: {kind} statements are refused{why}; it runs one SELECT "
        f"(or EXPLAIN SELECT) — {WRITABLE_SESSION}"
    )


def one_line(message: object) -> str:
    """A DuckDB error on one line: its text without the `LINE n:` excerpt and the caret under it."""
    kept, caret_next = [], False
    for line in str(message).splitlines():
        if line.startswith("LINE "):
            caret_next = True
            continue
        if caret_next:  # a hint may follow the caret on its line
            line, caret_next = line.lstrip(" ^"), False
        if line.strip():
            kept.append(line.strip())
    return " ".join(kept)


def query(home: Path, sql: str):
    """Run one reading statement (check_reading) on a read-only connection confined to KCAL_HOME;
    returns (column names, rows). The project's report queries pass the same check: each is one
    SELECT, so the DuckDB CLI and any client run them as they are."""
    check_reading(sql)
    con = connect_readonly(home)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    except duckdb.Error as exc:
        _raise_with_hint(home, exc)
    finally:
        con.close()


def _raise_with_hint(home: Path, exc: duckdb.Error) -> NoReturn:
    """Re-raise a DuckDB error with what to do about it: one that names a Parquet file of the store
    (truncated, corrupted) gets how to rebuild that file; a table the store has no files of yet (a
    store made before the table existed, e.g. the catalogs, or a stage not run) gets how to make it."""
    for path in re.findall(r"['\"]([^'\"]+\.parquet)['\"]", str(exc)):
        hint = store_file_hint(home, path)
        if hint:
            raise type(exc)(f"{exc}; {hint}") from exc
    missing = _MISSING_TABLE.search(str(exc))
    if isinstance(exc, duckdb.CatalogException) and missing and _read_by_reports(missing["table"]):
        raise type(exc)(
            f"{exc}; this store has no {missing['table']} table yet: `kcal demo` (with this KCAL_HOME) "
            "materializes what is missing, or materialize it in the UI"
        ) from exc
    raise exc


def _read_by_reports(table: str) -> bool:
    """A table the project's report queries or views read (not a name mistyped in a query)."""
    word = re.compile(rf"\b{re.escape(table)}\b")
    return any(word.search(f.read_text("utf-8")) for f in repo_sql_dir().glob("*/*.sql"))


def named_queries(sql_dir: Path | None = None) -> list[str]:
    """The names of the project's report queries (sql/queries/*.sql), sorted."""
    return sorted(p.stem for p in ((sql_dir or repo_sql_dir()) / "queries").glob("*.sql"))


def query_description(path: Path) -> str:
    """The line a report query opens with, `-- <what it answers>`: what `kcal sql --list` prints.
    A file without it is an error naming the file, so no query is listed without a description."""
    first = path.read_text("utf-8").split("\n", 1)[0].strip()
    match = _DESCRIPTION.fullmatch(first)
    if match is None:
        raise ValueError(
            f"{path}: a report query's first line must be '-- <what it answers, one line>', got {first!r}"
        )
    return match["text"].strip()


def query_descriptions(sql_dir: Path | None = None) -> dict[str, str]:
    """Every report query's name and one-line description, by name."""
    folder = (sql_dir or repo_sql_dir()) / "queries"
    return {name: query_description(folder / f"{name}.sql") for name in named_queries(sql_dir)}


def named_query(name: str, sql_dir: Path | None = None) -> str:
    """A report query from sql/queries/<name>.sql; an unknown name is an error listing the known
    ones (a name is never read as a path)."""
    sql_dir = sql_dir or repo_sql_dir()
    known = named_queries(sql_dir)
    if name not in known:
        raise ValueError(f"no query named {name!r}; known: {', '.join(known)}")
    path = sql_dir / "queries" / f"{name}.sql"
    query_description(path)
    return path.read_text("utf-8")
