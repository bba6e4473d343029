"""Named jobs, one per stage: what `kcal demo` runs and what the UI's Jobs page lists.

A run started without a job shows as `__ephemeral_asset_job__` with no asset names; a run of one of
these jobs says what it is (`scoring`, `evaluation`, ...), and its tags say who started it
(`kcal/source`) and which assets (`kcal/assets`). Each job holds assets of one partitions
definition (Dagster infers it), as a partitioned job requires. `generated_templates` (an LM writing
paraphrases, minutes of work) has a job of its own, so launching `dataset` never starts it.
"""

from dagster import AssetSelection, define_asset_job
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

# The code location's name (workspace.yaml's location_name). A run started in-process (kcal demo)
# carries it as the repository label, so the UI lists it under its job, like a run it launched.
CODE_LOCATION = "kcal"
IN_CODE_LOCATION = {REPOSITORY_LABEL_TAG: f"{SINGLETON_REPOSITORY_NAME}@{CODE_LOCATION}"}

STAGE_ASSETS: dict[str, tuple[str, ...]] = {
    "dataset": ("relations", "templates", "object_pools", "data_quality"),
    "facts": ("wikidata_facts", "dropped_facts"),
    "probe": ("probe_instances", "statements"),
    "scoring": ("statement_scores", "estimates", "option_estimates", "estimator_fits", "estimator_status"),
    "evaluation": (
        "metrics", "metric_differences", "curves", "decision_thresholds", "consistency", "report",
    ),
    "cross_model": ("family_comparison", "cross_model_report"),
    "paraphrases": ("generated_templates",),
}  # fmt: skip
DESCRIPTIONS = {
    "dataset": "The relation catalog, templates, distractor pools and the data-quality table.",
    "facts": "Facts of one catalog relation from the SPARQL endpoint (or rules, or an import).",
    "probe": "Instances and statements of one probe relation.",
    "scoring": "Scores and every estimator of one model × relation.",
    "evaluation": "Metrics, differences, curves, thresholds, consistency and the report of one model.",
    "cross_model": "The family comparison and the cross-model leaderboard.",
    "paraphrases": "Template paraphrases written by an instruct LM (on demand).",
}
STAGE_JOBS = [
    define_asset_job(
        name,
        selection=AssetSelection.assets(*assets),
        description=DESCRIPTIONS[name],
        tags={"kcal/stage": name},
    )
    for name, assets in STAGE_ASSETS.items()
]


def job_of(asset: str) -> str:
    """The stage job that holds `asset`."""
    return next(name for name, assets in STAGE_ASSETS.items() if asset in assets)
