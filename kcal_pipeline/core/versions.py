"""Data versions: what a materialized partition was computed from, so "up to date" is a comparison.

A partition's data version is a hash of the asset's name and code version, the settings it read
and the data versions of the exact input files it read. It is stored in the Parquet file's
key-value metadata (and shown as materialization metadata in Dagster). A partition is up to date
when a file exists and its stored version equals the version the current code, settings and
inputs would give; a changed setting, a rebuilt input or an interrupted run (no final file) all
make it differ, and nothing else does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

DATA_VERSION_KEY = "kcal.data_version"
UNVERSIONED = "unversioned"  # an input file written before data versions existed


def data_version(asset: str, code_version: str | None, settings: Mapping[str, object],
                 inputs: Mapping[str, str]) -> str:  # fmt: skip
    """The version of one partition of `asset`; `inputs` maps each input file (relative to the
    store) to its own data version."""
    payload = {
        "asset": asset,
        "code_version": code_version,
        "settings": {k: settings[k] for k in sorted(settings)},
        "inputs": {k: inputs[k] for k in sorted(inputs)},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def stored_version(path: Path) -> str | None:
    """The data version recorded in a Parquet file; None if the file is missing or unreadable,
    UNVERSIONED if it has none."""
    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError):
        return None
    value = meta.get(DATA_VERSION_KEY.encode())
    return value.decode() if value else UNVERSIONED


def input_versions(home: Path, paths: list[Path]) -> dict[str, str]:
    """{path relative to the store: its data version} of input files that exist."""
    home = Path(home)
    out = {}
    for path in paths:
        version = stored_version(path)
        if version is not None:
            out[str(Path(path).relative_to(home))] = version
    return out
