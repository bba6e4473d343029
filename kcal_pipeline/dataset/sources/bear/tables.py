"""A read BEAR dataset as kcal's facts tables: kept facts, dropped lines, and the stored file.

The stored file holds both the kept facts (drop_reason null) and the dropped lines with their
reason, so they are written together or not at all; split_stored takes it apart again when the
facts are loaded (sources/facts.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import polars as pl

from kcal_pipeline.dataset.sources.bear.parsed import BearDataset, BearRelation

BEAR_FACT_SCHEMA = {
    "relation_id": pl.Utf8,
    "subject_id": pl.Utf8,
    "subject_label": pl.Utf8,
    "object_id": pl.Utf8,
    "object_label": pl.Utf8,
    "qualifiers": pl.Utf8,
    "source": pl.Utf8,
    "retrieved_at": pl.Utf8,
}
STORED_SCHEMA = {**BEAR_FACT_SCHEMA, "drop_reason": pl.Utf8}  # a facts file: kept rows have no reason


def _fact_rows(ds: BearDataset, rows_of: Callable[[BearRelation], tuple[dict, ...]]) -> list[dict]:
    return [
        {
            "relation_id": rel.relation_id,
            "subject_id": r["subject_id"],
            "subject_label": r["subject_label"],
            "object_id": r["object_id"],
            "object_label": r["object_label"],
            "qualifiers": json.dumps({"sub_aliases": list(r["aliases"])}, ensure_ascii=False),
            "source": f"bear:{ds.name}",
            "retrieved_at": None,
            **({"drop_reason": r["drop_reason"]} if "drop_reason" in r else {}),
        }
        for rel in ds.relations.values()
        for r in rows_of(rel)
    ]


def facts_frame(ds: BearDataset) -> pl.DataFrame:
    """The kept facts of every relation, in the facts-table layout, sorted."""
    return pl.DataFrame(_fact_rows(ds, lambda rel: rel.facts), schema=BEAR_FACT_SCHEMA).sort(
        ["relation_id", "subject_id", "object_id"]
    )


def dropped_frame(ds: BearDataset) -> pl.DataFrame:
    """The dropped lines, same layout plus drop_reason, for the quality report."""
    return pl.DataFrame(_fact_rows(ds, lambda rel: rel.dropped), schema=STORED_SCHEMA)


def stored_frame(ds: BearDataset) -> pl.DataFrame:
    """What an import stores per relation: the kept facts (drop_reason null), then the dropped
    lines with their reason, so the facts and their drops are written together or not at all."""
    kept = facts_frame(ds).with_columns(drop_reason=pl.lit(None, pl.Utf8))
    return pl.concat([kept, dropped_frame(ds)]).sort(
        ["relation_id", "drop_reason", "subject_id", "object_id"], nulls_last=False, maintain_order=True
    )


def split_stored(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept facts, dropped lines) of a stored facts file; a file imported before drops were stored
    has no drop_reason column and no dropped lines."""
    if "drop_reason" not in frame.columns:
        return frame, pl.DataFrame(schema={**frame.schema, "drop_reason": pl.Utf8})
    dropped = pl.col("drop_reason").is_not_null()
    return frame.filter(~dropped).drop("drop_reason"), frame.filter(dropped)


def content_version(frame: pl.DataFrame) -> str:
    """A hash of a stored facts file's rows: its data version, so a re-import that changes facts
    (and nothing in the catalog entry) still makes the relation's facts stale."""
    rows = json.dumps([frame.columns, frame.rows()], ensure_ascii=False, default=str)
    return hashlib.sha256(rows.encode()).hexdigest()[:20]
