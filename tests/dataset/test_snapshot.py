"""The embedded snapshot: shape, determinism, labels, and the oxigraph store it is loaded into."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kcal_pipeline.core.keys import PROJECT_ENTITY_IRI
from kcal_pipeline.dataset.sources.snapshot.build import build_ntriples, ensure_store
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, clean_label, fold, literal, typed_literal

P = "<http://www.wikidata.org/prop/direct/{}>"
LABEL = "<http://www.w3.org/2000/01/rdf-schema#label>"
K = PROJECT_ENTITY_IRI
# subject, predicate, then an IRI, an @en label or a typed literal (MACE dates and areas).
TRIPLE = re.compile(
    r'^<([^>]+)> <([^>]+)> (?:<([^>]+)>|"((?:[^"\\]|\\.)*)"@en|"(?:[^"\\]|\\.)*"\^\^<[^>]+>) \.$'
)
ENTITY = re.compile(rf"^(?:{re.escape(K)}|http://www\.wikidata\.org/entity/)")
# Certain QIDs only: country, city, human (and river, from mace_data.py).
CERTAIN_QIDS = {"Q4022", "Q5", "Q515", "Q6256"}


@pytest.fixture(scope="module")
def ntriples() -> str:
    return build_ntriples()


@pytest.fixture(scope="module")
def lines(ntriples) -> list[str]:
    return ntriples.splitlines()


def test_two_builds_are_identical(ntriples):
    again = build_ntriples()
    assert hashlib.sha256(again.encode()).hexdigest() == hashlib.sha256(ntriples.encode()).hexdigest()


def test_lines_are_sorted_unique_and_well_formed(lines, ntriples):
    assert ntriples.endswith("\n")
    assert lines == sorted(set(lines))
    bad = [line for line in lines if not TRIPLE.match(line)]
    assert bad == []


def test_known_facts_are_present(lines):
    fr = f"<{K}country-FR>"
    expected = {
        f"{fr} {P.format('P31')} <http://www.wikidata.org/entity/Q6256> .",
        f"{fr} {P.format('P36')} <{K}city-FR-paris> .",
        f"{fr} {P.format('P30')} <{K}continent-EU> .",
        f"{fr} {P.format('P37')} <{K}lang-fr> .",
        f'{fr} {LABEL} "France"@en .',
        f'<{K}city-FR-paris> {LABEL} "Paris"@en .',
        f'<{K}city-CO-bogota> {LABEL} "Bogotá"@en .',  # accent restored from the city record
        f'<{K}city-TD-n-djamena> {LABEL} "N\'Djamena"@en .',
        f'<{K}lang-fr> {LABEL} "French"@en .',
        f"<{K}country-CH> {P.format('P37')} <{K}lang-it> .",
        f"<{K}country-BR> {P.format('P30')} <{K}continent-SA> .",
        f"<{K}country-KZ> {P.format('P36')} <{K}city-KZ-astana> .",
    }
    assert expected - set(lines) == set()


def test_city_currency_border_and_curated_facts_are_present(lines):
    q = "<http://www.wikidata.org/entity/{}>"
    expected = {
        f"<{K}city-FR-paris> {P.format('P1376')} <{K}country-FR> .",
        f"<{K}city-FR-paris> {P.format('P17')} <{K}country-FR> .",
        f"<{K}city-FR-paris> {P.format('P31')} {q.format('Q515')} .",
        f"<{K}city-GB-london> {P.format('P1376')} <{K}country-GB> .",  # dwarfs London, Ontario
        f"<{K}country-FR> {P.format('P38')} <{K}currency-EUR> .",
        f"<{K}country-FR> {P.format('P47')} <{K}country-DE> .",
        f"<{K}city-US-chicago> {P.format('P131')} <{K}state-US-IL> .",
        f"<{K}person-albert-einstein> {P.format('P19')} <{K}city-DE-ulm> .",
        f"<{K}person-albert-einstein> {P.format('P31')} {q.format('Q5')} .",
        f"<{K}country-DE> {P.format('P463')} <{K}org-european-union> .",
        f"<{K}work-iphone> {P.format('P176')} <{K}org-apple-inc> .",
        f'<{K}currency-EUR> {LABEL} "Euro"@en .',
        f'<{K}city-DE-cologne> {LABEL} "Cologne"@en .',  # GeoNames: Köln
        f'<{K}city-US-washington-d-c> {LABEL} "Washington, D.C."@en .',
    }
    assert expected - set(lines) == set()


def test_one_city_entity_per_name_and_country(lines):
    """Capitals, large cities and curated birthplaces naming the same city share one entity."""
    cities = [
        TRIPLE.match(line).group(1, 4) for line in lines if line.startswith(f"<{K}city-") and LABEL in line
    ]
    keys = Counter((iri[len(K) :].split("-")[1], fold(label)) for iri, label in cities)
    assert [key for key, n in keys.items() if n > 1] == []


def test_ambiguous_city_names_get_no_city_facts(lines):
    hyderabad = f"<{K}city-IN-hyderabad>"
    assert not [line for line in lines if line.startswith(hyderabad) and LABEL not in line]
    assert any(line.endswith(f"{P.format('P19')} {hyderabad} .") for line in lines)  # still an object


def test_snapshot_stays_small(lines):
    assert len(lines) < 60_000


def test_dependencies_are_not_typed_as_countries(lines):
    typed = {line.split()[0] for line in lines if P.format("P31") in line}
    assert f"<{K}country-GU>" not in typed  # Guam
    assert f"<{K}country-PR>" not in typed  # Puerto Rico
    assert f"<{K}country-DE>" in typed


def test_each_relation_has_at_least_100_facts(lines):
    counts = Counter(line.split()[1] for line in lines)
    for pid in ("P36", "P30", "P37"):
        assert counts[P.format(pid)] >= 100, pid


def test_only_certain_qids_are_used(ntriples):
    assert set(re.findall(r"<http://www\.wikidata\.org/entity/(Q\d+)>", ntriples)) == CERTAIN_QIDS
    iris = set(re.findall(r"<(http[^>]+)>", ntriples))
    allowed = (
        K,
        "https://kcal.invalid/statement/",
        "http://www.wikidata.org/prop/",
        "http://www.w3.org/2000/01/rdf-schema#label",
        "http://www.w3.org/2001/XMLSchema#",
        *(f"http://www.wikidata.org/entity/{q}" for q in CERTAIN_QIDS),
    )
    assert [i for i in iris if not i.startswith(allowed)] == []


def test_every_entity_has_exactly_one_clean_label(lines):
    parsed = [TRIPLE.match(line).groups() for line in lines]
    labels = Counter(s for s, p, _, lit in parsed if lit is not None)
    entities = {e for s, _, o, _ in parsed for e in (s, o) if e and ENTITY.match(e)}
    assert set(labels) == entities
    assert max(labels.values()) == 1
    texts = [lit for *_, lit in parsed if lit is not None]
    assert all(t == t.strip() and t for t in texts)
    assert not [t for t in texts if re.fullmatch(r"Q\d+|[a-z]{2,3}(_\w+)?", t)]


def test_continent_labels(lines):
    continents = {
        line.split()[0]: TRIPLE.match(line).group(4)
        for line in lines
        if line.startswith(f"<{K}continent-") and LABEL in line
    }
    assert sorted(continents.values()) == [
        "Africa",
        "Antarctica",
        "Asia",
        "Europe",
        "North America",
        "Oceania",
        "South America",
    ]


def test_language_labels_never_repeat_a_country_name(lines):
    def labels(prefix):
        return {
            TRIPLE.match(line).group(4)
            for line in lines
            if line.startswith(f"<{K}{prefix}") and LABEL in line
        }

    assert labels("lang-") & labels("country-") == set()
    assert "Tuvaluan" in labels("lang-")


def test_literal_escaping():
    assert literal('say "hi"') == '"say \\"hi\\""@en'
    assert literal("back\\slash") == '"back\\\\slash"@en'
    assert literal("two\nlines\r") == '"two\\nlines\\r"@en'
    assert literal("Nouméa ünïcödé 東京") == '"Nouméa ünïcödé 東京"@en'
    assert literal("bell\x07") == '"bell\\u0007"@en'


def test_clean_label_refuses_ids_and_blanks():
    assert clean_label("  San   José ") == "San José"
    assert clean_label("") is None
    assert clean_label(None) is None
    assert clean_label("Q42") is None
    assert clean_label("zh_Hant") is None


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("snapshot")


def test_ensure_store_builds_a_store_named_by_hash(store_root, ntriples):
    info = ensure_store(store_root)
    digest = hashlib.sha256(ntriples.encode()).hexdigest()
    assert info.content_hash == digest
    assert info.n_triples == len(ntriples.splitlines())
    assert info.store_dir == store_root / f"store-{digest[:12]}"
    assert (store_root / f"snapshot-{digest[:12]}.nt").read_text("utf-8") == ntriples
    assert (info.store_dir / "CURRENT").is_file()  # a RocksDB directory written by oxigraph
    assert sorted(p.name for p in store_root.iterdir()) == [
        f"snapshot-{digest[:12]}.nt",
        f"store-{digest[:12]}",
    ]  # no temporary leftovers


def test_ensure_store_is_idempotent(store_root, monkeypatch):
    first = ensure_store(store_root)
    marker = first.store_dir / ".kcal-complete"
    stamp = marker.stat().st_mtime_ns

    def no_reload(*args, **kwargs):
        raise AssertionError("oxigraph load ran again for a complete store")

    monkeypatch.setattr(subprocess, "run", no_reload)
    assert ensure_store(store_root) == first
    assert marker.stat().st_mtime_ns == stamp


def test_ensure_store_rebuilds_an_unmarked_store(tmp_path):
    info = ensure_store(tmp_path)
    (info.store_dir / ".kcal-complete").unlink()
    assert ensure_store(tmp_path) == info
    assert (info.store_dir / ".kcal-complete").read_text().strip() == info.content_hash


def test_missing_oxigraph_binary_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="oxigraph binary not found"):
        ensure_store(tmp_path / "root")
    assert [p.name for p in (tmp_path / "root").iterdir() if p.is_dir()] == []


def test_typed_literals_follow_wikidata():
    assert typed_literal(1995) == '"1995-01-01T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
    assert (
        typed_literal("2001-06-30") == '"2001-06-30T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
    )
    assert typed_literal(123.5) == '"123.5"^^<http://www.w3.org/2001/XMLSchema#decimal>'
    with pytest.raises(ValueError, match="no literal form"):
        typed_literal("June 2001")


def test_qualified_statement_shape():
    g = Graph()
    g.entity("kcal:person-x", "X")
    g.entity("kcal:award-y", "Y")
    g.add_qualified("kcal:person-x", "P166", "kcal:award-y", {"P585": 1921})
    lines = g.ntriples().splitlines()
    node = next(ln.split()[2] for ln in lines if "/prop/P166>" in ln)
    assert (
        f"{node} <http://www.wikidata.org/prop/statement/P166> <https://kcal.invalid/entity/award-y> ."
        in lines
    )
    assert any(
        ln.startswith(f'{node} <http://www.wikidata.org/prop/qualifier/P585> "1921-01-01') for ln in lines
    )
    assert (
        "<https://kcal.invalid/entity/person-x> <http://www.wikidata.org/prop/direct/P166> "
        "<https://kcal.invalid/entity/award-y> ."
    ) in lines
