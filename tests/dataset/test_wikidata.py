"""Relation queries (text and a real oxigraph run) and the parsing of their results."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from kcal_pipeline.core.keys import InvalidIdError
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.dataset.sources.snapshot.build import ensure_store
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient
from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql, snapshot_endpoint_id
from kcal_pipeline.dataset.sources.wikidata import (
    FACT_COLUMNS,
    PROVENANCE_COLUMNS,
    fetch_facts,
    looks_like_id,
    parse_facts,
    relation_queries,
    relation_query,
    supports_sitelinks,
    values_queries,
    values_query,
)

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


@pytest.mark.parametrize(
    "field, value",
    [
        ("property", "P36 } ; DROP ALL"),
        ("property", "Q36"),
        ("subject_type", "Q6256> . ?s ?p ?o"),
    ],
)
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
    result = {
        "head": {"vars": []},
        "results": {
            "bindings": [
                row(WD + "Q142", "France", WD + "Q90", "Paris"),
                row(WD + "Q142", "France", WD + "Q90", "Paris"),  # duplicate
                row(KC + "country-DE", "Germany", KC + "city-DE-berlin", "Berlin"),
                row(WD + "Q183", None, WD + "Q64", "Berlin"),  # missing_label
                row(WD + "Q183", "Germany", WD + "Q64", "   "),  # missing_label
                row(WD + "Q30", "United States", WD + "Q61", "Q61"),  # label_is_id
                row(KC + "country-XX", "country-XX", KC + "city-x", "X"),  # label_is_id
                row("http://example.org/thing", "Thing", WD + "Q1", "Universe"),  # unknown_namespace
                row(WD + "Q142", "France", lit("Paris"), "Paris"),  # not_an_entity
                {"subjectLabel": lit("nothing bound")},  # not_an_entity
            ]
        },
    }
    facts = parse_facts(result, "P36")
    expected = pl.DataFrame(
        [
            ("P36", "Q142", "France", "Q90", "Paris"),
            ("P36", "kcal:country-DE", "Germany", "kcal:city-DE-berlin", "Berlin"),
        ],
        schema=dict.fromkeys(FACT_COLUMNS, pl.Utf8),
        orient="row",
    )
    assert facts.frame.equals(expected)
    assert facts.dropped == {
        "not_an_entity": 2,
        "unknown_namespace": 1,
        "missing_label": 2,
        "label_is_id": 2,
        "duplicate": 1,
    }


def test_parse_facts_sorts_and_collapses_whitespace():
    result = {
        "results": {
            "bindings": [
                row(WD + "Q2", "B", WD + "Q20", "Y"),
                row(WD + "Q1", " Côte  d'Ivoire ", WD + "Q10", "X"),
            ]
        }
    }
    frame = parse_facts(result, "P30").frame
    assert frame["subject_id"].to_list() == ["Q1", "Q2"]
    assert frame["subject_label"].to_list() == ["Côte d'Ivoire", "B"]


def test_parse_facts_on_no_rows_has_the_schema():
    facts = parse_facts({"results": {"bindings": []}}, "P37")
    assert facts.frame.height == 0
    assert dict(facts.frame.schema) == dict.fromkeys(FACT_COLUMNS, pl.Utf8)


@pytest.mark.parametrize("bad", [{}, {"results": {}}, {"results": {"bindings": None}}, []])
def test_parse_facts_rejects_malformed_results(bad):
    with pytest.raises(ValueError, match=r"results\.bindings|must be a dict"):
        parse_facts(bad, "P36")


def test_parse_facts_validates_the_relation_id():
    with pytest.raises(InvalidIdError):
        parse_facts({"results": {"bindings": []}}, "../P36")


@pytest.mark.parametrize(
    "label",
    ["Q42", "P36", " Q42 ", "L7-S1", "L7-F2", "http://www.wikidata.org/entity/Q42", "kcal:country-FR"],
)
def test_ids_and_iris_look_like_ids(label):
    assert looks_like_id(label)


# Names the old language-code pattern took for ids: BEAR's subject "pig" (P105) was dropped and its
# option "oud" (P1303) counted as id-like. Short lower-case words and numbers are names.
@pytest.mark.parametrize("label", ["Paris", "Queensland", "pig", "oud", "iOS", "zh", "1984", "21", "Q-Tip"])
def test_names_do_not_look_like_ids(label):
    assert not looks_like_id(label)


# --- the same queries on the real local endpoint -----------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ensure_store(tmp_path_factory.mktemp("wikidata"))


@pytest.fixture(scope="module")
def client(store):
    with LocalEndpoint(store.store_dir) as ep:
        yield SparqlClient(ep.url, retries=1, backoff=0.01)


@pytest.fixture(scope="module")
def facts(client):
    # The relations checked below; the catalog also holds MACE and rule-based relations.
    catalog = load_catalog()
    return {
        rid: parse_facts(client.select(relation_query(catalog[rid])), rid) for rid in ("P36", "P30", "P37")
    }


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
    assert objects("P37", "Montenegro") == ["Montenegrin"]  # not CLDR's Serbian
    fr = facts["P36"].frame.filter(pl.col("subject_id") == "Q142")  # France, keyed by its Wikidata id
    assert fr["object_id"].to_list() == ["Q90"]  # Paris


def test_limit_runs_on_the_endpoint(client):
    frame = parse_facts(client.select(relation_query(load_catalog()["P30"], limit=3)), "P30").frame
    # Ordered by IRI: the countries' Wikidata ids in string order (Gabon, the Gambia, Guinea).
    assert frame["subject_id"].to_list() == ["Q1000", "Q1005", "Q1006"]


# --- dropped rows stay visible -----------------------------------------------------------------


def test_parse_facts_keeps_the_dropped_rows_with_their_reason():
    result = {
        "results": {
            "bindings": [
                row(WD + "Q142", "France", WD + "Q90", "Paris"),
                row(WD + "Q142", "France", WD + "Q90", "Paris"),
                row(WD + "Q183", None, WD + "Q64", "Berlin"),
                row("http://example.org/thing", "Thing", WD + "Q1", "Universe"),
                "not even a dict",
            ]
        }
    }
    facts = parse_facts(result, "P36")
    dropped = facts.dropped_rows.sort("drop_reason")
    assert dropped.rows() == [
        ("P36", "Q142", "France", "Q90", "Paris", "duplicate"),
        ("P36", "Q183", None, "Q64", "Berlin", "missing_label"),
        ("P36", None, None, None, None, "not_an_entity"),
        ("P36", "http://example.org/thing", "Thing", "Q1", "Universe", "unknown_namespace"),
    ]
    counts = {k: v for k, v in facts.dropped.items() if v}
    assert counts == {"duplicate": 1, "missing_label": 1, "not_an_entity": 1, "unknown_namespace": 1}
    assert facts.frame.height == 1


# --- paging and VALUES batches: query text ------------------------------------------------------


def test_pages_have_a_total_order_and_offsets():
    pages = relation_queries(load_catalog()["P36"], page_size=10)
    first, second = next(pages), next(pages)
    assert first.endswith("ORDER BY ?subject ?object ?subjectLabel ?objectLabel\nLIMIT 10\nOFFSET 0\n")
    assert second.endswith("LIMIT 10\nOFFSET 10\n")
    assert list(relation_queries(load_catalog()["P36"])) == [relation_query(load_catalog()["P36"])]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"page_size": 0},
        {"page_size": True},
        {"page_size": "5"},
        {"min_sitelinks": -1},
        {"min_sitelinks": 2.0},
    ],
)
def test_paging_and_popularity_arguments_are_validated(kwargs):
    with pytest.raises(ValueError, match="must be an int"):
        next(relation_queries(load_catalog()["P36"], **kwargs))


def test_offset_needs_a_limit():
    with pytest.raises(ValueError, match="offset needs a limit"):
        relation_query(load_catalog()["P36"], offset=5)


def test_sitelinks_filter_text():
    query = relation_query(load_catalog()["P36"], min_sitelinks=25)
    assert "PREFIX wikibase: <http://wikiba.se/ontology#>" in query
    assert "  ?subject wikibase:sitelinks ?links . FILTER(?links >= 25)\n" in query


def test_values_query_lists_validated_iris():
    query = values_query(load_catalog()["P36"], ["Q142", "kcal:country-DE", "Q142"])
    assert (
        "  VALUES ?subject { <http://www.wikidata.org/entity/Q142> "
        "<https://kcal.invalid/entity/country-DE> }\n"
    ) in query
    assert query.index("VALUES") < query.index("wdt:P36")


@pytest.mark.parametrize(
    "bad",
    [
        "Q142> } ; DROP ALL ; <x",
        "Q1 Q2",
        "kcal:a b",
        "kcal:../x",
        "wd:Q1",
        "",
        None,
        "Q0",
    ],
)
def test_values_query_refuses_injection(bad):
    with pytest.raises(InvalidIdError, match="subject id"):
        values_query(load_catalog()["P36"], ["Q142", bad])


@pytest.mark.parametrize("ids", [[], "Q142"])
def test_values_query_needs_a_list_of_ids(ids):
    with pytest.raises(ValueError, match="non-empty list"):
        values_query(load_catalog()["P36"], ids)


@pytest.mark.parametrize("ids", [[], "Q142"])
def test_values_queries_need_a_list_of_ids(ids):
    with pytest.raises(ValueError, match="non-empty list"):
        values_queries(load_catalog()["P36"], ids)


def test_values_queries_batch():
    queries = values_queries(load_catalog()["P36"], ["Q1", "Q2", "Q3", "Q2", "Q4", "Q5"], batch_size=2)
    assert len(queries) == 3
    assert "<http://www.wikidata.org/entity/Q5> }" in queries[2]


# --- fetch_facts through the cache ---------------------------------------------------------------


class _Scripted:
    """A stand-in client: answers from a function of the query text and records every query."""

    def __init__(self, answer):
        self.answer, self.queries = answer, []

    def select(self, query):
        self.queries.append(query)
        return self.answer(query)


def test_sitelinks_filter_is_applied_where_the_endpoint_has_them(tmp_path):
    def answer(query):
        if query.lstrip().startswith("PREFIX wikibase") and "ASK" in query:
            return {"head": {}, "boolean": True}
        return {"results": {"bindings": [row(WD + "Q142", "France", WD + "Q90", "Paris")]}}

    client = _Scripted(answer)
    notes = []
    result = fetch_facts(
        CachedSparql(client, tmp_path, "https://query.wikidata.org/sparql"),
        load_catalog()["P36"],
        min_sitelinks=10,
        log=notes.append,
    )
    assert notes == [] and result.frame.height == 1
    assert "FILTER(?links >= 10)" in client.queries[-1]


def test_duplicates_across_batches_are_counted_with_provenance(tmp_path):
    client = _Scripted(lambda q: {"results": {"bindings": [row(WD + "Q142", "France", WD + "Q90", "Paris")]}})
    cache = CachedSparql(client, tmp_path, "test-endpoint")
    result = fetch_facts(cache, load_catalog()["P36"], subject_ids=["Q142", "Q1", "Q2"], batch_size=1)
    assert result.frame.height == 1 and result.dropped["duplicate"] == 2
    assert result.dropped_rows["query_hash"].n_unique() == 2
    assert result.dropped_rows["endpoint"].to_list() == ["test-endpoint"] * 2


def test_a_relation_without_facts_is_logged_not_raised(tmp_path):
    client = _Scripted(lambda q: {"results": {"bindings": []}})
    notes = []
    result = fetch_facts(CachedSparql(client, tmp_path, "e"), load_catalog()["P36"], log=notes.append)
    assert result.frame.height == 0
    assert set(PROVENANCE_COLUMNS) <= set(result.frame.columns)
    assert notes == ["relation P36: no facts from e (dropped: 0)"]


def test_an_endpoint_ignoring_offset_cannot_loop_forever(tmp_path):
    page = {"results": {"bindings": [row(WD + "Q142", "France", WD + "Q90", "Paris")]}}
    cache = CachedSparql(_Scripted(lambda q: page), tmp_path, "e")
    with pytest.raises(RuntimeError, match="more than 3 pages"):
        fetch_facts(cache, load_catalog()["P36"], page_size=1, max_pages=3)


@pytest.fixture(scope="module")
def snapshot(store, client):
    """The local endpoint's URL (a new port every run) and its stable id for the cache."""
    return client.url, snapshot_endpoint_id(store.content_hash)


class _Counting(SparqlClient):
    calls = 0

    def select(self, query):
        type(self).calls += 1
        return super().select(query)


def test_pages_give_the_union_in_a_deterministic_order(snapshot, tmp_path):
    url, endpoint_id = snapshot
    cache = CachedSparql(SparqlClient(url, retries=1, backoff=0.01), tmp_path, endpoint_id)
    spec = load_catalog()["P37"]
    whole = fetch_facts(cache, spec)
    paged = fetch_facts(cache, spec, page_size=37)
    n_pages = whole.frame.height // 37 + 1
    assert paged.frame["query_hash"].n_unique() == n_pages
    assert paged.frame.drop(PROVENANCE_COLUMNS).equals(whole.frame.drop(PROVENANCE_COLUMNS))
    assert paged.frame.select(PROVENANCE_COLUMNS).null_count().sum_horizontal().item() == 0
    assert set(paged.frame["endpoint"]) == {endpoint_id}


def test_rematerializing_never_asks_again(snapshot, tmp_path):
    url, endpoint_id = snapshot
    client = _Counting(url, retries=1, backoff=0.01)
    spec = load_catalog()["P30"]
    first = fetch_facts(CachedSparql(client, tmp_path, endpoint_id), spec, page_size=100)
    asked = _Counting.calls
    again = fetch_facts(CachedSparql(client, tmp_path, endpoint_id), spec, page_size=100)
    assert asked >= 2 and _Counting.calls == asked
    assert again.frame.equals(first.frame)


def test_values_batches_on_the_endpoint(snapshot, tmp_path):
    url, endpoint_id = snapshot
    cache = CachedSparql(SparqlClient(url, retries=1, backoff=0.01), tmp_path, endpoint_id)
    wanted = ["Q142", "Q39", "Q17"]  # France, Switzerland, Japan
    result = fetch_facts(cache, load_catalog()["P37"], subject_ids=wanted, batch_size=2)
    assert sorted(set(result.frame["subject_id"])) == sorted(wanted)
    assert result.frame["query_hash"].n_unique() == 2


def test_sitelinks_are_skipped_with_a_note_on_the_snapshot(snapshot, tmp_path):
    url, endpoint_id = snapshot
    cache = CachedSparql(SparqlClient(url, retries=1, backoff=0.01), tmp_path, endpoint_id)
    assert supports_sitelinks(cache) is False
    notes = []
    result = fetch_facts(cache, load_catalog()["P36"], min_sitelinks=10, log=notes.append)
    assert notes == [
        f"relation P36: popularity filter skipped: endpoint {endpoint_id} has no wikibase:sitelinks"
    ]
    assert result.frame.height >= 100
