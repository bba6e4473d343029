"""`dagster-daemon run` for a test: `python -m tests.assets.daemon run -w workspace.yaml`, the same
daemon with its backfill loop every second instead of Dagster's fixed 30 s (DEFAULT_DAEMON_INTERVAL_SECONDS
in dagster/_daemon/backfill.py, which no setting changes). A backfill advances one stage per loop, so
at 30 s the test spent most of its time asleep; the behaviour under test (what a loop submits, the
pool's limit) is the same at either interval."""

import sys

import dagster._daemon.backfill as backfill
from dagster._daemon.cli import main

BACKFILL_LOOP_S = 1

if __name__ == "__main__":
    backfill.DEFAULT_DAEMON_INTERVAL_SECONDS = BACKFILL_LOOP_S
    sys.argv[0] = "dagster-daemon"
    sys.exit(main())
