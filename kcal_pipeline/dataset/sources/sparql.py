"""SPARQL access: a polite client for live or local endpoints, and a local oxigraph server.

The client is what talks to query.wikidata.org, so it identifies itself per the Wikimedia
User-Agent policy and backs off on throttling and server errors instead of hammering. The local
endpoint serves the embedded snapshot so the same queries run offline.
"""

from __future__ import annotations

import ast
import http.client
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import SPARQLWrapper as _sparqlwrapper
from SPARQLWrapper import JSON, POST, SPARQLWrapper
from SPARQLWrapper.SPARQLExceptions import QueryBadFormed, SPARQLWrapperException

from kcal_pipeline import __version__

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


class LocalEndpoint:
    """`oxigraph serve-read-only` over a store, on a free 127.0.0.1 port, for as long as needed."""

    def __init__(self, store_dir: Path | str, startup_timeout: float = 15.0) -> None:
        self.store_dir = Path(store_dir)
        self.startup_timeout = startup_timeout
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
        )
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

    def stop(self) -> None:
        """Terminate exactly the process this endpoint started, and reap it."""
        proc, self._proc, self._url = self._proc, None, None
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

    def __enter__(self) -> LocalEndpoint:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
