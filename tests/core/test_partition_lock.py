"""Partition writers side by side (kcal_pipeline/core/partition_lock.py): other partitions at once,
one partition at a time, never beside a whole-store writer, released when the holder is killed.
Holders are real processes, as on the workers of the Celery path."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kcal_pipeline.core.partition_lock import hold_partition_lock, partition_lock_path
from kcal_pipeline.core.store_lock import StoreLockedError, hold_store_lock

P36 = {"model": "m", "relation": "P36"}
P30 = {"model": "m", "relation": "P30"}
HOLD = """
import sys
from kcal_pipeline.core.partition_lock import hold_partition_lock
from kcal_pipeline.core.store_lock import hold_store_lock
home, relation = sys.argv[1], sys.argv[2]
partition = {"model": "m", "relation": relation}
with hold_store_lock(home) if relation == "store" else hold_partition_lock(home, partition):
    print("held", flush=True)
    sys.stdin.readline()
"""


class Holder:
    """Another process holding the store (`store`) or one relation's partition until released."""

    def __init__(self, home: Path, what: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(home), what],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        self.proc.wait(30)


@pytest.fixture
def holders():
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.proc.kill()
        holder.proc.wait(30)


def test_other_partitions_are_written_at_once_and_one_partition_by_one_writer(tmp_path, holders):
    holders.append(Holder(tmp_path, "P36"))
    with hold_partition_lock(tmp_path, P30, wait=False):  # another partition: at once
        pass
    with (
        pytest.raises(StoreLockedError, match="partition model m, relation P36"),
        hold_partition_lock(tmp_path, P36, wait=False),
    ):
        pass
    holders[0].release()
    with hold_partition_lock(tmp_path, P36, wait=False):
        assert partition_lock_path(tmp_path, P36).is_relative_to(tmp_path / ".locks")


def test_a_whole_store_writer_and_partition_writers_exclude_each_other(tmp_path, holders):
    holders.append(Holder(tmp_path, "store"))
    with pytest.raises(StoreLockedError, match="the store"), hold_partition_lock(tmp_path, P30, wait=False):
        pass
    holders[0].release()
    holders.append(Holder(tmp_path, "P36"))
    with pytest.raises(StoreLockedError), hold_store_lock(tmp_path, wait=False):
        pass


def test_a_killed_partition_writer_releases_its_partition(tmp_path, holders):
    holders.append(Holder(tmp_path, "P36"))
    holders[0].proc.send_signal(signal.SIGKILL)
    holders[0].proc.wait(30)
    with hold_partition_lock(tmp_path, P36, wait=False):
        pass
    # A process that holds the whole store (a run inside `kcal demo`) writes any partition in it.
    with hold_store_lock(tmp_path, wait=False), hold_partition_lock(tmp_path, P36, wait=False):
        pass


def test_a_waiting_writer_says_whom_it_waits_for_once_and_goes_on_when_released(tmp_path, holders):
    import threading

    holders.append(Holder(tmp_path, "P36"))
    said: list[str] = []
    threading.Timer(0.5, holders[0].release).start()
    with hold_partition_lock(tmp_path, P36, notify=said.append):
        pass
    assert len(said) == 1 and said[0].startswith("waiting for partition model m, relation P36")
