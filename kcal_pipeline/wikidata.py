"""Relation queries and their parsing into the wikidata_facts frame.

The query uses only rdfs:label with a language filter (not the wikibase:label SERVICE), so the
very same text runs on query.wikidata.org and on the local oxigraph snapshot.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from kcal_pipeline.keys import (
    InvalidIdError, check_pid, check_qid, check_relation_id, entity_id_from_iri,
)
from kcal_pipeline.relations import RelationSpec

PREFIXES = (
    "PREFIX wd: <http://www.wikidata.org/entity/>\n"
    "PREFIX wdt: <http://www.wikidata.org/prop/direct/>\n"
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
)
FACT_COLUMNS = ("relation_id", "subject_id", "subject_label", "object_id", "object_label")
FACT_SCHEMA = {name: pl.Utf8 for name in FACT_COLUMNS}
DROP_REASONS = ("not_an_entity", "unknown_namespace", "missing_label", "label_is_id", "duplicate")

# Wikidata ids (Q42, P36, L7-S1), language-code-like tokens ('fr', 'zh_Hant') and IRIs: what an
# endpoint shows when an entity has no English label, never a name worth probing.
_ID_LIKE = re.compile(r"[QPL][0-9]+(?:-[SF][0-9]+)?|[a-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})*|https?://\S*")


def looks_like_id(label: str) -> bool:
    return bool(_ID_LIKE.fullmatch(label.strip()))


def relation_query(spec: RelationSpec, limit: int | None = None) -> str:
    """SELECT subject, object and their English labels for one relation.

    Labels are OPTIONAL so entities without an English label still come back and parse_facts can
    count them, instead of vanishing silently.
    """
    prop = check_pid(spec.property, f"relation {spec.relation_id} property")
    lines = [f"  ?subject wdt:{prop} ?object ."]
    if spec.subject_type is not None:
        subject_type = check_qid(spec.subject_type, f"relation {spec.relation_id} subject_type")
        lines.append(f"  ?subject wdt:P31 wd:{subject_type} .")
    for var in ("subject", "object"):
        lines.append(
            f'  OPTIONAL {{ ?{var} rdfs:label ?{var}Label . FILTER(LANG(?{var}Label) = "en") }}'
        )
    query = (
        PREFIXES
        + "SELECT ?subject ?subjectLabel ?object ?objectLabel WHERE {\n"
        + "\n".join(lines)
        + "\n}\n"
    )
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        # Ordered only when limited: which rows a LIMIT keeps must not depend on the server's mood,
        # while ordering a large unlimited result would only cost the live endpoint time.
        query += f"ORDER BY ?subject ?object\nLIMIT {limit}\n"
    return query


@dataclass(frozen=True)
class FactsResult:
    frame: pl.DataFrame
    dropped: dict[str, int] = field(default_factory=dict)


def _bindings(result: dict) -> list:
    if not isinstance(result, dict):
        raise ValueError(f"SPARQL result must be a dict, got {type(result).__name__}")
    results = result.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("bindings"), list):
        raise ValueError("SPARQL result has no 'results.bindings' list")
    return results["bindings"]


def _entity(binding: dict, var: str) -> tuple[str | None, str | None]:
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
    subject, why = _entity(binding, "subject")
    if why:
        return None, why
    obj, why = _entity(binding, "object")
    if why:
        return None, why
    subject_label, why = _label(binding, "subjectLabel", subject)
    if why:
        return None, why
    object_label, why = _label(binding, "objectLabel", obj)
    if why:
        return None, why
    return (subject, subject_label, obj, object_label), None


def parse_facts(result: dict, relation_id: str) -> FactsResult:
    """SPARQL JSON results -> one row per (subject, object), with a count of what was dropped and why."""
    check_relation_id(relation_id)
    dropped = Counter({reason: 0 for reason in DROP_REASONS})
    rows = []
    for binding in _bindings(result):
        row, why = _fact_row(binding if isinstance(binding, dict) else {})
        if why:
            dropped[why] += 1
        else:
            rows.append((relation_id, *row))
    frame = pl.DataFrame(rows, schema=FACT_SCHEMA, orient="row")
    unique = (
        frame.sort(["subject_id", "object_id", "subject_label", "object_label"])
        .unique(subset=["subject_id", "object_id"], keep="first", maintain_order=True)
    )
    dropped["duplicate"] = frame.height - unique.height
    return FactsResult(frame=unique, dropped=dict(dropped))
