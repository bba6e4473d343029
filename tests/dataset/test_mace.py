"""MACE domains end to end: real queries on a local oxigraph over the embedded snapshot, exact
gold counts, distractors, stable ids, validity filters, the paper's filters (one laureate per
year, offices of >= 10 years, countries of >= 3 divisions, rivers through <= 6 countries, up to
three "or" parts, a 20 % dev split), question templates and hand-checked answers."""

import csv
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pycountry
import pytest

from kcal_pipeline.core.keys import InvalidIdError, check_entity_id
from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances import mace_questions
from kcal_pipeline.dataset.instances.probe import INSTANCE_COLUMNS, templates_frame
from kcal_pipeline.dataset.instances.quality import quality_report
from kcal_pipeline.dataset.instances.relation_probe import (
    curated_and_variants,
    relation_statements,
    run_templates,
)
from kcal_pipeline.dataset.relations import load_catalog, parse_catalog
from kcal_pipeline.dataset.sources import mace
from kcal_pipeline.dataset.sources.facts import relation_facts
from kcal_pipeline.dataset.sources.snapshot.build import ensure_store
from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient
from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql

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
def relation_results(tmp_path_factory) -> dict:
    """Every domain's facts and dropped rows as the wikidata_facts / dropped_facts asset gets them
    (relation_facts through the SPARQL cache), and the parse alone (domain_facts), each fetched
    once through the real query on a real local endpoint."""
    info = ensure_store(tmp_path_factory.mktemp("mace-store"))
    catalog = load_catalog()
    with LocalEndpoint(info.store_dir) as endpoint:
        client = SparqlClient(endpoint.url, retries=0)
        cached = CachedSparql(client, tmp_path_factory.mktemp("mace-cache"), "snapshot")
        return {
            rid: (relation_facts(catalog[rid], cached), mace.domain_facts(catalog[rid], client.select))
            for rid in DOMAINS
        }


@pytest.fixture(scope="module")
def facts(relation_results) -> dict:
    return {rid: parsed for rid, (_, parsed) in relation_results.items()}


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
        # The seed's core question (MACE Table 5), the answer last, so it is conditioned on it.
        assert spec.questions and all(q.startswith("Question: Name ") for q in spec.questions), rid
        assert all(q.endswith("\nAnswer: [Y]") and q.count("[X]") == 1 for q in spec.questions), rid
    award = catalog["mace-award"].questions[0].replace("[X]", "the Nobel Prize in Physics in 1921")
    assert award == "Question: Name one person who received the Nobel Prize in Physics in 1921.\nAnswer: [Y]"


@pytest.mark.parametrize(
    "questions, needle",
    [
        (["[Y] is the answer to: name [X]."], "must end with the answer slot [Y]"),
        (["Question: Name [X].\nAnswer: [Y] "], "must end with the answer slot [Y]"),
        (["Question: Name [X] and [X].\nAnswer: [Y]"], "must contain [X] exactly once"),
        (["Name [X]: [Y]", "Name [X]: [Y]"], "duplicate questions"),
        ("Name [X]: [Y]", "questions must be a list of strings"),
    ],
)
def test_a_question_template_must_end_with_its_answer(questions, needle):
    entry = {"label": "x", "kind": "rule", "source": "rule", "object_type": "n", "templates": ["[X] [Y]"]}
    with pytest.raises(ValueError, match=r"mace\.toml") as error:
        parse_catalog({"mace-x": {**entry, "questions": questions}}, origin="mace.toml")
    assert needle in str(error.value) and "[mace-x]" in str(error.value)
    assert parse_catalog({"mace-x": {**entry, "questions": ["Name [X].\nAnswer: [Y]."]}})["mace-x"].questions


def test_question_templates_are_scored_by_default_without_variants():
    catalog = load_catalog()
    table = curated_and_variants(templates_frame(catalog), ProbeOptions().perturbation_seeds)
    questions = table.filter(pl.col("kind") == "question")
    assert sorted(questions["template_id"]) == sorted(f"{rid}:q0" for rid in DOMAINS)
    assert table.filter(pl.col("parent_id").str.contains(":q")).is_empty()  # no marker or typo copies
    chosen = run_templates(
        table.filter(pl.col("relation_id") == "mace-award"),
        None,
        ProbeOptions().template_kinds,
        3,
        ProbeOptions().perturbation_seeds,
    )
    assert chosen["template_id"].to_list() == [
        "mace-award:c0",
        "mace-award:c1",
        "mace-award:c2",
        "mace-award:q0",
    ]
    closed = run_templates(
        table.filter(pl.col("relation_id") == "P36"),
        None,
        ProbeOptions().template_kinds,
        3,
        ProbeOptions().perturbation_seeds,
    )
    assert set(closed["kind"]) == {"curated"}  # closed-set relations have no questions
    einstein = {"gold_ids": ["a"], "gold_labels": ["Albert Einstein"], "n_gold": 1}
    instance = {
        "instance_id": "mace-award:q", "relation_id": "mace-award", "subject_id": "kcal:q",
        "subject_label": "the Nobel Prize in Physics in 1921", **einstein,
        "option_ids": ["a"], "option_labels": ["Albert Einstein"], "n_options": 1, "split": "test",
    }  # fmt: skip
    statement = relation_statements(pl.DataFrame([instance]), chosen.filter(pl.col("kind") == "question"), 13)
    text = statement["text"][0]
    assert text.endswith("\nAnswer: Albert Einstein")
    assert text[statement["object_start"][0] : statement["object_end"][0]] == "Albert Einstein"
    assert statement["object_end"][0] == len(text)  # nothing after the answer
    assert text[statement["subject_start"][0] : statement["subject_end"][0]] == instance["subject_label"]


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
    assert gold("mace-river", "the Rhône") == ["France", "Switzerland"]
    assert gold("mace-river", "the Po or the Seine") == ["France", "Italy"]
    assert gold("mace-river", "the Ebro, the Po or the Rhône") == ["France", "Italy", "Spain", "Switzerland"]
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


def test_an_or_question_has_up_to_three_parts_each_adding_an_answer():
    """Rivers a: {A}, b: {B}, c: {C, D}, d: {A} (d repeats a). Gold counts 1, 2, 4: every 'or'
    must add an answer, so "a or d" is no question, and three parts reach four answers."""
    rows = [("a", "A"), ("b", "B"), ("c", "C"), ("c", "D"), ("d", "A")]
    frame = pl.DataFrame(
        [("mace-river", f"kcal:river-{r}", r, f"kcal:country-{c}", c, "{}") for r, c in rows],
        schema=mace.FACT_SCHEMA,
        orient="row",
    )
    got = {q.label: sorted(q.gold) for q in mace_questions.candidate_questions(frame, "river", (1, 2, 4))}
    country = lambda *cs: [f"kcal:country-{c}" for c in cs]  # noqa: E731
    assert got == {
        "the a": country("A"), "the b": country("B"), "the d": country("A"), "the c": country("C", "D"),
        "the a or the b": country("A", "B"), "the b or the d": country("A", "B"),
        "the a, the b or the c": country("A", "B", "C", "D"),
        "the b, the c or the d": country("A", "B", "C", "D"),
    }  # fmt: skip
    two = mace_questions.candidate_questions(frame, "river", (1, 2, 4), max_parts=2)
    assert max(q.parts for q in two) == 2 and len(two) == 6


def _award_facts(years: dict[int, list[str]]) -> pl.DataFrame:
    rows = [
        ("mace-award", "kcal:award-x", "Prize X", f"kcal:person-{p}", p, json.dumps({"year": y}))
        for y, people in years.items()
        for p in people
    ]
    return pl.DataFrame(rows, schema=mace.FACT_SCHEMA, orient="row")


def test_award_ranges_only_span_years_with_one_laureate():
    """2000: A, 2001: B and C (shared), 2002: D, 2003: E. Gold counts 1, 2, 4: "in 2001" ({B, C}),
    2000-2002 ({A, B, C, D}) and 2001-2003 ({B, C, D, E}) touch the shared year and are dropped."""
    frame = _award_facts({2000: ["A"], 2001: ["B", "C"], 2002: ["D"], 2003: ["E"]})
    drops = Counter()
    got = {
        q.label: sorted(q.gold) for q in mace_questions.candidate_questions(frame, "award", (1, 2, 4), drops)
    }
    person = lambda *ps: [f"kcal:person-{p}" for p in ps]  # noqa: E731
    assert got == {
        "the Prize X in 2000": person("A"),
        "the Prize X in 2002": person("D"),
        "the Prize X in 2003": person("E"),
        "the Prize X between 2002 and 2003": person("D", "E"),
    }
    assert drops["shared_award_year"] == 3
    assert mace_questions.question_drops(frame, "mace-award", "award", (1, 2, 4))["shared_award_year"] == 3


def test_snapshot_award_questions_have_one_laureate_per_year(facts, questions):
    frame = facts["mace-award"].frame
    years = Counter(
        (a, json.loads(q)["year"]) for a, q in frame.select("subject_id", "qualifiers").iter_rows()
    )
    award_of = {f"the {label}": a for a, label in frame.select("subject_id", "subject_label").iter_rows()}
    for label, n_gold in questions["mace-award"].frame.select("subject_label", "n_gold").iter_rows():
        name, single, first, last = re.fullmatch(r"(.+) (?:in (\d+)|between (\d+) and (\d+))", label).groups()
        first, last = (int(single), int(single)) if single else (int(first), int(last))
        counts = [n for (a, y), n in years.items() if a == award_of[name] and first <= y <= last]
        assert counts and set(counts) == {1}, label  # every award year of the range: one laureate
        assert n_gold <= len(counts), label  # fewer only if one laureate won twice
    assert questions["mace-award"].dropped["shared_award_year"] > 0


def test_paper_filters_drop_short_offices_small_countries_and_long_rivers():
    """Hand-made facts at and just past each bound; the failing subject goes with all its rows."""

    def office(position, holder, start, end):
        return ("mace-office", position, position, f"kcal:person-{holder}", holder,
                json.dumps({"start": start, "end": end}))  # fmt: skip

    offices = pl.DataFrame(
        [
            office("kcal:position-a", "A1", 2000, 2004),  # 2000..2004 and 2005..2009: 10 years
            office("kcal:position-a", "A2", 2005, 2009),
            office("kcal:position-b", "B1", 2000, 2004),  # 2000..2004 and 2006..2009: 9 years
            office("kcal:position-b", "B2", 2006, 2009),
            office("kcal:position-c", "C1", 2000, None),  # open term, to 2008 (C2's start): 9 years
            office("kcal:position-c", "C2", 2008, 2008),
        ],
        schema=mace.FACT_SCHEMA,
        orient="row",
    )
    kept, dropped = mace.paper_filter(offices, "office")
    assert kept["subject_id"].unique().to_list() == ["kcal:position-a"]
    assert dropped.height == 4 and set(dropped["drop_reason"]) == {"office_under_10_years"}

    regions = pl.DataFrame(
        [("mace-region", f"kcal:country-{c}", c, f"kcal:sub-{c}{n}", f"{c}{n}", '{"area_km2": 1.0}')
         for c, k in (("X", 3), ("Y", 2)) for n in range(k)],
        schema=mace.FACT_SCHEMA,
        orient="row",
    )  # fmt: skip
    kept, dropped = mace.paper_filter(regions, "region")
    assert kept["subject_id"].unique().to_list() == ["kcal:country-X"]
    assert dropped["drop_reason"].to_list() == ["country_under_3_divisions"] * 2

    rivers = pl.DataFrame(
        [("mace-river", f"kcal:river-{r}", r, f"kcal:country-{n}", str(n), "{}")
         for r, k in (("six", 6), ("seven", 7)) for n in range(k)],
        schema=mace.FACT_SCHEMA,
        orient="row",
    )  # fmt: skip
    kept, dropped = mace.paper_filter(rivers, "river")
    assert kept["subject_id"].unique().to_list() == ["kcal:river-six"]
    assert dropped["drop_reason"].to_list() == ["river_over_6_countries"] * 7
    assert mace.paper_filter(rivers, "language")[0].equals(rivers)  # no such filter there


def test_the_danube_is_dropped_into_dropped_facts_with_its_reason(relation_results):
    result, parsed = relation_results["mace-river"]
    danube = result.dropped.filter(pl.col("subject_label") == "Danube")
    assert danube.height == 10 and set(danube["drop_reason"]) == {"river_over_6_countries"}
    assert danube["endpoint"].to_list() == ["snapshot"] * 10  # provenance on dropped rows too
    assert "Danube" not in result.facts["subject_label"].to_list()
    assert result.drop_counts["river_over_6_countries"] == parsed.dropped["river_over_6_countries"] == 10
    language, _ = relation_results["mace-language"]
    assert language.dropped.height == language.drop_counts["duplicate"] > 0  # official and used: one fact
    for rid in ("mace-office", "mace-region"):  # the snapshot's positions and countries all pass
        assert relation_results[rid][0].dropped.is_empty(), rid


@pytest.mark.parametrize("rid", sorted(DOMAINS))
def test_the_dev_split_is_a_fifth_of_every_gold_count(questions, rid):
    frame = questions[rid].frame
    dev = frame.filter(pl.col("split") == "dev").group_by("n_gold").len().sort("n_gold")
    assert dev.rows() == [(1, 10), (2, 10), (4, 10), (6, 10)]


def test_dev_splits_are_every_fifth_and_keep_when_more_are_picked(facts):
    assert mace_questions.dev_splits(10, 0.2) == ["test"] * 4 + ["dev"] + ["test"] * 4 + ["dev"]
    assert (
        mace_questions.dev_splits(7, 0.25).count("dev") == 1
        and mace_questions.dev_splits(3, 0.0) == ["test"] * 3
    )
    frame = facts["mace-office"].frame
    small = mace_questions.build_questions(frame, "mace-office", seed=13, per_count=20)
    large = mace_questions.build_questions(frame, "mace-office", seed=13, per_count=50)
    both = small.join(large, on="instance_id", suffix="_large")
    assert both.height == small.height and (both["split"] == both["split_large"]).all()


def test_the_quality_table_counts_what_each_filter_dropped(relation_results, questions):
    catalog = load_catalog()
    facts = pl.concat(
        [frame for result, _ in relation_results.values() for frame in (result.facts, result.dropped)],
        how="diagonal_relaxed",
    )
    instances = pl.concat([questions[rid].frame for rid in DOMAINS])
    report = {(r, c): v for r, c, v in quality_report(facts, instances, catalog).iter_rows()}
    assert report[("mace-river", "dropped:river_over_6_countries")] == 10
    assert report[("mace-river", "facts")] == relation_results["mace-river"][0].facts.height
    assert report[("mace-office", "dropped:office_under_10_years")] == 0
    assert report[("mace-region", "dropped:country_under_3_divisions")] == 0
    for rid in DOMAINS:
        assert [report[(rid, f"questions_n_gold:{k}")] for k in (1, 2, 4, 6)] == [50, 50, 50, 50], rid
        for reason in mace_questions.QUESTION_DROPS:
            assert report[(rid, f"dropped_questions:{reason}")] == questions[rid].dropped[reason], (
                rid,
                reason,
            )
    assert report[("mace-award", "dropped_questions:shared_award_year")] > 0
    assert report[("mace-region", "dropped_questions:ambiguous_bound")] > 0
    assert ("P36", "dropped_questions:ambiguous_bound") not in report  # closed-set relations: no MACE checks
