"""Materialize what is missing, stage by stage, on a persistent Dagster instance.

This is what `kcal demo` runs: the same assets and resources as the UI, so a partition
materialized here shows up there (and the reverse). A (asset, partition) counts as done when its
Parquet file records the data version the current code, settings and inputs would give it
(kcal_pipeline/core/versions.py): a changed setting or a rebuilt input reruns exactly what it
affects, an interrupted partition (no final file) is never done, and done work is never redone.
"""

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    ExecuteInProcessResult,
    MultiPartitionKey,
    RunsFilter,
)

from assets.checks import ASSET_CHECKS
from assets.definitions import all_assets
from assets.instance import get_instance, sync_model_partitions, sync_relation_partitions
from assets.jobs import IN_CODE_LOCATION, STAGE_JOBS, job_of
from kcal_pipeline.core.paths import model_cache_dir, registry_path
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.versions import data_version, input_versions, stored_version
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.relations import relation_ids
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelLoadError, Registry
from kcal_pipeline.scoring.models.gguf import convert_in_background
from resources import default_resources
from resources.settings import declared_reads, resolve_reads

# Stages in dependency order; inside a stage, assets share one partitions definition. Facts are
# fetched for every relation (cheap, and the top-up pools of short answer spaces must not depend
# on which relations a run happened to select); the rest only for the selected relations.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("none", ("relations", "templates")),
    ("all_relations", ("wikidata_facts", "dropped_facts")),
    ("none", ("object_pools",)),
    ("relation", ("probe_instances", "statements")),
    ("none", ("data_quality",)),
    (
        "model_relation",
        ("statement_scores", "estimates", "option_estimates", "estimator_fits", "estimator_status"),
    ),
    ("model", ("metrics", "metric_differences", "curves", "decision_thresholds", "consistency", "report")),
    ("none", ("family_comparison",)),  # across models: after every model's metrics
    ("none", ("cross_model_report",)),
]
# Stages that read every model: their failure is recorded like a model's, never stops the run.
CROSS_MODEL = {"family_comparison", "cross_model_report"}
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


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


def _partitions(kind: str, models: Sequence[str], relations: Sequence[str]) -> list[tuple[str | None, dict]]:
    if kind == "none":
        return [(None, {})]
    if kind == "all_relations":
        return [(r, {"relation": r}) for r in relation_ids()]
    if kind == "relation":
        return [(r, {"relation": r}) for r in relations]
    if kind == "model":
        return [(m, {"model": m}) for m in models]
    return [
        (MultiPartitionKey({"model": m, "relation": r}), {"model": m, "relation": r})
        for m in models
        for r in relations
    ]


KIND_OF = {
    asset: "relation" if kind == "all_relations" else kind for kind, names in STAGES for asset in names
}


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
        declared_reads(spec.metadata), dims, resources["probe_settings"], resources["scoring_settings"], home
    )
    files = [f for dep in spec.deps for f in _upstream_files(home, dep.asset_key.to_user_string(), dims)]
    code_version = assets_def.code_versions_by_key.get(AssetKey(asset))
    return data_version(asset, code_version, values, input_versions(home, [*files, *extra]))


def is_up_to_date(home: Path, asset: str, dims: dict, resources: dict) -> bool:
    """A partition is up to date when its file records the version it would be computed with now:
    a changed setting, a rebuilt input or a missing final file (an interrupted run) all differ."""
    stored = stored_version(partition_path(home, asset, dims))
    return stored is not None and stored == expected_version(home, asset, dims, resources)


def runner_tags() -> dict[str, str]:
    return {"kcal/host": socket.gethostname(), "kcal/pid": str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def fail_abandoned_runs(instance: DagsterInstance) -> list[str]:
    """Mark failed the runs a killed kcal process left 'started' on this host (a SIGKILL gives it
    no chance to), so they neither show as running forever nor hold the scoring pool's slot that
    the UI's queued runs wait for. Returns their run ids."""
    stuck = instance.get_runs(
        filters=RunsFilter(
            statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING],
            tags={"kcal/host": socket.gethostname()},
        )
    )
    pids = {run.run_id: run.tags.get("kcal/pid", "") for run in stuck}
    abandoned = [run for run in stuck if pids[run.run_id].isdigit() and not _alive(int(pids[run.run_id]))]
    for run in abandoned:
        instance.report_run_failed(run, f"the kcal process (pid {run.tags['kcal/pid']}) that ran it is gone")
    return [run.run_id for run in abandoned]


def run_stage(
    instance: DagsterInstance, resources: dict, assets: Sequence[str], partition_key: str | None = None
) -> ExecuteInProcessResult:
    """Materialize `assets` (of one stage) as a run of their named job (assets/jobs.py), tagged
    with the assets and this process, so the UI's runs list says what each CLI run did."""
    definitions = Definitions(
        assets=all_assets, asset_checks=ASSET_CHECKS, jobs=STAGE_JOBS, resources=resources
    )
    job = definitions.resolve_job_def(job_of(assets[0]))
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


def _blocked(summary: RunSummary, unloadable: dict[str, str], kind: str, model: str) -> str | None:
    """Why a model's partition is not run: its model failed to load, or (for the per-model
    summaries) some of its relation partitions failed, so they would summarise a partial model."""
    if model in unloadable:
        return unloadable[model]
    failed = [f for f in summary.failed if f.model == model]
    if kind == "model" and failed:
        return f"not run: {len(failed)} partition(s) of this model failed"
    return None


def check_run(
    home: Path, models: Sequence[str] | None, relations: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The models and relations of a run, each checked against the registry and the catalog
    without writing anything (a store without models.toml has the default model only)."""
    path = registry_path(home)
    registered = [e.key for e in Registry(path).entries()] if path.exists() else [DEFAULT_MODEL.key]
    unknown = [m for m in models or () if m not in registered]
    if unknown:
        raise KeyError(f"--model {', '.join(unknown)}: not registered; registered: {', '.join(registered)}")
    known = relation_ids()
    bad = [r for r in relations or () if r not in known]
    if bad:
        raise KeyError(f"--relation {', '.join(bad)}: not in the catalog; known: {', '.join(known)}")
    return list(models or registered), list(relations or known)


def run_missing(
    home: Path,
    models: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
    settings: dict | None = None,
    refresh: bool = False,
    log: Callable[[str], None] = print,
) -> RunSummary:
    """Materialize every missing (asset, partition) for the given models and relations.

    A failure in a model's partitions (its scoring, its estimates, its summaries) is recorded in
    the summary's `failed` and the other models go on; a failure in the shared dataset stages stops
    the run."""
    # Everything is checked before the first write: models, relations, settings.
    models, relations = check_run(home, models, relations)
    resources = default_resources(home=str(home), **(settings or {}))
    instance = get_instance(home)
    sync_model_partitions(home, instance)
    sync_relation_partitions(home, instance, relations)
    for run_id in fail_abandoned_runs(instance):
        log(f"run {run_id} was left started by a killed kcal process: marked failed")
    conversion = _convert_models_early(home, models, relations)
    try:
        return _run_stages(home, models, relations, resources, instance, refresh, log)
    finally:
        if conversion is not None and conversion.is_alive():  # a run that stopped before scoring
            conversion.terminate()
            conversion.join(timeout=30)


def _convert_models_early(home: Path, models: Sequence[str], relations: Sequence[str]):
    """Convert the GGUF models that will score something while the dataset stages run (see
    convert_in_background); a model whose scores all exist is left alone."""
    entries = [
        entry
        for entry in Registry(registry_path(home)).entries()
        if entry.key in models
        and not all(
            partition_path(home, "statement_scores", {"model": entry.key, "relation": r}).exists()
            for r in relations
        )
    ]
    return convert_in_background(entries, model_cache_dir(home))


def _run_stages(
    home: Path,
    models: Sequence[str],
    relations: Sequence[str],
    resources: dict,
    instance: DagsterInstance,
    refresh: bool,
    log: Callable[[str], None],
) -> RunSummary:
    summary = RunSummary()
    unloadable: dict[str, str] = {}  # model key -> why its remaining partitions are not run
    for kind, stage_assets in STAGES:
        for pkey, dims in _partitions(kind, models, relations):
            label = str(pkey) if pkey is not None else "-"
            # Stage assets are in dependency order: from the first stale one on, all are recomputed.
            done = [not refresh and is_up_to_date(home, a, dims, resources) for a in stage_assets]
            first_missing = done.index(False) if False in done else len(done)
            todo = list(stage_assets[first_missing:])
            summary.skipped += [(a, label) for a in stage_assets[:first_missing]]
            if not todo:
                continue
            model = dims.get("model")
            if set(todo) <= CROSS_MODEL and not _upstream_files(home, "metrics", dims):
                log(f"not materializing {', '.join(todo)}: no model has metrics")  # all failed
                continue
            if model is not None and (reason := _blocked(summary, unloadable, kind, model)):
                summary.failed.append(Failure(tuple(todo), model, dims.get("relation"), reason))
                continue
            log(f"materializing {', '.join(todo)} [{label}]")
            try:
                run_stage(instance, resources, todo, pkey)
            except Exception as error:
                cross_model = set(todo) <= CROSS_MODEL
                if (model is None and not cross_model) or _interrupted(error):  # dataset stages; Ctrl-C
                    raise
                # One model's failure (a broken folder, an OOM) fails that model's partitions only.
                failure = Failure(tuple(todo), model, dims.get("relation"), _one_line(error))
                summary.failed.append(failure)
                log(f"failed: {failure}")
                if isinstance(error, ModelLoadError):
                    unloadable[model] = "not run: the model failed to load (see its first failure)"
                continue
            summary.materialized += [(a, label) for a in todo]
    refresh_views(home)
    return summary
