"""The closed-set catalog against the real snapshot: every relation's query, run by a real oxigraph
endpoint, returns enough labelled facts, and the curated fact files fail loudly when malformed."""

from __future__ import annotations

import re

import pytest

from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.dataset.sources.snapshot import ids
from kcal_pipeline.dataset.sources.snapshot.build import build_ntriples, ensure_store
from kcal_pipeline.dataset.sources.snapshot.curated import CuratedDataError, add_rows, read_rows
from kcal_pipeline.dataset.sources.snapshot.graph import Graph
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient
from kcal_pipeline.dataset.sources.wikidata import parse_facts, relation_query

MIN_FACTS = 30
# Classes the contributors type with (country, human, city; river from mace_data.py); every other
# QID comes from the id table (ids.py), which names its source.
CLASS_QIDS = {"Q5", "Q515", "Q4022", "Q6256"}

CLOSED_SET = [spec for spec in load_catalog().values() if spec.domain == "closed_set"]


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    info = ensure_store(tmp_path_factory.mktemp("closed-set"))
    with LocalEndpoint(info.store_dir) as endpoint:
        client = SparqlClient(endpoint.url)
        return {
            spec.relation_id: parse_facts(client.select(relation_query(spec)), spec.relation_id)
            for spec in CLOSED_SET
        }


def test_at_least_25_closed_set_relations():
    assert len(CLOSED_SET) >= 25


@pytest.mark.parametrize("spec", CLOSED_SET, ids=lambda s: s.relation_id)
def test_each_relation_has_five_distinct_templates(spec):
    assert len(set(spec.templates)) >= 5
    assert any(not t.rstrip(".").endswith("[Y]") for t in spec.templates)  # object slot not always last


@pytest.mark.parametrize("spec", CLOSED_SET, ids=lambda s: s.relation_id)
def test_each_relation_yields_labelled_facts(facts, spec):
    result = facts[spec.relation_id]
    assert result.frame.height >= MIN_FACTS
    assert sum(result.dropped.values()) == 0, result.dropped
    assert result.frame.null_count().sum_horizontal().item() == 0


def test_at_least_5000_closed_set_facts(facts):
    assert sum(r.frame.height for r in facts.values()) >= 5000


def test_objects_link_across_sources(facts):
    """A curated birthplace is geo.py's city entity; a curated citizenship is geo.py's country."""

    def pairs(rid):
        return set(facts[rid].frame.select("subject_label", "object_id").iter_rows())

    assert ("Albert Einstein", "kcal:city-DE-ulm") in pairs("P19")  # no source carries Ulm's id
    assert ("Marie Curie", "Q36") in pairs("P27")  # Poland
    assert ("Apple Inc.", "kcal:city-US-cupertino") in pairs("P159")
    assert ("Munich", "Q183") in pairs("P17")  # Germany
    assert ("Paris", "Q142") in pairs("P1376")  # France
    assert ("Germany", "Q188") in pairs("P37")  # German


def test_snapshot_qids_are_classes_or_sourced():
    """Every QID is a class the contributors type with or a row of the cited id table."""
    used = set(re.findall(r"<http://www\.wikidata\.org/entity/(Q\d+)>", build_ntriples()))
    assert used - {row.qid for row in ids.table().values()} <= CLASS_QIDS


def _rows(text: str):
    return read_rows("people_test.tsv", text)


def test_curated_reader_accepts_the_documented_format():
    kind, rows = _rows("# comment\nperson\tP19\tP27\n\nAda Lovelace\tLondon@GB\t\n")
    graph = Graph()
    add_rows(graph, kind, rows)
    assert ("kcal:person-ada-lovelace", "P19", "kcal:city-GB-london") in graph.facts
    assert ("kcal:person-ada-lovelace", "P31", "Q5") in graph.facts


@pytest.mark.parametrize(
    "text, message",
    [
        ("person\tP19\tP999\n", r"people_test\.tsv:1: unknown relation\(s\) P999"),
        ("planet\tP19\n", r"people_test\.tsv:1: subject kind 'planet'"),
        ("# c\nperson\tP19\n\tUlm@DE\n", r"people_test\.tsv:3: missing subject label"),
        ("person\tP19\nA\tUlm@DE\textra\n", r"people_test\.tsv:2: 3 cells but the header has 2"),
        ("", r"people_test\.tsv: no header line"),
    ],
)
def test_curated_reader_errors_name_file_and_line(text, message):
    with pytest.raises(CuratedDataError, match=message):
        _rows(text)


@pytest.mark.parametrize(
    "line, message",
    [
        ("A\tUlm\tDE", r"people_test\.tsv:2: city 'Ulm' is not written as 'Name@ISO'"),
        ("A\tUlm@XX\tDE", r"people_test\.tsv:2: unknown country code 'XX'"),
        ("A\tUlm@DE\tGU", r"people_test\.tsv:2: unknown country code 'GU'"),  # Guam: not a country
    ],
)
def test_curated_objects_errors_name_file_and_line(line, message):
    kind, rows = _rows(f"person\tP19\tP27\n{line}\n")
    with pytest.raises(CuratedDataError, match=message):
        add_rows(Graph(), kind, rows)


def test_labels_that_collide_on_one_id_are_an_error():
    kind, rows = _rows("org\tP159\nSony\tTokyo@JP\nSONY\tTokyo@JP\n")
    with pytest.raises(CuratedDataError, match=r"people_test\.tsv:3: 'SONY' has the same id kcal:org-sony"):
        add_rows(Graph(), kind, rows)


def test_unknown_language_code_is_an_error():
    kind, rows = _rows("person\tP103\nA\tzz-nope\n")
    with pytest.raises(CuratedDataError, match=r"people_test\.tsv:2: unknown language code 'zz-nope'"):
        add_rows(Graph(), kind, rows)
