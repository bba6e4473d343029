"""`dagster-daemon run` for a test: `python -m tests.assets.daemon run -w workspace.yaml`, the same
daemon with its backfill loop every 2 s instead of Dagster's fixed 30 s (DEFAULT_DAEMON_INTERVAL_SECONDS
in dagster/_daemon/controller.py, which no setting changes). A backfill advances one stage per loop, so
at 30 s the test spent most of its time asleep; the behaviour under test (what a loop submits, the
pool's limit) is the same at any interval. Not 1 s: each iteration re-reads every backfill's
materializations and enumerates its partitions (70 % of the daemon's CPU, py-spy), and at 1 s the
daemon took ~13 s more CPU over the backfill test, on the cores its runs need, for no shorter run.

The backfill loop imports the constant from the controller at each start (dagster 1.13), so it is
set there; setting it on dagster._daemon.backfill had no effect (the loop kept 30 s). The check below
fails loudly should a Dagster upgrade read it from elsewhere again.

Its SQLite storages also keep one engine per database and read the migration scripts once
(assets/sqlite_engines.py, as every process that loads kcal's code location does): most of the
daemon's CPU is in those queries and in setting up each new run's event-log file."""

import inspect
import sys

import dagster._daemon.backfill as backfill
import dagster._daemon.controller as controller
from dagster._daemon.cli import main

from assets.sqlite_engines import speed_up_sqlite_storages

BACKFILL_LOOP_S = 2


def shorten_backfill_loop(seconds: int = BACKFILL_LOOP_S) -> None:
    source = inspect.getsource(backfill.execute_backfill_iteration_loop)
    if "from dagster._daemon.controller import DEFAULT_DAEMON_INTERVAL_SECONDS" not in source:
        raise RuntimeError("the backfill loop no longer reads controller.DEFAULT_DAEMON_INTERVAL_SECONDS")
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = seconds


if __name__ == "__main__":
    shorten_backfill_loop()
    speed_up_sqlite_storages()
    sys.argv[0] = "dagster-daemon"
    sys.exit(main())
