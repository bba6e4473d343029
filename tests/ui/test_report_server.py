"""The report server of `kcal ui` (kcal_pipeline/core/report_server.py): it serves the files under
KCAL_HOME/reports over http on 127.0.0.1 and nothing else of the store, its port comes from
KCAL_REPORTS_PORT, and it stops."""

import http.client
import os
import socket

import pytest

from kcal_pipeline.core.paths import cross_model_report_path, duckdb_path, report_path
from kcal_pipeline.core.report_server import (
    DEFAULT_REPORTS_PORT,
    REPORTS_PORT_ENV,
    ReportServer,
    ReportsPortError,
    report_url,
    reports_dir,
    reports_port,
)
from tests.ui.server import free_port

SECRET = b"the store's database: never served"


@pytest.fixture
def store(tmp_path):
    home = tmp_path / "kcal"
    page = report_path(home, "m1")
    page.parent.mkdir(parents=True)
    page.write_text("<html><body>model m1's report</body></html>")
    cross_model_report_path(home).write_text("<html><body>the leaderboard</body></html>")
    duckdb_path(home).write_bytes(SECRET)
    (home / "models.toml").write_bytes(SECRET)
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes(SECRET)
    os.symlink(outside, reports_dir(home) / "link.txt")  # a link out of reports/ is not followed out
    return home


def get(port: int, path: str) -> tuple[int, bytes, dict]:
    """One raw GET: `path` goes on the wire as written (no client-side normalisation of `..`)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def test_it_serves_the_reports_and_nothing_else_of_the_store(store):
    with ReportServer(reports_dir(store), free_port()) as server:
        url = report_url(store, report_path(store, "m1"), server.port)
        assert url == f"http://127.0.0.1:{server.port}/model=m1/report.html"
        status, body, headers = get(server.port, url.removeprefix(server.url[:-1]))
        assert (status, body) == (200, b"<html><body>model m1's report</body></html>")
        assert headers["content-type"] == "text/html" and headers["cache-control"] == "no-store"
        assert get(server.port, "/")[:2] == (200, b"<html><body>the leaderboard</body></html>")
        for escape in (
            "/../kcal.duckdb",
            "/%2e%2e/kcal.duckdb",
            "/%2E%2E%2Fkcal.duckdb",
            "/..%2fmodels.toml",
            "/model=m1/../../kcal.duckdb",
            "/model=m1/%2e%2e/%2e%2e/models.toml",
            "//work/../../kcal.duckdb",
            "/link.txt",
        ):
            status, body, _ = get(server.port, escape)
            assert status == 404 and SECRET not in body, escape
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("PUT", "/model=m1/report.html", body=b"overwritten")
        assert connection.getresponse().status == 501  # read-only: GET and HEAD only
        connection.close()
    assert report_path(store, "m1").read_text() == "<html><body>model m1's report</body></html>"


def raw_request(port: int, request_line: bytes) -> bytes:
    """One request line sent as bytes (http.client refuses NUL and control bytes): the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_line + b"\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
        return reply


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (b"/%00", b"control character"),
        (b"/..%00/x", b"control character"),
        (b"/model=m1/report.html%00.png", b"control character"),
        (b"/%0a", b"control character"),
        (b"/\x00", b"control character"),
        (b"/%zz", b"bad percent-encoding"),
        (b"/%", b"bad percent-encoding"),
        (b"/%4", b"bad percent-encoding"),
        (b"/%ff%fe", b"not UTF-8"),
        (b"/" + b"a" * 3000, b"over 2048 characters"),
    ],
    ids=lambda v: repr(v[:24]) if isinstance(v, bytes) else None,
)
def test_a_malformed_request_gets_400_and_the_server_goes_on(store, path, why, capfd):
    with ReportServer(reports_dir(store), free_port()) as server:
        reply = raw_request(server.port, b"GET " + path + b" HTTP/1.0")
        assert reply.startswith(b"HTTP/1.0 400 "), reply[:200]
        assert why in reply and SECRET not in reply
        assert get(server.port, "/")[:2] == (200, b"<html><body>the leaderboard</body></html>")  # still up
    assert "Traceback" not in capfd.readouterr().err


def test_it_listens_on_localhost_only_and_stops(store):
    server = ReportServer(reports_dir(store), free_port())
    assert server._httpd.server_address[0] == "127.0.0.1"
    server.start()
    assert get(server.port, "/model=m1/report.html")[0] == 200
    server.stop()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", server.port)) != 0, "the reports port still accepts"
    server.stop()  # a second stop is harmless


def test_a_taken_port_says_how_to_choose_another(store):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            ReportsPortError, match=rf"port {port} \({REPORTS_PORT_ENV}\) is taken.*kcal demo"
        ):
            ReportServer(reports_dir(store), port)


def test_the_port_setting(monkeypatch):
    monkeypatch.delenv(REPORTS_PORT_ENV, raising=False)
    assert reports_port() == DEFAULT_REPORTS_PORT
    monkeypatch.setenv(REPORTS_PORT_ENV, "4123")
    assert reports_port() == 4123
    for wrong in ("0", "70000", "http", "-1"):
        monkeypatch.setenv(REPORTS_PORT_ENV, wrong)
        with pytest.raises(ReportsPortError, match="not a port number"):
            reports_port()


def test_kcal_ui_stops_at_once_on_a_taken_reports_port(tmp_path, monkeypatch, capsys):
    """Before anything starts (no partitions synced, no dagster dev): the error and how to fix it."""
    from assets import cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv(REPORTS_PORT_ENV, str(port))
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
        monkeypatch.setenv("KCAL_HOME", str(tmp_path / "kcal"))  # main() sets it: restored after the test
        assert cli.main(["--home", str(tmp_path / "kcal"), "ui"]) == 2
    error = capsys.readouterr().err
    assert f"kcal: error: the reports port {port} (KCAL_REPORTS_PORT) is taken" in error
    assert f"KCAL_REPORTS_PORT={port + 1} kcal ui" in error
    assert not (tmp_path / "dagster").exists()  # nothing was started or written
