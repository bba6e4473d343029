"""Relation queries (text and a real oxigraph run) and the parsing of their results."""
from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from kcal_pipeline.keys import InvalidIdError
from kcal_pipeline.relations import load_catalog
from kcal_pipeline.snapshot.build import ensure_store
from kcal_pipeline.sparql import LocalEndpoint, SparqlClient
from kcal_pipeline.wikidata import FACT_COLUMNS, looks_like_id, parse_facts, relation_query

WD = "http://www.wikidata.org/entity/"
KC = "https://kcal.invalid/entity/"


def uri(value):
    return {"type": "uri", "value": value}


def lit(value):
    return {"type": "literal", "value": value, "xml:lang": "en"}


def row(s, sl, o, ol):
    b = {"subject": uri(s), "object": o if isinstance(o, dict) else uri(o)}
    if sl is not None:
        b["subjectLabel"] = lit(sl)
    if ol is not None:
        b["objectLabel"] = lit(ol)
    return b


# --- query text --------------------------------------------------------------------------------

def test_query_text_for_capital():
    assert relation_query(load_catalog()["P36"], limit=5) == (
        "PREFIX wd: <http://www.wikidata.org/entity/>\n"
        "PREFIX wdt: <http://www.wikidata.org/prop/direct/>\n"
        "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
        "SELECT ?subject ?subjectLabel ?object ?objectLabel WHERE {\n"
        "  ?subject wdt:P36 ?object .\n"
        "  ?subject wdt:P31 wd:Q6256 .\n"
        '  OPTIONAL { ?subject rdfs:label ?subjectLabel . FILTER(LANG(?subjectLabel) = "en") }\n'
        '  OPTIONAL { ?object rdfs:label ?objectLabel . FILTER(LANG(?objectLabel) = "en") }\n'
        "}\n"
        "ORDER BY ?subject ?object\n"
        "LIMIT 5\n"
    )


def test_query_without_subject_type_or_limit():
    spec = dataclasses.replace(load_catalog()["P30"], subject_type=None)
    query = relation_query(spec)
    assert "wdt:P31" not in query and "LIMIT" not in query and "ORDER BY" not in query
    assert "SERVICE" not in query
    assert "?subject wdt:P30 ?object ." in query


@pytest.mark.parametrize("field, value", [
    ("property", "P36 } ; DROP ALL"), ("property", "Q36"), ("subject_type", "Q6256> . ?s ?p ?o"),
])
def test_query_refuses_unsafe_ids(field, value):
    spec = dataclasses.replace(load_catalog()["P36"], **{field: value})
    with pytest.raises(InvalidIdError):
        relation_query(spec)


@pytest.mark.parametrize("limit", [0, -3, 2.5, True, "10"])
def test_query_refuses_bad_limits(limit):
    with pytest.raises(ValueError, match="limit must be a positive int"):
        relation_query(load_catalog()["P36"], limit=limit)


# --- parsing -----------------------------------------------------------------------------------

def test_parse_facts_keeps_good_rows_and_counts_dropped_ones():
    result = {"head": {"vars": []}, "results": {"bindings": [
        row(WD + "Q142", "France", WD + "Q90", "Paris"),
        row(WD + "Q142", "France", WD + "Q90", "Paris"),                 # duplicate
        row(KC + "country-DE", "Germany", KC + "city-DE-berlin", "Berlin"),
        row(WD + "Q183", None, WD + "Q64", "Berlin"),                    # missing_label
        row(WD + "Q183", "Germany", WD + "Q64", "   "),                  # missing_label
        row(WD + "Q30", "United States", WD + "Q61", "Q61"),             # label_is_id
        row(KC + "country-XX", "country-XX", KC + "city-x", "X"),        # label_is_id
        row("http://example.org/thing", "Thing", WD + "Q1", "Universe"),  # unknown_namespace
        row(WD + "Q142", "France", lit("Paris"), "Paris"),               # not_an_entity
        {"subjectLabel": lit("nothing bound")},                          # not_an_entity
    ]}}
    facts = parse_facts(result, "P36")
    expected = pl.DataFrame(
        [("P36", "Q142", "France", "Q90", "Paris"),
         ("P36", "kcal:country-DE", "Germany", "kcal:city-DE-berlin", "Berlin")],
        schema={c: pl.Utf8 for c in FACT_COLUMNS}, orient="row",
    )
    assert facts.frame.equals(expected)
    assert facts.dropped == {"not_an_entity": 2, "unknown_namespace": 1, "missing_label": 2,
                             "label_is_id": 2, "duplicate": 1}


def test_parse_facts_sorts_and_collapses_whitespace():
    result = {"results": {"bindings": [
        row(WD + "Q2", "B", WD + "Q20", "Y"),
        row(WD + "Q1", " Côte  d'Ivoire ", WD + "Q10", "X"),
    ]}}
    frame = parse_facts(result, "P30").frame
    assert frame["subject_id"].to_list() == ["Q1", "Q2"]
    assert frame["subject_label"].to_list() == ["Côte d'Ivoire", "B"]


def test_parse_facts_on_no_rows_has_the_schema():
    facts = parse_facts({"results": {"bindings": []}}, "P37")
    assert facts.frame.height == 0
    assert dict(facts.frame.schema) == {c: pl.Utf8 for c in FACT_COLUMNS}


@pytest.mark.parametrize("bad", [{}, {"results": {}}, {"results": {"bindings": None}}, []])
def test_parse_facts_rejects_malformed_results(bad):
    with pytest.raises(ValueError, match="results.bindings|must be a dict"):
        parse_facts(bad, "P36")


def test_parse_facts_validates_the_relation_id():
    with pytest.raises(InvalidIdError):
        parse_facts({"results": {"bindings": []}}, "../P36")


def test_looks_like_id():
    assert looks_like_id("Q42") and looks_like_id("P36") and looks_like_id("zh_Hant")
    assert looks_like_id("http://www.wikidata.org/entity/Q42")
    assert not looks_like_id("Paris") and not looks_like_id("Queensland")


# --- the same queries on the real local endpoint -----------------------------------------------

@pytest.fixture(scope="module")
def client(tmp_path_factory):
    store = ensure_store(tmp_path_factory.mktemp("wikidata")).store_dir
    with LocalEndpoint(store) as ep:
        yield SparqlClient(ep.url, retries=1, backoff=0.01)


@pytest.fixture(scope="module")
def facts(client):
    return {rid: parse_facts(client.select(relation_query(spec)), rid)
            for rid, spec in load_catalog().items()}


@pytest.mark.parametrize("relation_id", ["P36", "P30", "P37"])
def test_each_catalog_relation_yields_at_least_100_labelled_facts(facts, relation_id):
    result = facts[relation_id]
    frame = result.frame
    assert frame.height >= 100
    assert frame.columns == list(FACT_COLUMNS)
    assert frame["relation_id"].unique().to_list() == [relation_id]
    assert frame.null_count().sum_horizontal().item() == 0
    assert sum(result.dropped.values()) == 0
    assert frame.select(pl.col("subject_label").str.strip_chars() != "").to_series().all()


def test_snapshot_facts_match_hand_picked_values(facts):
    def objects(relation_id, subject_label):
        frame = facts[relation_id].frame.filter(pl.col("subject_label") == subject_label)
        return sorted(frame["object_label"].to_list())

    assert objects("P36", "France") == ["Paris"]
    assert objects("P36", "Colombia") == ["Bogotá"]
    assert objects("P30", "Brazil") == ["South America"]
    assert objects("P30", "Japan") == ["Asia"]
    assert objects("P37", "Switzerland") == ["French", "German", "Italian"]
    assert objects("P37", "Serbia") == ["Serbian"]  # sr and sr_Latn are one language
    fr = facts["P36"].frame.filter(pl.col("subject_id") == "kcal:country-FR")
    assert fr["object_id"].to_list() == ["kcal:city-FR-paris"]


def test_limit_runs_on_the_endpoint(client):
    frame = parse_facts(client.select(relation_query(load_catalog()["P30"], limit=3)), "P30").frame
    assert frame["subject_id"].to_list() == ["kcal:country-AD", "kcal:country-AE", "kcal:country-AF"]
