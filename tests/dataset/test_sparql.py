"""SPARQL client behaviour against scripted local HTTP servers, and the real local oxigraph endpoint."""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kcal_pipeline.dataset.sources.snapshot.build import ensure_store
from kcal_pipeline.dataset.sources.sparql import (
    DEFAULT_USER_AGENT,
    LocalEndpoint,
    SparqlClient,
    SparqlError,
    find_oxigraph,
)

QUERY = "SELECT ?s WHERE { ?s ?p ?o } LIMIT 1"
RESULT = {
    "head": {"vars": ["s"]},
    "results": {"bindings": [{"s": {"type": "uri", "value": "http://example.org/a"}}]},
}
JSON_TYPE = {"Content-Type": "application/sparql-results+json"}
OK = (200, JSON_TYPE, json.dumps(RESULT).encode())


def status(code: int, body: bytes = b"try later", **headers: str):
    return (
        code,
        {"Content-Type": "text/plain", **{k.replace("_", "-"): v for k, v in headers.items()}},
        body,
    )


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next scripted step; once the script is spent, 404 (no retry)."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        with srv.lock:
            srv.seen.append((time.monotonic(), self.headers.get("User-Agent")))
            step = srv.script.pop(0) if srv.script else status(404, b"script exhausted")
        if isinstance(step, float):  # a stall longer than the client's timeout
            time.sleep(step)
            step = OK
        code, headers, body = step
        try:
            self.send_response(code)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout test)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def serve():
    servers = []

    def start(*script):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        srv.daemon_threads = True
        srv.script, srv.seen, srv.lock = list(script), [], threading.Lock()
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_port}/query", srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def gaps(srv) -> list[float]:
    times = [t for t, _ in srv.seen]
    return [b - a for a, b in itertools.pairwise(times)]


def test_503_then_200_is_retried(serve):
    url, srv = serve(status(503), OK)
    assert SparqlClient(url, backoff=0.01).select(QUERY) == RESULT
    assert len(srv.seen) == 2


def test_every_retryable_server_error_is_retried(serve):
    url, srv = serve(status(500), status(502), status(504), OK)
    assert SparqlClient(url, retries=3, backoff=0.01).select(QUERY) == RESULT
    assert len(srv.seen) == 4


def test_backoff_doubles(serve):
    url, srv = serve(status(503), status(503), status(503), OK)
    SparqlClient(url, retries=3, backoff=0.1).select(QUERY)
    waits = gaps(srv)
    for wait, expected in zip(waits, (0.1, 0.2, 0.4), strict=False):
        assert expected * 0.9 <= wait < expected + 0.25
    assert len(waits) == 3


def test_429_retry_after_is_honoured(serve):
    url, srv = serve(status(429, Retry_After="1"), OK)
    assert SparqlClient(url, backoff=0.01).select(QUERY) == RESULT
    assert gaps(srv)[0] >= 0.95


def test_retry_after_on_a_500_is_honoured(serve):
    # SPARQLWrapper wraps a 500 in its own exception; the header must still be found.
    url, srv = serve(status(500, b"overloaded", Retry_After="1"), OK)
    assert SparqlClient(url, backoff=0.01).select(QUERY) == RESULT
    assert gaps(srv)[0] >= 0.95


def test_an_excessive_retry_after_fails_at_once(serve):
    url, srv = serve(status(429, Retry_After="3600"), OK)
    with pytest.raises(SparqlError, match=r"retry after 3600 s") as err:
        SparqlClient(url, backoff=0.01).select(QUERY)
    assert url in str(err.value)
    assert len(srv.seen) == 1


def test_gives_up_after_the_retries(serve):
    url, srv = serve(*[status(503, b"busy")] * 5)
    with pytest.raises(SparqlError) as err:
        SparqlClient(url, retries=2, backoff=0.01).select(QUERY)
    message = str(err.value)
    assert url in message and "after 3 attempt" in message and "HTTP 503" in message
    assert len(srv.seen) == 3


def test_400_is_not_retried_and_carries_the_server_message(serve):
    url, srv = serve(status(400, b"Parse error: unexpected '}' at line 3"), OK)
    with pytest.raises(SparqlError, match=r"HTTP 400.*Parse error: unexpected '\}' at line 3") as err:
        SparqlClient(url, backoff=0.01).select(QUERY)
    assert url in str(err.value)
    assert len(srv.seen) == 1


def test_404_is_not_retried(serve):
    url, srv = serve(status(404, b"no such endpoint"), OK)
    with pytest.raises(SparqlError, match="HTTP 404: no such endpoint"):
        SparqlClient(url, backoff=0.01).select(QUERY)
    assert len(srv.seen) == 1


def test_truncated_json_is_a_clear_error(serve):
    body = json.dumps(RESULT).encode()[:40]
    url, srv = serve((200, JSON_TYPE, body), OK)
    with pytest.raises(SparqlError, match=r"malformed or truncated JSON \(40 bytes\)") as err:
        SparqlClient(url, backoff=0.01).select(QUERY)
    assert url in str(err.value)
    assert len(srv.seen) == 1


def test_json_that_is_not_a_sparql_result_is_refused(serve):
    url, _ = serve((200, JSON_TYPE, b'{"error": "nope"}'))
    with pytest.raises(SparqlError, match="not a SPARQL result"):
        SparqlClient(url).select(QUERY)


def test_timeouts_are_retried_then_reported(serve):
    url, srv = serve(1.0, 1.0)
    with pytest.raises(SparqlError, match=r"after 2 attempt\(s\).*timed out"):
        SparqlClient(url, timeout=0.2, retries=1, backoff=0.01).select(QUERY)
    assert len(srv.seen) == 2


def test_user_agent_identifies_the_tool_and_a_contact(serve):
    assert re.fullmatch(
        r"kcal/\d+\.\d+\.\d+\S* \(https://github\.com/\S+; \S+@\S+\) SPARQLWrapper/\d+\.\d+\.\d+",
        DEFAULT_USER_AGENT,
    )
    url, srv = serve(OK)
    SparqlClient(url).select(QUERY)
    assert srv.seen[0][1] == DEFAULT_USER_AGENT


def test_unreachable_endpoint_names_the_url_after_retries():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/query"  # closed: nothing listens there any more
    with pytest.raises(SparqlError, match=r"after 3 attempt\(s\).*refused") as err:
        SparqlClient(url, retries=2, backoff=0.01).select(QUERY)
    assert url in str(err.value)


# --- the real oxigraph endpoint ------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    return ensure_store(tmp_path_factory.mktemp("sparql")).store_dir


@pytest.fixture(scope="module")
def endpoint(store_dir):
    with LocalEndpoint(store_dir) as ep:
        yield ep


def test_find_oxigraph_prefers_the_interpreters_directory():
    assert find_oxigraph() == str(Path(sys.executable).parent / "oxigraph")


def test_local_endpoint_answers_queries(endpoint):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/query", endpoint.url)
    result = SparqlClient(endpoint.url).select(
        "SELECT ?label WHERE { <http://www.wikidata.org/entity/Q142> "
        "<http://www.w3.org/2000/01/rdf-schema#label> ?label }"
    )
    assert [b["label"]["value"] for b in result["results"]["bindings"]] == ["France"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # SPARQLWrapper cannot classify a broken query
def test_malformed_query_gives_the_servers_message(endpoint):
    with pytest.raises(SparqlError, match=r"rejected the query \(HTTP 400\): error at 1:\d+") as err:
        SparqlClient(endpoint.url, backoff=0.01).select("SELEKT ?x WHERE { ?x ?y }")
    assert endpoint.url in str(err.value)


def test_stop_leaves_no_process_with_that_pid(store_dir):
    ep = LocalEndpoint(store_dir)
    url = ep.start()
    pid = ep.pid
    os.kill(pid, 0)  # alive while started
    ep.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError, match="not started"):
        _ = ep.url
    ep.stop()  # a second stop is harmless
    with pytest.raises(SparqlError, match="failed after 1 attempt"):
        SparqlClient(url, retries=0).select(QUERY)


def test_start_failure_includes_the_servers_stderr(tmp_path):
    not_a_store = tmp_path / "file"
    not_a_store.write_text("x")
    with pytest.raises(SparqlError, match=r"exited with code \d+ .*Not a directory"):
        LocalEndpoint(not_a_store).start()
