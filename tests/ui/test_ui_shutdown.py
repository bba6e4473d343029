"""`kcal ui` (what `make ui` runs) stops with every process it started: dagster dev, its webserver,
daemon and code server (issue 16: after a stop, the webserver and dagster dev survived SIGINT and
SIGTERM and the daemon stayed orphaned).

Real servers on free ports over an empty temporary store: a terminal's Ctrl-C (a pty's ^C, which
the kernel sends to the foreground process group), `kill -INT` on the top pid only, and SIGTERM
to a UI started the way scripts start servers (`cmd &` without job control: SIGINT ignored, the
case plain `dagster dev` cannot be stopped in), and SIGKILL on the launcher (dagster dev gets its
parent-death signal). Each case asserts the whole tree, collected before the stop (and the
sessions it ran in, which catches orphans), is gone within 20 s, and that the report server (a
thread of the launcher, on KCAL_REPORTS_PORT) answered while the UI ran and is gone with it.
`dagster dev`'s SupersessionWarning is silenced (assets/ui.py): the log has none."""

import os
import signal

import pytest

from assets.ui import GRACE_S
from tests.ui.server import STOP_BOUND_S, start_ui, stop_and_check

# A killed launcher's group: dagster dev stops its services on the parent-death SIGINT, and what
# hangs the reaper ends after the grace, then SIGTERM and SIGKILL 5 s apart (core/processes.py).
REAPED_WITHIN_S = GRACE_S + 5 + 5 + 5

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "how",
    [
        "ctrl-c in a terminal",
        "kill -INT on the top pid",
        "SIGTERM, started with SIGINT ignored",
        "SIGKILL on the top pid",
    ],
)
def test_the_ui_stops_with_every_process_it_started(tmp_path, how):
    server = start_ui(
        tmp_path / "kcal",
        tmp_path / "dagster",
        tmp_path / "ui.log",
        terminal=how.startswith("ctrl-c"),
        sigint_ignored="ignored" in how,
    )
    try:
        up = server.wait_until_up()
        assert server.reports_status("/") == 404  # answering: the empty store has no reports yet
        if how.startswith("ctrl-c"):
            send = lambda: os.write(server.pty_master, b"\x03")  # noqa: E731
        elif how.startswith("kill -INT"):
            send = lambda: os.kill(server.proc.pid, signal.SIGINT)  # noqa: E731
        elif how.startswith("SIGTERM"):
            send = lambda: os.kill(server.proc.pid, signal.SIGTERM)  # noqa: E731
        else:
            send = lambda: os.kill(server.proc.pid, signal.SIGKILL)  # noqa: E731
        killed = how.startswith("SIGKILL")
        # Dagster's daemon has now and then hung after a SIGKILL of the launcher (its code server
        # gone): the reaper's grace then bounds it, not dagster dev.
        bound = REAPED_WITHIN_S if killed else STOP_BOUND_S
        took = stop_and_check(server, send, bound, exit_code=-signal.SIGKILL if killed else 130)
        print(f"{how}: up after {up:.1f} s, every process gone {took:.1f} s after the stop")
        assert killed or "stopping the Dagster UI" in server.log_tail()
        log = server.log.read_text(errors="replace")
        assert f"Reports: http://127.0.0.1:{server.reports_port}/" in log
        assert "SupersessionWarning" not in log and "dg dev" not in log
    finally:
        server.kill_everything()
