"""One SQLAlchemy engine per SQLite database file for Dagster's default storages, not one per query,
and their migration scripts read once per process, not twice per run.

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

The event log also opens a new database file for every run, and sets it up through alembic: it
asks for the head revision and stamps it, and each ask builds a `ScriptDirectory` that imports all
of Dagster's ~90 migration scripts again (~0.15 s of the ~0.4 s of CPU a trivial in-process run
took). `KeptScriptDirectory` keeps one per alembic config for Dagster's own script location: the
scripts are files of the installed package and do not change while a process runs, the revision
map is only read, and the new file is stamped with the same head revision.

Both are applied (`speed_up_sqlite_storages`) by the code location (assets/definitions.py) and
`get_instance` (assets/instance.py), so every process that loads kcal's definitions or opens its
instance (the CLI's in-process runs, run workers, code servers) gets them; a Dagster process that
never imports kcal (`dagster dev`'s webserver and daemon) runs unchanged. `bench/dagster_sqlite.py`
measures them side by side; tests/assets/test_sqlite_engines.py checks them.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from typing import ClassVar

import alembic.command
import sqlalchemy
from alembic.script import ScriptDirectory

from assets.dagster_internals import alembic_scripts_location, alembic_setup_module, sqlite_storage_modules

# The modules whose storages build engines through their module-level `create_engine` name (Dagster's
# private modules, reached only through assets/dagster_internals.py).
STORAGE_MODULES = sqlite_storage_modules()
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


def speed_up_sqlite_storages() -> None:
    """Both: the kept engines and the kept migration scripts (idempotent)."""
    cache_sqlite_engines()
    cache_migration_scripts()


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


# The modules that build a ScriptDirectory through their module-level name when Dagster sets up a
# SQLite database: Dagster's check of the head revision, and alembic's `stamp` command.
SCRIPT_DIRECTORY_USERS = (alembic_setup_module(), alembic.command)
DAGSTER_SCRIPTS = alembic_scripts_location()  # Dagster's own script location


class KeptScriptDirectory(ScriptDirectory):
    """`ScriptDirectory` whose `from_config` returns one kept directory per alembic config (its
    revision map loaded once) for Dagster's own script location; any other location is built
    anew each time, as alembic does."""

    _kept: ClassVar[weakref.WeakKeyDictionary] = weakref.WeakKeyDictionary()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    built: ClassVar[int] = 0  # directories built for Dagster's location (the tests count them)

    @classmethod
    def from_config(cls, config) -> ScriptDirectory:
        if config.get_main_option("script_location") != DAGSTER_SCRIPTS:
            return ScriptDirectory.from_config(config)
        with cls._lock:
            kept = cls._kept.get(config)
            if kept is None:
                kept = cls._kept[config] = ScriptDirectory.from_config(config)
                KeptScriptDirectory.built += 1
            return kept


def cache_migration_scripts(keep: bool = True) -> None:
    """Make Dagster's database set-up take its migration scripts from `KeptScriptDirectory`
    (keep=False restores alembic's own; idempotent). Refuses, naming the module, when a Dagster
    or alembic upgrade no longer builds them through `ScriptDirectory` there."""
    for module in SCRIPT_DIRECTORY_USERS:
        if getattr(module, "ScriptDirectory", None) not in (ScriptDirectory, KeptScriptDirectory):
            raise RuntimeError(
                f"{module.__name__} has no ScriptDirectory from alembic.script any more: "
                "assets/sqlite_engines.py needs updating for this Dagster or alembic version"
            )
        module.ScriptDirectory = KeptScriptDirectory if keep else ScriptDirectory
