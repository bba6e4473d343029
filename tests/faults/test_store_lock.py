"""One writer per store (issue 11, point 6): a second writer of the same KCAL_HOME waits for the
first, saying whom it waits for, or fails at once with --no-wait; `kcal` commands and Dagster runs
take the same lock, and the runs `kcal demo` starts re-enter the lock it holds."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_kcal

HOLDER_COMMAND = "kcal demo (test holder)"
HOLD = """
import sys
from kcal_pipeline.core.store_lock import hold_store_lock
with hold_store_lock(sys.argv[1], command=sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()  # released when the test writes a line (or closes stdin)
"""


class Holder:
    """Another process holding the store lock of `home` until release()."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(home), HOLDER_COMMAND],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "held"
        self.pid = self.proc.pid

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)

    def release_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.release)
        timer.start()
        return timer

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def holder(tmp_path):
    held = Holder(tmp_path)
    yield held
    held.kill()


def test_no_wait_fails_at_once_naming_the_holder(tmp_path, holder):
    from kcal_pipeline.core.store_lock import StoreLockedError, hold_store_lock

    started = time.monotonic()
    with pytest.raises(StoreLockedError) as error, hold_store_lock(tmp_path, wait=False):
        pass
    assert time.monotonic() - started < 2
    assert f"pid {holder.pid} ({HOLDER_COMMAND}, started " in str(error.value)
    assert str(tmp_path) in str(error.value)


def test_wait_says_whom_it_waits_for_and_waits_until_released(tmp_path, holder):
    from kcal_pipeline.core.store_lock import hold_store_lock, read_holder

    said: list[str] = []
    started = time.monotonic()
    timer = holder.release_after(1.5)
    with hold_store_lock(tmp_path, notify=said.append, timeout=30, command="second writer"):
        waited = time.monotonic() - started
        assert read_holder(tmp_path)["pid"] == os.getpid()
        assert read_holder(tmp_path)["command"] == "second writer"
    timer.join()
    assert waited >= 1.4
    assert len(said) == 1
    assert said[0].startswith(
        f"waiting for the store lock held by pid {holder.pid} ({HOLDER_COMMAND}, started "
    )
    assert read_holder(tmp_path) is None  # the record goes with the lock


def test_wait_is_bounded_by_its_timeout(tmp_path, holder):
    from kcal_pipeline.core.store_lock import StoreLockedError, hold_store_lock

    with (
        pytest.raises(StoreLockedError, match=f"still in use .* pid {holder.pid}"),
        hold_store_lock(tmp_path, notify=lambda message: None, timeout=0.5),
    ):
        pass


def test_a_killed_holder_releases_the_lock(tmp_path, holder):
    from kcal_pipeline.core.store_lock import hold_store_lock, read_holder

    os.kill(holder.pid, signal.SIGKILL)
    holder.proc.wait(timeout=10)
    assert read_holder(tmp_path)["pid"] == holder.pid  # the stale record stays behind…
    with hold_store_lock(tmp_path, wait=False):  # …but the OS released the lock itself
        assert read_holder(tmp_path)["pid"] == os.getpid()


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    """`kcal demo` holds the lock while the Dagster runs it starts take it again: no deadlock, and
    the record names the outer holder until it releases."""
    from kcal_pipeline.core.store_lock import hold_store_lock, read_holder

    with hold_store_lock(tmp_path, wait=False, command="outer"):
        result: list[str] = []
        worker = threading.Thread(  # a nested acquisition from another thread of the process
            target=lambda: result.append(_nested(tmp_path))
        )
        worker.start()
        worker.join(timeout=10)
        assert result == ["outer"]
        with hold_store_lock(tmp_path, wait=False, command="inner"):
            assert read_holder(tmp_path)["command"] == "outer"
        assert read_holder(tmp_path)["command"] == "outer"
    assert read_holder(tmp_path) is None


def _nested(home: Path) -> str:
    from kcal_pipeline.core.store_lock import hold_store_lock, read_holder

    with hold_store_lock(home, wait=False, command="nested"):
        return read_holder(home)["command"]


# --- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--relation", "P36"],
        ["models", "add", "lab/x", "--path", "."],
        ["models", "remove", "HuggingFaceTB/SmolLM2-135M-Instruct"],
        ["dataset", "import-bear", "."],
        ["dataset", "paraphrase"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_writing_commands_fail_clearly_with_no_wait(tmp_path, holder, args):
    out = run_kcal(tmp_path, *args, "--no-wait", timeout=120)
    assert out.returncode == 2, out.stderr
    assert "is in use" in out.stderr and f"pid {holder.pid} ({HOLDER_COMMAND}" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "dagster").exists() and not list(tmp_path.rglob("*.parquet"))


def test_a_second_command_waits_for_the_first(tmp_path, holder):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster")}
    env.pop("KCAL_HOME", None)
    kcal = Path(sys.executable).with_name("kcal")
    second = subprocess.Popen(
        [str(kcal), "--home", str(tmp_path), "models", "remove", "HuggingFaceTB/SmolLM2-135M-Instruct"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = second.stderr.readline()  # blocks until the second command says it waits
        assert said.startswith(
            f"waiting for the store lock held by pid {holder.pid} ({HOLDER_COMMAND}, started "
        ), said
        time.sleep(0.5)
        assert second.poll() is None  # still waiting
        holder.release()
        out, err = second.communicate(timeout=120)
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 0, err
    assert "removed HuggingFaceTB/SmolLM2-135M-Instruct" in out


# --- Dagster runs ----------------------------------------------------------------------------------


def _materialize_relations(home: Path, wait: bool):
    from dagster import DagsterInstance, materialize

    from assets.dataset import relations
    from resources import default_resources

    return materialize(
        [relations],
        resources=default_resources(home=str(home), wait_for_store_lock=wait),
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_a_dagster_run_fails_with_no_wait_while_another_process_writes(tmp_path, holder):
    result = _materialize_relations(tmp_path, wait=False)
    assert not result.success
    errors = [  # the run fails in resource set-up: the IO manager's store lock
        event.event_specific_data.error.to_string()
        for event in result.all_events
        if getattr(event.event_specific_data, "error", None) is not None
    ]
    assert any(f"pid {holder.pid} ({HOLDER_COMMAND}" in e for e in errors), errors
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_dagster_run_waits_while_another_process_writes(tmp_path, holder):
    timer = holder.release_after(2)
    started = time.monotonic()
    result = _materialize_relations(tmp_path, wait=True)
    timer.join()
    assert result.success
    assert time.monotonic() - started >= 1.9  # it waited for the holder
    assert (tmp_path / "relations" / "part.parquet").is_file()
