"""The registry sensor on a real (ephemeral) Dagster instance."""
from dagster import AssetMaterialization, DagsterInstance, MultiPartitionKey, SkipReason, build_sensor_context

from assets.sensors import model_registry_sensor
from kcal_pipeline.models import ModelEntry, Registry
from resources import ModelProvider

KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"


def evaluate(instance, home):
    ctx = build_sensor_context(instance=instance, resources={"models": ModelProvider(home=str(home))})
    return model_registry_sensor(ctx)


def test_new_models_get_partitions_and_runs_for_exactly_the_missing_scores(tmp_path):
    instance = DagsterInstance.ephemeral()
    first = evaluate(instance, tmp_path)
    (req,) = first.dynamic_partitions_requests
    assert req.partition_keys == [KEY] and first.run_requests == []  # nothing has statements yet
    instance.add_dynamic_partitions("model", [KEY])

    for rel in ("P36", "P30"):
        instance.report_runless_asset_event(AssetMaterialization("statements", partition=rel))
    second = evaluate(instance, tmp_path)
    assert sorted(r.partition_key for r in second.run_requests) == sorted(
        str(MultiPartitionKey({"model": KEY, "relation": r})) for r in ("P36", "P30"))
    assert {tuple(k.path) for r in second.run_requests for k in r.asset_selection} == {
        ("statement_scores",), ("estimates",)}

    done = MultiPartitionKey({"model": KEY, "relation": "P36"})
    instance.report_runless_asset_event(AssetMaterialization("statement_scores", partition=done))
    third = evaluate(instance, tmp_path)
    assert [r.partition_key for r in third.run_requests] == [str(MultiPartitionKey({"model": KEY, "relation": "P30"}))]

    registry = Registry(tmp_path / "models.toml")
    registry.add(ModelEntry(id="lab/other", source="local", path=str(tmp_path)))
    registry.remove("HuggingFaceTB/SmolLM2-135M-Instruct")
    fourth = evaluate(instance, tmp_path)
    added, deleted = fourth.dynamic_partitions_requests
    assert added.partition_keys == ["lab--other"] and deleted.partition_keys == [KEY]


def test_nothing_to_do_is_a_skip(tmp_path):
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    assert isinstance(evaluate(instance, tmp_path), SkipReason)
