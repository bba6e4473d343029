"""assets/sqlite_engines.py: Dagster's SQLite storages reuse one engine per database file, on a
real SQLite instance in a temporary DAGSTER_HOME, and record exactly what they recorded without it."""

import pytest
import sqlalchemy
from dagster import DagsterInstance, DynamicPartitionsDefinition, asset, materialize

from assets import sqlite_engines
from assets.sqlite_engines import STORAGE_MODULES, EngineCache, cache_sqlite_engines

RELATIONS = DynamicPartitionsDefinition(name="relation")


@asset(partitions_def=RELATIONS)
def lengths(context) -> int:
    return len(context.partition_key)


class Counting:
    def __init__(self):
        self.urls = []

    def __call__(self, url, **options):
        self.urls.append(str(url))
        return sqlalchemy.create_engine(url, **options)


def test_the_code_location_makes_every_sqlite_storage_use_the_cache():
    import assets.definitions  # noqa: F401  (applies it on import)

    assert [m.create_engine for m in STORAGE_MODULES] == [sqlite_engines.ENGINES] * len(STORAGE_MODULES)


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
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = DagsterInstance.get()
    instance.add_dynamic_partitions("relation", ["P36", "P1412"])
    for key in ("P36", "P1412", "P36"):
        assert materialize([lengths], instance=instance, partition_key=key).success
    # every partition lookup, event and run record went through a kept engine: one per database
    # file (runs, schedules, the event log's index and one shard per run), not one per connection
    databases = sorted(f"sqlite:///{p}" for p in tmp_path.rglob("*.db"))
    assert len(databases) == 3 + 3 and sorted(created.urls) == databases
    events = instance.fetch_materializations(lengths.key, limit=10).records
    assert sorted(e.partition_key for e in events) == ["P1412", "P36", "P36"]
    assert instance.get_materialized_partitions(lengths.key) == {"P36", "P1412"}
    assert len(instance.get_runs()) == 3 and instance.get_dynamic_partitions("relation") == ["P36", "P1412"]


def test_a_dagster_that_no_longer_builds_engines_there_is_refused_by_module(monkeypatch):
    module = STORAGE_MODULES[2]
    monkeypatch.delattr(module, "create_engine")
    with pytest.raises(RuntimeError, match=module.__name__.replace(".", r"\.")):
        cache_sqlite_engines()
