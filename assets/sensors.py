"""A sensor that follows the model registry, so registering a model is enough to get it scored.

Each tick (every 30 s; RUNNING by default, so `dagster dev` starts it with no click) it makes the
`model` dynamic partitions equal the registry (models.toml): new entries get their partitions,
removed ones lose them. It requests no runs itself: the automation sensor
(`kcal_automation_sensor`, assets/automation.py) sees the new partitions as missing and requests
statement_scores + estimates for exactly the model × relation partitions whose statements exist,
then the model's metrics, curves and report. One mechanism deciding what to run means no
duplicate runs (a partition added by `kcal models add` is seen once), no run-key bookkeeping (a
model removed and added again is scored again), and failed runs are not retried in a loop.
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

from assets.partitions import model_partitions, partition_changes
from resources import ModelProvider


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def model_registry_sensor(context: SensorEvaluationContext, models: ModelProvider):
    keys = [e.key for e in models.registry().entries()]
    added, removed = partition_changes(context.instance.get_dynamic_partitions(model_partitions.name), keys)
    requests = [AddDynamicPartitionsRequest(model_partitions.name, added)] if added else []
    if removed:
        requests.append(DeleteDynamicPartitionsRequest(model_partitions.name, removed))
    if not requests:
        return SkipReason("the model partitions equal the registry")
    context.log.info(f"model partitions: adding {added}, removing {removed}")
    return SensorResult(dynamic_partitions_requests=requests)
