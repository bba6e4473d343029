"""Upgrades of tables written by an older kcal: one spelling for every reader, no rescoring.

When a stored column is renamed, or a meaning that older files left implicit is written out, the
new code writes the new form under the *same* code version, and an older file is rewritten in
place to exactly that form (core/storage.py does it the first time the file is read, and for the
whole store when the SQL views are refreshed). The file keeps its data version, since its content
is unchanged, so nothing downstream goes stale and no partition is rescored. A test checks that
each upgrade turns an old file into what the current code writes.

Each upgrade is a frozen record of a past format: its old names stay here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl


@dataclass(frozen=True)
class ColumnUpgrade:
    """Old columns renamed, then columns older files lacked added with a constant (their meaning
    in those files) and nulls in them filled with it."""

    table: str
    why: str
    renamed: Mapping[str, str] = field(default_factory=dict)
    filled: Mapping[str, tuple[pl.DataType, object]] = field(default_factory=dict)

    def needed(self, schema: Mapping[str, pl.DataType]) -> bool:
        """Whether a file of this schema predates the upgrade (an upgraded file has every filled
        column and none of the old names)."""
        return any(old in schema for old in self.renamed) or any(c not in schema for c in self.filled)

    def apply(self, frame: pl.DataFrame) -> pl.DataFrame:
        renamed = frame.rename({old: new for old, new in self.renamed.items() if old in frame.columns})
        return renamed.with_columns(
            (
                pl.col(column).cast(dtype).fill_null(pl.lit(value, dtype))
                if column in renamed.columns
                else pl.lit(value, dtype)
            ).alias(column)
            for column, (dtype, value) in self.filled.items()
        )


UPGRADES: tuple[ColumnUpgrade, ...] = (
    ColumnUpgrade(
        table="probe_instances",
        why="the option-count sweep's columns spelled as the setting (answer_space_k), 0 = full space",
        renamed={
            "subsample_k": "answer_space_k",
            "subsample_draw": "answer_space_draw",
            "subsample_status": "answer_space_status",
        },
        filled={
            "parent_instance_id": (pl.Utf8, None),
            "answer_space_k": (pl.Int32, 0),
            "answer_space_draw": (pl.Int32, 0),
            "answer_space_status": (pl.Utf8, None),
        },
    ),
)


def upgrades_of(table: str) -> tuple[ColumnUpgrade, ...]:
    return tuple(u for u in UPGRADES if u.table == table)


def upgraded_tables() -> tuple[str, ...]:
    return tuple(dict.fromkeys(u.table for u in UPGRADES))


def upgrade_frame(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (a whole file of `table`) in the current form."""
    for upgrade in upgrades_of(table):
        if upgrade.needed(frame.schema):
            frame = upgrade.apply(frame)
    return frame


def needs_upgrade(table: str, schema: Mapping[str, pl.DataType]) -> bool:
    return any(u.needed(schema) for u in upgrades_of(table))
