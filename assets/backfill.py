"""`kcal backfill --model M`: one Dagster backfill that scores a model on every probe relation and
then evaluates it, run by the daemon of `kcal ui` (`make ui`) and shown on the UI's Backfills page.

The backfill is an asset backfill over exactly the model's partitions: statement_scores and the
estimation outputs of model × relation for each probe relation that has statements, then the
model's evaluation assets and report (Dagster runs them after the relations they read). The
scoring runs wait in the run queue for the `scoring` pool (one at a time by default).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from dagster import AssetKey, MultiPartitionKey

from assets.dagster_internals import (
    BackfillStatus,
    backfill_is_done,
    backfill_runs_filter,
    submit_asset_backfill,
)
from assets.definitions import defs
from assets.jobs import ON_DEMAND
from assets.runner import (
    KIND_OF,
    STAGE_OF,
    check_run,
    get_instance,
    sync_model_partitions,
    sync_relation_partitions,
)
from kcal_pipeline.core.storage import partition_path


class AssetPartition(NamedTuple):
    """One (asset, partition) of a backfill."""

    asset_key: AssetKey
    partition_key: str


def backfill_partitions(model: str, relations: Sequence[str]) -> set[AssetPartition]:
    """The (asset, partition) pairs of one model's backfill over `relations`: every asset
    partitioned by model × relation (scoring, estimation) and by model (evaluation), outside the
    on-demand stages (open answers run only when asked: `kcal demo --generate`)."""
    kinds = {asset: kind for asset, kind in KIND_OF.items() if STAGE_OF[asset] not in ON_DEMAND}
    per_relation = {
        AssetPartition(AssetKey(asset), MultiPartitionKey({"model": model, "relation": relation}))
        for asset, kind in kinds.items()
        if kind == "model_relation"
        for relation in relations
    }
    per_model = {AssetPartition(AssetKey(a), model) for a, kind in kinds.items() if kind == "model"}
    return per_relation | per_model


def submit_backfill(home: Path, model: str, relations: Sequence[str] | None = None) -> tuple[str, list[str]]:
    """Submit the backfill to the store's Dagster instance; returns its id and its relations.

    The relations are the given ones, or every probe relation; only those with statements (the
    probe must exist: `kcal demo --relation R` builds it) are scored."""
    # a clear error for an unknown model or relation; the model as its key, whether id or key was given
    model = check_run(home, [model], relations)[0][0]
    instance = get_instance(home)
    sync_model_partitions(home, instance)
    probe = sync_relation_partitions(home, instance, relations or ())
    wanted = [r for r in (relations or probe) if partition_path(home, "statements", {"relation": r}).exists()]
    if not wanted:
        asked = ", ".join(relations or probe) or "none"
        raise ValueError(
            f"--relation: no statements for {asked}; build the probe first (kcal demo --relation R)"
        )
    backfill_id = submit_asset_backfill(
        instance,
        defs.resolve_asset_graph(),
        backfill_partitions(model, wanted),
        tags={"kcal/source": "kcal backfill", "kcal/model": model},
        title=f"kcal backfill --model {model}",
        description=f"score {model} on {', '.join(wanted)}, then evaluate it",
    )
    return backfill_id, wanted


def backfill_progress(instance, backfill_id: str) -> str:
    """'3 runs: 2 SUCCESS, 1 STARTED' for the backfill's runs so far."""
    runs = instance.get_runs(filters=backfill_runs_filter(backfill_id))
    counts = Counter(run.status.value for run in runs)
    return f"{len(runs)} runs: " + (
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none yet"
    )


def wait_for_backfill(
    home: Path,
    backfill_id: str,
    log: Callable[[str], None] = print,
    poll_s: float = 5.0,
    timeout_s: float = 0,
) -> BackfillStatus:
    """Poll until the backfill is done (or `timeout_s` passed, if > 0), logging each change."""
    instance = get_instance(home)
    started, seen = time.monotonic(), None
    while True:
        backfill = instance.get_backfill(backfill_id)
        if backfill is None:
            raise KeyError(f"backfill {backfill_id!r} is not on the instance at {instance.root_directory}")
        state = f"{backfill.status.value}; {backfill_progress(instance, backfill_id)}"
        if state != seen:
            log(f"backfill {backfill_id}: {state}")
            seen = state
        if backfill_is_done(backfill.status) or (timeout_s and time.monotonic() - started > timeout_s):
            return backfill.status
        time.sleep(poll_s)


def daemon_is_running(home: Path, within_s: float = 120) -> bool:
    """A Dagster daemon (started by `kcal ui`) sent a heartbeat to this store's instance lately."""
    beats = get_instance(home).get_daemon_heartbeats()
    return any(time.time() - beat.timestamp < within_s for beat in beats.values())
