"""The Dagster instance config kcal writes under DAGSTER_HOME: loaded by Dagster, no onboarding
pop-up, and a user's own config left alone."""

import pytest

from assets.instance import INSTANCE_CONFIG, get_instance
from kcal_pipeline.core.paths import dagster_home


@pytest.fixture
def own_dagster_home(monkeypatch):
    """No DAGSTER_HOME from outside (make test exports the repository's): the instance lives in
    the test's KCAL_HOME, and whatever get_instance sets is undone afterwards."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


def test_a_new_home_gets_the_config_and_dagster_loads_it(tmp_path, own_dagster_home):
    instance = get_instance(tmp_path)
    config = tmp_path / "dagster" / "dagster.yaml"
    assert dagster_home(tmp_path) == config.parent
    assert config.read_text() == INSTANCE_CONFIG
    assert instance.get_settings("nux") == {"enabled": False}  # validated against Dagster's schema
    assert not instance.nux_enabled


def test_an_empty_config_is_filled_and_a_users_own_is_kept(tmp_path, own_dagster_home):
    config = tmp_path / "dagster" / "dagster.yaml"
    config.parent.mkdir(parents=True)
    config.touch()  # what earlier kcal versions wrote
    get_instance(tmp_path)
    assert config.read_text() == INSTANCE_CONFIG
    own = "telemetry:\n  enabled: false\n"
    config.write_text(own)
    instance = get_instance(tmp_path)
    assert config.read_text() == own and instance.get_settings("telemetry") == {"enabled": False}


def test_the_scoring_pool_is_limited_per_run_and_an_earlier_default_is_upgraded(tmp_path, own_dagster_home):
    """One scoring run at a time (the pool's default limit), counted per run (no op slots that a
    killed CLI run could leave claimed); the config an earlier kcal wrote is replaced."""
    config = tmp_path / "dagster" / "dagster.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("nux:\n  enabled: false\n")
    instance = get_instance(tmp_path)
    assert config.read_text() == INSTANCE_CONFIG
    pools = instance.get_concurrency_config().pool_config
    assert (pools.default_pool_limit, pools.pool_granularity.value) == (1, "run")


def test_the_scoring_pool_has_its_limit_in_storage_before_any_run_is_queued(tmp_path, own_dagster_home):
    """Dagster's run queue takes a pool it has not yet initialised as unlimited for one pass, so two
    scoring runs queued together on a fresh instance both started (tests/assets/test_backfill.py saw
    peak 2). kcal writes the pool's limit when it opens the instance; a user's own limit is kept."""
    from dagster import DagsterInstance

    config = tmp_path / "dagster" / "dagster.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(INSTANCE_CONFIG)
    assert DagsterInstance.from_config(str(config.parent)).event_log_storage.get_concurrency_keys() == set()
    storage = get_instance(tmp_path).event_log_storage
    assert storage.get_concurrency_keys() == {"scoring"}
    assert storage.get_concurrency_info("scoring").slot_count == 1
    storage.set_concurrency_slots("scoring", 2)  # `dagster instance concurrency set scoring 2`
    assert get_instance(tmp_path).event_log_storage.get_concurrency_info("scoring").slot_count == 2
