"""A store can be copied or moved (issue 11, point 8): the DuckDB views follow the KCAL_HOME they are
opened in, never the folder the store was built in, and a home whose path holds glob characters
(`[1]`, `*`) reads its own files, not a sibling's that the glob would match."""

import shutil

import duckdb
import polars as pl
import pytest

from assets.cli import main
from kcal_pipeline.core.paths import duckdb_path
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.warehouse import connect_readonly, refresh_views

SCORES = {"model": "lab--m", "relation": "P36"}


def build(home, label="capital", n_scores=3):
    """A store as the pipeline leaves it (same writer, same views), with its own values."""
    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": [label]}), partition_path(home, "relations")
    )
    write_parquet_atomic(
        pl.DataFrame({"statement_id": [f"s{i}" for i in range(n_scores)], "ll_sum": [-1.0] * n_scores}),
        partition_path(home, "statement_scores", SCORES),
    )
    refresh_views(home)
    return home


@pytest.fixture
def sql(monkeypatch, capsys):
    """`kcal --home HOME sql QUERY --csv` in this process: the rows, as lists of strings."""

    def run(home, query):
        monkeypatch.setenv("KCAL_HOME", str(home))  # main() sets it; monkeypatch restores it
        code = main(["--home", str(home), "sql", query, "--csv"])
        out = capsys.readouterr()
        assert code == 0 and "Traceback" not in out.err, out.err
        return [line.split(",") for line in out.out.splitlines()[1:]]

    return run


def test_a_copied_store_reads_the_copy_not_the_original(tmp_path, sql):
    original = build(tmp_path / "original")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    # Change the copy only: its views must show the copy's values.
    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": ["copied"]}), partition_path(copy, "relations")
    )
    assert sql(copy, "select label from relations") == [["copied"]]
    assert sql(original, "select label from relations") == [["capital"]]
    # Any DuckDB client opening the copy's file sees the copy's views from now on.
    with duckdb.connect(str(duckdb_path(copy)), read_only=True) as con:
        assert con.execute("select label from relations").fetchall() == [("copied",)]


def test_a_moved_store_still_reads_its_rows_when_the_original_is_gone(tmp_path, sql):
    original = build(tmp_path / "original", n_scores=5)
    moved = tmp_path / "moved"
    shutil.copytree(original, moved)
    shutil.rmtree(original)
    assert sql(moved, "select count(*) from statement_scores") == [["5"]]
    assert sql(moved, "select label from relations") == [["capital"]]
    write_parquet_atomic(  # a new partition in the moved store shows up through the glob
        pl.DataFrame({"statement_id": ["x"], "ll_sum": [-9.0]}),
        partition_path(moved, "statement_scores", {"model": "lab--m", "relation": "P30"}),
    )
    assert sql(moved, "select relation, count(*) from statement_scores group by all order by 1") == [
        ["P30", "1"],
        ["P36", "5"],
    ]


@pytest.mark.parametrize("name", ["store[1]", "st*re", "st[!x]re"])
def test_a_home_with_glob_characters_reads_its_own_files(tmp_path, sql, name):
    # Siblings the unescaped glob would match ("store1" for "store[1]", "stXre" for "st*re"):
    # their rows must never show up in this store's views.
    for sibling in ("store1", "stXre", "stre", "st!re", "stxre"):
        build(tmp_path / sibling, label=f"sibling {sibling}", n_scores=7)
    home = build(tmp_path / name, label="mine", n_scores=3)
    assert sql(home, "select label from relations") == [["mine"]]
    assert sql(home, "select count(*) from statement_scores") == [["3"]]


def test_a_home_with_glob_characters_works_without_a_sibling(tmp_path, sql):
    home = build(tmp_path / "store[1]")
    assert sql(home, "select count(*) from statement_scores") == [["3"]]


def test_a_home_duckdb_cannot_hold_is_refused_clearly(tmp_path):
    # DuckDB cuts a database path at '?' (its WAL goes elsewhere) and reads '\' as a separator.
    home = tmp_path / "what?"
    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": ["x"]}), partition_path(home, "relations")
    )
    with pytest.raises(ValueError, match=r"cannot hold a DuckDB database.*'\?'"):
        refresh_views(home)
    with pytest.raises(ValueError, match=r"cannot hold a DuckDB database.*'\?'"):
        connect_readonly(home)
