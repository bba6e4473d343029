"""Materialize what is missing, stage by stage, on a persistent Dagster instance.

This is what `kcal demo` runs: the same assets and resources as the UI, so a partition
materialized here shows up there (and the reverse). A (asset, partition) counts as done when the
instance has a materialization for it and its Parquet file exists; done work is never redone.
"""

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import AssetKey, DagsterInstance, MultiPartitionKey, materialize

from assets.definitions import all_assets
from assets.partitions import model_partitions, partition_changes
from kcal_pipeline.core.paths import dagster_home, registry_path
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.relations import relation_ids
from kcal_pipeline.scoring.models import Registry
from resources import default_resources

# Stages in dependency order; inside a stage, assets share one partitions definition. Facts are
# fetched for every relation (cheap, and the top-up pools of short answer spaces must not depend
# on which relations a run happened to select); the rest only for the selected relations.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("none", ("relations", "templates")),
    ("all_relations", ("wikidata_facts", "dropped_facts")),
    ("none", ("object_pools",)),
    ("relation", ("probe_instances", "statements")),
    ("none", ("data_quality",)),
    ("model_relation", ("statement_scores", "estimates")),
    ("model", ("metrics", "curves", "report")),
]
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


@dataclass
class RunSummary:
    materialized: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def get_instance(home: Path) -> DagsterInstance:
    """The persistent instance under DAGSTER_HOME (default KCAL_HOME/dagster), shared with `dagster dev`."""
    path = dagster_home(home)
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").touch()  # an empty config = default local storage, said explicitly
    os.environ["DAGSTER_HOME"] = str(path)
    return DagsterInstance.get()


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


def _partitions(kind: str, models: Sequence[str], relations: Sequence[str]) -> list[tuple[str | None, dict]]:
    if kind == "none":
        return [(None, {})]
    if kind == "all_relations":
        return [(r, {"relation": r}) for r in relation_ids()]
    if kind == "relation":
        return [(r, {"relation": r}) for r in relations]
    if kind == "model":
        return [(m, {"model": m}) for m in models]
    return [
        (MultiPartitionKey({"model": m, "relation": r}), {"model": m, "relation": r})
        for m in models
        for r in relations
    ]


def _is_done(instance: DagsterInstance, home: Path, asset: str, pkey, dims: dict) -> bool:
    if not partition_path(home, asset, dims).exists():
        return False
    if pkey is None:
        return instance.get_latest_materialization_event(AssetKey(asset)) is not None
    return str(pkey) in instance.get_materialized_partitions(AssetKey(asset))


def materialize_unpartitioned(home: Path, asset: str, settings: dict | None = None) -> None:
    """One unpartitioned asset (e.g. generated_templates, data_quality), whatever its state."""
    instance = get_instance(home)
    materialize(
        all_assets,
        selection=[AssetKey(asset)],
        instance=instance,
        resources=default_resources(home=str(home), **(settings or {})),
        run_config=QUIET_LOGS,
    )


def _upstream_changed(summary: RunSummary, position: int, kind: str, dims: dict) -> bool:
    """Aggregates over many partitions (object pools, data quality, a model's metrics) are
    recomputed when this run materialized any of the partitions they read."""
    if kind == "none" and position > 0:
        return bool(summary.materialized)
    if kind == "model":
        return any(label.startswith(f"{dims['model']}|") for _, label in summary.materialized)
    return False


def run_missing(
    home: Path,
    models: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
    settings: dict | None = None,
    refresh: bool = False,
    log: Callable[[str], None] = print,
) -> RunSummary:
    """Materialize every missing (asset, partition) for the given models and relations."""
    instance = get_instance(home)
    registered = sync_model_partitions(home, instance)
    models = list(models or registered)
    unknown = [m for m in models if m not in registered]
    if unknown:
        raise KeyError(f"model key(s) {unknown} are not registered; registered: {registered}")
    relations = list(relations or relation_ids())
    bad = [r for r in relations if r not in relation_ids()]
    if bad:
        raise KeyError(f"unknown relation(s) {bad}; known: {relation_ids()}")
    resources = default_resources(home=str(home), **(settings or {}))
    summary = RunSummary()
    for position, (kind, stage_assets) in enumerate(STAGES):
        for pkey, dims in _partitions(kind, models, relations):
            label = str(pkey) if pkey is not None else "-"
            stale = _upstream_changed(summary, position, kind, dims)
            done = [not (refresh or stale) and _is_done(instance, home, a, pkey, dims) for a in stage_assets]
            first_missing = done.index(False) if False in done else len(done)
            todo = list(stage_assets[first_missing:])
            summary.skipped += [(a, label) for a in stage_assets[:first_missing]]
            if not todo:
                continue
            log(f"materializing {', '.join(todo)} [{label}]")
            materialize(
                all_assets,
                selection=[AssetKey(a) for a in todo],
                partition_key=pkey,
                instance=instance,
                resources=resources,
                run_config=QUIET_LOGS,
            )
            summary.materialized += [(a, label) for a in todo]
    refresh_views(home)
    return summary
