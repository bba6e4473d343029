"""`kcal sql` is a door for reading results (issue 11, point 4): it runs one SELECT (or EXPLAIN of a
SELECT) and refuses every other statement with a one-line error naming its type; it reads files
only inside KCAL_HOME; an empty, multiple or invalid query is a one-line error, never a traceback.
Nothing in the store changes, whatever is typed."""

import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.warehouse import refresh_views
from tests.conftest import run_kcal

SCORES = {"model": "lab--m", "relation": "P36"}


@pytest.fixture
def store(tmp_path):
    """A small store as the pipeline leaves it: Parquet partitions plus the DuckDB views."""
    home = tmp_path / "home"
    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": ["capital"]}), partition_path(home, "relations")
    )
    write_parquet_atomic(
        pl.DataFrame({"statement_id": ["a", "b", "c"], "ll_sum": [-1.0, -2.0, -3.0]}),
        partition_path(home, "statement_scores", SCORES),
    )
    refresh_views(home)
    (tmp_path / "secret.csv").write_text("name,password\nroot,hunter2\n")
    return home


def snapshot(home):
    """Every file of the store with its bytes (the DuckDB file included: nothing may change it)."""
    return {p: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.fixture
def kcal(store):
    """`kcal --home HOME sql QUERY` in this process (run_kcal): (exit code, stdout, stderr)."""

    def run(query, *flags):
        out = run_kcal(store, "sql", query, *flags)
        return out.returncode, out.stdout, out.stderr

    return run


def one_line_error(code, out, err):
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kcal: error: "), err
    return lines[0]


def test_reading_statements_run_and_a_copy_does_not(kcal, store):
    code, out, err = kcal("select label from relations", "--csv")
    assert code == 0 and out.splitlines() == ["label", "capital"], err
    code, out, err = kcal("select label from relations")  # the table goes to the current stdout
    assert code == 0 and [line.rstrip() for line in out.splitlines()] == ["label", "-------", "capital"], err
    code, out, _ = kcal("select count(*) as n, min(model) as model from statement_scores", "--csv")
    assert code == 0 and out.splitlines() == ["n,model", "3,lab--m"]
    code, out, _ = kcal("EXPLAIN SELECT count(*) FROM statement_scores", "--csv")
    assert code == 0 and "physical_plan" in out
    code, out, _ = kcal("EXPLAIN ANALYZE SELECT count(*) FROM statement_scores", "--csv")
    assert code == 0 and "analyzed_plan" in out
    code, out, _ = kcal("describe relations", "--csv")  # DESCRIBE, SHOW, SUMMARIZE are SELECTs
    assert code == 0 and "label" in out
    before = snapshot(store)
    line = one_line_error(*kcal(f"COPY (SELECT 1 AS x) TO '{store}/relations/part.parquet' (FORMAT parquet)"))
    assert "COPY statement" in line and snapshot(store) == before
    code, out, _ = kcal("select label from relations", "--csv")
    assert code == 0 and out.splitlines() == ["label", "capital"]


@pytest.mark.parametrize(
    "sql, kind",
    [
        ("COPY (SELECT 1 AS x) TO '{home}/relations/part.parquet' (FORMAT parquet)", "COPY"),
        ("COPY relations TO '{tmp}/out.csv'", "COPY"),
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/out.csv'", "EXPLAIN"),
        ("EXPORT DATABASE '{tmp}/export'", "EXPORT"),
        ("ATTACH '{tmp}/other.duckdb' AS other", "ATTACH"),
        ("DETACH kcal", "DETACH"),
        ("SET enable_external_access = true", "SET"),
        ("RESET threads", "SET"),
        ("USE memory", "SET"),
        ("LOAD httpfs", "LOAD"),
        ("INSTALL httpfs", "LOAD"),
        ("PRAGMA database_list", "PRAGMA"),
        ("CALL pragma_version()", "CALL"),
        ("CHECKPOINT", "CALL"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("CREATE OR REPLACE VIEW relations AS SELECT 1 AS hacked", "CREATE"),
        ("DROP VIEW relations", "DROP"),
        ("INSERT INTO relations VALUES ('P1', 'x')", "INSERT"),
        ("UPDATE relations SET label = 'x'", "UPDATE"),
        ("DELETE FROM relations", "DELETE"),
        ("ALTER VIEW relations RENAME TO r", "ALTER"),
        ("VACUUM", "VACUUM"),
        ("BEGIN TRANSACTION", "TRANSACTION"),
        ("PREPARE p AS SELECT 1", "PREPARE"),
        ("PIVOT relations ON label", "MULTI"),
    ],
)
def test_every_other_statement_is_refused_with_its_type(kcal, store, tmp_path, sql, kind):
    before = snapshot(store)
    line = one_line_error(*kcal(sql.format(home=store, tmp=tmp_path)))
    assert f"{kind} statement" in line and "read-only" in line, line
    assert snapshot(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "secret.csv"]  # nothing written


@pytest.mark.parametrize(
    "sql",
    [
        "select * from read_csv('{tmp}/secret.csv')",
        "select * from read_text('/etc/passwd')",
        "select * from read_parquet('{home}/../secret.csv')",
        "select * from glob('{tmp}/*')",
        "select * from read_blob('{tmp}/secret.csv')",
    ],
)
def test_files_outside_the_store_cannot_be_read(kcal, store, tmp_path, sql):
    inside = f"select count(*) as n from read_parquet('{store}/statement_scores/**/*.parquet')"
    code, out, err = kcal(inside, "--csv")
    assert code == 0 and out.splitlines() == ["n", "3"], err
    line = one_line_error(*kcal(sql.format(home=store, tmp=tmp_path)))
    assert "hunter2" not in line and "root:" not in line
    assert "Permission Error" in line, line


@pytest.mark.parametrize(
    "sql, needle",
    [
        ("", "empty query"),
        ("  ;  ", "empty query"),
        ("-- only a comment", "empty query"),
        ("select 1; select 2", "2 statements"),
        ("select 1; copy relations to 'x.csv'", "2 statements"),
        ("selec 1", 'syntax error at or near "selec"'),
        ("select * from no_such_table", "no_such_table"),
        ("select 'abc'::int", "Conversion Error"),
    ],
)
def test_empty_several_or_invalid_queries_get_one_line(kcal, sql, needle):
    line = one_line_error(*kcal(sql))
    assert needle in line, line


def test_a_report_on_a_store_without_its_tables_says_how_to_make_them(kcal, store):
    """A store made before a table existed (the catalogs) or before a stage ran: the report's error
    names the table and the command that makes it; a mistyped table name gets no such advice."""
    out = run_kcal(store, "sql", "--query", "leaderboard")
    line = one_line_error(out.returncode, out.stdout, out.stderr)
    assert "this store has no " in line and "`kcal demo`" in line, line
    line = one_line_error(*kcal("select * from metric_catalog"))
    assert "this store has no metric_catalog table yet" in line, line
    assert "this store has no" not in one_line_error(*kcal("select * from no_such_table"))


def test_the_installed_command_refuses_copy(store, tmp_path):
    before = snapshot(store)
    out = run_kcal(store, "sql", f"COPY relations TO '{store}/relations/part.parquet' (FORMAT parquet)")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "kcal: error: kcal sql is read-only: COPY statements are refused; it runs one SELECT "
        "(or EXPLAIN SELECT) — for a writable session open KCAL_HOME/kcal.duckdb with the duckdb "
        "CLI or duckdb.connect() (README, 'Using it')"
    )
    assert snapshot(store) == before
