"""Ctrl-C during `kcal demo` (issue 11, point 11): one line, exit code 130, no traceback from kcal,
Dagster or the processes they started, and the scoring checkpoints stay for the next run.

Ctrl-C is simulated as a terminal sends it: SIGINT to the whole process group of the command."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_facts_store

INTERRUPTED = "interrupted; the next run resumes from the partition checkpoints"
DEMO = ["demo", "--relation", "P36", "--max-instances", "30", "--chunk-size", "16", "--no-progress"]


def _checkpoints(home: Path) -> list[Path]:
    return sorted((home / ".checkpoints").rglob("chunk-*.parquet"))


def _facts(home: Path) -> list[Path]:
    return sorted((home / "wikidata_facts").rglob("part.parquet"))


def as_from_a_terminal() -> None:
    """preexec_fn: the signal state of a command started from a terminal (SIGINT at its default,
    nothing blocked), whatever the test runner inherited (a background job ignores SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def ctrl_c_demo(tmp_path: Path, ready, facts: Path | None = None) -> tuple[int, str, str, Path]:
    """Start `kcal demo` in its own process group (on a copy of `facts`, else an empty store),
    Ctrl-C it once ready(home), wait for it to end."""
    home = tmp_path / "home"
    if facts is not None:
        copy_facts_store(facts, home)
    env = {**os.environ, "DAGSTER_HOME": str(home / "dagster")}
    env.pop("KCAL_HOME", None)
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("kcal")), "--home", str(home), *DEMO],
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
        try:
            deadline = time.monotonic() + 150
            while not ready(home) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert proc.poll() is None, f"kcal demo ended before it was interrupted:\n{err.read_text()}"
            assert ready(home), "kcal demo did not get there in time"
            os.killpg(proc.pid, signal.SIGINT)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, out.read_text(), err.read_text(), home


def assert_one_line(code: int, out: str, err: str) -> None:
    assert code == 130, (out + err)[-3000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, (out + err)[-3000:]
    assert "Interrupted" not in err  # Dagster's report of the interrupted step and run
    assert err.strip().splitlines()[-1] == f"kcal: {INTERRUPTED}"
    assert (out + err).count(INTERRUPTED) == 1


BLOCKED = """
import subprocess, sys, time
from assets.cli import CtrlC
with CtrlC() as ctrl_c:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(child.pid, flush=True)
    started = time.monotonic()
    try:
        time.sleep(60)  # a blocking call in the main thread, as an HTTP request or a backoff is
    except KeyboardInterrupt:
        print(f"interrupted {ctrl_c.pressed} {time.monotonic() - started:.1f} {child.poll()}", flush=True)
    child.kill()
"""


def _blocks_sigint(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal masks from /proc")
def test_ctrl_c_reaches_a_blocked_main_thread_and_spares_the_children():
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        child = int(proc.stdout.readline())
        assert _blocks_sigint(child)  # inherited: a terminal's Ctrl-C does not reach it
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)  # generous: a loaded CI machine
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    word, pressed, seconds, child_status = out.split()
    assert (word, pressed, child_status) == ("interrupted", "True", "None")  # the child lived on
    assert float(seconds) < 5  # the sleep was cut short, not waited out
    assert proc.returncode == 0


@pytest.mark.integration
def test_ctrl_c_during_scoring_prints_one_line_and_exits_130(tmp_path, facts_store):
    code, out, err, home = ctrl_c_demo(tmp_path, lambda home: bool(_checkpoints(home)), facts_store)
    assert_one_line(code, out, err)
    assert _checkpoints(home), "the checkpoints of the interrupted partition are gone"
    assert not (home / "statement_scores").exists()


@pytest.mark.integration
def test_ctrl_c_during_the_facts_stage_stops_before_the_next_run(tmp_path):
    # The facts stage is 32 short Dagster runs: a Ctrl-C often lands outside a step's computation,
    # where Dagster only notes it (and forgets it when the run ends); the next run must not start.
    code, out, err, home = ctrl_c_demo(tmp_path, lambda home: len(_facts(home)) >= 2)
    assert_one_line(code, out, err)
    assert len(_facts(home)) < 32 and not (home / "statements").exists()


def test_a_ctrl_c_that_sqlalchemy_logs_while_closing_a_connection_prints_nothing():
    """A Ctrl-C that lands while SQLAlchemy's pool closes a Dagster instance's connection is logged
    by the pool as "Exception closing connection" with its traceback (seen once in the facts-stage
    test above): inside a command such records are dropped, from loggers made before it (at
    import) and during it; any other error of the same loggers still prints, and after the command
    the loggers are as they were."""
    import io
    import logging

    from assets.cli import CtrlC

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    before = logging.getLogger("sqlalchemy.pool.test-made-before")
    try:
        logging.getLogger().addHandler(handler)
        with CtrlC():
            during = logging.getLogger("sqlalchemy.pool.test-made-during")
            for logger in (before, during):
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt:
                    logger.error("Exception closing connection", exc_info=True)
                try:
                    raise OSError("disk full")
                except OSError:
                    logger.error("Exception closing connection (%s)", logger.name, exc_info=True)
        assert "KeyboardInterrupt" not in stream.getvalue()
        assert stream.getvalue().count("OSError: disk full") == 2
        assert before.filters == []
    finally:
        logging.getLogger().removeHandler(handler)
        logging.root.manager.loggerDict.pop("sqlalchemy.pool.test-made-during", None)
        logging.root.manager.loggerDict.pop("sqlalchemy.pool.test-made-before", None)
