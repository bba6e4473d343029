"""MACE-style multi-answer domains (METHODS §5): SPARQL queries and facts; math facts by rule.

Each SPARQL domain has a query builder (rdfs:label + language filter, explicit prefixes, ids
validated before they reach the query text: the same text runs on query.wikidata.org and on the
local snapshot) and one parser into a facts frame whose `qualifiers` column (JSON) carries what
constraints are relaxed over: a year, a term, an area. Math is rule-based and needs no query.
The questions with 1, 2, 4 or 6 answers built from these facts are in
dataset/instances/mace_questions.py.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

import polars as pl

from kcal_pipeline.core.keys import (
    check_entity_id,
    check_relation_id,
    entity_iri,
)
from kcal_pipeline.dataset.relations import RelationSpec
from kcal_pipeline.dataset.sources.wikidata import FactsResult, _raw_id, _raw_label, entity_of, looks_like_id

PREFIXES = (
    "PREFIX wd: <http://www.wikidata.org/entity/>\n"
    "PREFIX wdt: <http://www.wikidata.org/prop/direct/>\n"
    "PREFIX p: <http://www.wikidata.org/prop/>\n"
    "PREFIX ps: <http://www.wikidata.org/prop/statement/>\n"
    "PREFIX pq: <http://www.wikidata.org/prop/qualifier/>\n"
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
)
FACT_COLUMNS = ("relation_id", "subject_id", "subject_label", "object_id", "object_label", "qualifiers")
FACT_SCHEMA = dict.fromkeys(FACT_COLUMNS, pl.Utf8)
DROPPED_FACT_SCHEMA = {**FACT_SCHEMA, "drop_reason": pl.Utf8}
# Filters of the MACE paper (Wang et al.; METHODS §5) that select whole subjects: a subject that
# fails one is dropped with all its facts, each row kept in dropped_facts with the reason. (Award's
# "one laureate per year" selects questions, not facts: dataset/instances/mace_questions.py.)
MIN_OFFICE_YEARS = 10  # a position whose holders cover fewer years gives too few year ranges
MIN_DIVISIONS = 3  # a country with fewer first-level divisions gives too few area ranges
MAX_RIVER_COUNTRIES = 6  # a river through more countries fits no question (at most 6 answers)
PAPER_DROPS = {
    "office": "office_under_10_years",
    "region": "country_under_3_divisions",
    "river": "river_over_6_countries",
}
FACT_DROPS = (
    "not_an_entity",
    "unknown_namespace",
    "missing_label",
    "label_is_id",
    "missing_qualifier",
    "duplicate",
    *PAPER_DROPS.values(),
)


# ---------------------------------------------------------------- queries


def _values(subjects: Sequence[str] | None) -> str:
    """Optional restriction to given subjects (e.g. real QIDs on Wikidata); ids are validated."""
    if not subjects:
        return ""
    iris = " ".join(f"<{entity_iri(check_entity_id(s, 'MACE subject'))}>" for s in subjects)
    return f"  VALUES ?subject {{ {iris} }}\n"


def _select(extra_vars: str, body: str, subjects: Sequence[str] | None) -> str:
    labels = "".join(
        f'  OPTIONAL {{ ?{v} rdfs:label ?{v}Label . FILTER(LANG(?{v}Label) = "en") }}\n'
        for v in ("subject", "object")
    )
    return (
        PREFIXES
        + f"SELECT ?subject ?subjectLabel ?object ?objectLabel {extra_vars} WHERE {{\n"
        + _values(subjects)
        + body
        + labels
        + "}\n"
    )


def award_query(subjects: Sequence[str] | None = None) -> str:
    """Award → human laureates with the year (P166 statement, point in time P585)."""
    return _select(
        "?time",
        (
            "  ?object p:P166 ?statement .\n"
            "  ?statement ps:P166 ?subject .\n"
            "  ?object wdt:P31 wd:Q5 .\n"
            "  OPTIONAL { ?statement pq:P585 ?time }\n"
        ),
        subjects,
    )


def office_query(subjects: Sequence[str] | None = None) -> str:
    """Position → human holders with their term (P39 statement, start P580, end P582)."""
    return _select(
        "?start ?end",
        (
            "  ?object p:P39 ?statement .\n"
            "  ?statement ps:P39 ?subject .\n"
            "  ?object wdt:P31 wd:Q5 .\n"
            "  OPTIONAL { ?statement pq:P580 ?start }\n"
            "  OPTIONAL { ?statement pq:P582 ?end }\n"
        ),
        subjects,
    )


def region_query(subjects: Sequence[str] | None = None) -> str:
    """Country → first-level divisions (P150) with their area (P2046)."""
    return _select(
        "?area",
        (
            "  ?subject wdt:P31 wd:Q6256 .\n"
            "  ?subject wdt:P150 ?object .\n"
            "  OPTIONAL { ?object wdt:P2046 ?area }\n"
        ),
        subjects,
    )


def river_query(subjects: Sequence[str] | None = None) -> str:
    """River (Q4022) → countries it flows through (P17)."""
    return _select(
        "",
        ("  ?subject wdt:P31 wd:Q4022 .\n  ?subject wdt:P17 ?object .\n  ?object wdt:P31 wd:Q6256 .\n"),
        subjects,
    )


def language_query(subjects: Sequence[str] | None = None) -> str:
    """Language → countries where it is official (P37) or used (P2936), read from the country side."""
    return _select(
        "?status",
        (
            "  ?object wdt:P31 wd:Q6256 .\n"
            '  { ?object wdt:P37 ?subject . BIND("official" AS ?status) }\n'
            '  UNION { ?object wdt:P2936 ?subject . BIND("used" AS ?status) }\n'
        ),
        subjects,
    )


QUERIES: dict[str, Callable[..., str]] = {
    "award": award_query,
    "office": office_query,
    "region": region_query,
    "river": river_query,
    "language": language_query,
}


def domain_query(spec: RelationSpec, subjects: Sequence[str] | None = None) -> str:
    if spec.query not in QUERIES:
        raise ValueError(
            f"relation {spec.relation_id}: no MACE query named {spec.query!r}; known: {', '.join(QUERIES)}"
        )
    return QUERIES[spec.query](subjects)


# ---------------------------------------------------------------- parsing


def _year(term: dict | None) -> int | None:
    """The year of an xsd:dateTime value ('1995-01-01T00:00:00Z'; BCE years start with '-')."""
    match = re.match(r"^(-?\d{1,6})-", str((term or {}).get("value", "")))
    return int(match.group(1)) if match else None


def _number(term: dict | None) -> float | None:
    try:
        return float(term["value"]) if term else None
    except (KeyError, TypeError, ValueError):
        return None


def _award_qualifiers(b: dict) -> dict | None:
    year = _year(b.get("time"))
    return None if year is None else {"year": year}


def _office_qualifiers(b: dict) -> dict | None:
    start = _year(b.get("start"))
    return None if start is None else {"start": start, "end": _year(b.get("end"))}


def _region_qualifiers(b: dict) -> dict | None:
    area = _number(b.get("area"))
    return None if area is None or area <= 0 else {"area_km2": area}


def _language_qualifiers(b: dict) -> dict:
    return {"status": str((b.get("status") or {}).get("value", "used"))}


QUALIFIERS: dict[str, Callable[[dict], dict | None]] = {
    "award": _award_qualifiers,
    "office": _office_qualifiers,
    "region": _region_qualifiers,
    "river": lambda b: {},
    "language": _language_qualifiers,
}
# Award and Office keep one row per statement (a second prize or term is a second fact); the
# others keep one row per (subject, object), whatever the number of values the endpoint returns.
_PER_STATEMENT = frozenset({"award", "office"})


def label_problem(label: str | None, entity_id: str) -> str | None:
    """Why a label is unusable ('missing_label', 'label_is_id'), or None if it is a real name."""
    label = " ".join((label or "").split())
    if not label:
        return "missing_label"
    if looks_like_id(label) or label in (entity_id, entity_id.split(":", 1)[-1]):
        return "label_is_id"
    return None


def _row(binding: dict, domain: str) -> tuple[tuple | None, str | None]:
    out = []
    for var in ("subject", "object"):
        entity, why = entity_of(binding, var)
        if why:
            return None, why
        label = " ".join(str((binding.get(f"{var}Label") or {}).get("value", "")).split())
        why = label_problem(label, entity)
        if why:
            return None, why
        out += [entity, label]
    quals = QUALIFIERS[domain](binding)
    if quals is None:
        return None, "missing_qualifier"
    return (*out, json.dumps(quals, sort_keys=True)), None


def _dropped_row(binding: dict, relation_id: str, why: str) -> tuple:
    """What the endpoint sent for a row that fails validity (an id where the IRI parses)."""
    return (
        relation_id,
        _raw_id(binding, "subject"),
        _raw_label(binding, "subjectLabel"),
        _raw_id(binding, "object"),
        _raw_label(binding, "objectLabel"),
        None,
        why,
    )


def parse_mace_facts(result: dict, relation_id: str, domain: str) -> FactsResult:
    """SPARQL JSON → facts frame (FACT_COLUMNS) after the validity filters, duplicates and the
    paper's filters (paper_filter); every dropped row is kept with its reason, and counted."""
    check_relation_id(relation_id)
    if domain not in QUALIFIERS:
        raise ValueError(f"unknown MACE domain {domain!r}; known: {', '.join(QUALIFIERS)}")
    bindings = (result.get("results") or {}).get("bindings") if isinstance(result, dict) else None
    if not isinstance(bindings, list):
        raise ValueError("SPARQL result has no 'results.bindings' list")
    rows, invalid = [], []
    for binding in bindings:
        binding = binding if isinstance(binding, dict) else {}
        row, why = _row(binding, domain)
        if why:
            invalid.append(_dropped_row(binding, relation_id, why))
        else:
            rows.append((relation_id, *row))
    frame = pl.DataFrame(rows, schema=FACT_SCHEMA, orient="row").sort(list(FACT_COLUMNS))
    key = ["subject_id", "object_id"] + (["qualifiers"] if domain in _PER_STATEMENT else [])
    first = pl.struct(key).is_first_distinct()
    kept, filtered = paper_filter(frame.filter(first), domain)
    dropped_rows = pl.concat(
        [
            pl.DataFrame(invalid, schema=DROPPED_FACT_SCHEMA, orient="row"),
            frame.filter(~first).with_columns(drop_reason=pl.lit("duplicate")),
            filtered,
        ]
    )
    counts = dict.fromkeys(FACT_DROPS, 0) | dict(Counter(dropped_rows["drop_reason"].to_list()))
    return FactsResult(frame=kept, dropped=counts, dropped_rows=dropped_rows)


def _subject_sizes(frame: pl.DataFrame, domain: str) -> dict[str, int]:
    """Per subject, the size a paper filter bounds: divisions of a country, countries of a river,
    distinct years a position's holders cover (an open term runs to the latest year in its data)."""
    if domain in ("region", "river"):
        return dict(frame.group_by("subject_id").agg(pl.col("object_id").n_unique()).iter_rows())
    terms: dict[str, list[tuple[int, int | None]]] = {}
    for subject, quals in frame.select("subject_id", "qualifiers").iter_rows():
        q = json.loads(quals)
        terms.setdefault(subject, []).append((q["start"], q.get("end")))
    sizes = {}
    for subject, spans in terms.items():
        last = max(start if end is None else max(start, end) for start, end in spans)
        years = {y for start, end in spans for y in range(start, (last if end is None else end) + 1)}
        sizes[subject] = len(years)
    return sizes


def paper_filter(frame: pl.DataFrame, domain: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept facts, dropped rows with drop_reason): the subjects that fail the domain's filter of
    the MACE paper (PAPER_DROPS) go with all their facts; other domains pass unchanged."""
    if domain not in PAPER_DROPS:
        return frame, frame.clear().with_columns(drop_reason=pl.lit(None, pl.Utf8))
    sizes = _subject_sizes(frame, domain)
    if domain == "river":
        failing = {s for s, n in sizes.items() if n > MAX_RIVER_COUNTRIES}
    else:
        failing = {
            s for s, n in sizes.items() if n < (MIN_OFFICE_YEARS if domain == "office" else MIN_DIVISIONS)
        }
    fails = pl.col("subject_id").is_in(sorted(failing))
    return frame.filter(~fails), frame.filter(fails).with_columns(drop_reason=pl.lit(PAPER_DROPS[domain]))


# ---------------------------------------------------------------- math (rule-based facts)

MATH_CLASSES = {
    "prime": "prime number",
    "square": "perfect square",
    "cube": "perfect cube",
    "fibonacci": "Fibonacci number",
    "triangular": "triangular number",
}


def _members(kind: str, limit: int) -> list[int]:
    """Positive members of a number class up to limit, ascending and without repeats."""
    if kind == "prime":
        return [n for n in range(2, limit + 1) if all(n % d for d in range(2, math.isqrt(n) + 1))]
    if kind == "fibonacci":
        a, b, out = 1, 2, [1]
        while b <= limit:
            out.append(b)
            a, b = b, a + b
        return out
    step = {"square": lambda i: i * i, "cube": lambda i: i**3, "triangular": lambda i: i * (i + 1) // 2}[kind]
    return list(itertools.takewhile(lambda n: n <= limit, (step(i) for i in itertools.count(1))))


def math_facts(relation_id: str = "mace-math", limit: int = 1000) -> pl.DataFrame:
    """Number class → its members up to limit; numbers are entities `kcal:number-<n>` labelled by digits."""
    rows = [
        (relation_id, f"kcal:math-{kind}", label, f"kcal:number-{n}", str(n), json.dumps({"value": n}))
        for kind, label in MATH_CLASSES.items()
        for n in _members(kind, limit)
    ]
    return pl.DataFrame(rows, schema=FACT_SCHEMA, orient="row")


def domain_facts(spec: RelationSpec, select: Callable[[str], dict] | None = None) -> FactsResult:
    """The facts of one MACE relation: rule-based (math) or via `select(query)` (a SparqlClient's)."""
    if spec.source == "rule":
        return FactsResult(frame=math_facts(spec.relation_id), dropped={})
    if select is None:
        raise ValueError(f"relation {spec.relation_id} needs a SPARQL endpoint (select) for its facts")
    return parse_mace_facts(select(domain_query(spec)), spec.relation_id, spec.query)
