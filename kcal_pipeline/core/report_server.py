"""The reports over http: `kcal ui` serves KCAL_HOME/reports on 127.0.0.1, read-only, so the report
links and plot images in the Dagster UI open in the browser (a browser refuses `file://` links from
an http page: "Not allowed to load local resource").

The port is a setting, not a free port picked at start: a report asset writes its link into the
run database when it runs (under `kcal demo`, the daemon or the UI), maybe while no UI runs, and the
link must still open under the next `kcal ui`. So the link's port, and the port `kcal ui` serves on,
both come from KCAL_REPORTS_PORT (default 3030); set it for `kcal demo` and `kcal ui` alike.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Mapping
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from kcal_pipeline.core.paths import cross_model_report_path

REPORTS_PORT_ENV = "KCAL_REPORTS_PORT"
DEFAULT_REPORTS_PORT = 3030
REPORTS_HOST = "127.0.0.1"  # the reports hold a store's results: never served beyond this machine
MAX_PATH = 2048  # no report path comes near it; a longer one is a bad request, not a lookup
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def bad_request(raw: str) -> str | None:
    """Why a request path is malformed (None if it is not): a `%` not followed by two hex digits, a
    path that does not decode to UTF-8, a control character (NUL included, raw or %-encoded), or
    more than MAX_PATH characters. The base class would raise on some of these (os.stat of a path
    with a NUL byte: "embedded null byte") and drop the connection with a traceback."""
    if len(raw) > MAX_PATH:
        return f"request path over {MAX_PATH} characters"
    path = raw.split("?", 1)[0].split("#", 1)[0]
    if _BAD_ESCAPE.search(path):
        return "bad percent-encoding in the request path"
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        return "request path is not UTF-8"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in decoded):
        return "control character in the request path"
    return None


class ReportsPortError(RuntimeError):
    """The reports port is unusable (taken, or not a port): the message says how to choose one."""


def reports_dir(home: Path) -> Path:
    """KCAL_HOME/reports: the only folder the report server serves."""
    return cross_model_report_path(home).parent


def reports_port(environ: Mapping[str, str] | None = None) -> int:
    """KCAL_REPORTS_PORT, or the default; anything but a port number 1-65535 is an error."""
    text = (os.environ if environ is None else environ).get(REPORTS_PORT_ENV, "").strip()
    if not text:
        return DEFAULT_REPORTS_PORT
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ReportsPortError(f"{REPORTS_PORT_ENV}={text!r}: not a port number (1-65535)")
    return int(text)


def report_url(home: Path, path: Path, port: int | None = None) -> str:
    """The http URL under which `kcal ui` serves `path` (a file under KCAL_HOME/reports)."""
    relative = Path(path).resolve().relative_to(reports_dir(Path(home).resolve()))
    return f"http://{REPORTS_HOST}:{port or reports_port()}/{quote(relative.as_posix(), safe='/=')}"


class _ReportsHandler(SimpleHTTPRequestHandler):
    """GET and HEAD of files under the served folder (the base class answers other methods 501).
    A malformed path (bad_request) is answered 400 and the server goes on. The base class already
    drops `..` and `.` segments after percent-decoding; a path that still resolves outside the
    folder (a symbolic link) is answered 404 like a missing file."""

    root: Path

    def send_head(self):
        why = bad_request(self.path)
        if why is not None:
            self.send_error(400, why)
            return None
        try:
            resolved = Path(self.translate_path(self.path)).resolve()
        except (OSError, ValueError):  # whatever else the file system refuses to look up
            self.send_error(400, "request path cannot be looked up")
            return None
        if resolved != self.root and self.root not in resolved.parents:
            self.send_error(404, "File not found")
            return None
        return super().send_head()

    def end_headers(self) -> None:
        # reports and plot images are rewritten in place by each materialization: never cache them
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:
        """Quiet: the launcher's terminal belongs to the Dagster UI's log."""


class ReportServer:
    """A thread serving `folder` on 127.0.0.1:`port`. The port is bound when the object is made
    (a taken port raises ReportsPortError at once); `start`/`stop`, or `with`, run the thread."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = Path(folder).resolve()
        handler = type("Handler", (_ReportsHandler,), {"root": self.folder})
        handler = partial(handler, directory=str(self.folder))
        try:
            self._httpd = ThreadingHTTPServer((REPORTS_HOST, port), handler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise ReportsPortError(
                f"the reports port {port} ({REPORTS_PORT_ENV}) is taken, maybe by another `kcal ui`; "
                f"choose a free one, e.g. `{REPORTS_PORT_ENV}={port + 1} kcal ui`, and use the same "
                f"{REPORTS_PORT_ENV} for `kcal demo` so the report links point to it"
            ) from None
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{REPORTS_HOST}:{self.port}/"

    def start(self) -> ReportServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kcal-reports", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (idempotent)."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ReportServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
