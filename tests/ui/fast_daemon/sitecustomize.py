"""Put on PYTHONPATH by the UI tests that run a backfill (tests/ui/server.py, `fast_daemon=True`):
in the `dagster-daemon` process that `dagster dev` starts (`python -m dagster._daemon run`), the
backfill loop runs every 2 s instead of every 30 s, and its SQLite storages keep their engines and
migration scripts, as in tests/assets/daemon.py (which says why neither changes behaviour under
test). Every other process (webserver, code server, runs) is left as it is."""

import sys
from pathlib import Path

if sys.orig_argv[1:3] == ["-m", "dagster._daemon"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.assets
    from assets.sqlite_engines import speed_up_sqlite_storages
    from tests.assets.daemon import shorten_backfill_loop

    shorten_backfill_loop()
    speed_up_sqlite_storages()
    del sys.path[0]
