"""A sensor that follows the model registry, so registering a model is enough to get it scored.

Each tick (every 30 s; RUNNING by default, so `dagster dev` starts it with no click) it makes the
`model` dynamic partitions equal the registry (models.toml): new entries get their partitions,
removed ones lose them. It keeps the `catalog_relation` partitions (the facts') equal to the
catalog, and the probe's `relation` partitions in step with the store:
a relation probed outside this instance (its probe_instances on disk) joins them, one no longer in
the catalog (typed into the UI's "add partition", or a removed import) leaves them.

It requests no runs itself: the automation sensor
(`kcal_automation_sensor`, assets/automation.py) sees the new partitions as missing and requests
statement_scores + estimates for exactly the model × relation partitions whose statements exist,
then the model's metrics, curves and report. One mechanism deciding what to run means no
duplicate runs (a partition added by `kcal models add` is seen once), no run-key bookkeeping (a
model removed and added again is scored again), and failed runs are not retried in a loop.

Requesting no runs, every tick is "skipped" in the UI; each gives its reason (tick_reason): the
partitions it added or removed, or that there was nothing to do.
"""

from dagster import (
    AddDynamicPartitionsRequest,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import (
    model_partitions,
    partition_changes,
    probed_relations,
    relation_partition_changes,
)
from kcal_pipeline.core.paths import kcal_home
from resources import ModelProvider

INTERVAL_S = 30


def _keys(keys: list[str], shown: int = 4) -> str:
    """Partition keys for one line of the UI: all of a few, else the count and the first ones."""
    if len(keys) <= shown:
        return ", ".join(keys)
    return f"{len(keys)} ({', '.join(keys[:shown])}, …)"


def tick_reason(changes: dict[str, tuple[list[str], list[str]]], registered: int, probed: int) -> str:
    """What a tick did, for the UI's tick list: every tick is "skipped" there (it requests no runs),
    so the reason says which partitions it added or removed, or that there was nothing to do."""
    done = [
        f"{verb} {name} partitions {_keys(keys)}"
        for name, (added, removed) in changes.items()
        for verb, keys in (("added", added), ("removed", removed))
        if keys
    ]
    if done:
        return "; ".join(done) + "; runs are kcal_automation_sensor's to request"
    return (
        f"nothing to do: no model registered or removed ({registered} registered), no relation "
        f"probed or dropped ({probed} probed); next check in {INTERVAL_S} s"
    )


@sensor(
    minimum_interval_seconds=INTERVAL_S,
    default_status=DefaultSensorStatus.RUNNING,
    description="Keeps the model partitions equal to the registry (models.toml) and the relation "
    "partitions to the catalog and the probe (assets/sensors.py). It requests no runs "
    "(kcal_automation_sensor does), so every tick shows as skipped, with what it changed as the reason.",
)
def model_registry_sensor(context: SensorEvaluationContext, models: ModelProvider):
    keys = [e.key for e in models.registry().entries()]
    current = context.instance.get_dynamic_partitions(model_partitions.name)
    changes = {model_partitions.name: partition_changes(current, keys)}
    probe = probed_relations(kcal_home(models.home or None))
    for name, add, delete in relation_partition_changes(context.instance.get_dynamic_partitions, probe):
        changes[name] = (add, delete)
    requests = []
    for name, (add, delete) in changes.items():
        if add:
            requests.append(AddDynamicPartitionsRequest(name, add))
        if delete:
            requests.append(DeleteDynamicPartitionsRequest(name, delete))
    reason = tick_reason(changes, len(keys), len(probe))
    if not requests:
        return SkipReason(reason)
    context.log.info(reason)
    return SensorResult(dynamic_partitions_requests=requests, skip_reason=reason)
