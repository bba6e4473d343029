"""Where kcal keeps its state: one root (KCAL_HOME) for Parquet, DuckDB, models, reports and Dagster."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = ".kcal"


def kcal_home(explicit: str | os.PathLike | None = None) -> Path:
    """KCAL_HOME, absolute: an explicit value wins, then the environment, then ./.kcal."""
    value = explicit or os.environ.get("KCAL_HOME") or DEFAULT_HOME
    return Path(value).expanduser().resolve()


def model_cache_dir(home: Path) -> Path:
    """Converted model weights; KCAL_MODEL_CACHE lets several homes (e.g. tests) share one cache."""
    override = os.environ.get("KCAL_MODEL_CACHE")
    return Path(override).expanduser().resolve() if override else home / "models"


def registry_path(home: Path) -> Path:
    return home / "models.toml"


def dagster_home(home: Path) -> Path:
    """DAGSTER_HOME if set, else a folder inside KCAL_HOME so the UI and the CLI share one instance."""
    override = os.environ.get("DAGSTER_HOME")
    return Path(override).expanduser().resolve() if override else home / "dagster"


def duckdb_path(home: Path) -> Path:
    return home / "kcal.duckdb"


def report_path(home: Path, model_key: str) -> Path:
    """The HTML report of one model (written by the report asset, printed by the CLI)."""
    return home / "reports" / f"model={model_key}" / "report.html"


def cross_model_report_path(home: Path) -> Path:
    """The page across every model (written by the cross_model_report asset); it links to each
    model's report_path, beside it."""
    return home / "reports" / "index.html"


def repo_sql_dir() -> Path:
    """The project's sql/ folder (beside kcal_pipeline/ in a checkout or editable install)."""
    return Path(__file__).resolve().parents[2] / "sql"
