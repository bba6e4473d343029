"""Child processes die with their parent (issue 11, point 7): the local oxigraph server runs in its
own session, never outlives kcal (stop, atexit, the kernel's parent-death signal), and a server
left behind anyway is reaped by the next start — but never an unrelated process."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kcal_pipeline.dataset.sources.snapshot import ensure_store
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient, find_oxigraph

ASK = "ASK {}"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    return ensure_store(tmp_path_factory.mktemp("children")).store_dir


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def processes_under(folder: Path, argument: bytes = b"serve-read-only") -> list[int]:
    """Pids of processes with `argument` among their arguments (by default oxigraph servers; b"-F"
    for tail) and a path under folder in their command line (found in /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = argument in argv and any(str(folder).encode() in a for a in argv)
        if ours and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def end(pids) -> None:
    """Clean-up after a failure: the servers this test caused, found by their store path."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def serve(store_dir: Path) -> subprocess.Popen:
    """An oxigraph server started the old way: a plain child of the test process."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [find_oxigraph(), "serve-read-only", "--location", str(store_dir), "--bind", f"127.0.0.1:{port}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pid_dir(store_dir: Path) -> Path:
    """Where LocalEndpoint records the servers of store_dir."""
    from kcal_pipeline.dataset.sources.sparql import PID_DIR

    return store_dir.parent / PID_DIR


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def record(pid_dir: Path, pid: int, owner: int, store_dir: Path) -> Path:
    pid_dir.mkdir(parents=True, exist_ok=True)
    path = pid_dir / f"oxigraph-{pid}.json"
    path.write_text(json.dumps({"pid": pid, "owner": owner, "store": str(store_dir)}))
    return path


# --- killing the parent ----------------------------------------------------------------------------


STARTER = """
import sys, time
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint
endpoint = LocalEndpoint(sys.argv[1])
endpoint.start()
print(endpoint.pid, flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)  # without stop(): the atexit hook must stop it
time.sleep(120)
"""


def block_termination() -> None:
    """preexec_fn: a caller whose mask blocks SIGTERM (as a Dagster run or a test runner can)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def ignore_termination() -> None:
    """preexec_fn: a caller that ignores SIGTERM (seen in CI: an ignored signal survives exec)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def start_in_child(store_dir: Path, then: str, preexec=None) -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(store_dir), then],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    return parent, int(parent.stdout.readline())


@pytest.mark.parametrize(
    "preexec",
    [None, block_termination, ignore_termination],
    ids=["plain", "caller-blocks-sigterm", "caller-ignores-sigterm"],
)
def test_sigkill_of_the_parent_takes_the_server_with_it(store_dir, preexec):
    # With SIGTERM blocked or ignored in the caller and inherited, the death signal was swallowed
    # and the server lived on (seen in CI); the server now starts with SIGTERM at its default.
    parent, server = start_in_child(store_dir, "sleep", preexec)
    try:
        assert alive(server)
        assert os.getsid(server) == server  # its own session: a terminal's Ctrl-C goes to kcal only
        parent.kill()
        parent.wait(timeout=10)
        assert gone_within(server, 30), "oxigraph outlived the process that started it"
    finally:
        end([server] if alive(server) else [])
        parent.kill()


def test_exit_without_stop_stops_the_server(store_dir):
    parent, server = start_in_child(store_dir, "exit")
    try:
        assert parent.wait(timeout=30) == 0
        assert gone_within(server, 5)
    finally:
        end([server] if alive(server) else [])


@pytest.mark.integration
def test_killing_kcal_demo_leaves_no_oxigraph_behind(tmp_path):
    """The issue's probe: SIGKILL `kcal demo` while it fetches facts from the local endpoint."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster")}
    env.pop("KCAL_HOME", None)
    kcal = Path(sys.executable).with_name("kcal")
    demo = subprocess.Popen(
        [str(kcal), "--home", str(tmp_path), "demo", "--relation", "P36", "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while not seen and time.monotonic() < deadline and demo.poll() is None:
            seen.update(processes_under(tmp_path))
            time.sleep(0.05)
        assert seen, "kcal demo never started its oxigraph server"
        demo.kill()
        demo.wait(timeout=10)
        time.sleep(0.2)
        seen.update(processes_under(tmp_path))  # one started just before the kill
        survivors = [pid for pid in seen if not gone_within(pid, 5)]
        assert not survivors, f"oxigraph server(s) {survivors} outlived the killed kcal"
    finally:
        demo.kill()
        end(processes_under(tmp_path))
        # Dagster mirrors a step's captured output with `tail -F` and starts a watcher that ends it
        # when its parent dies; a kill between the two starts leaves the tail running for ever.
        # Dagster's race, not kcal's: the test ends what its kill may have left.
        end(processes_under(tmp_path, argument=b"-F"))


# --- reaping on start ------------------------------------------------------------------------------


def test_a_stale_server_of_the_store_is_reaped_on_start(store_dir):
    stale = serve(store_dir)
    try:
        wait_exec(stale)
        stale_record = record(pid_dir(store_dir), stale.pid, dead_pid(), store_dir)
        with LocalEndpoint(store_dir) as endpoint:
            assert stale.wait(timeout=10) is not None  # terminated by the start
            assert not stale_record.exists()
            own = pid_dir(store_dir) / f"oxigraph-{endpoint.pid}.json"
            assert json.loads(own.read_text())["owner"] == os.getpid()
            assert SparqlClient(endpoint.url).select(ASK)["boolean"] is True
        assert not own.exists()  # stop() removes the record
    finally:
        stale.kill()
        stale.wait()


def wait_exec(proc: subprocess.Popen) -> None:
    """Until the child has exec'd oxigraph (before that, its cmdline is still Python's)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            if b"serve-read-only" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                return
        time.sleep(0.01)
    raise AssertionError("the hand-started oxigraph did not start")


def test_an_unrelated_process_named_in_a_record_is_not_killed(store_dir):
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        bogus = record(pid_dir(store_dir), unrelated.pid, dead_pid(), store_dir)
        with LocalEndpoint(store_dir):
            assert unrelated.poll() is None and alive(unrelated.pid)
            assert not bogus.exists()  # a record naming something else is dropped, not acted on
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_server_whose_owner_is_alive_is_left_alone(store_dir):
    """Two live users of one store (e.g. two steps of a run): starting the second never stops the first."""
    with LocalEndpoint(store_dir) as first, LocalEndpoint(store_dir) as second:
        assert first.pid != second.pid and alive(first.pid) and alive(second.pid)
        records = sorted(pid_dir(store_dir).glob("oxigraph-*.json"))
        assert {json.loads(r.read_text())["pid"] for r in records} >= {first.pid, second.pid}
        assert SparqlClient(first.url).select(ASK)["boolean"] is True
