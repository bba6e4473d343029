"""The persistent Dagster instance under DAGSTER_HOME and the dynamic partitions kept equal to the
store (the registry's models, the catalog's and the probe's relations).

Apart from the runner so that `kcal ui` and `kcal models add/remove/sync` set the instance up
without importing the code location's assets (~0.5 s of CPU less per command).
"""

import os
from collections.abc import Sequence
from pathlib import Path

from dagster import DagsterInstance

from assets.partitions import (
    model_partitions,
    partition_changes,
    probed_relations,
    relation_partition_changes,
    relation_partitions,
)
from assets.sqlite_engines import speed_up_sqlite_storages
from kcal_pipeline.core.paths import dagster_home, registry_path
from kcal_pipeline.scoring.models import Registry

# At most `limit` scoring runs at once (the instance config below sets 1: one device); more runs
# queue in the UI instead of fighting over the GPU or the CPU. The scoring asset is in this pool.
SCORING_POOL = "scoring"
# The Celery queue of the LM's steps (op tag `dagster-celery/queue`: assets/engine.py's workers).
SCORING_QUEUE = "scoring"

# The instance config kcal writes where there is none: default local storage (SQLite under
# DAGSTER_HOME); no "join the community" pop-up covering the asset graph in `dagster dev`; and
# the scoring pool (assets/scoring.py) limited per run: the run queue starts at most
# `default_limit` runs that score at once (one device; raise it with a device per slot, in this
# file or with `dagster instance concurrency set scoring N`), the others wait queued.
INSTANCE_CONFIG = """\
nux:
  enabled: false
concurrency:
  pools:
    granularity: run
    default_limit: 1
"""
# What earlier kcal versions wrote: replaced by the current config, unlike a user's own.
EARLIER_INSTANCE_CONFIGS = {"nux:\n  enabled: false\n"}


def get_instance(home: Path) -> DagsterInstance:
    """The persistent instance under DAGSTER_HOME (default KCAL_HOME/dagster), shared with `dagster dev`."""
    path = dagster_home(home)
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    text = config.read_text() if config.exists() else ""
    if not text.strip() or text in EARLIER_INSTANCE_CONFIGS:  # a user's own config is kept
        config.write_text(INSTANCE_CONFIG)
    os.environ["DAGSTER_HOME"] = str(path)
    speed_up_sqlite_storages()
    instance = DagsterInstance.get()
    initialize_pool_limits(instance)
    return instance


def initialize_pool_limits(instance: DagsterInstance) -> None:
    """Give the scoring pool its default limit in the instance's storage before any run is queued.

    Dagster's run queue reads the configured pools before it sets a newly seen pool to the default
    limit, so the first pass that meets `scoring` on a fresh instance takes it as unlimited: two
    backfills of one model queued together both started scoring (seen under load, peak 2)."""
    storage = instance.event_log_storage
    if SCORING_POOL not in storage.get_concurrency_keys():
        storage.initialize_concurrency_limit_to_default(SCORING_POOL)


def sync_model_partitions(home: Path, instance: DagsterInstance | None = None) -> list[str]:
    """Make the 'model' dynamic partitions equal the registry's keys; returns them."""
    instance = instance or get_instance(home)
    keys = [e.key for e in Registry(registry_path(home)).entries()]
    added, removed = partition_changes(instance.get_dynamic_partitions(model_partitions.name), keys)
    if added:
        instance.add_dynamic_partitions(model_partitions.name, added)
    for stale in removed:
        instance.delete_dynamic_partition(model_partitions.name, stale)
    return keys


def sync_relation_partitions(
    home: Path, instance: DagsterInstance | None = None, relations: Sequence[str] = ()
) -> list[str]:
    """Make the `catalog_relation` partitions equal the catalog; add `relations` (a run's) and
    every relation with a probe on disk to the probe's `relation` partitions, and drop those no
    longer in the catalog. Returns the probe's relations."""
    instance = instance or get_instance(home)
    probe = [*relations, *probed_relations(home)]
    for name, added, removed in relation_partition_changes(instance.get_dynamic_partitions, probe):
        if added:
            instance.add_dynamic_partitions(name, added)
        for stale in removed:
            instance.delete_dynamic_partition(name, stale)
    return instance.get_dynamic_partitions(relation_partitions.name)
