"""assets/dagster_internals.py, the one door to Dagster's internals: each of its functions against
the installed Dagster, doing what kcal relies on. A failure names the function and what changed in
Dagster; fix that function (and only it), then update DAGSTER_VERSION_CHECKED.

Also: no other module of kcal_pipeline, assets or resources imports Dagster's private modules, and
the words by which assets/checks.py silences the preview warning of partitioned checks are still
Dagster's.
"""

import inspect
import re
import string
import warnings
from pathlib import Path

import dagster
import pytest
from alembic.script import ScriptDirectory
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRun,
    Definitions,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    PreviewWarning,
    RunsFilter,
    StaticPartitionsDefinition,
    asset,
    asset_check,
    define_asset_job,
    materialize,
)
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.storage import sql as dagster_sql
from dagster._core.storage.tags import BACKFILL_ID_TAG, TagType, get_tag_type

from assets import dagster_internals as door
from assets.sqlite_engines import KeptScriptDirectory

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "workspace.yaml"
# An import of a private module of Dagster, or its name in a string (e.g. a warnings filter's module).
PRIVATE_USE = re.compile(r"\bdagster\._")


def changed(function: str, what: str) -> str:
    """The failure message: which function of the door a Dagster upgrade broke, and how."""
    return (
        f"assets/dagster_internals.py {function}: {what} (Dagster {dagster.__version__}; "
        f"last checked against {door.DAGSTER_VERSION_CHECKED})"
    )


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as instance:
        yield instance


def test_the_door_was_reviewed_for_the_installed_dagster():
    assert dagster.__version__ == door.DAGSTER_VERSION_CHECKED, (
        f"Dagster is {dagster.__version__}, assets/dagster_internals.py was last reviewed against "
        f"{door.DAGSTER_VERSION_CHECKED}: review each of its functions (this file's tests say which "
        "broke), then set DAGSTER_VERSION_CHECKED"
    )


def test_no_other_module_uses_dagsters_private_modules():
    outside = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for folder in ("kcal_pipeline", "assets", "resources")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != ROOT / "assets" / "dagster_internals.py"
        for text in [path.read_text("utf-8")]
        for m in PRIVATE_USE.finditer(text)
    ]
    assert not outside, f"Dagster's private modules are used only in assets/dagster_internals.py: {outside}"


def test_hidden_tag_is_stored_and_filtered_by_but_hidden_from_the_ui(instance):
    key = door.hidden_tag("kcal_test")
    assert get_tag_type(key) == TagType.HIDDEN, changed(
        "hidden_tag", f"{key!r} is no longer a hidden tag (the UI's GraphQL API would show it)"
    )

    @asset
    def one() -> int:
        return 1

    run_id = materialize([one], instance=instance, tags={key: "7"}).run_id
    found = [r.run_id for r in instance.get_runs(filters=RunsFilter(tags={key: "7"}))]
    assert found == [run_id], changed("hidden_tag", "a run is no longer found by its hidden tag")


def test_repository_label_tags_are_the_tag_dagster_gives_a_run_of_a_code_location():
    origin = door.repository_origin(Path("no-workspace.yaml"), "assets.definitions", "kcal", "__repository__")
    run = DagsterRun(job_name="dataset", remote_job_origin=origin.get_job_origin("dataset"))
    ours = door.repository_label_tags("__repository__", "kcal")
    theirs = {k: v for k, v in run.tags_for_storage().items() if k in ours}
    assert theirs == ours, changed(
        "repository_label_tags",
        f"Dagster labels a run of that origin with {dict(run.tags_for_storage())}, not {ours}",
    )


def test_singleton_repository_name_is_the_name_of_a_definitions_repository():
    name = door.singleton_repository_name()
    assert name == SINGLETON_REPOSITORY_NAME, changed(
        "singleton_repository_name", f"{name!r} is not Dagster's SINGLETON_REPOSITORY_NAME"
    )

    @asset
    def one() -> int:
        return 1

    assert Definitions(assets=[one]).get_repository_def().name == name, changed(
        "singleton_repository_name", "a Definitions with assets names its repository otherwise"
    )


@pytest.mark.parametrize("workspace", [WORKSPACE, Path("no-workspace.yaml")], ids=["workspace", "module"])
def test_repository_origin_names_the_code_location_from_the_workspace_or_the_module(workspace):
    origin = door.repository_origin(workspace, "assets.definitions", "kcal", "__repository__")
    got = (
        origin.code_location_origin.location_name,
        origin.repository_name,
        origin.code_location_origin.loadable_target_origin.module_name,
        origin.get_label(),
    )
    assert got == ("kcal", "__repository__", "assets.definitions", "__repository__@kcal"), changed(
        "repository_origin", f"the origin from {workspace.name} is {got}"
    )


def test_runs_created_with_origin_gives_an_in_process_run_its_origin(instance):
    @asset
    def one() -> int:
        return 1

    job = Definitions(assets=[one], jobs=[define_asset_job("stage", [one])]).resolve_job_def("stage")
    origin = door.repository_origin(Path("no-workspace.yaml"), "assets.definitions", "kcal", "__repository__")
    with door.runs_created_with_origin(instance, origin, "stage"):
        inside = job.execute_in_process(instance=instance).run_id
    outside = job.execute_in_process(instance=instance).run_id
    run = instance.get_run_by_id(inside)
    assert run.remote_job_origin is not None, changed(
        "runs_created_with_origin",
        "execute_in_process no longer creates its run through DagsterInstance.create_run_for_job "
        "(or that no longer takes remote_job_origin): the run has no origin",
    )
    assert (run.remote_job_origin.job_name, run.remote_job_origin.repository_origin) == ("stage", origin), (
        changed("runs_created_with_origin", f"the run's origin is {run.remote_job_origin}")
    )
    assert "create_run_for_job" not in vars(instance), changed(
        "runs_created_with_origin", "the instance keeps the patched create_run_for_job"
    )
    assert instance.get_run_by_id(outside).remote_job_origin is None, changed(
        "runs_created_with_origin", "a run created after it still has the origin"
    )


def test_submit_asset_backfill_adds_a_backfill_of_exactly_those_partitions(instance):
    models = DynamicPartitionsDefinition(name="model")
    pairs = MultiPartitionsDefinition({"model": models, "relation": StaticPartitionsDefinition(["P1", "P2"])})

    @asset(partitions_def=pairs)
    def scores() -> int:
        return 1

    @asset(partitions_def=models, deps=[scores])
    def metrics() -> int:
        return 1

    instance.add_dynamic_partitions("model", ["m", "n"])
    wanted = {
        (AssetKey("scores"), MultiPartitionKey({"model": "m", "relation": "P2"})),
        (AssetKey("metrics"), "m"),
    }
    graph = Definitions(assets=[scores, metrics]).resolve_asset_graph()
    backfill_id = door.submit_asset_backfill(
        instance, graph, wanted, tags={"kcal/source": "test"}, title="t", description="d"
    )
    assert len(backfill_id) == 8 and set(backfill_id) <= set(string.ascii_lowercase)
    backfill = instance.get_backfill(backfill_id)
    assert backfill is not None, changed("submit_asset_backfill", "the instance has no backfill of that id")
    targeted = {
        (p.asset_key, p.partition_key)
        for p in backfill.asset_backfill_data.target_subset.iterate_asset_partitions()
    }
    assert targeted == wanted, changed("submit_asset_backfill", f"the backfill targets {targeted}")
    got = (
        backfill.status,
        backfill.tags,
        backfill.title,
        backfill.description,
        set(backfill.asset_selection),
    )
    assert got == (
        BulkActionStatus.REQUESTED,
        {"kcal/source": "test"},
        "t",
        "d",
        {scores.key, metrics.key},
    ), changed("submit_asset_backfill", f"the backfill is {got}")


def test_backfill_is_done_exactly_when_dagster_counts_the_backfill_ended():
    terminal = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
    done = {status.value for status in BulkActionStatus if door.backfill_is_done(status)}
    assert done == terminal, changed("backfill_is_done", f"the ended statuses are now {sorted(done)}")
    # kcal backfill --wait prints the status's value and exits 0 on these (assets/cli.py)
    assert {"COMPLETED", "COMPLETED_SUCCESS"} <= {s.value for s in door.BackfillStatus}, changed(
        "BackfillStatus", "the completed statuses are named otherwise"
    )


def test_backfill_runs_filter_finds_the_runs_a_backfill_launched(instance):
    @asset
    def one() -> int:
        return 1

    # the tag the backfill daemon puts on each run it launches (DagsterRun.tags_for_backfill_id)
    run_id = materialize([one], instance=instance, tags={BACKFILL_ID_TAG: "abcdefgh"}).run_id
    materialize([one], instance=instance)
    found = [r.run_id for r in instance.get_runs(filters=door.backfill_runs_filter("abcdefgh"))]
    assert found == [run_id], changed("backfill_runs_filter", f"the filter finds {found}")
    assert door.backfill_runs_filter("x").tags == DagsterRun.tags_for_backfill_id("x"), changed(
        "backfill_runs_filter", "it no longer filters by the tag backfill runs carry"
    )


def test_sqlite_storage_modules_are_every_sqlite_storage_that_builds_engines_by_module_name():
    modules = door.sqlite_storage_modules()
    for module in modules:
        source = inspect.getsource(module)
        assert hasattr(module, "create_engine") and "create_engine(" in source, changed(
            "sqlite_storage_modules", f"{module.__name__} no longer builds engines through create_engine"
        )
        assert "poolclass=NullPool" in source, changed(
            "sqlite_storage_modules", f"{module.__name__} no longer asks for NullPool engines"
        )
    # a SQLite storage module Dagster added that builds engines would escape the engine cache
    storage = Path(dagster_sql.__file__).parent
    building = {
        ".".join(("dagster", *path.relative_to(storage.parents[1]).with_suffix("").parts))
        for path in storage.rglob("*sqlite*.py")
        if "create_engine(" in path.read_text("utf-8")
    }
    assert building == {m.__name__ for m in modules}, changed(
        "sqlite_storage_modules", f"the SQLite storages that build engines are {sorted(building)}"
    )


def test_alembic_setup_module_checks_the_head_revision_through_its_script_directory_name():
    module = door.alembic_setup_module()
    assert module.ScriptDirectory in (ScriptDirectory, KeptScriptDirectory), changed(
        "alembic_setup_module", f"{module.__name__}.ScriptDirectory is {module.ScriptDirectory}"
    )
    uses = [
        name
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__
        and "ScriptDirectory.from_config" in inspect.getsource(function)
    ]
    assert uses, changed("alembic_setup_module", f"no function of {module.__name__} builds a ScriptDirectory")


def test_alembic_scripts_location_is_the_one_the_storages_configure_alembic_with():
    from dagster._core.storage.event_log.sqlite import sqlite_event_log

    configured = dagster_sql.get_alembic_config(sqlite_event_log.__file__).get_main_option("script_location")
    assert door.alembic_scripts_location() == configured, changed(
        "alembic_scripts_location", f"the storages configure alembic with {configured!r}"
    )


def test_the_partitioned_check_preview_warning_still_has_the_words_checks_py_silences():
    from assets.checks import PARTITIONED_CHECK_PREVIEW

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @asset_check(asset="a", partitions_def=StaticPartitionsDefinition(["x"]))
        def a_check():
            pass

    previews = [str(w.message) for w in caught if issubclass(w.category, PreviewWarning)]
    assert all(re.match(PARTITIONED_CHECK_PREVIEW, text) for text in previews), (
        f"assets/checks.py PARTITIONED_CHECK_PREVIEW no longer matches Dagster's warning: {previews}"
    )
