"""assets/sqlite_engines.py: Dagster's SQLite storages reuse one engine per database file and read
the migration scripts once, on a real SQLite instance in a temporary DAGSTER_HOME, and record
exactly what they recorded without it."""

import sqlite3

import alembic.command
import pytest
import sqlalchemy
from alembic.config import Config
from alembic.script import ScriptDirectory
from dagster import DagsterInstance, DynamicPartitionsDefinition, asset, materialize
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.sql import get_alembic_config

from assets import sqlite_engines
from assets.sqlite_engines import (
    SCRIPT_DIRECTORY_USERS,
    STORAGE_MODULES,
    EngineCache,
    KeptScriptDirectory,
    cache_migration_scripts,
    cache_sqlite_engines,
)

RELATIONS = DynamicPartitionsDefinition(name="relation")


@asset(partitions_def=RELATIONS)
def lengths(context) -> int:
    return len(context.partition_key)


def three_runs(home, monkeypatch) -> DagsterInstance:
    """A real SQLite instance in `home` with two relation partitions, materialized three times."""
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = DagsterInstance.get()
    instance.add_dynamic_partitions("relation", ["P36", "P1412"])
    for key in ("P36", "P1412", "P36"):
        assert materialize([lengths], instance=instance, partition_key=key).success
    return instance


def assert_three_runs_recorded(instance: DagsterInstance) -> None:
    events = instance.fetch_materializations(lengths.key, limit=10).records
    assert sorted(e.partition_key for e in events) == ["P1412", "P36", "P36"]


class Counting:
    def __init__(self):
        self.urls = []

    def __call__(self, url, **options):
        self.urls.append(str(url))
        return sqlalchemy.create_engine(url, **options)


def test_the_code_location_makes_every_sqlite_storage_use_the_cache():
    import assets.definitions  # noqa: F401  (applies it on import)

    assert [m.create_engine for m in STORAGE_MODULES] == [sqlite_engines.ENGINES] * len(STORAGE_MODULES)
    assert [m.ScriptDirectory for m in SCRIPT_DIRECTORY_USERS] == [KeptScriptDirectory] * 2


def test_a_null_pool_engine_is_built_once_per_database_and_anything_else_passes_through(tmp_path):
    created = Counting()
    cache = EngineCache(created, size=2)
    null = sqlalchemy.pool.NullPool
    a, b, c = (f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db", "c.db"))
    first = cache(a, poolclass=null, connect_args={"timeout": 15})
    assert cache(a, poolclass=null, connect_args={"timeout": 15}) is first
    assert cache(a, poolclass=null, connect_args={"timeout": 5}) is not first  # other options: own engine
    assert cache(a, poolclass=null) is not first
    assert len(created.urls) == 3 and len(cache) == 2  # bounded: the oldest (timeout 15) was dropped
    assert cache(a, poolclass=null, connect_args={"timeout": 15}) is not first
    pooled = [cache(b), cache(b), cache(c, poolclass=null, echo=True)]  # pooled or extra options: never kept
    assert len({id(e) for e in pooled}) == 3 and len(created.urls) == 7
    with first.connect() as conn:  # a kept NullPool engine opens and closes real connections
        assert conn.exec_driver_sql("select 1").scalar() == 1
    first.dispose()
    with first.connect() as conn:  # and still works after Dagster's dispose() after each use
        assert conn.exec_driver_sql("select 2").scalar() == 2


def test_runs_on_a_sqlite_instance_build_one_engine_per_database_and_record_the_same(tmp_path, monkeypatch):
    created = Counting()
    for module in STORAGE_MODULES:
        monkeypatch.setattr(module, "create_engine", EngineCache(created))
    instance = three_runs(tmp_path, monkeypatch)
    # every partition lookup, event and run record went through a kept engine: one per database
    # file (runs, schedules, the event log's index and one shard per run), not one per connection
    databases = sorted(f"sqlite:///{p}" for p in tmp_path.rglob("*.db"))
    assert len(databases) == 3 + 3 and sorted(created.urls) == databases
    assert_three_runs_recorded(instance)
    assert instance.get_materialized_partitions(lengths.key) == {"P36", "P1412"}
    assert len(instance.get_runs()) == 3 and instance.get_dynamic_partitions("relation") == ["P36", "P1412"]


def test_a_dagster_that_no_longer_builds_engines_there_is_refused_by_module(monkeypatch):
    module = STORAGE_MODULES[2]
    monkeypatch.delattr(module, "create_engine")
    with pytest.raises(RuntimeError, match=module.__name__.replace(".", r"\.")):
        cache_sqlite_engines()


def shard_revisions(home) -> dict[str, str]:
    """Each run's event-log file → the alembic revision it was stamped with."""
    out = {}
    for path in sorted((home / "history" / "runs").glob("*.db")):
        if path.stem != "index":
            with sqlite3.connect(path) as conn:
                out[path.stem] = conn.execute("select version_num from alembic_version").fetchone()[0]
    return out


def test_new_run_files_are_stamped_at_head_with_the_scripts_read_once(tmp_path, monkeypatch):
    head = ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__)).get_current_head()
    for module in SCRIPT_DIRECTORY_USERS:
        monkeypatch.setattr(module, "ScriptDirectory", KeptScriptDirectory)
    monkeypatch.setattr(KeptScriptDirectory, "_kept", type(KeptScriptDirectory._kept)())  # none kept yet
    monkeypatch.setattr(KeptScriptDirectory, "built", 0)
    loads = []
    real_load = ScriptDirectory._load_revisions
    monkeypatch.setattr(ScriptDirectory, "_load_revisions", lambda self: loads.append(1) or real_load(self))
    instance = three_runs(tmp_path, monkeypatch)
    stamped = shard_revisions(tmp_path)
    assert len(stamped) == 3 and set(stamped.values()) == {head}  # the revision alembic's own would stamp
    # one directory per storage config (runs, event log, schedules: ≤ 3), its revisions loaded once,
    # where each new run file built two (the head check and the stamp) and loaded both
    assert 1 <= KeptScriptDirectory.built <= 3 and len(loads) == KeptScriptDirectory.built
    assert_three_runs_recorded(instance)


def test_another_script_location_is_built_anew_and_keep_false_restores_alembic(monkeypatch):
    for module in SCRIPT_DIRECTORY_USERS:
        monkeypatch.setattr(module, "ScriptDirectory", ScriptDirectory)
    other = Config()
    other.set_main_option("script_location", "alembic:templates/generic")
    assert KeptScriptDirectory.from_config(other) is not KeptScriptDirectory.from_config(other)
    dagster_config = get_alembic_config(sqlite_event_log.__file__)
    assert KeptScriptDirectory.from_config(dagster_config) is KeptScriptDirectory.from_config(dagster_config)
    cache_migration_scripts()
    assert alembic.command.ScriptDirectory is KeptScriptDirectory
    cache_migration_scripts(keep=False)
    assert [m.ScriptDirectory for m in SCRIPT_DIRECTORY_USERS] == [ScriptDirectory] * 2


def test_an_alembic_that_no_longer_builds_scripts_there_is_refused_by_module(monkeypatch):
    monkeypatch.delattr(alembic.command, "ScriptDirectory")
    with pytest.raises(RuntimeError, match=r"alembic\.command has no ScriptDirectory"):
        cache_migration_scripts()
