"""MACE domains end to end: real queries on a local oxigraph over the embedded snapshot, exact
gold counts, distractors, stable ids, validity filters and hand-checked answers."""

import csv
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pycountry
import pytest

from kcal_pipeline.core.keys import InvalidIdError, check_entity_id
from kcal_pipeline.dataset.instances import mace_questions
from kcal_pipeline.dataset.instances.probe import INSTANCE_COLUMNS
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.dataset.sources import mace
from kcal_pipeline.dataset.sources.snapshot.build import ensure_store
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient

DOMAINS = {
    "mace-award": "award",
    "mace-office": "office",
    "mace-region": "region",
    "mace-river": "river",
    "mace-language": "language",
    "mace-math": "math",
}
DATA = Path(mace.__file__).parent / "snapshot" / "data"


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    """Every domain's facts, fetched once through the real query on a real local endpoint."""
    info = ensure_store(tmp_path_factory.mktemp("mace-store"))
    catalog = load_catalog()
    with LocalEndpoint(info.store_dir) as endpoint:
        client = SparqlClient(endpoint.url, retries=0)
        return {rid: mace.domain_facts(catalog[rid], client.select) for rid in DOMAINS}


@pytest.fixture(scope="module")
def questions(facts) -> dict:
    return {rid: mace_questions.build_question_set(facts[rid].frame, rid, seed=13) for rid in DOMAINS}


def _label(labels: dict, candidates: list, subject_label: str) -> list[str]:
    return sorted(labels[g] for g in next(q.gold for q in candidates if q.label == subject_label))


def test_catalog_has_every_domain():
    catalog = load_catalog()
    for rid, domain in DOMAINS.items():
        spec = catalog[rid]
        assert (spec.domain, spec.query) == ("mace", domain)
        assert spec.kind == ("rule" if domain == "math" else "multi_answer")
        assert len(spec.templates) >= 5
        if domain in ("award", "office", "region", "river"):  # phrases open with "the", "a" …
            assert not [t for t in spec.templates if t.startswith("[X]")], rid


@pytest.mark.parametrize("domain", sorted(mace.QUERIES))
def test_queries_are_portable_and_validate_ids(domain):
    build = mace.QUERIES[domain]
    text = build()
    for prefix in ("wd:", "wdt:", "p:", "ps:", "pq:", "rdfs:"):
        assert f"PREFIX {prefix} <" in text
    assert 'FILTER(LANG(?objectLabel) = "en")' in text and "wikibase:label" not in text
    assert "VALUES ?subject { <http://www.wikidata.org/entity/Q42> }" in build(["Q42"])
    with pytest.raises(InvalidIdError):
        build(["Q42> } ?x ?y ?z . {"])


def test_every_domain_returns_facts_with_qualifiers(facts):
    qualifier = {
        "award": "year",
        "office": "start",
        "region": "area_km2",
        "language": "status",
        "math": "value",
    }
    for rid, domain in DOMAINS.items():
        frame = facts[rid].frame
        assert frame.columns == list(mace.FACT_COLUMNS)
        assert frame.height >= 150, rid
        quals = [json.loads(q) for q in frame["qualifiers"]]
        if domain in qualifier:
            assert all(isinstance(q[qualifier[domain]], (int, float, str)) for q in quals), rid
    award = facts["mace-award"].frame
    bardeen = award.filter(pl.col("object_label") == "John Bardeen")["qualifiers"].to_list()
    assert sorted(json.loads(q)["year"] for q in bardeen) == [1956, 1972]  # two statements kept
    assert facts["mace-award"].dropped["missing_qualifier"] == 0


@pytest.mark.parametrize("rid", sorted(DOMAINS))
def test_gold_counts_are_exact_with_50_each(questions, rid):
    qs = questions[rid]
    frame = qs.frame
    assert qs.shortfall == {}
    assert dict(Counter(frame["n_gold"].to_list())) == {1: 50, 2: 50, 4: 50, 6: 50}
    assert all(len(g) == n for g, n in zip(frame["gold_ids"], frame["n_gold"], strict=True))
    assert frame["instance_id"].n_unique() == frame.height
    assert frame["subject_label"].n_unique() == frame.height
    assert all(check_entity_id(s) for s in frame["subject_id"])
    assert frame.columns == INSTANCE_COLUMNS


@pytest.mark.parametrize("rid", sorted(DOMAINS))
def test_golds_never_among_distractors(questions, rid):
    for row in questions[rid].frame.iter_rows(named=True):
        gold, options = set(row["gold_ids"]), row["option_ids"]
        assert gold <= set(options) and len(set(options)) == len(options)
        assert row["n_options"] == len(options) == len(gold) + 5
        assert len({label.casefold() for label in row["option_labels"]}) == len(options)


def test_question_ids_are_stable_and_the_seed_changes_only_distractors(facts):
    frame = facts["mace-award"].frame
    a = mace_questions.build_questions(frame, "mace-award", seed=13)
    assert a.equals(mace_questions.build_questions(frame, "mace-award", seed=13))
    b = mace_questions.build_questions(frame, "mace-award", seed=14)
    fixed = ["instance_id", "subject_id", "subject_label", "gold_ids", "n_gold", "split"]
    assert a.select(fixed).equals(b.select(fixed))
    assert (a["option_ids"].list.sort() != b["option_ids"].list.sort()).sum() > 50


def test_math_distractors_are_false_and_golds_true():
    rules = {
        "prime number": lambda n: n > 1 and all(n % d for d in range(2, int(n**0.5) + 1)),
        "perfect square": lambda n: round(n**0.5) ** 2 == n,
        "perfect cube": lambda n: round(n ** (1 / 3)) ** 3 == n,
        "triangular number": lambda n: any(k * (k + 1) // 2 == n for k in range(n + 1)),
        "Fibonacci number": lambda n: n in {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987},
    }
    frame = mace_questions.build_questions(mace.math_facts(), "mace-math", seed=13)
    for row in frame.iter_rows(named=True):
        kind, lo, hi = re.fullmatch(r"an? (.+) between (\d+) and (\d+)", row["subject_label"]).groups()
        true = {o for o in row["option_labels"] if rules[kind](int(o)) and int(lo) < int(o) < int(hi)}
        assert true == set(row["gold_labels"]), row["subject_label"]


def test_hand_checked_answers(facts):
    def gold(rid, label):
        frame = facts[rid].frame
        labels = dict(frame.select("object_id", "object_label").iter_rows())
        cands = mace_questions.candidate_questions(
            mace_questions.clean_facts(frame, rid, DOMAINS[rid], Counter()), DOMAINS[rid]
        )
        return _label(labels, cands, label)

    assert gold("mace-award", "the Nobel Prize in Literature in 1995") == ["Seamus Heaney"]
    assert gold("mace-award", "the Nobel Prize in Physics in 1921") == ["Albert Einstein"]
    assert gold("mace-award", "the Nobel Prize in Physics between 1921 and 1922") == [
        "Albert Einstein",
        "Niels Bohr",
    ]
    assert gold("mace-office", "President of the United States in 1994") == ["Bill Clinton"]
    assert gold("mace-office", "President of the United States in 1974") == ["Gerald Ford", "Richard Nixon"]
    assert gold(
        "mace-region", "a first-level administrative division of Germany with an area of less than 800 km²"
    ) == ["Bremen", "Hamburg"]
    assert gold("mace-river", "the Elbe") == ["Czechia", "Germany"]
    assert gold("mace-river", "the Loire or the Seine") == ["France"]
    assert gold("mace-language", "Japanese") == ["Japan"]
    math = mace_questions.candidate_questions(mace.math_facts(), "math")
    assert _label(
        {f"kcal:number-{n}": str(n) for n in range(1001)}, math, "a prime number between 10 and 20"
    ) == ["11", "13", "17", "19"]


def test_validity_filters_drop_raw_ids_and_missing_labels_with_counts():
    uri = lambda local: {"type": "uri", "value": f"https://kcal.invalid/entity/{local}"}  # noqa: E731
    lit = lambda text: {"type": "literal", "value": text}  # noqa: E731
    time = {"type": "literal", "value": "1995-01-01T00:00:00Z"}
    rows = [
        {
            "subject": uri("award-a"),
            "subjectLabel": lit("Prize A"),
            "object": uri("person-b"),
            "objectLabel": lit("Ann Bee"),
            "time": time,
        },
        {
            "subject": uri("award-a"),
            "subjectLabel": lit("Prize A"),
            "object": uri("person-c"),
            "objectLabel": lit("Q42"),
            "time": time,
        },
        {"subject": uri("award-a"), "subjectLabel": lit("Prize A"), "object": uri("person-d"), "time": time},
        {
            "subject": uri("award-a"),
            "subjectLabel": lit("Prize A"),
            "object": uri("person-e"),
            "objectLabel": lit("Eve"),
        },
        {"subject": {"type": "uri", "value": "http://example.org/x"}, "object": uri("person-b")},
    ]
    parsed = mace.parse_mace_facts({"results": {"bindings": rows}}, "mace-award", "award")
    assert parsed.frame["object_label"].to_list() == ["Ann Bee"]
    assert parsed.frame["qualifiers"].to_list() == ['{"year": 1995}']
    assert {k: v for k, v in parsed.dropped.items() if v} == {
        "label_is_id": 1,
        "missing_label": 1,
        "missing_qualifier": 1,
        "unknown_namespace": 1,
    }

    frame = pl.DataFrame(
        [
            ("mace-river", "kcal:river-a", "A River", "kcal:country-X", "Xland", "{}"),
            ("mace-river", "kcal:river-b", "B River", "kcal:country-Y", "country-Y", "{}"),
            ("mace-river", "kcal:river-c", "", "kcal:country-X", "Xland", "{}"),
        ],
        schema=mace.FACT_SCHEMA,
        orient="row",
    )
    qs = mace_questions.build_question_set(frame, "mace-river", seed=1, per_count=5, gold_counts=(1,))
    assert qs.dropped["label_is_id"] == 1 and qs.dropped["missing_label"] == 1
    assert qs.frame["subject_label"].to_list() == ["the A River"]
    assert qs.shortfall == {1: 4}


def test_region_table_lists_exactly_the_top_level_subdivisions():
    rows = list(csv.DictReader((DATA / "mace_region.tsv").open(encoding="utf-8"), delimiter="\t"))
    codes = {r["code"] for r in rows}
    assert len(codes) == len(rows)
    for country in {c[:2] for c in codes}:
        top = {
            s.code
            for s in pycountry.subdivisions.get(country_code=country)
            if s.parent_code is None and s.type != "Outlying area"
        }
        assert {c for c in codes if c.startswith(f"{country}-")} == top, country
    assert all(float(r["area_km2"]) > 0 for r in rows)


def test_award_table_has_no_repeated_laureate_within_a_year():
    rows = list(csv.DictReader((DATA / "mace_award.tsv").open(encoding="utf-8"), delimiter="\t"))
    keys = Counter((r["award"], r["year"]) for r in rows)
    assert max(keys.values()) == 1
    for r in rows:
        names = [n.strip() for n in r["laureates"].split(";")]
        assert len(set(names)) == len(names) <= 3
