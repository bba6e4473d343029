"""Issue 35 #4: a partition's data version follows its asset's code version through kcal's own
rerun decision (assets.runner.expected_version / is_up_to_date / the step's to-do list, what
`kcal demo` uses to say "nothing to do"), not only through Dagster's staleness. A new code
version of one asset, and nothing else changed, makes exactly that asset's partitions stale."""

import polars as pl
import pytest
from dagster import AssetKey

import assets.runner as runner
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY, stored_version
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from resources import default_resources

SCORES = {"model": DEFAULT_MODEL.key, "relation": "P36"}


def step_of(asset: str) -> runner.Step:
    return next(step for step in runner.STAGES if asset in step.assets)


def with_code_version(monkeypatch, asset: str, version: str) -> None:
    """The code location as if `asset`'s code had been given another code version (a rebuild)."""
    key = AssetKey(asset)
    patched = [
        a.map_asset_specs(
            lambda spec: spec.replace_attributes(code_version=version) if spec.key == key else spec
        )
        if key in a.keys
        else a
        for a in runner.all_assets
    ]
    monkeypatch.setattr(runner, "all_assets", patched)
    assert next(a for a in runner.all_assets if key in a.keys).code_versions_by_key[key] == version


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A store whose first step (the catalogs, relations, templates) a real Dagster run wrote, and
    its RunContext as `kcal demo` makes it (the instance is not needed to decide)."""
    home = tmp_path / "kcal"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    resources = default_resources(home=str(home))
    first = step_of("templates")
    runner.run_stage(runner.get_instance(home), resources, list(first.assets))
    run = runner.RunContext(
        home, (DEFAULT_MODEL.key,), ("P36",), resources, instance=None, log=lambda m: None
    )
    return run


def test_a_new_code_version_alone_makes_a_materialized_partition_stale(store, monkeypatch):
    home, resources, first = store.home, store.resources, step_of("templates")
    assert stored_version(partition_path(home, "templates")) not in (None, "unversioned")
    assert runner.is_up_to_date(home, "templates", {}, resources)
    assert runner._todo(store, first, {}) == []  # `kcal demo`: nothing to do
    before = runner.expected_version(home, "templates", {}, resources)

    with_code_version(monkeypatch, "templates", "6-changed")
    assert runner.expected_version(home, "templates", {}, resources) != before
    assert not runner.is_up_to_date(home, "templates", {}, resources)
    assert runner._todo(store, first, {}) == ["templates"]  # exactly the changed asset reruns


def test_a_new_code_version_makes_a_model_relation_partition_stale(store, monkeypatch):
    """statement_scores (model × relation), the costliest partition: its file as the IO manager
    records it, then only the scorer's code version changes."""
    home, resources, step = store.home, store.resources, step_of("statement_scores")
    version = runner.expected_version(home, "statement_scores", SCORES, resources)
    write_parquet_atomic(
        pl.DataFrame({"statement_id": ["s1"], "ll_sum": [-1.0]}),
        partition_path(home, "statement_scores", SCORES),
        metadata={DATA_VERSION_KEY: version},
    )
    assert runner.is_up_to_date(home, "statement_scores", SCORES, resources)
    assert runner._todo(store, step, SCORES) == []

    with_code_version(monkeypatch, "statement_scores", "5-changed")
    assert not runner.is_up_to_date(home, "statement_scores", SCORES, resources)
    assert runner._todo(store, step, SCORES) == ["statement_scores"]
    # the templates' code did not change: their partition stays done
    assert runner.is_up_to_date(home, "templates", {}, resources)
