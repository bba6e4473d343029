"""kcal on Dagster's Celery executor, for real: redis-server, two dagster-celery workers started with
deploy/celery/worker.sh, four model × relation partitions scored and estimated at once, and the
tables equal to the in-process executor's row for row."""

import time

import polars as pl
import pytest
from dagster import DagsterEventType
from dagster._core.events import EngineEventData

from assets.instance import SCORING_QUEUE
from tests.engine.conftest import RELATIONS, TABLES, forget, partition_keys, rows, run_on_celery

pytestmark = pytest.mark.integration


def step_windows(instance, run_id: str, step: str) -> list[tuple[float, float]]:
    """(start, end) of each execution of `step` in the run, from its event log."""
    records = instance.all_logs(run_id)
    starts = [
        r.timestamp
        for r in records
        if r.step_key == step and r.dagster_event_type == DagsterEventType.STEP_START
    ]
    ends = [
        r.timestamp
        for r in records
        if r.step_key == step
        and r.dagster_event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE)
    ]
    return list(zip(starts, ends, strict=False))


def test_four_partitions_on_two_celery_workers_equal_the_in_process_executor(cluster, in_process):
    reference, in_process_seconds = in_process
    store = cluster.store
    for relation in RELATIONS:  # a store whose partitions were scored before (a rerun) starts over
        forget(store, relation)
    keys = partition_keys()

    started = time.perf_counter()
    runs = run_on_celery(store, RELATIONS, cluster.redis, cluster.logs)
    celery_seconds = time.perf_counter() - started
    print(
        f"\n{len(keys)} partitions (statement_scores + estimates): Celery, 2 workers "
        f"{celery_seconds:.1f} s; in-process executor {in_process_seconds:.1f} s"
    )
    assert [ok for _, ok in runs] == [True] * len(keys)

    # Both workers worked, and at least two partitions were scored at the same time.
    hosts, windows, queues = set(), [], {}
    for run_id, _ in runs:
        logs = store.instance.all_logs(run_id)
        for record in logs:
            if record.user_message.startswith("Submitting celery task"):
                queues[record.step_key] = record.user_message.split('to queue "')[1].rstrip('".')
            data = record.dagster_event.event_specific_data if record.dagster_event else None
            if isinstance(data, EngineEventData) and "Celery worker" in data.metadata:
                hosts.add(data.metadata["Celery worker"].value)
        windows += step_windows(store.instance, run_id, "statement_scores")
    assert {h.split("@")[0] for h in hosts} == {"w1", "w2"}
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(windows) for b in windows[i + 1 :])

    # Row for row: exactly equal, floats included: the same model, statements and checkpoint
    # chunks give bit-identical float32 scores on any worker (conftest.CHUNK says why the chunking
    # must match).
    for table in TABLES:
        celery_rows, reference_rows = rows(store, table, keys), rows(reference, table, keys)
        assert celery_rows.height == reference_rows.height > 0, table
        assert celery_rows.equals(reference_rows), table
    scores = rows(store, "statement_scores", keys)
    assert scores["statement_id"].is_unique().all()
    statements = pl.concat([pl.read_parquet(p) for p in (store.home / "statements").rglob("*.parquet")])
    assert scores.height == statements.filter(pl.col("relation_id").is_in(RELATIONS)).height
    # Scoring steps go to the scoring queue (the GPU hosts' workers), estimation to the default one.
    assert queues == {"statement_scores": SCORING_QUEUE, "estimates": "dagster"}
