"""The raw-response cache in front of the SPARQL client, against a counting local HTTP server."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kcal_pipeline.dataset.sources.sparql import SparqlClient, SparqlError
from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql, sha256_hex, snapshot_endpoint_id

QUERY = "SELECT ?s WHERE { ?s ?p ?o } LIMIT 1"
RESULT = {
    "head": {"vars": ["s"]},
    "results": {"bindings": [{"s": {"type": "uri", "value": "http://example.org/ä"}}]},
}


class _Counting(BaseHTTPRequestHandler):
    """Answers every request with server.status/server.body and counts the requests."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests += 1
        body = self.server.body
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/sparql-results+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    srv.daemon_threads = True
    srv.lock, srv.requests = threading.Lock(), 0
    srv.status, srv.body = 200, json.dumps(RESULT).encode()
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    srv.url = f"http://127.0.0.1:{srv.server_port}/query"
    yield srv
    srv.shutdown()
    srv.server_close()


def cached(server, tmp_path, endpoint_id=None) -> CachedSparql:
    client = SparqlClient(server.url, retries=0, timeout=5)
    return CachedSparql(client, tmp_path / "cache", endpoint_id or server.url)


def test_second_select_comes_from_the_cache_with_the_same_provenance(server, tmp_path):
    cache = cached(server, tmp_path)
    first = cache.select(QUERY)
    second = cache.select(QUERY)
    assert server.requests == 1
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.result == second.result == RESULT
    assert (first.endpoint, first.query_hash, first.retrieved_at) == (
        second.endpoint,
        second.query_hash,
        second.retrieved_at,
    )
    assert first.endpoint == server.url and first.query_hash == sha256_hex(QUERY)
    assert datetime.fromisoformat(first.retrieved_at).utcoffset().total_seconds() == 0


def test_the_cache_survives_a_new_instance(server, tmp_path):
    cached(server, tmp_path).select(QUERY)
    assert cached(server, tmp_path).select(QUERY).from_cache
    assert server.requests == 1


def test_the_cache_file_keeps_endpoint_query_and_time(server, tmp_path):
    cache = cached(server, tmp_path)
    got = cache.select(QUERY)
    path = cache.path_for(QUERY)
    assert path.name == sha256_hex(server.url + "\n" + QUERY) + ".json"
    record = json.loads(path.read_text("utf-8"))
    assert record == {
        "endpoint": server.url,
        "query": QUERY,
        "retrieved_at": got.retrieved_at,
        "result": RESULT,
    }


def test_another_endpoint_or_query_is_a_miss(server, tmp_path):
    cached(server, tmp_path).select(QUERY)
    other = cached(server, tmp_path, endpoint_id="embedded-snapshot:abc").select(QUERY)
    assert not other.from_cache and other.endpoint == "embedded-snapshot:abc"
    assert not cached(server, tmp_path).select(QUERY + " ").from_cache
    assert server.requests == 3


@pytest.mark.parametrize(
    "content",
    [
        '{"endpoint": "trunc',
        "",
        "[]",
        "\udcff",
        '{"endpoint": "ENDPOINT", "query": "other", "retrieved_at": "x", "result": {"results": {}}}',
        '{"endpoint": "ENDPOINT", "query": "QUERY", "retrieved_at": "x", "result": {"error": 1}}',
    ],
)
def test_a_corrupt_cache_file_is_refetched_and_replaced(server, tmp_path, caplog, content):
    cache = cached(server, tmp_path)
    cache.select(QUERY)
    path = cache.path_for(QUERY)
    text = content.replace("ENDPOINT", server.url).replace('"QUERY"', json.dumps(QUERY))
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING, logger="kcal_pipeline.dataset.sources.sparql_cache"):
        again = cache.select(QUERY)
    assert not again.from_cache and again.result == RESULT
    assert server.requests == 2
    assert "corrupt SPARQL cache file" in caplog.text and str(path) in caplog.text
    assert cache.select(QUERY).from_cache  # replaced by a good entry
    assert server.requests == 2


def test_failures_are_not_cached(server, tmp_path):
    cache = cached(server, tmp_path)
    server.body = b'{"head": {}, "results": {"bindi'
    with pytest.raises(SparqlError, match="malformed or truncated JSON"):
        cache.select(QUERY)
    server.status, server.body = 404, b"gone"
    with pytest.raises(SparqlError, match="HTTP 404"):
        cache.select(QUERY)
    assert not cache.path_for(QUERY).exists()
    server.status, server.body = 200, json.dumps(RESULT).encode()
    assert cache.select(QUERY).result == RESULT
    assert server.requests == 3


def test_ask_results_are_cached_too(server, tmp_path):
    server.body = b'{"head": {}, "boolean": false}'
    cache = cached(server, tmp_path)
    assert cache.select("ASK {}").result["boolean"] is False
    assert cache.select("ASK {}").from_cache


def test_endpoint_ids():
    assert snapshot_endpoint_id("0123456789abcdef") == "embedded-snapshot:0123456789ab"
    with pytest.raises(ValueError, match="endpoint_id"):
        CachedSparql(None, "/tmp/x", " ")
