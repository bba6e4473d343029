"""Declarative automation: the model-dependent assets keep themselves complete and up to date.

The division of labour:
  * `model_registry_sensor` (assets/sensors.py) makes the `model` dynamic partitions equal the
    registry (models.toml) - a new model gets its partitions, a removed one loses them.
  * `kcal_automation_sensor` (below, an AutomationConditionSensorDefinition, RUNNING by default so
    `dagster dev` evaluates it every 30 s with no click) evaluates the conditions this module
    attaches to statement_scores, estimates, the evaluation tables and report, and requests runs - a
    backfill when a tick asks for several partitions of one asset - for exactly the partitions
    that need one. It plays the part of the "schedule that re-materializes stale partitions":
    staleness is acted on at the next tick rather than at a cron time.

An automated partition is requested when one of three *triggers* has fired since it was last
requested or materialized (by this sensor, the UI or `kcal demo` alike):
  * missing: it does not exist - a newly registered model, a relation whose statements just
    appeared, or a backlog found on the sensor's first tick;
  * upstream updated: a partition it reads got a new data version (statements of P36 rebuilt with new
    templates → statement_scores of every model for P36 → their estimates → those models'
    metrics, curves and report);
  * code changed: the asset's `code_version` differs from the previous tick's (every partition).
and nothing blocks it:
  * every input partition exists or is requested in the same tick (model × relation assets and
    report; scores are never requested for a relation without statements), and for the per-model
    aggregates metrics/curves, which read all relations of a model, at least one relation's
    estimates exist (the rest are left out, as the IO manager does);
  * neither the partition nor an input is being computed; metrics and curves also wait while an
    input is requested in the same tick (their runs are separate from the scoring runs, so they
    follow on the next tick instead of reading half-written estimates). The cross-model
    family_comparison and cross_model_report follow the same rule one level up: the tick after any
    model's metrics change, once no model's metrics or scores are requested or running.
Requested-then-failed partitions are not retried in a loop: a request counts as handling a
trigger, so a failed partition waits for its next trigger (or a manual run).

Dataset assets (facts, instances, statements, templates, ...) are not automated: their content
depends on run settings (relations, template kinds, probe size from `kcal demo` or the
probe_settings resource) that live in the run, not in the code location, so rebuilding them with
the defaults would silently change a user's probe. Rebuild them yourself; everything downstream
follows. Their code-version staleness shows in the UI.
"""

from dagster import (
    AssetKey,
    AssetSelection,
    AssetSpec,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
)

AC = AutomationCondition

# A request or a materialization (from any source) handles every trigger of a partition.
HANDLED = (AC.newly_requested() | AC.newly_updated()).with_label("handled")

# missing().newly_true() fires when a partition appears (new model) and, unlike eager(), also on
# the condition's first evaluation, so a backlog is picked up when the sensor is switched on.
MISSING = AC.missing().newly_true().with_label("newly_missing_or_backlog")


def _triggered(upstream_updated: AutomationCondition) -> AutomationCondition:
    return (
        (MISSING | upstream_updated | AC.code_version_changed())
        .since(HANDLED)
        .with_label("missing, upstream updated or code changed since last handled")
    )


# An input counts as updated when its data version changed (resources/parquet_io.py makes it
# kcal's data version): a rerun that rewrote nothing (`file_changed` false) re-triggers nothing.
INPUT_CHANGED = AC.data_version_changed()


def missing_or_stale() -> AutomationCondition:
    """For assets whose inputs map partition to partition (statement_scores reads one relation's
    statements; estimates one partition's scores; report one model's metrics and curves)."""
    return (
        _triggered(
            AC.any_deps_match(INPUT_CHANGED | AC.will_be_requested()).with_label(
                "any_deps_data_version_changed_or_requested"
            )
        )
        & ~AC.any_deps_missing()
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label("kcal: missing or stale")


def missing_or_stale_across(partial_input: str, *also_partial: str) -> AutomationCondition:
    """For per-model aggregates that read every relation of `partial_input` (estimates) and maybe
    of `also_partial` inputs (option_estimates, probe_instances): some of those partitions may be
    missing for good (relations never probed), so "any input missing" cannot block; at least one
    of `partial_input` must exist, and none may be requested or running."""
    partial = AssetSelection.assets(partial_input)
    ignored = AssetSelection.assets(partial_input, *also_partial)
    # Only `partial_input` triggers: every other input (probe_instances, templates, ...) changes
    # estimates first, and reacting to it directly would run before the new estimates exist.
    updated = (
        AC.any_deps_match(
            (INPUT_CHANGED & ~AC.executed_with_root_target()).with_label("data_version_changed_without_root")
        )
        .allow(partial)
        .with_label(f"{partial_input} updated")
    )
    return (
        _triggered(updated)
        & AC.any_deps_match(~AC.missing()).allow(partial).with_label(f"some {partial_input} exist")
        & ~AC.any_deps_missing().ignore(ignored)
        & ~AC.any_deps_match(AC.will_be_requested() | AC.in_progress()).with_label(
            "any_deps_requested_or_in_progress"
        )
        & ~AC.in_progress()
    ).with_label("kcal: missing or stale (across relations)")


CONDITIONS: dict[str, AutomationCondition] = {
    "statement_scores": missing_or_stale(),
    # the four outputs of one multi-asset (assets/estimation.py) are materialized together
    **dict.fromkeys(
        ("estimates", "option_estimates", "estimator_fits", "estimator_status"), missing_or_stale()
    ),
    "metrics": missing_or_stale_across("estimates", "option_estimates", "probe_instances"),
    "metric_differences": missing_or_stale_across("estimates"),
    "curves": missing_or_stale_across("estimates"),
    "decision_thresholds": missing_or_stale_across("estimates", "option_estimates"),
    "consistency": missing_or_stale_across("estimates"),
    "report": missing_or_stale(),
    # across models: every model's metrics (and the model kinds in statement_scores)
    "family_comparison": missing_or_stale_across("metrics", "statement_scores"),
    "cross_model_report": missing_or_stale_across("metrics"),
}
AUTOMATED = [AssetKey(name) for name in CONDITIONS]


def with_automation(spec: AssetSpec) -> AssetSpec:
    """The spec with its kcal automation condition (unchanged for assets that have none)."""
    condition = CONDITIONS.get(spec.key.to_user_string())
    return spec if condition is None else spec.replace_attributes(automation_condition=condition)


# The job and asset pages of automated assets show Dagster's "Auto-materialize off" tag: the paused
# flag of the instance-wide auto-materialize daemon that automation sensors replaced (off until
# someone switches it on); with sensors (the instance default, auto_materialize.use_sensors) it
# governs nothing. What automates them is this module's sensor, which says so in the UI.
AUTOMATION_NOTE = (
    "Automated by kcal_automation_sensor (Automation → Sensors, on by default), which evaluates "
    "these assets' automation conditions every 30 s and requests runs of their missing or stale "
    'partitions. The "Auto-materialize off" tag refers to the older instance-wide auto-materialize '
    "switch, which does not govern this sensor."
)

automation_sensor = AutomationConditionSensorDefinition(
    "kcal_automation_sensor",
    target=AssetSelection.assets(*AUTOMATED),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Requests runs for missing or stale model partitions (assets/automation.py): "
    "declarative automation, each asset's automation condition evaluated every 30 s by this sensor. "
    'A tick that requests nothing shows as skipped with "No reason provided": Dagster gives this '
    "kind of sensor's skipped ticks no reason; it means no partition was missing or stale (a tick's "
    'evaluations list each condition). The "Auto-materialize off" tag on job and asset pages refers '
    "to the older instance-wide auto-materialize switch, which does not govern this sensor.",
)
