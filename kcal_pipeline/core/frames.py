"""Checks on input frames shared by the estimators and metrics: fail loudly, naming the column."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def require_columns(frame: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    """Every column present and free of nulls, and at least one row."""
    for col in columns:
        if col not in frame.columns:
            raise ValueError(f"{what}: missing column {col!r} (have {frame.columns})")
    if frame.is_empty():
        raise ValueError(f"{what}: no rows")
    for col in columns:
        nulls = frame[col].null_count()
        if nulls:
            raise ValueError(f"{what}: column {col!r} has {nulls} null value(s)")
