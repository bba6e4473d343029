"""The facts of one catalog relation, whatever their source, in one table shape with provenance.

Closed-set relations come from SPARQL (paged or not, popularity-filtered where the endpoint can),
MACE domains from their own qualifier-aware queries, Math from rules, imported BEAR relations from
their facts file. Every row carries endpoint, query_hash and retrieved_at; dropped rows are kept
in a second frame with their reason, so nothing is lost silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kcal_pipeline.core.storage import read_parquet_named
from kcal_pipeline.dataset.relations import RelationSpec
from kcal_pipeline.dataset.sources import mace
from kcal_pipeline.dataset.sources.bear.tables import split_stored
from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql
from kcal_pipeline.dataset.sources.wikidata import DROPPED_SCHEMA, fetch_facts

COLUMNS = [
    "relation_id",
    "subject_id",
    "subject_label",
    "object_id",
    "object_label",
    "qualifiers",
    "endpoint",
    "query_hash",
    "retrieved_at",
]
SCHEMA = dict.fromkeys(COLUMNS, pl.Utf8)
DROPPED_COLUMNS = [*COLUMNS, "drop_reason"]


@dataclass(frozen=True)
class RelationFacts:
    facts: pl.DataFrame  # COLUMNS
    dropped: pl.DataFrame  # DROPPED_COLUMNS (rows), where the source can return them
    drop_counts: dict[str, int]


def _shape(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    missing = [c for c in columns if c not in frame.columns]
    frame = frame.with_columns([pl.lit(None, dtype=pl.Utf8).alias(c) for c in missing])
    return frame.select([pl.col(c).cast(pl.Utf8) for c in columns])


def _no_drops() -> pl.DataFrame:
    """Sources that return no dropped rows (rules)."""
    return _shape(pl.DataFrame(schema=DROPPED_SCHEMA), DROPPED_COLUMNS)


def _provenance(
    frame: pl.DataFrame, endpoint: str | None, query_hash: str | None, retrieved_at: str | None
) -> pl.DataFrame:
    return frame.with_columns(
        endpoint=pl.lit(endpoint, pl.Utf8),
        query_hash=pl.lit(query_hash, pl.Utf8),
        retrieved_at=pl.lit(retrieved_at, pl.Utf8),
    )


def relation_facts(
    spec: RelationSpec,
    cached: CachedSparql | None,
    *,
    page_size: int | None = None,
    min_sitelinks: int | None = None,
    log: Callable[[str], None] = print,
) -> RelationFacts:
    if spec.source == "bear":
        stored = read_parquet_named(
            Path(spec.data),
            f"it holds the imported facts of {spec.relation_id}: re-run `kcal dataset import-bear` "
            "on the BEAR directory to rewrite it",
        )
        facts, dropped = split_stored(stored)  # the import's drops reach dropped_facts
        counts = dict(Counter(dropped["drop_reason"].to_list()))
        return RelationFacts(_shape(facts, COLUMNS), _shape(dropped, DROPPED_COLUMNS), counts)
    if spec.source == "rule":
        facts = _provenance(mace.math_facts(spec.relation_id), "rule:kcal", None, None)
        return RelationFacts(_shape(facts, COLUMNS), _no_drops(), {})
    if cached is None:
        raise ValueError(f"relation {spec.relation_id!r} needs a SPARQL endpoint for its facts")
    if spec.domain == "mace":
        page = cached.select(mace.domain_query(spec))
        parsed = mace.parse_mace_facts(page.result, spec.relation_id, spec.query)
        facts = _provenance(parsed.frame, page.endpoint, page.query_hash, page.retrieved_at)
        dropped = _provenance(parsed.dropped_rows, page.endpoint, page.query_hash, page.retrieved_at)
        return RelationFacts(_shape(facts, COLUMNS), _shape(dropped, DROPPED_COLUMNS), parsed.dropped)
    parsed = fetch_facts(cached, spec, page_size=page_size, min_sitelinks=min_sitelinks, log=log)
    return RelationFacts(
        _shape(parsed.frame, COLUMNS), _shape(parsed.dropped_rows, DROPPED_COLUMNS), parsed.dropped
    )


def kept_counts(result: RelationFacts) -> dict[str, int]:
    f = result.facts
    return {
        "facts": f.height,
        "subjects": f["subject_id"].n_unique(),
        "objects": f["object_id"].n_unique(),
        "dropped": sum(result.drop_counts.values()),
    }
