"""Every tick of the registry sensor says why it requested no run (the UI lists each tick as
skipped, with "No reason provided" where a tick gives none), and the automation sensor and the
automated jobs say what automates them, which the UI's "Auto-materialize off" tag does not."""

from dagster import AddDynamicPartitionsRequest, DagsterInstance, build_sensor_context

from assets.automation import AUTOMATION_NOTE, automation_sensor
from assets.definitions import STAGE_JOBS, all_assets
from assets.jobs import automated_stages
from assets.sensors import INTERVAL_S, model_registry_sensor
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.relations import relation_ids
from kcal_pipeline.scoring.models import ModelEntry, Registry
from resources import ModelProvider

KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"


def tick(instance, home) -> str:
    """One tick as the sensor daemon runs it: the reason it stores with the tick (skip_message),
    after applying the tick's partition requests."""
    context = build_sensor_context(instance=instance, resources={"models": ModelProvider(home=str(home))})
    data = model_registry_sensor.evaluate_tick(context)
    assert not data.run_requests  # runs are the automation sensor's
    for request in data.dynamic_partitions_requests or []:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return data.skip_message


def test_every_registry_sensor_tick_says_what_it_did_or_that_nothing_was_to_do(tmp_path):
    instance = DagsterInstance.ephemeral()
    first = tick(instance, tmp_path)  # a fresh home: the embedded model, the whole catalog
    n = len(relation_ids())
    assert first == (
        f"added model partitions {KEY}; added catalog_relation partitions {n} "
        f"({', '.join(relation_ids()[:4])}, …); runs are kcal_automation_sensor's to request"
    )
    idle = (
        "nothing to do: no model registered or removed (1 registered), no relation probed or dropped "
        f"(0 probed); next check in {INTERVAL_S} s"
    )
    assert tick(instance, tmp_path) == idle

    registry = Registry(tmp_path / "models.toml")
    registry.add(ModelEntry(id="lab/other", source="local", path=str(tmp_path)))
    registry.remove("HuggingFaceTB/SmolLM2-135M-Instruct")
    probe = partition_path(tmp_path, "probe_instances", {"relation": "P30"})
    probe.parent.mkdir(parents=True)
    probe.write_bytes(b"")  # a relation probed outside this instance
    instance.add_dynamic_partitions("relation", ["P9999"])  # typed into the UI: in no catalog
    assert tick(instance, tmp_path) == (
        f"added model partitions lab--other; removed model partitions {KEY}; added relation "
        "partitions P30; removed relation partitions P9999; runs are kcal_automation_sensor's to request"
    )
    assert tick(instance, tmp_path) == idle.replace("(0 probed)", "(1 probed)")


def test_the_automation_sensor_and_the_automated_jobs_say_what_automates_them():
    description = automation_sensor.description
    assert '"No reason provided"' in description and "no partition was missing or stale" in description
    assert '"Auto-materialize off"' in description and "does not govern this sensor" in description
    automated = automated_stages(all_assets)
    assert automated == {"scoring", "estimation", "evaluation", "cross_model"}
    for job in STAGE_JOBS:
        assert (AUTOMATION_NOTE in job.description) == (job.name in automated), job.name
    assert "kcal_automation_sensor" in AUTOMATION_NOTE and '"Auto-materialize off"' in AUTOMATION_NOTE
