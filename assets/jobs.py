"""Named jobs, one per stage: what `kcal demo` runs and what the UI's Jobs page lists.

A stage is an asset group (the `group_name` each asset declares), and its job selects that group,
so the groups of the asset graph are the only list of stages: a new asset joins its stage's job by
naming the group. Each group holds assets of one partitions definition, as a partitioned job
requires (stage_partitions checks it): dataset (none), facts (catalog relations), probe
(relations), scoring and estimation (model × relation), evaluation (model), cross_model (none),
paraphrases (none), generation (model × relation), gen_metrics (model).

A run started without a job shows as `__ephemeral_asset_job__` with no asset names; a run of one of
these jobs says what it is (`scoring`, `evaluation`, ...), and its tags say who started it
(`kcal/source`) and which assets (`kcal/assets`). `generated_templates` (an LM writing paraphrases,
minutes of work) is in a stage of its own, so launching `dataset` never starts it.
"""

from collections.abc import Iterable

from dagster import AssetsDefinition, AssetSelection, define_asset_job

from assets.automation import AUTOMATION_NOTE
from assets.dagster_internals import repository_label_tags, singleton_repository_name
from assets.run_tags import STAGE_TAG

# The code location's name (workspace.yaml's location_name). A run started in-process (kcal demo)
# carries it as the repository label, so the UI lists it under its job, like a run it launched, and
# as its origin (assets/runner.py run_stage), so the Overview timeline places it.
CODE_LOCATION = "kcal"
DEFINITIONS_MODULE = "assets.definitions"  # its module_name there
REPOSITORY = singleton_repository_name()  # a code location of one Definitions holds one repository, so named
IN_CODE_LOCATION = repository_label_tags(REPOSITORY, CODE_LOCATION)

# What each stage is for, in the UI's words (a stage without an entry gets a plain description).
DESCRIPTIONS = {
    "dataset": "Stage 1 of 7 (dataset → facts → probe → scoring → estimation → evaluation → "
    "cross_model; `kcal demo` runs them all). The relation catalog, templates, distractor pools, "
    "the data-quality table and the estimator and metric catalogs.",
    "facts": "Stage 2 of 7. Facts of one catalog relation from the SPARQL endpoint (or rules, or an import).",
    "probe": "Stage 3 of 7. Instances and statements of one probe relation.",
    "scoring": "Stage 4 of 7. Scores of one model × relation (the LM's work: the slow stage).",
    "estimation": "Stage 5 of 7. Every estimator over one model × relation's scores.",
    "evaluation": "Stage 6 of 7. Metrics, differences, curves, thresholds, consistency and the "
    "report of one model. Where to start reading results: the `report` asset (a model partition) "
    "shows the summary, the intervals and the plots, and links the HTML report that `kcal ui` serves.",
    "cross_model": "Stage 7 of 7. The family comparison and the cross-model leaderboard: "
    "`cross_model_report` compares the models and links reports/index.html.",
    "paraphrases": "Optional, on demand: template paraphrases written by an instruct LM. Never run "
    "by `kcal demo` or the sensors; run it with `kcal dataset paraphrase` (or launch this job), then "
    "use them with `--template-kinds curated,generated`.",
    "generation": "Optional, on demand: open answers of one model × MACE relation (greedy, sampled "
    "and prompted answers, matched and turned into MACE's generation confidences). Never run by a "
    "plain `kcal demo`; run it with `kcal demo --generate --relation mace-award`.",
    "gen_metrics": "Optional, on demand: metrics of one model's generation confidences per "
    "gold count and mixture, and knowledge coverage. Runs after the generation stage with "
    "`kcal demo --generate --relation mace-award`.",
}
# Stages that run only when asked (`kcal dataset paraphrase`; `kcal demo --generate`): never part
# of a plain `kcal demo`.
GENERATION_STAGES = frozenset({"generation", "gen_metrics"})
ON_DEMAND = frozenset({"paraphrases"}) | GENERATION_STAGES


def stage_assets(assets: Iterable[AssetsDefinition]) -> dict[str, tuple[str, ...]]:
    """{stage: its asset names}, stages and assets in the order the definitions list them."""
    stages: dict[str, list[str]] = {}
    for assets_def in assets:
        for key in assets_def.keys:
            stages.setdefault(assets_def.group_names_by_key[key], []).append(key.to_user_string())
    return {stage: tuple(names) for stage, names in stages.items()}


def stage_partitions(assets: Iterable[AssetsDefinition]) -> dict[str, object]:
    """{stage: the partitions definition (None: unpartitioned) all its assets share}; a stage that
    mixes two is an error here, not a job Dagster refuses to build at run time."""
    found: dict[str, object] = {}
    for assets_def in assets:
        for key in assets_def.keys:
            stage = assets_def.group_names_by_key[key]
            pdef = assets_def.specs_by_key[key].partitions_def
            if stage in found and found[stage] != pdef:
                raise ValueError(
                    f"asset group {stage!r} mixes partitions definitions ({found[stage]} and {pdef} of "
                    f"{key.to_user_string()}): a stage's job needs one"
                )
            found[stage] = pdef
    return found


def automated_stages(assets: Iterable[AssetsDefinition]) -> set[str]:
    """The stages with an asset that has an automation condition: the ones whose job page shows
    Dagster's "Auto-materialize" tag."""
    return {
        assets_def.group_names_by_key[key]
        for assets_def in assets
        for key in assets_def.keys
        if assets_def.specs_by_key[key].automation_condition is not None
    }


def stage_jobs(assets: Iterable[AssetsDefinition]) -> list:
    """One job per asset group, named after it and tagged with its stage (a hidden tag,
    assets/run_tags.py); the description of a stage with automated assets says what automates
    them (AUTOMATION_NOTE)."""
    assets = list(assets)
    automated = automated_stages(assets)
    jobs = []
    for stage in stage_partitions(assets):
        description = DESCRIPTIONS.get(stage, f"The assets of the {stage} stage.")
        if stage in automated:
            description = f"{description} {AUTOMATION_NOTE}"
        job = define_asset_job(
            stage, selection=AssetSelection.groups(stage), description=description, tags={STAGE_TAG: stage}
        )
        jobs.append(job)
    return jobs
