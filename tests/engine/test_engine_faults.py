"""Faults on the distributed path (real redis-server, real dagster-celery workers, the embedded model):
a worker process killed mid-partition, the broker restarted during a run, two runs of one partition
at once. Each ends with the in-process executor's rows, none duplicated. The partition is P36 (240
statements) in checkpoint chunks of 8 (conftest.CHUNK), so there is a middle to fault in."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterEventType
from dagster._core.events import EngineEventData

from kcal_pipeline.core.partition_lock import hold_partition_lock, partition_lock_path
from kcal_pipeline.scoring.partition import checkpoint_dir
from tests.engine.conftest import TABLES, finished, forget, launch, partition_keys, rows

pytestmark = pytest.mark.integration


def dims(relation: str) -> dict[str, str]:
    return dict(partition_keys([relation])[0].keys_by_dimension)


def wait_for(condition, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def chunks_saved(store, relation: str) -> int:
    directory = checkpoint_dir(store.home, dims(relation)["model"], relation)
    return len(list(directory.glob("chunk-*.parquet"))) if directory.exists() else 0


def lock_holders(path: Path) -> list[int]:
    """The processes with the partition's lock file open (the step that scores it)."""
    holders = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if any(os.readlink(fd) == str(path) for fd in (proc / "fd").iterdir()):
                    holders.append(int(proc.name))
            except OSError:
                pass
    return holders


def celery_executions(store, run_id: str, step: str) -> list[str]:
    """The worker of each execution of `step` in the run (one entry per time a worker started it)."""
    out = []
    for record in store.instance.all_logs(run_id):
        data = record.dagster_event.event_specific_data if record.dagster_event else None
        if record.step_key == step and isinstance(data, EngineEventData) and "Celery worker" in data.metadata:
            out.append(data.metadata["Celery worker"].value)
    return out


def assert_equal_to_the_in_process_rows(store, reference, relation: str) -> None:
    keys = partition_keys([relation])
    for table in TABLES:
        assert rows(store, table, keys).equals(rows(reference, table, keys)), table
    assert rows(store, "statement_scores", keys)["statement_id"].is_unique().all()


def test_a_worker_process_killed_mid_partition_is_rerun_to_identical_rows(cluster, in_process):
    store, relation = cluster.store, "P36"  # 240 statements, 30 chunks
    forget(store, relation)
    run = launch(store, relation, cluster.redis, cluster.logs)
    wait_for(lambda: chunks_saved(store, relation) >= 2, "two checkpoint chunks")
    (victim,) = lock_holders(partition_lock_path(store.home, dims(relation)))
    worker = next(w for w in cluster.workers if victim in w.pids())
    saved = chunks_saved(store, relation)
    os.kill(victim, signal.SIGKILL)  # the process running the step, as the OOM killer would
    run_id, ok = finished(run)
    print(f"\nSIGKILLed the step's process (pid {victim}, worker {worker.name}) after {saved} chunks")
    assert ok
    # Celery put the step back on its queue (acks_late + reject_on_worker_lost), a worker ran it
    # again, and that run resumed from the checkpoints the killed one had saved.
    assert len(celery_executions(store, run_id, "statement_scores")) == 2
    record = store.instance.get_latest_materialization_event(AssetKey("statement_scores"))
    assert record.run_id == run_id
    assert int(record.asset_materialization.metadata["chunks_resumed"].value) >= saved
    assert_equal_to_the_in_process_rows(store, in_process[0], relation)


def test_two_runs_of_one_partition_at_once_take_turns_and_write_each_row_once(cluster, in_process):
    store, relation = cluster.store, "P47"
    forget(store, relation)
    lock_path = partition_lock_path(store.home, dims(relation))
    held, release = threading.Event(), threading.Event()

    def hold():  # the test holds the partition until both runs' scoring steps wait at its lock
        with hold_partition_lock(store.home, dims(relation)):
            held.set()
            release.wait(300)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(30)
    runs = []
    try:
        runs = [launch(store, relation, cluster.redis, cluster.logs) for _ in range(2)]
        wait_for(lambda: len(lock_holders(lock_path)) >= 3, "both runs' scoring steps at the partition lock")
    finally:
        release.set()
        holder.join(30)
    results = [finished(r) for r in runs]
    assert [ok for _, ok in results] == [True, True]
    windows = []
    for run_id, _ in results:
        records = [r for r in store.instance.all_logs(run_id) if r.step_key == "statement_scores"]
        assert any("waiting for partition" in (r.user_message or "") for r in records)
        kinds = {r.dagster_event_type: r.timestamp for r in records if r.dagster_event_type}
        windows.append((kinds[DagsterEventType.STEP_START], kinds[DagsterEventType.STEP_SUCCESS]))
    first, second = sorted(windows)
    assert first[1] <= second[0], f"the two runs scored the partition at the same time: {windows}"
    assert_equal_to_the_in_process_rows(store, in_process[0], relation)


def test_redis_restarted_during_a_run_then_the_run_or_its_rerun_ends_with_identical_rows(cluster, in_process):
    store, relation = cluster.store, "P37"
    forget(store, relation)
    run = launch(store, relation, cluster.redis, cluster.logs)
    wait_for(lambda: chunks_saved(store, relation) >= 1, "the first checkpoint chunk")
    cluster.redis.stop()  # SIGTERM: redis writes its append-only file, as a service restart does
    cluster.redis.start()
    _, ok = finished(run, timeout=300)
    outcome = "the run completed" if ok else "the run failed"
    if not ok:  # failed cleanly: a rerun of the partition completes
        _, ok = finished(launch(store, relation, cluster.redis, cluster.logs), timeout=300)
        outcome += f"; the rerun {'completed' if ok else 'failed'}"
    import redis

    unacked = redis.Redis(port=cluster.redis.port).hlen("unacked")
    print(f"\nredis restarted mid-scoring: {outcome}; messages left unacknowledged in redis: {unacked}")
    assert ok
    assert_equal_to_the_in_process_rows(store, in_process[0], relation)
