"""The one door to Dagster's internals: review this module on every Dagster upgrade.

Every use kcal makes of what Dagster does not offer as its public API lives here, each behind a small
function that says why no public API serves: the imports from Dagster's private modules (the only
ones in kcal_pipeline, assets and resources), and the few undocumented methods and behaviours kcal
relies on. tests/assets/test_dagster_internals.py exercises each function against the installed
Dagster and names the function whose assumption an upgrade broke; it also fails when Dagster's
private modules are used anywhere else, and when the installed Dagster is not the one this module was
last reviewed against (DAGSTER_VERSION_CHECKED).
"""

from __future__ import annotations

import functools
import random
import string
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from dagster import AssetKey, DagsterInstance, Definitions, RunsFilter
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.execution.backfill import (
    BULK_ACTION_TERMINAL_STATUSES,
    BulkActionStatus,
    PartitionBackfill,
)
from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage import sql as dagster_sql
from dagster._core.storage.event_log.sqlite import consolidated_sqlite_event_log, sqlite_event_log
from dagster._core.storage.runs.sqlite import sqlite_run_storage
from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage
from dagster._core.workspace.load import location_origin_from_module_name, location_origins_from_yaml_paths

DAGSTER_VERSION_CHECKED = "1.13.27"

# ---- Run tags ------------------------------------------------------------------------------------
# Two constants of Dagster's private tags module (core.storage.tags), written out, not imported:
# tests/assets/test_dagster_internals.py checks what they do (a hidden tag, the label Dagster gives a
# run of a code location) against the installed Dagster, so an upgrade that changes them fails there.
HIDDEN_TAG_PREFIX = ".dagster/"
REPOSITORY_LABEL_TAG = ".dagster/repository"


def hidden_tag(name: str) -> str:
    """A run tag key that Dagster stores and filters runs by (RunsFilter(tags=...)) like any other,
    but that its UI never shows (assets/run_tags.py)."""
    # No public API hides a tag: the webserver's GraphQL API drops tags under Dagster's own hidden
    # prefix (dagster_graphql resolve_tags, TagType.HIDDEN), a constant of a private module.
    return f"{HIDDEN_TAG_PREFIX}{name}"


def repository_label_tags(repository: str, location: str) -> dict[str, str]:
    """The tag by which the UI lists a run under its job of `repository` in code location
    `location`, as it lists the runs it launched (assets/jobs.py IN_CODE_LOCATION)."""
    # Dagster sets this tag only on runs created from a workspace; the key is a private constant.
    return {REPOSITORY_LABEL_TAG: f"{repository}@{location}"}


# ---- The code location as the UI knows it --------------------------------------------------------


def singleton_repository_name() -> str:
    """The name of the one repository a code location of one Definitions holds."""
    # Definitions.get_repository_def has no underscore but is not marked public (no @public): the
    # name is Dagster's private SINGLETON_REPOSITORY_NAME. It is what the UI's origins carry.
    return Definitions().get_repository_def().name


def repository_origin(workspace: Path, module: str, location: str, repository: str) -> RemoteRepositoryOrigin:
    """The origin of `repository` in code location `location` as the UI derives it: from
    `workspace` (the workspace.yaml `kcal ui` has `dagster dev` load) when it is a file, else the same
    location made from its definitions `module` (an installed kcal has no workspace.yaml)."""
    # A run's origin is only ever built by Dagster's workspace loading: no public API makes one.
    if workspace.is_file():
        origins = {
            origin.location_name: origin for origin in location_origins_from_yaml_paths([str(workspace)])
        }
        code_location = origins[location]
    else:
        code_location = location_origin_from_module_name(module, None, None, location)
    return RemoteRepositoryOrigin(code_location, repository)


@contextmanager
def runs_created_with_origin(
    instance: DagsterInstance, origin: RemoteRepositoryOrigin, job_name: str
) -> Iterator[None]:
    """While it lasts, a run `instance` creates has job `job_name` of `origin` as its origin, as a
    run the UI launched has (the UI's Overview timeline leaves out runs without one)."""
    # `execute_in_process` has no workspace, takes no origin, and Dagster has no public way to give
    # one. The smallest private use: its one call of `DagsterInstance.create_run_for_job`, which
    # accepts `remote_job_origin`, gets it here, on this instance object only.
    job_origin = RemoteJobOrigin(origin, job_name)
    instance.create_run_for_job = functools.partial(instance.create_run_for_job, remote_job_origin=job_origin)
    try:
        yield
    finally:
        del instance.create_run_for_job  # the class's method again


# ---- Asset backfills -----------------------------------------------------------------------------

# The status of a backfill (`instance.get_backfill(id).status`), for annotations: an Enum whose
# `.value` is its name ("COMPLETED_SUCCESS", ...).
BackfillStatus = BulkActionStatus


def submit_asset_backfill(
    instance: DagsterInstance,
    asset_graph,
    asset_partitions: Iterable[tuple[AssetKey, str | None]],
    *,
    tags: Mapping[str, str],
    title: str,
    description: str,
) -> str:
    """Add an asset backfill of exactly `asset_partitions` ((asset key, partition key or None)
    pairs of `asset_graph`, the code location's `Definitions.resolve_asset_graph()`) to `instance`,
    for its daemon to run; returns the backfill's id."""
    # Dagster launches backfills only from its UI, its GraphQL API (a running webserver) or its CLI
    # (a job's partitions, not an asset graph subset): building the PartitionBackfill is private.
    subset = AssetGraphSubset.from_asset_partition_set(set(asset_partitions), asset_graph)
    backfill = PartitionBackfill.from_asset_graph_subset(
        # an id of the form Dagster gives backfills (its make_new_backfill_id: 8 lowercase letters)
        backfill_id="".join(random.choices(string.ascii_lowercase, k=8)),
        backfill_timestamp=time.time(),
        tags=dict(tags),
        dynamic_partitions_store=instance,
        asset_graph_subset=subset,
        title=title,
        description=description,
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id


def backfill_is_done(status: BackfillStatus) -> bool:
    """Whether a backfill of this status has ended (completed, failed or canceled)."""
    # Which statuses are terminal is Dagster's private list (its backfill daemon's own).
    return status in BULK_ACTION_TERMINAL_STATUSES


def backfill_runs_filter(backfill_id: str) -> RunsFilter:
    """The runs a backfill launched."""
    # RunsFilter.for_backfill is not marked public (the tag it filters by is a private constant).
    return RunsFilter.for_backfill(backfill_id)


# ---- Dagster's SQLite storages (assets/sqlite_engines.py) ----------------------------------------


def sqlite_storage_modules() -> tuple[ModuleType, ...]:
    """The modules of Dagster's SQLite event-log, run and schedule storages: each builds its engines
    through its module-level name `create_engine`, which assets/sqlite_engines.py replaces."""
    # A storage takes only its database's path: no public setting or hook chooses its engine.
    return (sqlite_event_log, consolidated_sqlite_event_log, sqlite_run_storage, sqlite_schedule_storage)


def alembic_setup_module() -> ModuleType:
    """The module through which Dagster's SQL storages set a database up with alembic: its check of
    the head revision builds a `ScriptDirectory` through its module-level name of that class."""
    # The set-up is internal to the storages; no public hook reaches it.
    return dagster_sql


def alembic_scripts_location() -> str:
    """The alembic script location of Dagster's own migrations (an alembic config's
    `script_location` option), as the storages configure alembic with it."""
    # A private constant of the module above.
    return dagster_sql.ALEMBIC_SCRIPTS_LOCATION
