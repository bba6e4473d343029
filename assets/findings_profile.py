"""Build the findings profile: one ordinary kcal store per stage under a root directory.

Each stage store gets its BEAR import (where the stage needs BEAR) and then `run_missing`, exactly
as `kcal demo` runs, so a re-run materializes only what is missing or stale and a killed build
resumes from the partition checkpoints. The stages themselves (relations, settings, sizes) are
pure data in kcal_pipeline/core/findings_profile.py; this module times them and records what ran
in DIR/profile.json, which the findings header cites.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.core.storage import write_text_atomic
from kcal_pipeline.dataset.findings_profile import Stage, split_settings
from kcal_pipeline.dataset.instances.variants import SUBSAMPLE_SUFFIX
from kcal_pipeline.reporting.findings import kcal_commit
from kcal_pipeline.reporting.findings.store import PROFILE_FILE  # the file read_profile reads


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def stage_home(home: Path) -> Iterator[None]:
    """KCAL_HOME = `home` (and DAGSTER_HOME = home/dagster) for the block: the catalog (imported
    datasets) and the Dagster layer read them from the environment, and the catalog is cached per
    process, so its cache is cleared on the way in and out."""
    from kcal_pipeline.dataset.relations import load_catalog

    before = {name: os.environ.get(name) for name in ("KCAL_HOME", "DAGSTER_HOME")}
    os.environ["KCAL_HOME"] = str(home)
    # Each stage store has its own Dagster instance (get_instance sets DAGSTER_HOME for the
    # process, so without this every later stage would run on the first stage's instance).
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    load_catalog.cache_clear()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        load_catalog.cache_clear()


def stored_statements(home: Path, relations: Sequence[str]) -> int:
    """Scored statements in the store for these relations (every model), read from file metadata."""
    files = [
        f
        for r in relations
        for f in sorted((home / "statement_scores").glob(f"model=*/relation={r}/*.parquet"))
    ]
    if not files:
        return 0
    return int(pl.scan_parquet(files).select(pl.len()).collect().item())


def _earlier_stages(path: Path) -> dict[str, dict]:
    """The stage entries of an earlier build's profile.json (none if absent or unreadable)."""
    try:
        return {e["name"]: e for e in json.loads(path.read_text("utf-8")).get("stages", []) if "name" in e}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return {}


def _same_stage(before: dict, entry: dict) -> bool:
    """An earlier entry of the same stage with the same relations and settings, and a build time."""
    same = all(before.get(k) == entry[k] for k in ("relations", "settings", "source", "bear_templates"))
    return same and all(before.get(k) is not None for k in ("started", "finished", "seconds"))


def split_counts(home: Path, relations: Sequence[str]) -> dict[str, dict[str, int]]:
    """Probe instances per relation and split ({relation: {"dev": n, "test": n}}), read from the
    stage store's probe_instances: what each stage's claims rest on, recorded beside its build. The
    option-count sweep's subsample copies (SUBSAMPLE_SUFFIX) are the same instances, not counted."""
    files = [f for r in relations for f in sorted((home / "probe_instances").glob(f"relation={r}/*.parquet"))]
    if not files:
        return {}
    counts = (
        pl.scan_parquet(files)
        .filter(~pl.col("instance_id").str.contains(SUBSAMPLE_SUFFIX))
        .group_by("relation_id", "split")
        .len()
        .collect()
    )
    out: dict[str, dict[str, int]] = {}
    for relation, split, n in counts.sort("relation_id", "split").iter_rows():
        out.setdefault(relation, {})[split] = int(n)
    return out


def file_digest(path: Path | None) -> str | None:
    """sha256 of a file, or of a folder's files (their relative paths and bytes, in name order): the
    version of BEAR and of the template file a profile was built from."""
    if path is None or not Path(path).exists():
        return None
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        digest.update(str(f.relative_to(path) if f != path else f.name).encode() + b"\0")
        digest.update(f.read_bytes())
    return digest.hexdigest()


LIBRARIES = ("torch", "transformers", "dagster", "polars", "duckdb", "numpy")


def library_versions() -> dict[str, str]:
    """Python's and the numerical/pipeline libraries' versions a profile was built with."""
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def build_profile(
    root: Path,
    stages: Sequence[Stage],
    *,
    scale: float,
    bear_dir: Path | None,
    kissling: Path | None,
    command: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> tuple[dict[str, Path], list[str]]:
    """Materialize every stage store under `root`; returns (stage -> home of the stages that ran,
    the failures). A stage's failures are reported and the next stage goes on; a skipped stage
    (BEAR absent) is recorded with its reason. DIR/profile.json is rewritten after every stage."""
    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Converted weights are shared by every stage (converting takes ~25 s and ~0.5 GB each).
    os.environ.setdefault("KCAL_MODEL_CACHE", str(root / "model-cache"))
    record = _new_record(scale, command, bear_dir, kissling)
    homes: dict[str, Path] = {}
    failures: list[str] = []
    build_started = time.perf_counter()
    earlier = _earlier_stages(root / PROFILE_FILE)

    def save() -> None:
        write_text_atomic(root / PROFILE_FILE, json.dumps(record, indent=2) + "\n")

    for stage in stages:
        entry = _stage_entry(stage)
        record["stages"].append(entry)
        if stage.skipped:
            entry["skipped"] = stage.skipped
            log(f"stage {stage.name}: skipped: {stage.skipped}")
        else:
            home = root / stage.name
            failures += _build_stage(
                stage, entry, home, earlier.get(stage.name, {}),
                bear_dir=bear_dir, kissling=kissling, command=command, log=log,
            )  # fmt: skip
            homes[stage.name] = home
        save()
    total = time.perf_counter() - build_started
    _close_record(record, total)
    save()
    log(f"profile: {len(homes)} stage store(s) in {root} in {_minutes(total)}; {root / PROFILE_FILE}")
    return homes, failures


def _new_record(scale: float, command: Sequence[str], bear_dir: Path | None, kissling: Path | None) -> dict:
    """profile.json before any stage: how the profile is built (scale, command, commit, BEAR's and
    the template file's hashes, library versions, model cache) and when it started."""
    return {
        "scale": scale,
        "command": list(command),
        "kcal_commit": kcal_commit(),
        "bear": str(bear_dir) if bear_dir else None,
        "bear_sha256": file_digest(bear_dir),
        "bear_templates": str(kissling) if kissling else None,
        "bear_templates_sha256": file_digest(kissling),
        "libraries": library_versions(),
        "model_cache": os.environ["KCAL_MODEL_CACHE"],
        "started": _utc_now(),
        "finished": None,
        "seconds": None,
        "stages": [],
    }


def _stage_entry(stage: Stage) -> dict:
    """A stage's entry in profile.json before it runs: what it is for and what it probes, how."""
    return {
        "name": stage.name,
        "purpose": stage.purpose,
        "source": stage.source,
        "relations": stage.probe_relations,
        "settings": dict(stage.settings),
        "chosen": stage.chosen,
        "seed": ProbeOptions(**split_settings(stage.settings)[0]).seed,
        "bear_templates": stage.bear_templates,
    }


def _build_stage(
    stage: Stage,
    entry: dict,
    home: Path,
    before: dict,
    *,
    bear_dir: Path | None,
    kissling: Path | None,
    command: Sequence[str],
    log: Callable[[str], None],
) -> list[str]:
    """Materialize one stage store in `home` and record in its `entry` when and how long it ran,
    what it materialized and holds; `before` is its entry of an earlier build. Returns its failures."""
    home.mkdir(parents=True, exist_ok=True)
    entry["home"] = str(home)
    entry["started"] = _utc_now()
    log(f"stage {stage.name}: {', '.join(stage.probe_relations)} in {home} ({stage.purpose})")
    started = time.perf_counter()
    summary = _materialize_stage(stage, home, bear_dir=bear_dir, kissling=kissling, command=command, log=log)
    seconds = time.perf_counter() - started
    statements = stored_statements(home, stage.probe_relations)
    entry.update(
        finished=_utc_now(),
        seconds=round(seconds, 1),
        materialized=len(summary.materialized),
        skipped_up_to_date=len(summary.skipped),
        statements=statements,
        instances=split_counts(home, stage.probe_relations),
        failed=[str(f) for f in summary.failed],
    )
    if not summary.materialized and not summary.failed and _same_stage(before, entry):
        # Nothing was materialized: the store is the one the earlier run built, so its build
        # time (what the profile costs) is kept; `checked` says when it was found up to date.
        entry.update({k: before[k] for k in ("started", "finished", "seconds")}, checked=_utc_now())
    log(
        f"stage {stage.name}: {len(summary.materialized)} asset partitions in {_minutes(seconds)} "
        f"({len(summary.skipped)} up to date; {statements:,} statements scored in the store)"
    )
    failures = []
    for failure in summary.failed:
        failures.append(f"stage {stage.name}: {failure}")
        log(f"stage {stage.name}: failed: {failure}")
    return failures


def _materialize_stage(
    stage: Stage,
    home: Path,
    *,
    bear_dir: Path | None,
    kissling: Path | None,
    command: Sequence[str],
    log: Callable[[str], None],
):
    """`kcal demo`'s run in the stage store (under its lock): BEAR's import where the stage reads
    BEAR, then run_missing. Returns run_missing's summary."""
    from assets.runner import run_missing  # Dagster layer
    from kcal_pipeline.core.store_lock import hold_store_lock
    from kcal_pipeline.dataset.sources.bear.importing import import_bear

    with stage_home(home), hold_store_lock(home, command=" ".join(["kcal", *command])):
        if stage.source == "bear":
            templates = kissling if stage.bear_templates == "kissling" else None
            import_bear(
                bear_dir, home, prefix="bear-", replace=True, relations=stage.relations,
                templates=templates, log=log,
            )  # fmt: skip
        settings = dict(stage.settings)
        return run_missing(home, relations=stage.probe_relations, settings=settings, log=log)


def _close_record(record: dict, run_seconds: float) -> None:
    """The profile's start, end and cost: its stages' build times (kept from earlier runs for
    up-to-date stages); this run's own time is `run_seconds`."""
    built = [e for e in record["stages"] if e.get("seconds") is not None]
    record.update(
        started=min((e["started"] for e in built), default=record["started"]),
        finished=max((e["finished"] for e in built), default=_utc_now()),
        seconds=round(sum(e["seconds"] for e in built), 1),
        run_seconds=round(run_seconds, 1),
    )
