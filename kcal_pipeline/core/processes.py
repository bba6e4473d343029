"""Child processes that never outlive the process that started them (a local SPARQL server, the
`dagster dev` of `kcal ui`), even when that process is killed with SIGKILL."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def signal_when_parent_dies(sig: int) -> Callable[[], None] | None:
    """A preexec_fn: the kernel sends the child `sig` when its parent dies, even by SIGKILL (Linux
    prctl PR_SET_PDEATHSIG; elsewhere None). `sig` gets its default disposition, unblocked, in the
    child: one ignored or blocked by the caller (a Dagster run, a test runner, a `cmd &` in a
    script) is inherited and would swallow it. The death signal follows the *thread* that started
    the child, so start it from a thread that lives as long as the parent does."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the death signal was armed
            os.kill(os.getpid(), sig)

    return preexec


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group; on systems without /proc, the group
    counts as one member while signal 0 reaches it."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [group]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after it
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == group and state != "Z":
            members.append(int(entry.name))
    return members


def signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in it
        os.killpg(group, signum)


def end_group(group: int, leader: subprocess.Popen | None = None, wait_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, what is left of the group, waiting `wait_s` after each (and for the
    leader, when this process started it, to be reaped)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if leader is not None:
            leader.poll()  # reap the leader, so its zombie does not count
        if not group_members(group):
            return
        signal_group(group, signum)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (
            (leader is not None and leader.poll() is None) or group_members(group)
        ):
            time.sleep(0.1)


class GroupReaper:
    """A watcher that ends a process group once the process that started it is gone, however it
    went: it holds the read end of a pipe whose write end only the starter holds, so EOF comes
    when the starter exits or is killed (SIGKILL included). The parent-death signal makes `dagster
    dev` stop its services, but a killed starter can no longer escalate if one of them hangs
    (Dagster's daemon has, after its code server went): the reaper then waits `grace`, then
    SIGTERM, then SIGKILL, so no process of the group outlives the starter by more than that."""

    def __init__(self, process: subprocess.Popen, write_end: int):
        self.process, self._write_end = process, write_end

    def release(self) -> None:
        """The starter has ended the group itself: the reaper finds it empty and exits."""
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def start_group_reaper(group: int, grace: float) -> GroupReaper:
    """Start the reaper of `group` (python -m kcal_pipeline.core.processes GROUP GRACE) in a
    session of its own, so a terminal's Ctrl-C, meant for the starter, does not reach it."""
    read_end, write_end = os.pipe()  # not inheritable (PEP 446): only the reaper gets the read end
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kcal_pipeline.core.processes", str(group), str(grace)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        os.close(read_end)
    return GroupReaper(process, write_end)


def reap_when_orphaned(group: int, grace: float) -> None:
    """The reaper's body: block until the starter is gone, then end what is left of the group."""
    while sys.stdin.buffer.read(1 << 16):
        pass
    deadline = time.monotonic() + grace
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    end_group(group)


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    reap_when_orphaned(int(sys.argv[1]), float(sys.argv[2]))
