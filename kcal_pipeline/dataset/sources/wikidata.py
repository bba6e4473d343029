"""Relation queries, their parsing into the wikidata_facts frame, and fetching through the cache.

The query uses only rdfs:label with a language filter (not the wikibase:label SERVICE), so the
very same text runs on query.wikidata.org and on the local oxigraph snapshot. Large relations are
fetched in LIMIT/OFFSET pages or VALUES batches; every row carries its provenance (endpoint,
query_hash, retrieved_at), and every dropped row stays visible with its drop_reason.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import polars as pl

from kcal_pipeline.core.keys import (
    InvalidIdError,
    check_entity_id,
    check_pid,
    check_qid,
    check_relation_id,
    entity_id_from_iri,
    entity_iri,
)
from kcal_pipeline.dataset.relations import RelationSpec

PREFIXES = (
    "PREFIX wd: <http://www.wikidata.org/entity/>\n"
    "PREFIX wdt: <http://www.wikidata.org/prop/direct/>\n"
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
)
FACT_COLUMNS = ("relation_id", "subject_id", "subject_label", "object_id", "object_label")
FACT_SCHEMA = dict.fromkeys(FACT_COLUMNS, pl.Utf8)
DROP_REASONS = ("not_an_entity", "unknown_namespace", "missing_label", "label_is_id", "duplicate")
# Dropped rows keep whatever the endpoint sent (an id where the IRI parses, else the raw value).
DROPPED_SCHEMA = {**FACT_SCHEMA, "drop_reason": pl.Utf8}
PROVENANCE_COLUMNS = ("endpoint", "query_hash", "retrieved_at")
WIKIBASE_PREFIX = "PREFIX wikibase: <http://wikiba.se/ontology#>\n"
SITELINKS_ASK = WIKIBASE_PREFIX + "ASK { ?s wikibase:sitelinks ?n }\n"

# What an endpoint shows in place of a name when an entity has no English label: a Wikidata id
# (Q42, P36, a lexeme form or sense L7-F2 / L7-S1), an IRI, or a project id (kcal:country-FR).
# Only these shapes: short lower-case words ('pig', 'oud') and numbers ('1984', '21') are names.
_ID_LIKE = re.compile(r"[QPL][0-9]+(?:-[SF][0-9]+)?|https?://\S+|kcal:\S+")


def looks_like_id(label: str) -> bool:
    """Whether a label is an id or IRI rather than a name (surrounding spaces ignored)."""
    return bool(_ID_LIKE.fullmatch(label.strip()))


def _check_count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _where(spec: RelationSpec, min_sitelinks: int | None) -> list[str]:
    prop = check_pid(spec.property, f"relation {spec.relation_id} property")
    lines = [f"  ?subject wdt:{prop} ?object ."]
    if spec.subject_type is not None:
        subject_type = check_qid(spec.subject_type, f"relation {spec.relation_id} subject_type")
        lines.append(f"  ?subject wdt:P31 wd:{subject_type} .")
    if min_sitelinks is not None:
        n = _check_count(min_sitelinks, "min_sitelinks", 0)
        lines.append(f"  ?subject wikibase:sitelinks ?links . FILTER(?links >= {n})")
    for var in ("subject", "object"):
        lines.append(f'  OPTIONAL {{ ?{var} rdfs:label ?{var}Label . FILTER(LANG(?{var}Label) = "en") }}')
    return lines


def _select(lines: list[str], min_sitelinks: int | None) -> str:
    prefixes = PREFIXES + (WIKIBASE_PREFIX if min_sitelinks is not None else "")
    return (
        prefixes + "SELECT ?subject ?subjectLabel ?object ?objectLabel WHERE {\n" + "\n".join(lines) + "\n}\n"
    )


def relation_query(
    spec: RelationSpec, limit: int | None = None, offset: int | None = None, min_sitelinks: int | None = None
) -> str:
    """SELECT subject, object and their English labels for one relation.

    Labels are OPTIONAL so entities without an English label still come back and parse_facts can
    count them, instead of vanishing silently. min_sitelinks keeps only subjects with at least
    that many sitelinks (a popularity filter; only for endpoints that have wikibase:sitelinks).
    """
    query = _select(_where(spec, min_sitelinks), min_sitelinks)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        # Ordered only when limited: which rows a LIMIT keeps must not depend on the server's mood,
        # while ordering a large unlimited result would only cost the live endpoint time. Pages
        # also order by the labels so that the order is total and no row moves between pages.
        order = "?subject ?object" if offset is None else "?subject ?object ?subjectLabel ?objectLabel"
        query += f"ORDER BY {order}\nLIMIT {limit}\n"
    if offset is not None:
        if limit is None:
            raise ValueError("offset needs a limit (pages need a deterministic order)")
        query += f"OFFSET {_check_count(offset, 'offset', 0)}\n"
    return query


def relation_queries(
    spec: RelationSpec, page_size: int | None = None, min_sitelinks: int | None = None
) -> Iterator[str]:
    """The one query, or LIMIT/OFFSET pages without end: the caller stops at the first short page."""
    if page_size is None:
        yield relation_query(spec, min_sitelinks=min_sitelinks)
        return
    _check_count(page_size, "page_size", 1)
    for page in itertools.count():
        yield relation_query(spec, limit=page_size, offset=page * page_size, min_sitelinks=min_sitelinks)


def values_query(spec: RelationSpec, subject_ids: Sequence[str], min_sitelinks: int | None = None) -> str:
    """The relation restricted to the given subjects (VALUES); every id is validated first."""
    if isinstance(subject_ids, str) or not subject_ids:
        raise ValueError(f"subject_ids must be a non-empty list of entity ids, got {subject_ids!r}")
    iris = " ".join(f"<{entity_iri(check_entity_id(s, 'subject id'))}>" for s in dict.fromkeys(subject_ids))
    return _select([f"  VALUES ?subject {{ {iris} }}", *_where(spec, min_sitelinks)], min_sitelinks)


def values_queries(
    spec: RelationSpec, subject_ids: Sequence[str], batch_size: int = 200, min_sitelinks: int | None = None
) -> list[str]:
    """VALUES queries over batches of subjects, so no single query grows beyond what a server takes."""
    _check_count(batch_size, "batch_size", 1)
    ids = [] if isinstance(subject_ids, str) else list(dict.fromkeys(subject_ids))
    if not ids:
        raise ValueError("subject_ids must be a non-empty list of entity ids")
    return [
        values_query(spec, ids[i : i + batch_size], min_sitelinks) for i in range(0, len(ids), batch_size)
    ]


def _empty_dropped() -> pl.DataFrame:
    return pl.DataFrame(schema=DROPPED_SCHEMA)


@dataclass(frozen=True)
class FactsResult:
    """Kept facts, drop counts per reason, and the dropped rows themselves (never silently lost)."""

    frame: pl.DataFrame
    dropped: dict[str, int] = field(default_factory=dict)
    dropped_rows: pl.DataFrame = field(default_factory=_empty_dropped)


def _bindings(result: dict) -> list:
    if not isinstance(result, dict):
        raise ValueError(f"SPARQL result must be a dict, got {type(result).__name__}")
    results = result.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("bindings"), list):
        raise ValueError("SPARQL result has no 'results.bindings' list")
    return results["bindings"]


def entity_of(binding: dict, var: str) -> tuple[str | None, str | None]:
    """(entity id, None) or (None, drop reason)."""
    term = binding.get(var)
    if not isinstance(term, dict) or term.get("type") != "uri":
        return None, "not_an_entity"
    try:
        return entity_id_from_iri(term.get("value")), None
    except InvalidIdError:
        return None, "unknown_namespace"


def _label(binding: dict, var: str, entity_id: str) -> tuple[str | None, str | None]:
    term = binding.get(var)
    label = " ".join(str(term.get("value", "")).split()) if isinstance(term, dict) else ""
    if not label:
        return None, "missing_label"
    if looks_like_id(label) or label in (entity_id, entity_id.split(":", 1)[-1]):
        return None, "label_is_id"
    return label, None


def _fact_row(binding: dict) -> tuple[tuple[str, str, str, str] | None, str | None]:
    subject, why = entity_of(binding, "subject")
    if why:
        return None, why
    obj, why = entity_of(binding, "object")
    if why:
        return None, why
    subject_label, why = _label(binding, "subjectLabel", subject)
    if why:
        return None, why
    object_label, why = _label(binding, "objectLabel", obj)
    if why:
        return None, why
    return (subject, subject_label, obj, object_label), None


def _raw_id(binding: dict, var: str) -> str | None:
    term = binding.get(var)
    value = term.get("value") if isinstance(term, dict) else None
    try:
        return entity_id_from_iri(value)
    except InvalidIdError:
        return None if value is None else str(value)


def _raw_label(binding: dict, var: str) -> str | None:
    term = binding.get(var)
    value = term.get("value") if isinstance(term, dict) else None
    return None if value is None else str(value)


def _finish(frame: pl.DataFrame, dropped_rows: pl.DataFrame) -> FactsResult:
    """One row per (subject, object), sorted; later duplicates move to the dropped rows."""
    ordered = frame.sort(["subject_id", "object_id", "subject_label", "object_label"])
    first = pl.struct("subject_id", "object_id").is_first_distinct()
    duplicates = ordered.filter(~first).with_columns(drop_reason=pl.lit("duplicate"))
    dropped_rows = pl.concat([dropped_rows, duplicates], how="diagonal_relaxed")
    counts = dict.fromkeys(DROP_REASONS, 0)
    counts.update(dict(dropped_rows["drop_reason"].value_counts().iter_rows()))
    return FactsResult(frame=ordered.filter(first), dropped=counts, dropped_rows=dropped_rows)


def parse_facts(result: dict, relation_id: str) -> FactsResult:
    """SPARQL JSON results -> one row per (subject, object), with what was dropped and why."""
    check_relation_id(relation_id)
    rows, dropped = [], []
    for binding in _bindings(result):
        binding = binding if isinstance(binding, dict) else {}
        row, why = _fact_row(binding)
        if why:
            dropped.append(
                (
                    relation_id,
                    _raw_id(binding, "subject"),
                    _raw_label(binding, "subjectLabel"),
                    _raw_id(binding, "object"),
                    _raw_label(binding, "objectLabel"),
                    why,
                )
            )
        else:
            rows.append((relation_id, *row))
    return _finish(
        pl.DataFrame(rows, schema=FACT_SCHEMA, orient="row"),
        pl.DataFrame(dropped, schema=DROPPED_SCHEMA, orient="row"),
    )


def supports_sitelinks(cached_sparql) -> bool:
    """Whether the endpoint knows wikibase:sitelinks (Wikidata does, the local snapshot does not)."""
    answer = cached_sparql.select(SITELINKS_ASK).result.get("boolean")
    if not isinstance(answer, bool):
        raise ValueError(f"endpoint {cached_sparql.endpoint_id} answered the sitelinks ASK without a boolean")
    return answer


def _popularity(
    cached_sparql, spec: RelationSpec, min_sitelinks: int | None, log: Callable[[str], None]
) -> int | None:
    """min_sitelinks if the endpoint can apply it; otherwise None, with a logged note."""
    if min_sitelinks is None:
        return None
    _check_count(min_sitelinks, "min_sitelinks", 0)
    if supports_sitelinks(cached_sparql):
        return min_sitelinks
    log(
        f"relation {spec.relation_id}: popularity filter skipped: endpoint "
        f"{cached_sparql.endpoint_id} has no wikibase:sitelinks"
    )
    return None


def _with_provenance(frame: pl.DataFrame, page) -> pl.DataFrame:
    return frame.with_columns(
        endpoint=pl.lit(page.endpoint, pl.Utf8),
        query_hash=pl.lit(page.query_hash, pl.Utf8),
        retrieved_at=pl.lit(page.retrieved_at, pl.Utf8),
    )


def _pages(cached_sparql, queries: Iterator[str], page_size: int | None, max_pages: int):
    """Run queries through the cache; with paging, stop at the first page shorter than page_size."""
    for n, query in enumerate(queries):
        if n == max_pages:
            raise RuntimeError(
                f"more than {max_pages} pages from {cached_sparql.endpoint_id}: "
                "does the endpoint ignore OFFSET?"
            )
        page = cached_sparql.select(query)
        yield page
        if page_size is not None and len(_bindings(page.result)) < page_size:
            return


def fetch_facts(
    cached_sparql,
    spec: RelationSpec,
    page_size: int | None = None,
    min_sitelinks: int | None = None,
    log: Callable[[str], None] = print,
    *,
    subject_ids: Sequence[str] | None = None,
    batch_size: int = 200,
    max_pages: int = 10_000,
) -> FactsResult:
    """All facts of a relation through the cache, with provenance (endpoint, query_hash,
    retrieved_at) on every kept and every dropped row.

    Queries are one unlimited SELECT, LIMIT/OFFSET pages (page_size), or VALUES batches over
    subject_ids. A relation without facts is logged, not raised: the probe builder raises
    EmptyRelationError for it with the relation's name.
    """
    sitelinks = _popularity(cached_sparql, spec, min_sitelinks, log)
    if subject_ids is not None:
        queries, page_size = iter(values_queries(spec, subject_ids, batch_size, sitelinks)), None
    else:
        queries = relation_queries(spec, page_size, sitelinks)
    kept, dropped = [], []
    for page in _pages(cached_sparql, queries, page_size, max_pages):
        parsed = parse_facts(page.result, spec.relation_id)
        kept.append(_with_provenance(parsed.frame, page))
        dropped.append(_with_provenance(parsed.dropped_rows, page))
    result = _finish(pl.concat(kept), pl.concat(dropped))
    if result.frame.is_empty():
        log(
            f"relation {spec.relation_id}: no facts from {cached_sparql.endpoint_id} "
            f"(dropped: {sum(result.dropped.values())})"
        )
    return result
