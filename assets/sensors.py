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


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def model_registry_sensor(context: SensorEvaluationContext, models: ModelProvider):
    keys = [e.key for e in models.registry().entries()]
    added, removed = partition_changes(context.instance.get_dynamic_partitions(model_partitions.name), keys)
    requests = [AddDynamicPartitionsRequest(model_partitions.name, added)] if added else []
    if removed:
        requests.append(DeleteDynamicPartitionsRequest(model_partitions.name, removed))
    probe = probed_relations(kcal_home(models.home or None))
    new, gone = [], []
    for name, add, delete in relation_partition_changes(context.instance.get_dynamic_partitions, probe):
        if add:
            requests.append(AddDynamicPartitionsRequest(name, add))
        if delete:
            requests.append(DeleteDynamicPartitionsRequest(name, delete))
        new, gone = new + add, gone + delete
    if not requests:
        return SkipReason("the model partitions equal the registry, the relation partitions the probe")
    context.log.info(f"models: adding {added}, removing {removed}; relations: adding {new}, removing {gone}")
    return SensorResult(dynamic_partitions_requests=requests)
