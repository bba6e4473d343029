"""Stores written by an older kcal: probe_instances files of the `subsample_*` form are rewritten
once into the current form, keeping their data version, so nothing reruns and SQL sees one spelling."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

import assets.runner as runner
from kcal_pipeline.core import storage
from kcal_pipeline.core.paths import duckdb_path
from kcal_pipeline.core.storage import partition_path, read_partition, write_parquet_atomic
from kcal_pipeline.core.store_upgrades import UPGRADES, needs_upgrade, upgrade_frame
from kcal_pipeline.core.versions import DATA_VERSION_KEY, stored_version
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.instances.variants import (
    ANSWER_SPACE_COLUMNS,
    answer_space_sweep,
    with_full_answer_space,
)
from tests.conftest import copy_facts_store

OLD_NAMES = {"answer_space_k": "subsample_k", "answer_space_draw": "subsample_draw",
             "answer_space_status": "subsample_status"}  # fmt: skip


def current(sweep: bool = True) -> pl.DataFrame:
    """probe_instances as the current code writes them: 3 instances of 5 options, with the
    option-count sweep (k = 3, 2 draws) or without."""
    ids = ["P36/Q1", "P36/Q2", "P36/Q3"]
    instances = pl.DataFrame(
        {
            "instance_id": ids,
            "gold_ids": [["Q10"], ["Q11"], ["Q12"]],
            "option_ids": [["Q10", "Q11", "Q12", "Q13", "Q14"]] * 3,
            "option_labels": [["a", "b", "c", "d", "e"]] * 3,
            "n_options": [5, 5, 5],
            "split": ["dev", "test", "test"],
        }
    )
    full = with_full_answer_space(instances)
    return pl.concat([full, answer_space_sweep(full, [3], draws=2, seed=7)]) if sweep else full


def older(frame: pl.DataFrame) -> pl.DataFrame:
    """The same rows as kcal wrote them before the columns were renamed: a store with the sweep had
    `subsample_*` columns, null on the full answer space; one without had none of the four."""
    if not (frame["answer_space_k"] > 0).any():
        return frame.drop(list(ANSWER_SPACE_COLUMNS))
    full = pl.col("answer_space_k") == 0
    return frame.with_columns(
        pl.when(~full).then(pl.col(c)).alias(c) for c in ("answer_space_k", "answer_space_draw")
    ).rename(OLD_NAMES)


def write_older(home, frame, version="v-old"):
    path = partition_path(home, "probe_instances", {"relation": "P36"})
    write_parquet_atomic(older(frame), path, metadata={DATA_VERSION_KEY: version})
    return path


@pytest.mark.parametrize("sweep", [True, False])
def test_an_older_file_is_read_in_the_current_form_and_rewritten_once_keeping_its_version(tmp_path, sweep):
    path = write_older(tmp_path, current(sweep))
    assert needs_upgrade("probe_instances", pl.read_parquet_schema(path))
    got = read_partition(tmp_path, "probe_instances", {"relation": "P36"})
    assert got.equals(current(sweep))
    assert pl.read_parquet(path).equals(current(sweep))  # rewritten on disk, the old names gone
    assert stored_version(path) == "v-old"  # same content, same data version: nothing reruns
    stat = path.stat()
    read_partition(tmp_path, "probe_instances", {"relation": "P36"})
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)


def test_a_current_file_is_left_alone(tmp_path):
    path = partition_path(tmp_path, "probe_instances", {"relation": "P36"})
    write_parquet_atomic(current(), path, metadata={DATA_VERSION_KEY: "v1"})
    stat = path.stat()
    assert not needs_upgrade("probe_instances", pl.read_parquet_schema(path))
    assert read_partition(tmp_path, "probe_instances", {"relation": "P36"}).equals(current())
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)


def test_a_store_that_cannot_be_written_is_upgraded_in_memory(tmp_path, monkeypatch):
    # Injected: root may write a read-only folder here, so the refusal is raised by hand.
    path = write_older(tmp_path, current())
    before = path.read_bytes()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(storage, "write_parquet_atomic", refuse)
    where = {"split": "test"}
    got = read_partition(
        tmp_path, "probe_instances", {"relation": "P36"}, ["instance_id", "answer_space_k"], where
    )
    want = current().filter(pl.col("split") == "test").select("instance_id", "answer_space_k")
    assert got.equals(want)
    assert path.read_bytes() == before


def test_refreshing_the_views_upgrades_every_file_so_sql_sees_one_spelling(tmp_path):
    write_older(tmp_path, current())
    write_parquet_atomic(
        older(current(sweep=False)).with_columns(pl.lit("P37/Q1").alias("instance_id")),
        partition_path(tmp_path, "probe_instances", {"relation": "P37"}),
    )
    refresh_views(tmp_path)
    con = duckdb.connect(str(duckdb_path(tmp_path)), read_only=True)
    try:
        columns = {row[0] for row in con.execute("DESCRIBE probe_instances").fetchall()}
        per_k = con.execute(
            "SELECT answer_space_k, count(*) FROM probe_instances GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    assert set(ANSWER_SPACE_COLUMNS) <= columns and not {"subsample_k", "subsample_draw"} & columns
    assert per_k == [(0, 6), (3, 6)]  # P36's 3 + P37's 3 full-space rows; P36's 2 draws × 3 copies


def test_every_upgrade_gives_the_current_schema():
    assert [u.table for u in UPGRADES] == ["probe_instances"]
    for sweep in (True, False):
        assert upgrade_frame("probe_instances", older(current(sweep))).schema == current(sweep).schema


def test_a_real_store_of_the_older_form_is_up_to_date_and_nothing_reruns(tmp_path, facts_store, monkeypatch):
    """The probe stage run for real on the embedded facts, its files turned into the older form
    with their data versions kept: a second run materializes nothing, and the files are upgraded."""
    home = copy_facts_store(facts_store, tmp_path / "kcal")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    monkeypatch.setattr(runner, "STAGES", runner.STAGES[:4])  # through probe_instances, statements
    settings = {"max_instances": 4, "max_templates": 1, "answer_space_k": [2], "answer_space_draws": 1}
    first = runner.run_missing(home, relations=["P36"], settings=settings, log=lambda m: None)
    assert not first.failed and ("probe_instances", "P36") in first.materialized
    path = partition_path(home, "probe_instances", {"relation": "P36"})
    written, version = pl.read_parquet(path), stored_version(path)
    assert (written["answer_space_k"] == 2).any()
    write_parquet_atomic(older(written), path, metadata={DATA_VERSION_KEY: version})
    assert "subsample_k" in pl.read_parquet_schema(path)
    again = runner.run_missing(home, relations=["P36"], settings=settings, log=lambda m: None)
    assert (again.materialized, again.failed) == ([], [])
    assert pl.read_parquet(path).equals(written) and stored_version(path) == version
