"""Materialize what is missing, stage by stage, on a persistent Dagster instance.

This is what `kcal demo` runs: the same assets and resources as the UI, so a partition
materialized here shows up there (and the reverse). A (asset, partition) counts as done when its
Parquet file records the data version the current code, settings and inputs would give it
(kcal_pipeline/core/versions.py): a changed setting or a rebuilt input reruns exactly what it
affects, an interrupted partition (no final file) is never done, and done work is never redone.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from dagster import (
    AssetKey,
    AssetsDefinition,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    MultiPartitionKey,
    MultiPartitionsDefinition,
)

from assets.checks import ASSET_CHECKS
from assets.definitions import STAGE_JOBS, all_assets, defs
from assets.instance import get_instance, sync_model_partitions, sync_relation_partitions
from assets.jobs import (
    GENERATION_STAGES,
    IN_CODE_LOCATION,
    ON_DEMAND,
)
from assets.partitions import catalog_relation_partitions, model_partitions, relation_partitions
from assets.run_records import fail_abandoned_runs, runner_tags, runs_from_code_location
from kcal_pipeline.core.paths import model_cache_dir, registry_path
from kcal_pipeline.core.report_server import reports_port
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.versions import data_version, input_versions, stored_version
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.relations import get_relation, relation_ids
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelLoadError, Registry
from kcal_pipeline.scoring.models.gguf import convert_in_background
from resources import default_resources
from resources.settings import declared_reads, resolve_reads

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# The partitions a step of each kind runs: facts (catalog_relation) for every relation of the
# catalog (cheap, and the top-up pools of short answer spaces must not depend on which relations a
# run happened to select); relation and model × relation for the run's relations only.
KIND_OF_PARTITIONS = {
    catalog_relation_partitions.name: "all_relations",
    relation_partitions.name: "relation",
    model_partitions.name: "model",
}
KIND_RANK = {"none": 0, "all_relations": 1, "relation": 2, "model_relation": 3, "model": 4}


class Step(NamedTuple):
    """Consecutive assets of one stage (asset group), in dependency order: one run of the stage's
    job per partition of `kind` (none, all_relations, relation, model, model_relation)."""

    kind: str
    assets: tuple[str, ...]


def partition_kind(partitions_def) -> str:
    if partitions_def is None:
        return "none"
    if isinstance(partitions_def, MultiPartitionsDefinition):
        return "model_relation"
    return KIND_OF_PARTITIONS[partitions_def.name]


def derive_steps(
    asset_graph, declared: Sequence[str], left_out: frozenset[str] = ON_DEMAND
) -> tuple[list[Step], frozenset[str]]:
    """The run order of `kcal demo`, from the asset graph: a topological order of every asset
    outside the stages `left_out` (the on-demand ones), cut into steps of consecutive assets of one
    stage. When a step ends, the next starts with the ready asset of the fewest partitions (a kind
    that runs once before one that runs per relation or model), cross-model assets last; ties go
    to the order of `declared`. Cross-model assets are the unpartitioned ones that read a model's
    partitions: they run after every model, one step each, and their failure is recorded like a
    model's. Returns (steps, those)."""
    nodes = {
        key.to_user_string(): asset_graph.get(key)
        for key in asset_graph.toposorted_asset_keys
        if asset_graph.get(key).is_materializable and asset_graph.get(key).group_name not in left_out
    }
    order = {name: i for i, name in enumerate(declared)}
    kind = {name: partition_kind(node.partitions_def) for name, node in nodes.items()}
    parents = {
        name: {p.to_user_string() for p in node.parent_keys} & nodes.keys() for name, node in nodes.items()
    }
    cross_model = frozenset(
        name
        for name in nodes
        if kind[name] == "none" and any(kind[p] in ("model", "model_relation") for p in parents[name])
    )
    steps: list[Step] = []
    done: set[str] = set()
    while len(done) < len(nodes):
        ready = [n for n in nodes if n not in done and parents[n] <= done]
        first = min(ready, key=lambda n: (n in cross_model, KIND_RANK[kind[n]], order[n]))
        stage, assets = nodes[first].group_name, []
        while stage_ready := [n for n in ready if nodes[n].group_name == stage]:
            name = min(stage_ready, key=order.__getitem__)
            assets.append(name)
            done.add(name)
            ready = [n for n in nodes if n not in done and parents[n] <= done]
            if name in cross_model:  # each in a run of its own: one's failure leaves the other
                break
        steps.append(Step(kind[first], tuple(assets)))
    return steps, cross_model


def source_order(assets: Sequence[AssetsDefinition]) -> list[str]:
    """Asset names in the order the code defines them: modules as the definitions load them, then
    line by line, a multi-asset's outputs as it declares them (the order a reader expects in a step
    and in its failure lines: metrics, metric_differences, curves, ...)."""
    modules: dict[str, int] = {}
    placed = []
    for assets_def in assets:
        fn = assets_def.op.compute_fn.decorated_fn
        module = modules.setdefault(fn.__module__, len(modules))
        for i, output in enumerate(assets_def.op.output_defs):
            key = assets_def.keys_by_output_name[output.name].to_user_string()
            placed.append(((module, fn.__code__.co_firstlineno, i), key))
    return [key for _, key in sorted(placed)]


ASSET_GRAPH = defs.resolve_asset_graph()
STAGE_OF = {key.to_user_string(): a.group_names_by_key[key] for a in all_assets for key in a.keys}
# The steps of kcal demo, and the assets that read every model (their failure is recorded like a
# model's, never stops the run): derived from the asset graph, see derive_steps.
STAGES, CROSS_MODEL = derive_steps(ASSET_GRAPH, source_order(all_assets))
# `kcal demo --generate`: the same, with the open-answer stages where their inputs are ready.
GENERATE_STAGES, _ = derive_steps(ASSET_GRAPH, source_order(all_assets), ON_DEMAND - GENERATION_STAGES)
# The dimensions each asset's files are keyed by (facts: by relation, like the probe's).
KIND_OF = {
    key.to_user_string(): kind.replace("all_relations", "relation")
    for key in ASSET_GRAPH.toposorted_asset_keys
    for kind in [partition_kind(ASSET_GRAPH.get(key).partitions_def)]
}


@dataclass(frozen=True)
class RunContext:
    """What every step of one run_missing shares: the store, the run's models and relations, the
    resources its settings make, the Dagster instance, whether done work is redone, and the log."""

    home: Path
    models: tuple[str, ...]
    relations: tuple[str, ...]
    resources: dict
    instance: DagsterInstance
    refresh: bool = False
    log: Callable[[str], None] = print
    generate: bool = False  # also the open-answer stages (on the relations that ask questions)


@dataclass(frozen=True)
class Failure:
    """One stage of one model partition (or of a cross-model asset: model None) that failed; the
    run went on with the other models."""

    assets: tuple[str, ...]
    model: str | None
    relation: str | None
    error: str

    def __str__(self) -> str:
        where = "all models" if self.model is None else f"model {self.model}"
        where += f", relation {self.relation}" if self.relation else ""
        return f"{', '.join(self.assets)} [{where}]: {self.error}"


@dataclass
class RunSummary:
    materialized: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)


def _interrupted(error: BaseException) -> bool:
    """An error raised while an interruption (Ctrl-C) unwound: the run stops, it does not go on."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if not isinstance(error, Exception):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _one_line(error: BaseException, limit: int = 600) -> str:
    text = f"{type(error).__name__}: {' '.join(str(error).split())}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _partitions(run: RunContext, kind: str) -> list[tuple[str | None, dict]]:
    """(partition key, its dimensions) of each run of a step of `kind`: facts for every catalog
    relation, the rest for the run's relations and models."""
    if kind == "none":
        return [(None, {})]
    if kind == "all_relations":
        return [(r, {"relation": r}) for r in relation_ids()]
    if kind == "relation":
        return [(r, {"relation": r}) for r in run.relations]
    if kind == "model":
        return [(m, {"model": m}) for m in run.models]
    return [
        (MultiPartitionKey({"model": m, "relation": r}), {"model": m, "relation": r})
        for m in run.models
        for r in run.relations
    ]


def asks_questions(relation: str) -> bool:
    """Whether a relation has question templates: only those can be asked open questions."""
    return bool(get_relation(relation).questions)


def _upstream_files(home: Path, upstream: str, dims: dict) -> list[Path]:
    """The files of `upstream` that a partition with `dims` reads, as the IO manager maps them:
    the same partition, or every materialized relation where the step spans relations, or every
    materialized partition of every registered model where it spans models (no model in `dims`)."""
    kind = KIND_OF[upstream]
    if kind == "none":
        return [partition_path(home, upstream)]
    if kind in ("model", "model_relation") and "model" not in dims:
        models = [e.key for e in Registry(registry_path(home)).entries()]
        relations = [{"relation": r} for r in relation_ids()] if kind == "model_relation" else [{}]
        spanned = [partition_path(home, upstream, {"model": m, **r}) for m in models for r in relations]
        return [path for path in spanned if path.exists()]
    if kind == "model":
        return [partition_path(home, upstream, {"model": dims["model"]})]
    if kind == "relation" and "relation" in dims:
        return [partition_path(home, upstream, {"relation": dims["relation"]})]
    if kind == "model_relation" and "relation" in dims:
        return [partition_path(home, upstream, dims)]
    fixed = {"model": dims["model"]} if kind == "model_relation" else {}
    spanned = [partition_path(home, upstream, {**fixed, "relation": r}) for r in relation_ids()]
    return [path for path in spanned if path.exists()]


def expected_version(home: Path, asset: str, dims: dict, resources: dict) -> str:
    """The data version the current code, settings and inputs give this partition; the IO manager
    records the same computation when it writes the partition (resources/parquet_io.py)."""
    assets_def = next(a for a in all_assets if AssetKey(asset) in a.keys)
    spec = assets_def.specs_by_key[AssetKey(asset)]
    values, extra = resolve_reads(
        declared_reads(asset),
        dims,
        resources["probe_settings"],
        resources["scoring_settings"],
        home,
        resources.get("generation_settings"),  # None: the defaults
    )
    files = [f for dep in spec.deps for f in _upstream_files(home, dep.asset_key.to_user_string(), dims)]
    code_version = assets_def.code_versions_by_key.get(AssetKey(asset))
    return data_version(asset, code_version, values, input_versions(home, [*files, *extra]))


def is_up_to_date(home: Path, asset: str, dims: dict, resources: dict) -> bool:
    """A partition is up to date when its file records the version it would be computed with now:
    a changed setting, a rebuilt input or a missing final file (an interrupted run) all differ."""
    stored = stored_version(partition_path(home, asset, dims))
    return stored is not None and stored == expected_version(home, asset, dims, resources)


def run_stage(
    instance: DagsterInstance, resources: dict, assets: Sequence[str], partition_key: str | None = None
) -> ExecuteInProcessResult:
    """Materialize `assets` (of one stage) as a run of their stage's job (assets/jobs.py), tagged
    with the assets and this process, so the UI's runs list says what each CLI run did, and with
    the code location as its origin, so the Overview timeline shows it under its job."""
    definitions = Definitions(
        assets=all_assets, asset_checks=ASSET_CHECKS, jobs=STAGE_JOBS, resources=resources
    )
    job = definitions.resolve_job_def(STAGE_OF[assets[0]])
    with runs_from_code_location(instance, job.name):
        return job.execute_in_process(
            run_config=QUIET_LOGS,
            instance=instance,
            partition_key=partition_key,
            asset_selection=[AssetKey(a) for a in assets],
            tags={
                "kcal/source": "kcal (CLI)",
                "kcal/assets": ", ".join(assets),
                **runner_tags(),
                **IN_CODE_LOCATION,
            },
        )


def materialize_unpartitioned(home: Path, asset: str, settings: dict | None = None) -> None:
    """One unpartitioned asset (e.g. generated_templates, data_quality), whatever its state."""
    run_stage(get_instance(home), default_resources(home=str(home), **(settings or {})), [asset])


def check_run(
    home: Path, models: Sequence[str] | None, relations: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The models and relations of a run, each checked against the registry and the catalog
    without writing anything (a store without models.toml has the default model only); and the
    settings the run's last steps read from the environment (KCAL_REPORTS_PORT: the report links),
    so a bad one stops the run before any work, not after the scoring."""
    reports_port()  # ReportsPortError names the variable and its value
    path = registry_path(home)
    entries = Registry(path).entries() if path.exists() else [DEFAULT_MODEL]
    registered = [e.key for e in entries]
    key_of = {name: e.key for e in entries for name in (e.id, e.key)}  # what users type: id or key
    unknown = [m for m in models or () if m not in key_of]
    if unknown:
        raise KeyError(
            f"--model {', '.join(unknown)}: not registered; registered (id or key): "
            + ", ".join(f"{e.id} ({e.key})" if e.id != e.key else e.id for e in entries)
        )
    known = relation_ids()
    bad = [r for r in relations or () if r not in known]
    if bad:
        raise KeyError(f"--relation {', '.join(bad)}: not in the catalog; known: {', '.join(known)}")
    keys = list(dict.fromkeys(key_of[m] for m in models)) if models else registered
    return keys, list(relations or known)


def run_missing(
    home: Path,
    models: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
    settings: dict | None = None,
    refresh: bool = False,
    log: Callable[[str], None] = print,
    generate: bool = False,
) -> RunSummary:
    """Materialize every missing (asset, partition) for the given models and relations (with
    `generate`, also the open-answer stages on those relations that ask questions).

    A failure in a model's partitions (its scoring, its estimates, its summaries) is recorded in
    the summary's `failed` and the other models go on; a failure in the shared dataset stages stops
    the run."""
    # Everything is checked before the first write: models, relations, settings.
    models, relations = check_run(home, models, relations)
    resources = default_resources(home=str(home), **(settings or {}))
    instance = get_instance(home)
    if generate and not any(asks_questions(r) for r in relations):
        raise ValueError(
            f"--generate: none of the relations {', '.join(relations)} asks questions (only the MACE "
            "relations, e.g. --relation mace-award, have question templates)"
        )
    run = RunContext(Path(home), tuple(models), tuple(relations), resources, instance, refresh, log, generate)
    sync_model_partitions(run.home, instance)
    sync_relation_partitions(run.home, instance, relations)
    for run_id in fail_abandoned_runs(instance):
        log(f"run {run_id} was left started by a killed kcal process: marked failed")
    conversion = _convert_models_early(run)
    try:
        return _run_stages(run)
    finally:
        if conversion is not None and conversion.is_alive():  # a run that stopped before scoring
            conversion.terminate()
            conversion.join(timeout=30)


def _convert_models_early(run: RunContext):
    """Convert the GGUF models that will score something while the dataset stages run (see
    convert_in_background); a model whose scores all exist is left alone."""
    entries = [
        entry
        for entry in Registry(registry_path(run.home)).entries()
        if entry.key in run.models
        and not all(
            partition_path(run.home, "statement_scores", {"model": entry.key, "relation": r}).exists()
            for r in run.relations
        )
    ]
    return convert_in_background(entries, model_cache_dir(run.home))


def _todo(run: RunContext, step: Step, dims: dict) -> list[str]:
    """The step's assets to materialize for one partition: those not up to date, and within the
    step everything downstream of them (its inputs are about to change), with the other outputs
    of a multi-asset that cannot materialize part of itself."""
    stale = {a for a in step.assets if run.refresh or not is_up_to_date(run.home, a, dims, run.resources)}
    for asset in step.assets:  # in dependency order: a parent is decided before its children
        node = ASSET_GRAPH.get(AssetKey(asset))
        if any(parent.to_user_string() in stale for parent in node.parent_keys):
            stale.add(asset)
    for assets_def in all_assets:
        names = {key.to_user_string() for key in assets_def.keys}
        if not assets_def.can_subset and names & stale:
            stale |= names & set(step.assets)
    return [a for a in step.assets if a in stale]


def _blocked(summary: RunSummary, unloadable: dict[str, str], kind: str, dims: dict) -> str | None:
    """Why a model's partition is not run: its model failed to load, an earlier stage of the same
    partition failed (estimation after its scoring), or (for the per-model summaries) some of its
    relation partitions failed, so they would summarise a partial model."""
    model = dims.get("model")
    if model is None:
        return None
    if model in unloadable:
        return unloadable[model]
    failed = [f for f in summary.failed if f.model == model]
    if kind == "model" and failed:
        return f"not run: {len(failed)} partition(s) of this model failed"
    if any(f.relation == dims.get("relation") for f in failed):
        return "not run: an earlier stage of this partition failed"
    return None


def _record_not_run(summary: RunSummary, failure: Failure) -> None:
    """A step not run joins the failure of an earlier step of the same partition, so each failed
    partition is one line (its scoring and estimation, say), as when they were one run."""
    for i, earlier in enumerate(summary.failed):
        if (earlier.model, earlier.relation) == (failure.model, failure.relation):
            summary.failed[i] = replace(earlier, assets=earlier.assets + failure.assets)
            return
    summary.failed.append(failure)


def _run_stages(run: RunContext) -> RunSummary:
    summary = RunSummary()
    unloadable: dict[str, str] = {}  # model key -> why its remaining partitions are not run
    for step in GENERATE_STAGES if run.generate else STAGES:
        for pkey, dims in _partitions(run, step.kind):
            if STAGE_OF[step.assets[0]] == "generation" and not asks_questions(dims["relation"]):
                continue  # a closed-set relation has no open questions
            label = str(pkey) if pkey is not None else "-"
            todo = _todo(run, step, dims)
            summary.skipped += [(a, label) for a in step.assets if a not in todo]
            if todo:
                _run_step(run, summary, unloadable, step, todo, pkey, dims)
    refresh_views(run.home)
    return summary


def _run_step(run, summary, unloadable, step: Step, todo: list[str], pkey, dims: dict) -> None:
    """One run of `todo` (assets of `step`) for one partition, its failure recorded or raised."""
    label = str(pkey) if pkey is not None else "-"
    model = dims.get("model")
    cross_model = set(todo) <= CROSS_MODEL
    if cross_model:
        reads = {p.to_user_string() for a in todo for p in ASSET_GRAPH.get(AssetKey(a)).parent_keys}
        absent = sorted(p for p in reads if KIND_OF[p] in ("model", "model_relation"))
        absent = [p for p in absent if not _upstream_files(run.home, p, dims)]
        if absent:  # every model failed
            run.log(f"not materializing {', '.join(todo)}: no model has {', '.join(absent)}")
            return
    if reason := _blocked(summary, unloadable, step.kind, dims):
        _record_not_run(summary, Failure(tuple(todo), model, dims.get("relation"), reason))
        return
    run.log(f"materializing {', '.join(todo)} [{label}]")
    try:
        run_stage(run.instance, run.resources, todo, pkey)
    except Exception as error:
        if (model is None and not cross_model) or _interrupted(error):  # dataset stages; Ctrl-C
            raise
        # One model's failure (a broken folder, an OOM) fails that model's partitions only.
        failure = Failure(tuple(todo), model, dims.get("relation"), _one_line(error))
        summary.failed.append(failure)
        run.log(f"failed: {failure}")
        if isinstance(error, ModelLoadError):
            unloadable[model] = "not run: the model failed to load (see its first failure)"
        return
    summary.materialized += [(a, label) for a in todo]
