"""The Dagster code location of kcal (see workspace.yaml).

Automation (assets/automation.py) is attached here, not in the asset modules: the model-dependent
assets get their automation conditions through `map_asset_specs`, and two sensors run by default
under `dagster dev` (DefaultSensorStatus.RUNNING, no click in the UI needed):
`model_registry_sensor` keeps the `model` partitions equal to models.toml, and
`kcal_automation_sensor` requests runs for missing or stale model partitions.
"""

from dagster import AssetSpec, Definitions, in_process_executor, load_assets_from_modules, map_asset_specs

from assets import catalog, dataset, estimation, evaluation, generation, reporting, scoring
from assets.automation import automation_sensor, with_automation
from assets.checks import ASSET_CHECKS
from assets.engine import kcal_scoring_celery
from assets.jobs import stage_assets, stage_jobs
from assets.schedules import nightly_evaluation
from assets.sensors import model_registry_sensor
from assets.sqlite_engines import speed_up_sqlite_storages
from kcal_pipeline.evaluation.registry import METRICS
from resources import default_resources

speed_up_sqlite_storages()  # every process that loads the code location: see assets/sqlite_engines.py

OWNERS = ["team:kcal"]
# Every asset is a Parquet table under KCAL_HOME with a DuckDB view, computed with polars; the
# kinds are the icons the asset graph shows.
KINDS = {"parquet", "duckdb", "polars"}
EXTRA_KINDS = {
    "statement_scores": {"pytorch"},
    "generations": {"pytorch"},
    "report": {"html"},
    "cross_model_report": {"html"},
}


# Where a newcomer starts reading (the UI has no description for a code location or a group; the
# stages' jobs say the same, assets/jobs.py DESCRIPTIONS). Plain text: the Catalog shows the first
# line of a description unrendered.
START_HERE = {
    "report": "Start here for one model's results: this page shows the summary, the intervals "
    "and the plots; `report` links the full HTML report (served over http by `kcal ui`).",
    "cross_model_report": "Start here to compare models: the leaderboard, and `report` links "
    "reports/index.html (served over http by `kcal ui`).",
}
# Asset names are the DuckDB tables users' SQL reads (`kcal sql`), so a long one stays long even
# where the asset graph cuts it ("decisi…_thresholds"); its description says so.
LONG_NAME = 16
LONG_NAME_NOTE = "The asset graph may cut this name: it is the table `kcal sql` queries, so it stays."
# The UI's search (Ctrl-K) matches names only (assets, groups, jobs, sensors, schedules), never
# descriptions or tags; the asset selection box of the Catalog and the Lineage page also suggests
# tags. So the assets that hold the metrics carry each metric family and headline metric as a
# key-only tag: typing "accuracy" there offers `tag:accuracy`.
METRIC_WORDS = sorted(
    {m.family for m in METRICS.values()}
    | {m.name for m in METRICS.values() if m.in_summary or m.headline or m.role}
)
METRIC_ASSETS = {"metrics", "metric_differences", "curves", "report", "cross_model_report"}


def described(name: str, description: str | None) -> str:
    """The asset's own description, with where to start and the note on long names."""
    parts = [START_HERE.get(name), description, LONG_NAME_NOTE if len(name) >= LONG_NAME else None]
    return "\n\n".join(p.strip() for p in parts if p)


def with_catalog_attributes(spec: AssetSpec) -> AssetSpec:
    """Owners, kinds (the asset graph's icons), metric tags and the notes above; the group (one per
    stage) and the description come from each asset's definition."""
    name = spec.key.to_user_string()
    tags = {**spec.tags, **dict.fromkeys(METRIC_WORDS, "")} if name in METRIC_ASSETS else spec.tags
    return spec.replace_attributes(
        owners=OWNERS,
        kinds=KINDS | EXTRA_KINDS.get(name, set()),
        tags=tags,
        description=described(name, spec.description),
    )


all_assets = map_asset_specs(
    lambda spec: with_automation(with_catalog_attributes(spec)),
    # generation before evaluation: with --generate, a model's generation metrics come before its report
    load_assets_from_modules([catalog, dataset, scoring, estimation, generation, evaluation, reporting]),
)
# The stages are the asset groups: each group's assets, and a job per group (assets/jobs.py).
STAGE_ASSETS = stage_assets(all_assets)
STAGE_JOBS = stage_jobs(all_assets)

defs = Definitions(
    assets=all_assets,
    asset_checks=ASSET_CHECKS,
    jobs=[*STAGE_JOBS, kcal_scoring_celery],
    schedules=[nightly_evaluation],
    sensors=[model_registry_sensor, automation_sensor],
    resources=default_resources(),
    # A run launched by the UI or the daemon runs its steps in its own process, one after another:
    # Dagster's default (a process per step) spends 5-10 s importing torch and the code location
    # for each step of a few seconds (the backfill test's scoring and evaluation runs: 35-90 s ->
    # 7-14 s each on two cores), and a CPU host gains nothing from steps in parallel. Scale-out
    # is the Celery job's (assets/engine.py).
    executor=in_process_executor,
)
