"""Automation: a sensor that follows the model registry, so registering a model is enough.

Each tick it makes the `model` dynamic partitions equal the registry (models.toml) and requests
one run per model × relation whose scores are missing, for relations whose statements exist.
Per-model metrics, curves and reports follow by declarative automation (eager) once the daemon
(part of `dagster dev`) sees new estimates.
"""
from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    MultiPartitionKey,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import model_partitions, partition_changes
from kcal_pipeline.relations import relation_ids
from resources import ModelProvider

SCORING = [AssetKey("statement_scores"), AssetKey("estimates")]


def missing_partitions(instance, model_keys: list[str]) -> list[MultiPartitionKey]:
    """model × relation partitions without scores whose statements are materialized."""
    scored = instance.get_materialized_partitions(AssetKey("statement_scores"))
    ready = instance.get_materialized_partitions(AssetKey("statements"))
    return [MultiPartitionKey({"model": m, "relation": r}) for m in model_keys for r in relation_ids()
            if r in ready and str(MultiPartitionKey({"model": m, "relation": r})) not in scored]


@sensor(asset_selection=SCORING, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def model_registry_sensor(context: SensorEvaluationContext, models: ModelProvider):
    keys = [e.key for e in models.registry().entries()]
    added, removed = partition_changes(context.instance.get_dynamic_partitions(model_partitions.name), keys)
    requests = [AddDynamicPartitionsRequest(model_partitions.name, added)] if added else []
    if removed:
        requests.append(DeleteDynamicPartitionsRequest(model_partitions.name, removed))
    runs = [RunRequest(run_key=f"score:{key}", partition_key=key, asset_selection=SCORING)
            for key in missing_partitions(context.instance, keys)]
    if not requests and not runs:
        return SkipReason("registry and partitions agree; nothing missing")
    return SensorResult(run_requests=runs, dynamic_partitions_requests=requests)
