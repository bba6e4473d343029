"""Partition writers side by side: a shared hold on the store lock plus one lock per partition.

The store lock (store_lock.py) lets one writer at a time into KCAL_HOME. Distributed runs (the
Celery executor: one step per worker, on several hosts) each write one model × relation partition
and nothing else, so they need not exclude each other: each takes the store's lock file *shared*
(flock LOCK_SH on `KCAL_HOME/.lock`, the very file the exclusive holders lock) and its partition's
own lock *exclusively* (`KCAL_HOME/.locks/model=…/relation=….lock`). So any number of partitions are
written at once, two runs of one partition take turns, and a whole-store writer (`kcal demo`,
an import, an in-process run) and partition writers never overlap: the shared hold waits for the
exclusive one and the reverse. Both locks are flock locks, released by the OS when the holder
dies, however it dies (a SIGKILLed worker included).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.store_lock import (
    StoreLockedError,
    describe_holder,
    lock_path,
    read_holder,
    store_lock,
)

LOCKS_DIR = ".locks"
_POLL_SECONDS = 0.2


def partition_lock_path(home: Path, partition: Mapping[str, str]) -> Path:
    """`KCAL_HOME/.locks/model=…/relation=….lock`: hidden, one file per partition, never a table."""
    return partition_path(Path(home) / LOCKS_DIR, "partition", dict(partition)).with_suffix(".lock")


def _flock(path: Path, mode: int, wait: bool, what: str, notify: Callable[[str], None]) -> int:
    """An open descriptor holding flock `mode` on `path`; waits (saying so once) or raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return fd
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if not wait:
                raise StoreLockedError(f"{what} is in use (lock file {path}); try again when it has finished")
            if not told:
                notify(f"waiting for {what} (lock file {path})")
                told = True
            time.sleep(_POLL_SECONDS)
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def hold_partition_lock(
    home: Path,
    partition: Mapping[str, str],
    *,
    wait: bool = True,
    notify: Callable[[str], None] = print,
) -> Iterator[None]:
    """Hold the store shared and `partition` exclusively for the block (store first, always, so
    two partition writers can never wait for each other in a cycle). In a process that already
    holds the store exclusively (a run inside `kcal demo`), that hold covers the partition too."""
    home = Path(home).expanduser().resolve()
    if store_lock(home).is_locked:  # this process is the store's one writer already
        yield
        return
    store_what = f"the store {home} (held by {describe_holder(read_holder(home))})"
    store_fd = _flock(lock_path(home), fcntl.LOCK_SH, wait, store_what, notify)
    try:
        where = ", ".join(f"{k} {v}" for k, v in partition.items())
        part_fd = _flock(
            partition_lock_path(home, partition), fcntl.LOCK_EX, wait, f"partition {where}", notify
        )
        try:
            yield
        finally:
            os.close(part_fd)  # closing the descriptor releases its flock
    finally:
        os.close(store_fd)
