"""`kcal ui` for a test: started on a free 127.0.0.1 port (and its report server on another, through
KCAL_REPORTS_PORT) over a temporary KCAL_HOME and DAGSTER_HOME, found up through its HTTP API, and
proven stopped (every process it started gone, both ports closed)."""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

KCAL = Path(sys.executable).with_name("kcal")
START_TIMEOUT_S = 240  # the code location imports torch and transformers: slow on 2 shared CPUs
STOP_BOUND_S = 20  # the whole tree must be gone within this after the stop signal


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stat(pid: int) -> list[str] | None:
    """state, ppid, pgrp, session, ... of a live process (None: gone or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def live_pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _stat(int(e.name))]


def process_tree(root: int) -> dict[int, str]:
    """The live descendants of root (and root), pid → command line."""
    children: dict[int, list[int]] = {}
    for pid in live_pids():
        if (fields := _stat(pid)) is not None:
            children.setdefault(int(fields[1]), []).append(pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if _stat(pid) is not None:
            tree[pid] = cmdline(pid)
            todo += children.get(pid, [])
    return tree


def in_session(session: int) -> dict[int, str]:
    """Live processes of a session: catches a child orphaned (re-parented) before we looked."""
    found = {}
    for pid in live_pids():
        if (fields := _stat(pid)) is not None and int(fields[3]) == session:
            found[pid] = cmdline(pid)
    return found


def still_alive(pids) -> list[int]:
    return [pid for pid in pids if _stat(pid) is not None]


@dataclass
class UiServer:
    proc: subprocess.Popen
    port: int
    log: Path
    reports_port: int
    pty_master: int | None = None
    sessions: set[int] = field(default_factory=set)  # seen by stop_and_check: kill_everything's scope
    _drain: threading.Thread | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def reports_url(self) -> str:
        return f"http://127.0.0.1:{self.reports_port}"

    def reports_status(self, path: str = "/") -> int:
        """The report server's HTTP status for `path` (raises OSError when nothing listens)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.reports_port, timeout=10)
        try:
            connection.request("GET", path)
            return connection.getresponse().status
        finally:
            connection.close()

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 30) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
        assert "errors" not in answer, answer["errors"]
        return answer["data"]

    def wait_until_up(self, timeout: float = START_TIMEOUT_S) -> float:
        """Seconds until the webserver answers and the code location `kcal` is loaded."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise AssertionError(f"kcal ui exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError, ValueError, AssertionError, KeyError):
                entries = self.graphql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }",
                    timeout=5,
                )["workspaceOrError"]["locationEntries"]
                if [(e["name"], e["loadStatus"]) for e in entries] == [("kcal", "LOADED")]:
                    return time.monotonic() - started
            time.sleep(0.25)
        raise AssertionError(f"the UI did not come up within {timeout} s:\n{self.log_tail()}")

    def kill_everything(self) -> None:
        """Clean-up after a failed test: SIGKILL whatever is left of the server's sessions."""
        leftovers = {**process_tree(self.proc.pid), **in_session(self.proc.pid)}
        for session in {self.proc.pid, *self.sessions, *[int(f[3]) for p in leftovers if (f := _stat(p))]}:
            leftovers |= in_session(session)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.pty_master is not None:
            with contextlib.suppress(OSError):
                os.close(self.pty_master)


def _with_terminal() -> None:
    """In the child, after setsid: stdin (a pty) becomes its controlling terminal, so the pty's ^C
    sends SIGINT to its foreground process group, as a terminal's Ctrl-C does."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _ignoring_sigint() -> None:
    """What `cmd &` in a shell without job control (a script, CI, nohup launches) gives a child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


FAST_DAEMON = Path(__file__).with_name("fast_daemon")  # its sitecustomize: a 2 s backfill loop


def start_ui(
    home: Path,
    dagster_home: Path,
    log: Path,
    terminal: bool = False,
    sigint_ignored: bool = False,
    fast_daemon: bool = False,
) -> UiServer:
    """`kcal --home HOME ui` in a session of its own (with a pty as its terminal, or its output in
    `log`); DAGSTER_HOME is `dagster_home`. fast_daemon: the daemon's backfill loop every 2 s
    (tests/ui/fast_daemon)."""
    port = free_port()
    while (reports_port := free_port()) == port:
        pass
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "PYTHONUNBUFFERED": "1"}
    env["KCAL_REPORTS_PORT"] = str(reports_port)
    if fast_daemon:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAST_DAEMON), env.get("PYTHONPATH")]))
    env.pop("KCAL_HOME", None)
    command = [str(KCAL), "--home", str(home), "ui", "--port", str(port)]
    preexec = _with_terminal if terminal else _ignoring_sigint if sigint_ignored else None
    if not terminal:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=preexec,
            )  # fmt: skip
        return UiServer(proc, port, log, reports_port)
    master, slave = os.openpty()
    proc = subprocess.Popen(
        command, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=preexec
    )
    os.close(slave)
    server = UiServer(proc, port, log, reports_port, pty_master=master)

    def drain() -> None:  # the pty's output into the log (a full pty would block the server)
        with log.open("ab") as out:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return
                if not data:
                    return
                out.write(data)
                out.flush()

    server._drain = threading.Thread(target=drain, daemon=True)
    server._drain.start()
    return server


def stop_and_check(server: UiServer, send, bound: float = STOP_BOUND_S, exit_code: int = 130) -> float:
    """Stop the server with `send()` and assert that every process it started is gone within
    `bound` s (and its ports closed: the UI's and the report server's); returns the seconds it took."""
    tree = process_tree(server.proc.pid)
    # dagster dev (its own session, made by the launcher) with its webserver, daemon, code server
    sessions = {int(f[3]) for pid in tree if (f := _stat(pid))}
    server.sessions |= sessions
    names = " ".join(tree.values())
    assert "dagster_webserver" in names and "dagster._daemon" in names, tree
    started = time.monotonic()
    send()
    left: list[int] = list(tree)
    while time.monotonic() - started < bound:
        left = still_alive(tree) + [p for s in sessions for p in in_session(s) if p not in tree]
        if not left:
            break
        time.sleep(0.2)
    took = time.monotonic() - started
    alive = [(pid, cmdline(pid)) for pid in left]
    assert not left, f"alive {took:.1f} s after the stop: {alive}\n{server.log_tail()}"
    assert server.proc.wait(timeout=5) == exit_code, server.log_tail()
    for port, what in ((server.port, "the webserver"), (server.reports_port, "the report server")):
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"{what}'s port still accepts"
    if server.pty_master is not None:
        with contextlib.suppress(OSError):
            os.close(server.pty_master)
    return took
