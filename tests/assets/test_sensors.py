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
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.relations import relation_ids
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


def requests_for(result, name: str) -> list:
    return [r for r in result.dynamic_partitions_requests if r.partitions_def_name == name]


def test_partitions_follow_registry_additions_and_removals(tmp_path):
    instance = DagsterInstance.ephemeral()
    first = evaluate(instance, tmp_path)  # a fresh home: the registry holds the embedded model
    (catalog,) = requests_for(first, "catalog_relation")  # the facts' partitions: the whole catalog
    assert catalog.partition_keys == relation_ids()
    (req,) = requests_for(first, "model")
    assert isinstance(req, AddDynamicPartitionsRequest) and req.partition_keys == [KEY]
    assert first.run_requests in (None, [])  # runs are the automation sensor's job
    apply(instance, first)
    assert isinstance(evaluate(instance, tmp_path), SkipReason)

    registry = Registry(tmp_path / "models.toml")
    registry.add(ModelEntry(id="lab/other", source="local", path=str(tmp_path)))
    registry.remove("HuggingFaceTB/SmolLM2-135M-Instruct")
    second = evaluate(instance, tmp_path)
    added, deleted = requests_for(second, "model")
    assert added.partition_keys == ["lab--other"] and deleted.partition_keys == [KEY]
    apply(instance, second)
    assert instance.get_dynamic_partitions("model") == ["lab--other"]
    assert isinstance(evaluate(instance, tmp_path), SkipReason)


def test_nothing_to_do_is_a_skip(tmp_path):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    instance.add_dynamic_partitions("catalog_relation", relation_ids())
    assert isinstance(evaluate(instance, tmp_path), SkipReason)


def test_both_sensors_are_on_by_default():
    sensors = {s.name: s for s in defs.get_repository_def().sensor_defs}
    assert set(sensors) == {"model_registry_sensor", "kcal_automation_sensor"}
    assert {s.default_status for s in sensors.values()} == {DefaultSensorStatus.RUNNING}


def test_relation_partitions_follow_the_probe_on_disk_and_the_catalog(tmp_path):
    """A relation probed outside this instance (its probe_instances file exists) joins the probe's
    relation partitions; a key that is not a catalog relation (typed into the UI) leaves them."""
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    instance.add_dynamic_partitions("catalog_relation", relation_ids())
    instance.add_dynamic_partitions("relation", ["P36", "P9999"])  # P9999: in no catalog
    probe = partition_path(tmp_path, "probe_instances", {"relation": "P30"})
    probe.parent.mkdir(parents=True)
    probe.write_bytes(b"")  # only its existence counts
    result = evaluate(instance, tmp_path)
    added, deleted = result.dynamic_partitions_requests
    assert (added.partitions_def_name, added.partition_keys) == ("relation", ["P30"])
    assert (deleted.partitions_def_name, deleted.partition_keys) == ("relation", ["P9999"])
    apply(instance, result)
    assert sorted(instance.get_dynamic_partitions("relation")) == ["P30", "P36"]  # P36 stays: never dropped
    assert isinstance(evaluate(instance, tmp_path), SkipReason)
