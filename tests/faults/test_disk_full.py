"""Disk full while a partition's scores are stored: nothing scored is lost, nothing half-written stays.

A full disk cannot be had on demand, so the Parquet write of the final file is faked to write half
a file and raise ENOSPC. The run goes through Dagster and the Parquet IO manager, as `kcal demo`
does, with the embedded SmolLM2 scoring 15 statements in chunks of 4.
"""

import errno
import os
import stat

import polars as pl
import pytest
from dagster import AssetKey, DagsterInstance, MultiPartitionKey, materialize

from assets.definitions import all_assets
from assets.partitions import model_partitions, relation_partitions
from kcal_pipeline.core import storage
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic, write_text_atomic
from kcal_pipeline.scoring import engine as engine_mod
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from kcal_pipeline.scoring.partition import checkpoint_dir
from resources import default_resources
from tests.scoring.test_scoring_engine import STATEMENTS

KEY = DEFAULT_MODEL.key
DIMS = {"model": KEY, "relation": "P36"}
CHUNKS = 4  # 15 statements, 4 per chunk


def disk_full(monkeypatch, when=lambda file: True):
    """DataFrame.write_parquet writes half a file, then fails as a full disk does."""
    original = pl.DataFrame.write_parquet

    def full(self, file, *args, **kwargs):
        if not when(str(file)):
            return original(self, file, *args, **kwargs)
        with open(file, "wb") as fh:
            fh.write(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, "No space left on device (injected)", str(file))

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)


def counting_scorer(monkeypatch) -> list:
    calls, original = [], engine_mod.score_statements

    def score(loaded, chunk, options, progress=None):
        calls.append(chunk["statement_id"].to_list())
        return original(loaded, chunk, options, progress=progress)

    monkeypatch.setattr(engine_mod, "score_statements", score)
    return calls


def score(home, **kw):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(model_partitions.name, [KEY])
    instance.add_dynamic_partitions(relation_partitions.name, ["P36"])
    return materialize(
        all_assets,
        selection=[AssetKey("statement_scores")],
        partition_key=MultiPartitionKey(DIMS),
        instance=instance,
        resources=default_resources(home=str(home), chunk_size=4),
        raise_on_error=False,
        **kw,
    )


def failure_text(result) -> str:
    return "\n".join(
        str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )


def temp_files(home):
    return sorted(p for p in home.rglob("*") if p.name.endswith(".tmp"))


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    write_parquet_atomic(STATEMENTS, partition_path(home, "statements", {"relation": "P36"}))
    return home


def test_disk_full_keeps_checkpoints_and_old_file_and_the_next_run_resumes(home, tmp_path, monkeypatch):
    target = partition_path(home, "statement_scores", DIMS)
    # A previous result, scored from other inputs (another fingerprint): the run must replace it.
    write_parquet_atomic(
        STATEMENTS.select("statement_id").with_columns(scoring_fingerprint=pl.lit("older")), target
    )
    before = target.read_bytes()
    calls = counting_scorer(monkeypatch)
    with monkeypatch.context() as m:
        disk_full(m, when=lambda file: f".{storage.PART_FILE}." in file)  # the final file only
        failed = score(home)
    assert not failed.success
    assert "No space left on device" in failure_text(failed)
    assert len(calls) == CHUNKS
    checkpoints = checkpoint_dir(home, KEY, "P36")
    assert len(list(checkpoints.glob("chunk-*.parquet"))) == CHUNKS  # every score survives
    assert target.read_bytes() == before  # the old file is untouched
    assert temp_files(home) == []  # and no half-written temp file is left behind

    calls.clear()
    resumed = score(home)
    assert resumed.success
    assert calls == []  # resumed from the checkpoints: no chunk rescored
    meta = resumed.asset_materializations_for_node("statement_scores")[0].metadata
    assert (meta["chunks_resumed"].value, meta["chunks"].value) == (str(CHUNKS), str(CHUNKS))
    stored = pl.read_parquet(target)
    assert stored["statement_id"].to_list() == STATEMENTS["statement_id"].to_list()  # none duplicated
    assert not checkpoints.exists()  # dropped once the final file is stored
    assert temp_files(home) == []

    # Up to date now: a third run rescores nothing, keeps the file and drops leftover checkpoints.
    after = target.read_bytes()
    checkpoints.mkdir(parents=True)
    (checkpoints / "chunk-000000.parquet").write_bytes(b"stale")
    assert score(home).success
    assert calls == [] and target.read_bytes() == after and not checkpoints.exists()

    clean_home = tmp_path / "clean"
    write_parquet_atomic(STATEMENTS, partition_path(clean_home, "statements", {"relation": "P36"}))
    assert score(clean_home).success
    assert stored.equals(pl.read_parquet(partition_path(clean_home, "statement_scores", DIMS)))


def test_atomic_writes_flush_file_and_folder_and_leave_nothing_behind_on_a_full_disk(tmp_path, monkeypatch):
    """fsync of the new file before the rename and of its folder after it, so the rename survives a
    power cut (only then may the checkpoints go); a failed write keeps the old file, no temp file."""
    synced, original = [], os.fsync

    def fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        return original(fd)

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", fsync)
        parquet = tmp_path / "p" / storage.PART_FILE
        write_parquet_atomic(pl.DataFrame({"a": [1, 2]}), parquet)
        assert synced == ["file", "dir"]
        synced.clear()
        text = tmp_path / "t" / "catalog.toml"
        write_text_atomic(text, "old = 1\n")
        assert synced == ["file", "dir"]
    before = parquet.read_bytes()
    with monkeypatch.context() as m:
        disk_full(m)
        with pytest.raises(OSError) as err:
            write_parquet_atomic(pl.DataFrame({"a": [3, 4, 5]}), parquet)
    assert err.value.errno == errno.ENOSPC
    assert parquet.read_bytes() == before
    assert [p.name for p in parquet.parent.iterdir()] == [storage.PART_FILE]

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", no_space)
        with pytest.raises(OSError):
            write_text_atomic(text, "new = 2\n" * 1000)
    assert text.read_text() == "old = 1\n"
    assert [p.name for p in text.parent.iterdir()] == ["catalog.toml"]
