"""The nightly evaluation: off by default, for stores where the automation sensor is switched off.

At 03:00 (UTC) it requests the `evaluation` job for each model whose estimates changed since its
metrics were last materialized (new scores land as new estimates: `kcal demo`, a backfill and the
automation sensor compute both), and nothing for a model whose evaluation is current. Turn it on
in the UI (Automation → schedules) or with `dagster schedule start nightly_evaluation -w workspace.yaml`.
"""

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from assets.partitions import model_partitions, model_relation_partitions


def models_with_new_estimates(instance: DagsterInstance) -> list[str]:
    """Registered models with an estimates partition materialized after the model's metrics
    (or with estimates and no metrics at all), in registry order."""
    materialized = DagsterEventType.ASSET_MATERIALIZATION
    estimates = instance.get_latest_storage_id_by_partition(AssetKey("estimates"), materialized)
    metrics = instance.get_latest_storage_id_by_partition(AssetKey("metrics"), materialized)
    newest: dict[str, int] = {}
    for key, storage_id in estimates.items():
        model = model_relation_partitions.get_partition_key_from_str(key).keys_by_dimension["model"]
        newest[model] = max(newest.get(model, 0), storage_id)
    models = instance.get_dynamic_partitions(model_partitions.name)
    return [m for m in models if m in newest and newest[m] > metrics.get(m, -1)]


@schedule(
    job_name="evaluation",  # the evaluation stage's job (assets/jobs.py)
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
    description="Nightly: re-run evaluation for models whose estimates changed (off by default).",
)
def nightly_evaluation(context: ScheduleEvaluationContext):
    stale = models_with_new_estimates(context.instance)
    if not stale:
        return SkipReason("no model has estimates newer than its metrics")
    return [
        RunRequest(partition_key=model, tags={"kcal/source": "nightly_evaluation schedule"})
        for model in stale
    ]
