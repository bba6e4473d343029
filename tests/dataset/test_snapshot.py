"""The embedded snapshot: shape, determinism, labels, and the oxigraph store it is loaded into."""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kcal_pipeline.core.keys import PROJECT_ENTITY_IRI
from kcal_pipeline.dataset.sources.snapshot import ids
from kcal_pipeline.dataset.sources.snapshot.build import build_keyed_graph, build_ntriples, ensure_store
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, clean_label, fold, literal, typed_literal

P = "<http://www.wikidata.org/prop/direct/{}>"
LABEL = "<http://www.w3.org/2000/01/rdf-schema#label>"
K = PROJECT_ENTITY_IRI
WD = "http://www.wikidata.org/entity/"
# subject, predicate, then an IRI, an @en label or a typed literal (MACE dates and areas).
TRIPLE = re.compile(
    r'^<([^>]+)> <([^>]+)> (?:<([^>]+)>|"((?:[^"\\]|\\.)*)"@en|"(?:[^"\\]|\\.)*"\^\^<[^>]+>) \.$'
)
ENTITY = re.compile(rf"^(?:{re.escape(K)}|http://www\.wikidata\.org/entity/)")
# The classes the contributors type entities with: country, city, human (and river, mace_data.py).
CLASS_QIDS = {"Q4022", "Q5", "Q515", "Q6256"}


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
    """Keyed by Wikidata ids (data/wikidata_ids.tsv): France Q142 and Paris Q90 from Natural Earth,
    Europe Q46 and French Q150 from BEAR; Bogotá Q2841, N'Djamena Q3659, Astana Q1520 from Natural Earth."""
    fr = f"<{WD}Q142>"
    expected = {
        f"{fr} {P.format('P31')} <{WD}Q6256> .",
        f"{fr} {P.format('P36')} <{WD}Q90> .",
        f"{fr} {P.format('P30')} <{WD}Q46> .",
        f"{fr} {P.format('P37')} <{WD}Q150> .",
        f'{fr} {LABEL} "France"@en .',
        f'<{WD}Q90> {LABEL} "Paris"@en .',
        f'<{WD}Q2841> {LABEL} "Bogotá"@en .',  # accent restored from the city record
        f'<{WD}Q3659> {LABEL} "N\'Djamena"@en .',
        f'<{WD}Q150> {LABEL} "French"@en .',
        f"<{WD}Q39> {P.format('P37')} <{WD}Q652> .",  # Switzerland: Italian
        f"<{WD}Q155> {P.format('P30')} <{WD}Q18> .",  # Brazil: South America
        f"<{WD}Q232> {P.format('P36')} <{WD}Q1520> .",  # Kazakhstan: Astana
        f'<{WD}Q1520> {LABEL} "Astana"@en .',  # not BEAR's stale "Nur-Sultan" (make_ids.KEEP_LABEL)
    }
    assert expected - set(lines) == set()


def test_city_currency_border_and_curated_facts_are_present(lines):
    expected = {
        f"<{WD}Q90> {P.format('P1376')} <{WD}Q142> .",
        f"<{WD}Q90> {P.format('P17')} <{WD}Q142> .",
        f"<{WD}Q90> {P.format('P31')} <{WD}Q515> .",
        f"<{WD}Q84> {P.format('P1376')} <{WD}Q145> .",  # London dwarfs London, Ontario
        f"<{WD}Q142> {P.format('P38')} <{K}currency-EUR> .",  # no source carries currency ids
        f"<{WD}Q142> {P.format('P47')} <{WD}Q183> .",
        f"<{WD}Q1297> {P.format('P131')} <{WD}Q1204> .",  # Chicago, Illinois
        f"<{K}person-albert-einstein> {P.format('P19')} <{K}city-DE-ulm> .",
        f"<{K}person-albert-einstein> {P.format('P31')} <{WD}Q5> .",
        f"<{WD}Q183> {P.format('P463')} <{K}org-european-union> .",
        f"<{K}work-iphone> {P.format('P176')} <{WD}Q312> .",  # Apple Inc., from BEAR
        f'<{K}currency-EUR> {LABEL} "Euro"@en .',
        f'<{K}city-DE-cologne> {LABEL} "Cologne"@en .',  # GeoNames: Köln
        f'<{WD}Q61> {LABEL} "Washington, D.C."@en .',
    }
    assert expected - set(lines) == set()


def test_montenegro_speaks_montenegrin(lines):
    """CLDR says Serbian; the Constitution of Montenegro (2007, art. 13) says Montenegrin."""
    assert [line for line in lines if line.startswith(f"<{WD}Q236> {P.format('P37')}")] == [
        f"<{WD}Q236> {P.format('P37')} <{K}lang-cnr> ."
    ]
    assert f'<{K}lang-cnr> {LABEL} "Montenegrin"@en .' in lines


def test_one_city_entity_per_name_and_country():
    """Capitals, large cities and curated birthplaces naming the same city share one project key
    (before the keys become QIDs, which never merges two cities: test_ids_never_merge_two_cities)."""
    lines = build_keyed_graph().ntriples().splitlines()
    cities = [
        TRIPLE.match(line).group(1, 4) for line in lines if line.startswith(f"<{K}city-") and LABEL in line
    ]
    keys = Counter((iri[len(K) :].split("-")[1], fold(label)) for iri, label in cities)
    assert [key for key, n in keys.items() if n > 1] == []


def test_ids_never_merge_two_cities():
    table = ids.table()
    qids = Counter(
        table[k].qid for k in build_keyed_graph().labels if k.startswith("kcal:city-") and k in table
    )
    assert [q for q, n in qids.items() if n > 1] == []


def test_ambiguous_city_names_get_no_city_facts(lines):
    hyderabad = f"<{WD}Q1361>"  # Natural Earth's Hyderabad, India
    assert not [line for line in lines if line.startswith(hyderabad) and LABEL not in line]
    assert any(line.endswith(f"{P.format('P19')} {hyderabad} .") for line in lines)  # still an object


def test_snapshot_stays_small(lines):
    assert len(lines) < 60_000


def test_dependencies_are_not_typed_as_countries(lines):
    typed = {line.split()[0] for line in lines if P.format("P31") in line}
    assert f"<{K}country-GU>" not in typed and f"<{WD}Q16635>" not in typed  # Guam
    assert f"<{K}country-PR>" not in typed and f"<{WD}Q1183>" not in typed  # Puerto Rico
    assert f"<{WD}Q183>" in typed  # Germany


def test_each_relation_has_at_least_100_facts(lines):
    counts = Counter(line.split()[1] for line in lines)
    for pid in ("P36", "P30", "P37"):
        assert counts[P.format(pid)] >= 100, pid


def test_every_qid_comes_from_a_cited_source(ntriples):
    """No Q-number is invented: each is a class the contributors type with, or a row of the id
    table naming where it was read."""
    sourced = {row.qid for row in ids.table().values()}
    used = set(re.findall(r"<http://www\.wikidata\.org/entity/(Q\d+)>", ntriples))
    assert used - sourced - CLASS_QIDS == set()
    assert len(used) > 1000
    iris = set(re.findall(r"<(http[^>]+)>", ntriples))
    allowed = (
        K,
        WD,
        "https://kcal.invalid/statement/",
        "http://www.wikidata.org/prop/",
        "http://www.w3.org/2000/01/rdf-schema#label",
        "http://www.w3.org/2001/XMLSchema#",
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
    """Six continents carry BEAR's ids (P30 objects); BEAR has no Oceania, so it keeps its key."""
    expected = {
        "Q15": "Africa",
        "Q51": "Antarctica",
        "Q48": "Asia",
        "Q46": "Europe",
        "Q49": "North America",
        "Q18": "South America",
    }
    labels = {f'<{WD}{q}> {LABEL} "{name}"@en .' for q, name in expected.items()}
    assert labels | {f'<{K}continent-OC> {LABEL} "Oceania"@en .'} <= set(lines)


def test_language_labels_never_repeat_a_country_name(lines):
    parsed = [TRIPLE.match(line).groups() for line in lines]
    label = {s: lit for s, p, _, lit in parsed if lit is not None}
    countries = {s for s, p, o, _ in parsed if p == P.format("P31")[1:-1] and o == f"{WD}Q6256"}
    languages = {o for s, p, o, _ in parsed if p in {P.format(x)[1:-1] for x in ("P37", "P103", "P1412")}}
    assert {label[e] for e in languages} & {label[e] for e in countries} == set()
    assert "Tuvaluan" in {label[e] for e in languages}


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
    assert clean_label("kcal:country-FR") is None
    assert clean_label("oud") == "oud"  # a short lower-case word is a name (wikidata.looks_like_id)


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


# ---- the Wikidata id table (ids.py) and how make_ids.py matches ---------------------------------

HEADER = "key\tqid\twikidata_label\tsource\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("key\tqid\tlabel\tsource\n", r"t\.tsv:1: header"),
        (HEADER + "kcal:country-FR\tQ0\t\tne\n", r"t\.tsv:2: invalid qid 'Q0'"),
        (HEADER + "Q142\tQ142\t\tne\n", r"t\.tsv:2: key 'Q142' is not a project key"),
        (HEADER + "kcal:country-FR\tQ142\t\t \n", r"t\.tsv:2: empty source for kcal:country-FR"),
        (HEADER + "kcal:country-FR\tQ142\t\n", r"t\.tsv:2: 3 cells, expected 4"),
        (HEADER + "kcal:a\tQ1\t\tx\n# c\nkcal:a\tQ2\t\tx\n", r"t\.tsv:4: key kcal:a appears twice"),
        ("# only a comment\n", r"t\.tsv: no header line"),
    ],
)
def test_id_table_errors_name_line_and_field(text, message):
    with pytest.raises(ids.IdTableError, match=message):
        ids.parse(text, "t.tsv")


def _small_graph() -> Graph:
    g = Graph()
    g.entity("kcal:country-XL", "Xland")
    g.entity("kcal:city-XL-y", "Ytown")
    g.add("kcal:country-XL", "P36", "kcal:city-XL-y")
    g.add_qualified("kcal:country-XL", "P166", "kcal:city-XL-y", {"P585": 1921})
    return g


def test_rekey_turns_sourced_keys_into_qids_with_wikidata_labels():
    table = ids.parse(HEADER + "kcal:country-XL\tQ100\tRepublic of Xland\tne:XL\n")
    out = ids.rekey(_small_graph(), table)
    assert out.labels == {"Q100": "Republic of Xland", "kcal:city-XL-y": "Ytown"}
    assert out.facts == {("Q100", "P36", "kcal:city-XL-y"), ("Q100", "P166", "kcal:city-XL-y")}
    assert {(s, p, o) for s, p, o, _ in out.statements} == {("Q100", "P166", "kcal:city-XL-y")}
    assert "<http://www.wikidata.org/entity/Q100> <http://www.wikidata.org/prop/direct/P36>" in out.ntriples()


def test_rekey_merges_keys_of_one_item_only_when_their_labels_agree():
    g = _small_graph()
    g.entity("kcal:subdivision-XL-Y", "Ytown")
    g.add("kcal:country-XL", "P150", "kcal:subdivision-XL-Y")
    both = HEADER + "kcal:city-XL-y\tQ7\t\tne:a\nkcal:subdivision-XL-Y\tQ7\t\tne:b\n"
    out = ids.rekey(g, ids.parse(both))
    assert out.labels["Q7"] == "Ytown"
    assert {("kcal:country-XL", "P36", "Q7"), ("kcal:country-XL", "P150", "Q7")} <= out.facts
    clash = HEADER + "kcal:city-XL-y\tQ7\t\tne:a\nkcal:country-XL\tQ7\t\tne:b\n"
    with pytest.raises(ids.IdTableError, match=r"keys with different labels share a QID: .*Q7"):
        ids.rekey(g, ids.parse(clash))


def test_rekey_refuses_a_qid_the_graph_already_uses():
    g = _small_graph()
    g.entity("Q5", "human")
    with pytest.raises(ids.IdTableError, match="Q5 already name other entities"):
        ids.rekey(g, ids.parse(HEADER + "kcal:country-XL\tQ5\t\tne:x\n"))


def _bear(rows: dict[str, list[tuple[str, str, str, str]]]):
    from kcal_pipeline.dataset.sources.snapshot.make_ids import Bear

    out, labels, roles = {}, {}, {}
    for pid, items in rows.items():
        out[pid] = [{"sub_id": s, "sub_label": sl, "obj_id": o, "obj_label": ol} for s, sl, o, ol in items]
        for s, sl, o, ol in items:
            labels.setdefault(s, sl)
            labels.setdefault(o, ol)
            roles.setdefault(s, set()).add(f"{pid}:sub")
            roles.setdefault(o, set()).add(f"{pid}:obj")
    return Bear(out, labels, roles)


def test_label_matching_is_type_aware_and_refuses_ambiguity():
    from kcal_pipeline.dataset.sources.snapshot.make_ids import match_by_label

    g = Graph()
    g.entity("kcal:lang-xx", "Mercury")  # a language named like a planet
    g.entity("kcal:person-john-smith", "John Smith")
    g.entity("kcal:genre-jazz", "jazz")  # no BEAR role holds genres
    bear = _bear(
        {
            "P397": [("Q10", "Moon", "Q308", "Mercury")],  # not a language role
            "P37": [("Q20", "Xland", "Q400", "Mercury")],
            "P19": [("Q31", "John Smith", "Q1", "A"), ("Q32", "John Smith", "Q2", "B")],
            "P136": [("Q40", "Song", "Q8341", "jazz")],
        }
    )
    out = {}
    match_by_label(g, bear, out)
    assert {k: m.qid for k, m in out.items()} == {"kcal:lang-xx": "Q400"}
    assert out["kcal:lang-xx"].source == "bear:P37:obj:label"


def test_fact_confirmed_match_needs_an_anchored_subject_and_an_equal_label():
    from kcal_pipeline.dataset.sources.snapshot.make_ids import Match, confirm_by_facts

    g = Graph()
    for key, label in [
        ("kcal:country-XL", "Xland"),
        ("kcal:city-XL-y", "Ytown"),
        ("kcal:city-XL-z", "Ztown"),
    ]:
        g.entity(key, label)
    g.add("kcal:country-XL", "P36", "kcal:city-XL-y")
    g.add("kcal:city-XL-z", "P1376", "kcal:country-XL")
    bear = _bear({"P36": [("Q100", "Xland", "Q7", "Y-Town")], "P1376": [("Q8", "Ztown", "Q100", "Xland")]})
    out = {"kcal:country-XL": Match("Q100", None, "ne:XL")}
    assert confirm_by_facts(g, bear, out) == 1
    assert out["kcal:city-XL-z"].qid == "Q8" and "kcal:city-XL-y" not in out  # 'Y-Town' is no 'Ytown'


def test_a_capital_never_takes_its_city_states_id():
    from kcal_pipeline.dataset.sources.snapshot.make_ids import Match, _assign

    g = Graph()
    for key in ("kcal:country-SG", "kcal:city-SG-singapore", "kcal:state-US-CA", "kcal:subdivision-US-CA"):
        g.entity(key, "California" if "CA" in key else "Singapore")
    out = {"kcal:country-SG": Match("Q334", None, "ne"), "kcal:state-US-CA": Match("Q99", None, "ne")}
    _assign(g, out, "kcal:city-SG-singapore", Match("Q334", None, "ne"))
    _assign(g, out, "kcal:subdivision-US-CA", Match("Q99", None, "ne"))
    assert sorted(out) == ["kcal:country-SG", "kcal:state-US-CA", "kcal:subdivision-US-CA"]
