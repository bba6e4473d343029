"""Reading a store's tables as the claims read them (one StoreTables per model)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.core.storage import (
    BadFileError,
    partition_path,
    read_partition,
    read_partitions,
    rebuild_hint,
)
from kcal_pipeline.estimation.registry import DEV_SPLIT, FULL_ANSWER_SPACE, HEADLINE_SPLIT, OUTPUT_SCHEMA
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import FIT_COLUMNS, REDUCTION, StoreTables


def store_models(home: Path) -> list[str]:
    """The model keys that have a metrics table in the store."""
    return sorted(
        p.parent.name.split("=", 1)[1] for p in (Path(home) / "metrics").glob("model=*/part.parquet")
    )


def _relation_partitions(home: Path, table: str, key: str | None = None) -> list[dict[str, str]]:
    base = Path(home) / table / (f"model={key}" if key else "")
    parts = []
    for p in sorted(base.glob("relation=*/part.parquet")):
        partition = {"relation": p.parent.name.split("=", 1)[1]}
        parts.append({"model": key, **partition} if key else partition)
    return parts


def _optional(home: Path, table: str, key: str) -> pl.DataFrame:
    """A model-partitioned table, or an empty frame where the store has none for the model."""
    try:
        return read_partition(home, table, {"model": key})
    except FileNotFoundError:
        return pl.DataFrame()


# The estimates columns the claims read (predicted_id is not needed).
ESTIMATE_COLUMNS = tuple(c for c in OUTPUT_SCHEMA if c != "predicted_id")


# The reductions the claims read: the headline one, and SCA's own.
CLAIMED_REDUCTIONS = (REDUCTION, "answer_sum")
# Base is also kept under every reduction (the reduction claim) and on the option-count sweep's cut
# answer spaces (answer_space_k > 0: the more-options claim); every other estimator on full ones only.
EVERY_SETTING_ESTIMATORS = (BASELINE,)


def _claimed_estimates(home: Path, partition: dict[str, str], split: str = HEADLINE_SPLIT) -> pl.DataFrame:
    """One estimates partition, only the rows the claims read (test split; full answer spaces
    and CLAIMED_REDUCTIONS, or Base under any reduction and answer space), filtered while scanning:
    a store with every template kind holds millions of estimate rows per model. A damaged file is
    named with how to rebuild it, as storage does."""
    path = partition_path(home, "estimates", partition)
    try:
        present = pl.read_parquet_schema(path)
        return (
            pl.scan_parquet(path)
            .select([c for c in ESTIMATE_COLUMNS if c in present])
            .filter(
                (pl.col("split") == split)
                & (
                    (
                        (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
                        & pl.col("reduction").is_in(CLAIMED_REDUCTIONS)
                    )
                    | pl.col("estimator").is_in(EVERY_SETTING_ESTIMATORS)
                )
            )
            .collect()
        )
    except (OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadFileError(
            f"{path}: not a readable Parquet file ({reason}); {rebuild_hint('estimates', partition)}"
        ) from exc


def read_store_tables(home: Path, models: Sequence[str] | None = None) -> list[StoreTables]:
    """Each model's tables (every model with metrics, or the given keys or ids), read from the
    store's Parquet files; estimates kept on the test split and full answer spaces only."""
    home = Path(home)
    keys = store_models(home)
    if not keys:
        raise FileNotFoundError(f"{home}: no metrics table; run kcal demo (with --home {home}) first")
    wanted = list(dict.fromkeys(model_key(m) for m in models)) if models else keys
    unknown = [m for m in wanted if m not in keys]
    if unknown:
        raise ValueError(
            f"--model {', '.join(unknown)}: no metrics for it in {home}; models in the store: "
            f"{', '.join(keys)}"
        )
    templates = read_partition(home, "templates")
    relations = _optional_unpartitioned(home, "relations", ["relation_id", "domain"])
    instance_parts = _relation_partitions(home, "probe_instances")
    instances = (
        read_partitions(
            home, "probe_instances", instance_parts, ["relation_id", "instance_id", "n_gold", "n_options"]
        )
        if instance_parts
        else pl.DataFrame()
    )
    out = []
    for key in wanted:
        metrics = read_partition(home, "metrics", {"model": key})
        parts = _relation_partitions(home, "estimates", key)
        estimates = (
            pl.concat([_claimed_estimates(home, p) for p in parts], how="diagonal_relaxed")
            if parts
            else pl.DataFrame()
        )
        dev_estimates = (
            pl.concat([_claimed_estimates(home, p, DEV_SPLIT) for p in parts], how="diagonal_relaxed")
            if parts
            else pl.DataFrame()
        )
        fit_parts = _relation_partitions(home, "estimator_fits", key)
        out.append(
            StoreTables(
                model_id=metrics["model_id"][0] if metrics.height else key,
                fits=read_partitions(home, "estimator_fits", fit_parts, FIT_COLUMNS)
                if fit_parts
                else pl.DataFrame(),
                metrics=metrics,
                differences=_optional(home, "metric_differences", key),
                consistency=_optional(home, "consistency", key),
                estimates=estimates,
                dev_estimates=dev_estimates,
                templates=templates,
                instances=instances,
                relations=relations,
            )
        )
    return out


def _optional_unpartitioned(home: Path, table: str, columns: Sequence[str]) -> pl.DataFrame:
    try:
        return read_partition(home, table, columns=columns)
    except FileNotFoundError:
        return pl.DataFrame()


PROFILE_FILE = "profile.json"  # what kcal findings --build records about its stages


def read_profile(
    root: Path, models: Sequence[str] | None = None
) -> tuple[dict[str, list[StoreTables]], dict]:
    """A findings profile's stage stores (kcal findings --build): stage → each model's tables, in the
    profile's stage order, and the build record (profile.json: stages, settings, times). A stage
    without metrics (skipped, failed, not built yet) is left out: its claims are then not testable."""
    root = Path(root)
    path = root / PROFILE_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no findings profile here; build one with kcal findings --build --profile-dir {root}"
        )
    try:
        record = json.loads(path.read_text())
    except ValueError as exc:
        raise BadFileError(f"{path}: not JSON ({exc}); rebuild with kcal findings --build") from exc
    stages = {}
    for entry in record.get("stages", []):
        home = root / str(entry.get("name", ""))
        if entry.get("name") and store_models(home):
            stages[entry["name"]] = read_store_tables(home, models)
    if not stages:
        raise FileNotFoundError(
            f"{root}: no stage store has metrics yet; run kcal findings --build --profile-dir {root}"
        )
    return stages, record
