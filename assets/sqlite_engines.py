"""One SQLAlchemy engine per SQLite database file for Dagster's default storages, not one per query.

Dagster's SQLite run, event-log and schedule storages (what a DAGSTER_HOME without a database
config uses: kcal's default) call `create_engine(url, poolclass=NullPool)` at every connection,
and `has_table` (asked on every dynamic-partitions lookup, dozens of times per partitioned step)
builds one more. A new engine initialises its dialect on its first connection and starts with an
empty compiled-statement cache, so every query paid both: profiled over the test suite's
in-process runs (py-spy), SQLAlchemy took ~22 % of all CPU, most of it in engine set-up.

An engine with NullPool holds no connection between uses (each `connect()` opens a fresh sqlite3
connection and closing it closes the file), so reusing it changes nothing Dagster relies on: the
same connections, transactions, busy timeout and locking, and `engine.dispose()` (which Dagster calls
after each use) only recreates the empty pool. What is kept is the initialised dialect and the
statement cache. NullPool engines are kept per (URL, connect args) in a bounded LRU, since the
event log has one database file per run.

Applied by the code location (assets/definitions.py) and `get_instance` (assets/instance.py), so
every process that loads kcal's definitions or opens its instance (the CLI's in-process runs, run
workers, code servers) gets it; a Dagster process that never imports kcal (`dagster dev`'s
webserver and daemon) runs unchanged.
`bench/dagster_sqlite.py` measures it side by side; tests/assets/test_sqlite_engines.py checks it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

import sqlalchemy
from dagster._core.storage.event_log.sqlite import consolidated_sqlite_event_log, sqlite_event_log
from dagster._core.storage.runs.sqlite import sqlite_run_storage
from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage

# The modules whose storages build engines through their module-level `create_engine` name.
STORAGE_MODULES = (
    sqlite_event_log,
    consolidated_sqlite_event_log,
    sqlite_run_storage,
    sqlite_schedule_storage,
)
MAX_ENGINES = 256  # the index, runs and schedules databases plus the most recent runs' shards


class EngineCache:
    """`create_engine` with the same signature, returning a kept engine for a NullPool request
    (every other request is passed through: a pooled engine's connections must not be shared)."""

    def __init__(self, create=sqlalchemy.create_engine, size: int = MAX_ENGINES):
        self._create = create
        self._size = size
        self._engines: OrderedDict[tuple, sqlalchemy.engine.Engine] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0

    def __call__(self, url, **options):
        reusable = options.get("poolclass") is sqlalchemy.pool.NullPool
        if not reusable or set(options) - {"poolclass", "connect_args"}:
            return self._create(url, **options)
        key = (str(url), json.dumps(options.get("connect_args"), sort_keys=True, default=repr))
        with self._lock:
            engine = self._engines.get(key)
            if engine is not None:
                self._engines.move_to_end(key)
                return engine
        engine = self._create(url, **options)
        with self._lock:
            engine = self._engines.setdefault(key, engine)
            self.created += 1
            self._engines.move_to_end(key)
            while len(self._engines) > self._size:
                self._engines.popitem(last=False)
        return engine

    def __len__(self) -> int:
        return len(self._engines)


ENGINES = EngineCache()


def cache_sqlite_engines(engines=ENGINES) -> None:
    """Make Dagster's SQLite storages take their engines from `engines` (default ENGINES; the bench
    swaps in its variants; idempotent). Refuses, naming the module, when a Dagster upgrade no longer
    builds engines through `create_engine` there: silently keeping the slow path would hide the
    regression."""
    for module in STORAGE_MODULES:
        current = getattr(module, "create_engine", None)
        if current is None:
            raise RuntimeError(
                f"{module.__name__} has no create_engine any more: assets/sqlite_engines.py needs "
                "updating for this Dagster version"
            )
        if current is not engines:
            module.create_engine = engines
