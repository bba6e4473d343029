"""One writer per store: an exclusive lock on KCAL_HOME, taken by every command and run that writes.

The lock is `KCAL_HOME/.lock` (an OS file lock through the `filelock` package, so it is released
when its holder exits, however it exits); beside it, `KCAL_HOME/.lock.holder` records who holds it
(pid, host, command, start time), so a second writer can say whom it waits for. A run either waits
for the holder to finish, saying so once, or fails at once with StoreLockedError.

The lock is re-entrant within a process: every acquisition of one store's lock in a process goes
through one lock object (store_lock() caches it), so the Dagster runs that `kcal demo` starts while
it holds the lock take it again instead of waiting for themselves. Two processes always exclude
each other.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.holder"
_MAX_COMMAND = 200

_locks: dict[Path, FileLock] = {}
_locks_guard = threading.Lock()


class StoreLockedError(RuntimeError):
    """Another process holds the store's lock and the caller asked not to wait."""


def lock_path(home: Path) -> Path:
    return Path(home) / LOCK_FILE


def holder_path(home: Path) -> Path:
    return Path(home) / HOLDER_FILE


def store_lock(home: Path) -> FileLock:
    """The one lock object of this process for the store at `home` (created with the folder)."""
    home = Path(home).expanduser().resolve()
    with _locks_guard:
        lock = _locks.get(home)
        if lock is None:
            home.mkdir(parents=True, exist_ok=True)
            # thread_local=False: the lock count is the process's, so a nested acquisition in
            # another thread of the same process (a resource set up by a worker) re-enters too.
            lock = _locks[home] = FileLock(lock_path(home), thread_local=False)
        return lock


def current_command() -> str:
    """This process's command line, shortened: `kcal demo --relation P36`, `dagster dev …`."""
    argv = list(sys.argv) or ["python"]
    name = Path(argv[0]).name or "python"
    return _shorten(" ".join([name, *argv[1:]]))


def _shorten(command: str) -> str:
    command = " ".join(command.split())
    return command if len(command) <= _MAX_COMMAND else command[: _MAX_COMMAND - 1] + "…"


def read_holder(home: Path) -> dict | None:
    """The holder record ({pid, host, command, started}), or None when absent or unreadable."""
    try:
        record = json.loads(holder_path(home).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def describe_holder(record: dict | None) -> str:
    """`pid 1234 on host (kcal demo, started 2026-01-02 10:11:12)`."""
    if not record:
        return "another process (no holder record; it may be starting or have just finished)"
    host = record.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return (
        f"pid {record.get('pid', '?')}{where} ({record.get('command') or 'unknown command'}, "
        f"started {record.get('started', '?')})"
    )


def _write_holder(home: Path, command: str) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": _shorten(command),
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    path = holder_path(home)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record) + "\n", "utf-8")
    os.replace(tmp, path)


def _remove_holder(home: Path) -> None:
    record = read_holder(home)
    if record is not None and record.get("pid") == os.getpid():
        holder_path(home).unlink(missing_ok=True)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def hold_store_lock(
    home: Path,
    *,
    wait: bool = True,
    command: str | None = None,
    notify: Callable[[str], None] = _stderr,
    timeout: float | None = None,
) -> Iterator[FileLock]:
    """Hold the store's lock for the block.

    Free: taken at once, silently. Held by this process: re-entered. Held by another process:
    with wait, `notify` says once whom we wait for and the call blocks until the holder releases
    (at most `timeout` seconds, then StoreLockedError); without wait, StoreLockedError at once.
    The outermost holder writes the holder record and removes it on release.
    """
    home = Path(home).expanduser().resolve()
    lock = store_lock(home)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = describe_holder(read_holder(home))
        if not wait:
            raise StoreLockedError(
                f"the store {home} is in use: its lock ({lock_path(home)}) is held by {holder}; "
                "try again when it has finished, or wait for it (the default, without --no-wait)"
            ) from None
        notify(
            f"waiting for the store lock held by {holder}; "
            f"lock file {lock_path(home)}, --no-wait fails at once instead"
        )
        started = time.monotonic()
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except Timeout:
            raise StoreLockedError(
                f"the store {home} is still in use after {time.monotonic() - started:.0f} s: "
                f"its lock is held by {describe_holder(read_holder(home))}"
            ) from None
    try:
        if lock.lock_counter == 1:
            _write_holder(home, command or current_command())
        yield lock
    finally:
        if lock.lock_counter == 1:
            _remove_holder(home)
        lock.release()
