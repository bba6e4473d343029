"""The reaper that ends a process group its starter can no longer end (a SIGKILLed `kcal ui`):
real processes, a real SIGKILL, a group that ignores the polite signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kcal_pipeline.core.processes import group_members

# The starter: a group of its own whose members ignore SIGINT and SIGTERM (as a hung Dagster
# daemon does in effect), then the reaper with a short grace; it prints the group and waits.
STARTER = textwrap.dedent(
    """
    import subprocess, sys, time
    from kcal_pipeline.core.processes import start_group_reaper
    group = subprocess.Popen(
        ["bash", "-c", "trap '' INT TERM; sleep 300 & trap '' INT TERM; wait"], start_new_session=True
    )
    reaper = start_group_reaper(group.pid, float(sys.argv[1]))
    print(group.pid, reaper.process.pid, flush=True)
    if sys.argv[2] == "release":
        time.sleep(0.5)
        subprocess.run(["kill", "-KILL", "--", f"-{group.pid}"])
        group.wait()
        reaper.release()
        print("released", reaper.process.returncode, flush=True)
    else:
        time.sleep(300)
    """
)


def start(grace: float, how: str) -> tuple[subprocess.Popen, int, int]:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(grace), how], stdout=subprocess.PIPE, text=True
    )
    group, reaper = map(int, starter.stdout.readline().split())
    return starter, group, reaper


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(group: int, within: float) -> float:
    started = time.monotonic()
    while group_members(group) and time.monotonic() - started < within:
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_killed_starter_leaves_no_member_of_its_group_behind():
    starter, group, reaper = start(grace=1.0, how="kill")
    try:
        time.sleep(0.5)
        assert len(group_members(group)) == 2  # bash and its sleep, both deaf to INT and TERM
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        took = wait_gone(group, within=20)
        assert not group_members(group), f"still alive after {took:.1f} s"
        assert took >= 1.0  # the reaper gave the grace first (the group did not stop by itself)
        assert took < 1.0 + 5 + 5  # then SIGTERM (ignored), 5 s, then SIGKILL
        for _ in range(50):
            if not running(reaper):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the reaper did not exit after ending the group")
    finally:
        subprocess.run(["kill", "-KILL", "--", f"-{group}"], stderr=subprocess.DEVNULL, check=False)
        starter.kill()


def test_a_starter_that_ended_its_group_releases_the_reaper_at_once():
    starter, group, _ = start(grace=60.0, how="release")
    try:
        line = starter.stdout.readline().split()
        assert line == ["released", "0"]  # exited within release()'s wait, not after the 60 s grace
        assert not group_members(group)
    finally:
        subprocess.run(["kill", "-KILL", "--", f"-{group}"], stderr=subprocess.DEVNULL, check=False)
        starter.kill()
