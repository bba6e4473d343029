"""The registry sensor on a real (ephemeral) Dagster instance: partitions follow models.toml."""

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DefaultSensorStatus,
    SkipReason,
    build_sensor_context,
)

from assets.definitions import defs
from assets.sensors import model_registry_sensor
from kcal_pipeline.scoring.models import ModelEntry, Registry
from resources import ModelProvider

KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"


def evaluate(instance, home):
    ctx = build_sensor_context(instance=instance, resources={"models": ModelProvider(home=str(home))})
    return model_registry_sensor(ctx)


def apply(instance, result) -> None:
    """What the sensor daemon does with the result's partition requests."""
    for req in result.dynamic_partitions_requests:
        if isinstance(req, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)


def test_partitions_follow_registry_additions_and_removals(tmp_path):
    instance = DagsterInstance.ephemeral()
    first = evaluate(instance, tmp_path)  # a fresh home: the registry holds the embedded model
    (req,) = first.dynamic_partitions_requests
    assert isinstance(req, AddDynamicPartitionsRequest) and req.partition_keys == [KEY]
    assert first.run_requests in (None, [])  # runs are the automation sensor's job
    apply(instance, first)
    assert isinstance(evaluate(instance, tmp_path), SkipReason)

    registry = Registry(tmp_path / "models.toml")
    registry.add(ModelEntry(id="lab/other", source="local", path=str(tmp_path)))
    registry.remove("HuggingFaceTB/SmolLM2-135M-Instruct")
    second = evaluate(instance, tmp_path)
    added, deleted = second.dynamic_partitions_requests
    assert added.partition_keys == ["lab--other"] and deleted.partition_keys == [KEY]
    apply(instance, second)
    assert instance.get_dynamic_partitions("model") == ["lab--other"]
    assert isinstance(evaluate(instance, tmp_path), SkipReason)


def test_nothing_to_do_is_a_skip(tmp_path):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    assert isinstance(evaluate(instance, tmp_path), SkipReason)


def test_both_sensors_are_on_by_default():
    sensors = {s.name: s for s in defs.get_repository_def().sensor_defs}
    assert set(sensors) == {"model_registry_sensor", "kcal_automation_sensor"}
    assert {s.default_status for s in sensors.values()} == {DefaultSensorStatus.RUNNING}
