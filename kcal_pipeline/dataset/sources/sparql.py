"""SPARQL access: a polite client for live or local endpoints, and a local oxigraph server.

The client is what talks to query.wikidata.org, so it identifies itself per the Wikimedia
User-Agent policy and backs off on throttling and server errors instead of hammering. The local
endpoint serves the embedded snapshot so the same queries run offline.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import SPARQLWrapper as _sparqlwrapper
from SPARQLWrapper import JSON, POST, SPARQLWrapper
from SPARQLWrapper.SPARQLExceptions import QueryBadFormed, SPARQLWrapperException

from kcal_pipeline import __version__
from kcal_pipeline.core.processes import signal_when_parent_dies

DEFAULT_USER_AGENT = (
    f"kcal/{__version__} (https://github.com/kcal-project/kcal; kcal@users.noreply.github.com) "
    f"SPARQLWrapper/{_sparqlwrapper.__version__}"
)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class SparqlError(RuntimeError):
    """A query failed; the message names the endpoint URL and the cause."""


class _Transient(Exception):
    """A failure worth retrying; retry_after is the server's requested wait in seconds, if any."""

    def __init__(self, cause: str, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.retry_after = retry_after


def find_oxigraph() -> str:
    """The oxigraph CLI: the venv's own first (it is installed next to python), then PATH."""
    beside = Path(sys.executable).parent / "oxigraph"
    if beside.is_file():
        return str(beside)
    found = shutil.which("oxigraph")
    if found is None:
        raise FileNotFoundError(
            f"oxigraph binary not found next to {sys.executable} or on PATH; "
            "install it with `pip install oxigraph`"
        )
    return found


def _retry_after(headers) -> float | None:
    """Retry-After in seconds; the HTTP-date form is ignored (exponential backoff applies)."""
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _server_message(exc: SPARQLWrapperException) -> str:
    """SPARQLWrapper keeps the response body only as a bytes repr inside its message."""
    text = str(exc)
    _, sep, tail = text.partition("Response:\n")
    if not sep:
        return text
    try:
        return ast.literal_eval(tail).decode("utf-8", "replace").strip()
    except (ValueError, SyntaxError, AttributeError):
        return tail.strip()


class SparqlClient:
    """SELECT queries returning SPARQL 1.1 JSON results, with retries and exponential backoff.

    Retried: connection errors, timeouts and HTTP 429/500/502/503/504, waiting backoff * 2**n
    seconds (capped at max_backoff) or the server's Retry-After. A Retry-After above
    max_retry_after fails at once rather than stall a run. Not retried: other HTTP errors (a 400
    is a malformed query) and malformed JSON.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        retries: int = 3,
        user_agent: str = DEFAULT_USER_AGENT,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_retry_after: float = 300.0,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.user_agent = user_agent
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after

    def select(self, query: str) -> dict:
        attempts = 0
        while True:
            attempts += 1
            try:
                return self._decode(self._fetch(query))
            except _Transient as exc:
                if attempts > self.retries:
                    raise SparqlError(
                        f"SPARQL endpoint {self.url} failed after {attempts} attempt(s): {exc}"
                    ) from exc
                time.sleep(self._delay(attempts - 1, exc))

    def _delay(self, attempt: int, exc: _Transient) -> float:
        if exc.retry_after is None:
            return min(self.max_backoff, self.backoff * 2**attempt)
        if exc.retry_after > self.max_retry_after:
            raise SparqlError(
                f"SPARQL endpoint {self.url} asked to retry after {exc.retry_after:g} s "
                f"(more than the allowed {self.max_retry_after:g} s): {exc}"
            ) from exc
        return exc.retry_after

    def _fetch(self, query: str) -> bytes:
        sw = SPARQLWrapper(self.url, agent=self.user_agent)
        sw.setMethod(POST)
        sw.setOnlyConneg(True)
        sw.setReturnFormat(JSON)
        sw.timeout = self.timeout  # setTimeout() truncates to int, and 0 would mean "wait forever"
        sw.setQuery(query)
        try:
            response = sw.query().response
            try:
                return response.read()
            finally:
                response.close()
        except QueryBadFormed as exc:
            raise SparqlError(
                f"SPARQL endpoint {self.url} rejected the query (HTTP 400): {_server_message(exc)}"
            ) from exc
        except SPARQLWrapperException as exc:  # 401, 404, 414, 500: SPARQLWrapper wraps HTTPError
            cause = exc.__context__
            raise self._http_error(
                getattr(cause, "code", None), getattr(cause, "headers", None), _server_message(exc)
            ) from exc
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc.code, exc.headers, exc.read().decode("utf-8", "replace")) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise _Transient(f"{type(exc).__name__}: {reason}") from exc

    def _http_error(self, status: int | None, headers, body: str) -> Exception:
        cause = f"HTTP {status}: {body.strip()[:500]}"
        if status in RETRY_STATUSES:
            return _Transient(cause, _retry_after(headers))
        return SparqlError(f"SPARQL endpoint {self.url} failed with {cause}")

    def _decode(self, raw: bytes) -> dict:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SparqlError(
                f"SPARQL endpoint {self.url} returned malformed or truncated JSON ({len(raw)} bytes): {exc}"
            ) from exc
        if not isinstance(data, dict) or not ("results" in data or "boolean" in data):
            raise SparqlError(
                f"SPARQL endpoint {self.url} returned JSON that is not a SPARQL result "
                "(no 'results' or 'boolean' member)"
            )
        return data


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the local server's lifetime: it never outlives the process that started it -------------------

PID_DIR = ".oxigraph-pids"  # beside the store: one record per running server
_running: set[LocalEndpoint] = set()
_running_guard = threading.Lock()


def _stop_running() -> None:
    """atexit: stop every server this process started and did not stop (an exception, sys.exit)."""
    with _running_guard:
        endpoints = list(_running)
    for endpoint in endpoints:
        endpoint.stop()


atexit.register(_stop_running)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, or None when it does not exist (or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text("utf-8", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return fields[0], int(fields[1])
    except (IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def serves_store(pid: int, store_dir: Path | str) -> bool:
    """True only if pid is a live `oxigraph serve-read-only --location <store_dir>` (/proc/<pid>/cmdline):
    a recorded pid that a finished server left to an unrelated process is never touched."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return False
    if not _alive(pid) or not argv or "oxigraph" not in Path(argv[0]).name or "serve-read-only" not in argv:
        return False
    try:
        location = argv[argv.index("--location") + 1]
    except (ValueError, IndexError):
        return False
    return os.path.realpath(location) == os.path.realpath(store_dir)


def _terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, for a process that is not our child."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def reap_stale_servers(store_dir: Path | str, pid_dir: Path | str) -> list[int]:
    """Stop the servers of `store_dir` recorded in pid_dir whose starting process is gone.

    A record names the server's pid and its owner (the process that started it). The server is
    terminated only if that pid is still an oxigraph serving this store (checked in /proc) and it
    is no longer the owner's child (the owner died, e.g. by SIGKILL, on a system without the death
    signal). A live owner's server is left alone; a record naming a dead or unrelated process is
    just removed. Returns the pids terminated.
    """
    store_dir, pid_dir = Path(store_dir), Path(pid_dir)
    reaped = []
    for record_file in sorted(pid_dir.glob("oxigraph-*.json")):
        try:
            record = json.loads(record_file.read_text("utf-8"))
            pid, owner, store = int(record["pid"]), record.get("owner"), record["store"]
        except (OSError, ValueError, KeyError, TypeError):
            record_file.unlink(missing_ok=True)
            continue
        if os.path.realpath(store) != os.path.realpath(store_dir):
            continue
        if not serves_store(pid, store_dir):
            record_file.unlink(missing_ok=True)  # gone, or the pid now belongs to something else
            continue
        stat = _proc_stat(pid)
        if stat is not None and stat[1] == owner and _alive(owner):
            continue  # its owner is alive and still its parent: in use
        _terminate(pid)
        reaped.append(pid)
        record_file.unlink(missing_ok=True)
    return reaped


class LocalEndpoint:
    """`oxigraph serve-read-only` over a store, on a free 127.0.0.1 port, for as long as needed.

    The server never outlives kcal: it runs in its own session (a Ctrl-C in the terminal reaches
    kcal, which stops it, not the server mid-request), stop() ends it, an atexit hook ends what was
    not stopped, on Linux the kernel sends it SIGTERM when kcal dies (even by SIGKILL), and a
    record under pid_dir (default: `.oxigraph-pids` beside the store) lets the next start reap a
    server whose owner died anyway.
    """

    def __init__(
        self, store_dir: Path | str, startup_timeout: float = 15.0, pid_dir: Path | str | None = None
    ) -> None:
        self.store_dir = Path(store_dir)
        self.startup_timeout = startup_timeout
        self.pid_dir = Path(pid_dir) if pid_dir is not None else self.store_dir.resolve().parent / PID_DIR
        self._record: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("LocalEndpoint is not started")
        return self._url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> str:
        if self._proc is not None:
            return self.url
        with contextlib.suppress(OSError):  # an unwritable pid_dir only loses the reaping
            reap_stale_servers(self.store_dir, self.pid_dir)
        port = _free_port()
        # stderr goes to a file, not a pipe: a chatty server must never block on a full pipe.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open while the server runs; stop() closes it
        self._proc = subprocess.Popen(
            [
                find_oxigraph(),
                "serve-read-only",
                "--location",
                str(self.store_dir),
                "--bind",
                f"127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
            preexec_fn=signal_when_parent_dies(signal.SIGTERM),
        )
        with _running_guard:
            _running.add(self)
        self._write_record()
        self._url = f"http://127.0.0.1:{port}/query"
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self._url

    def _wait_ready(self) -> None:
        ask = self._url + "?" + urllib.parse.urlencode({"query": "ASK {}"})
        request = urllib.request.Request(ask, headers={"Accept": "application/sparql-results+json"})
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                raise SparqlError(
                    f"oxigraph serve-read-only for {self.store_dir} exited with code "
                    f"{self._proc.returncode} before answering at {self._url}: {self._read_stderr()}"
                )
            try:
                with urllib.request.urlopen(request, timeout=1.0) as response:
                    if json.loads(response.read()).get("boolean") is True:
                        return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SparqlError(
                    f"oxigraph at {self._url} did not answer within {self.startup_timeout:g} s: "
                    f"{self._read_stderr() or 'no stderr output'}"
                )
            time.sleep(0.05)

    def _read_stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace").strip()

    def _write_record(self) -> None:
        record = {
            "pid": self._proc.pid,
            "owner": os.getpid(),
            "store": str(self.store_dir.resolve()),
            "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        path = self.pid_dir / f"oxigraph-{self._proc.pid}.json"
        try:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record) + "\n", "utf-8")
        except OSError:
            return  # an unwritable pid_dir only loses the reaping; the server still dies with us
        self._record = path

    def stop(self) -> None:
        """Terminate exactly the process this endpoint started, and reap it."""
        proc, self._proc, self._url = self._proc, None, None
        with _running_guard:
            _running.discard(self)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._record is not None:
            self._record.unlink(missing_ok=True)
            self._record = None

    def __enter__(self) -> LocalEndpoint:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
