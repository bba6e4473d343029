"""A second BEAR import merges with the first by relation id; `--replace` starts the catalog over."""

import tomllib

import polars as pl
import pytest

from kcal_pipeline.dataset.relations import load_catalog
from tests.conftest import run_kcal
from tests.dataset.test_bear import FACTS, METADATA, line, write_bear

# The second directory: P36 again with a larger answer space and other facts (B'), and P37 (C).
METADATA_2 = {
    "P36": {
        "templates": ["[Y] is the capital of [X]."],
        "answer_space_ids": ["Q90", "Q64", "Q1490"],
        "answer_space_labels": ["Paris", "Berlin", "Tokyo"],
    },
    "P37": {
        "templates": ["The official language of [X] is [Y]."],
        "answer_space_ids": ["Q150", "Q188"],
        "answer_space_labels": ["French", "German"],
    },
}
FACTS_2 = {
    "P36": [
        line("Q142", "France", "Q90", 0),
        line("Q183", "Germany", "Q64", 1),
        line("Q17", "Japan", "Q1490", 2),
    ],
    "P37": [line("Q142", "France", "Q150", 0), line("Q183", "Germany", "Q188", 1)],
}


@pytest.fixture
def kcal(tmp_path, monkeypatch):
    """`kcal --home HOME ...` in this process (tests/conftest.py's run_kcal): its stdout. KCAL_HOME
    is HOME for the test's own reads of the catalog."""
    monkeypatch.setenv("KCAL_HOME", str(tmp_path / "home"))

    def run(*args):
        out = run_kcal(tmp_path / "home", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    return run


def imported(home):
    base = home / "datasets" / "bear"
    catalog = tomllib.loads((base / "catalog.toml").read_text("utf-8"))
    facts = {p.stem: pl.read_parquet(p) for p in sorted((base / "facts").glob("*.parquet"))}
    return catalog, facts


def test_a_second_import_merges_by_relation_and_replace_starts_over(tmp_path, kcal):
    home = tmp_path / "home"
    first = write_bear(tmp_path / "first", metadata=METADATA, facts=FACTS)  # A = P19, B = P36
    second = write_bear(tmp_path / "second", metadata=METADATA_2, facts=FACTS_2)  # B' = P36, C = P37
    kcal("dataset", "import-bear", str(first))
    _, facts_1 = imported(home)

    out = kcal("dataset", "import-bear", str(second))
    catalog, facts = imported(home)
    assert list(catalog) == ["bear-P19", "bear-P36", "bear-P37"]
    assert catalog["bear-P36"]["answer_space_ids"] == ["Q90", "Q64", "Q1490"]  # B' replaced B's entry
    assert catalog["bear-P36"]["templates"] == ["[Y] is the capital of [X]."]
    assert sorted(facts["bear-P36"]["subject_label"]) == ["France", "Germany", "Japan"]  # and its facts
    assert facts["bear-P19"].equals(facts_1["bear-P19"])  # A kept as it was
    assert set(facts["bear-P37"]["object_label"]) == {"French", "German"}
    said = [row for row in out.splitlines() if row.startswith("replaced ")]
    assert said == [
        f"replaced bear-P36: catalog entry and facts now come from {second}; "
        "kept bear-P19 from the earlier import"
    ]
    load_catalog.cache_clear()
    assert {"bear-P19", "bear-P36", "bear-P37"} <= set(load_catalog())
    assert load_catalog()["bear-P36"].answer_space_labels == ("Paris", "Berlin", "Tokyo")

    out = kcal("dataset", "import-bear", str(second), "--replace")
    catalog, facts = imported(home)
    assert list(catalog) == ["bear-P36", "bear-P37"]
    assert list(facts) == ["bear-P36", "bear-P37"]  # A's facts file went with its entry
    assert "removed 1 earlier relation(s): bear-P19" in out
    load_catalog.cache_clear()
    assert "bear-P19" not in load_catalog() and "bear-P37" in load_catalog()


def test_an_unreadable_earlier_catalog_is_named_and_nothing_is_written(tmp_path, kcal):
    home = tmp_path / "home"
    kcal("dataset", "import-bear", str(write_bear(tmp_path / "first")))
    catalog = home / "datasets" / "bear" / "catalog.toml"
    catalog.write_text("[bear-P19\n")
    facts_before = {p: p.read_bytes() for p in catalog.parent.rglob("*.parquet")}
    out = run_kcal(home, "dataset", "import-bear", str(write_bear(tmp_path / "second", METADATA_2, FACTS_2)))
    err = out.stderr
    assert out.returncode != 0 and str(catalog) in err and "--replace" in err
    assert catalog.read_text() == "[bear-P19\n"
    assert {p: p.read_bytes() for p in catalog.parent.rglob("*.parquet")} == facts_before
    kcal("dataset", "import-bear", str(tmp_path / "second"), "--replace")
    assert list(imported(home)[0]) == ["bear-P36", "bear-P37"]


def test_a_reimport_that_changes_only_facts_makes_them_stale(tmp_path, kcal):
    """The catalog entry can stay the same while the facts change (here a subject's label; the
    import now keeps labels as written, so re-importing BEAR changes some): the facts file's
    version is part of what the relation's facts are computed from, so they are recomputed rather
    than called up to date."""
    from assets.runner import expected_version
    from resources import ProbeSettings, ScoringSettings

    home = tmp_path / "home"
    settings = {"probe_settings": ProbeSettings(home=str(home)), "scoring_settings": ScoringSettings()}
    partition = {"relation": "bear-P36"}
    kcal("dataset", "import-bear", str(write_bear(tmp_path / "a" / "BEAR")))
    load_catalog.cache_clear()
    before, entries = expected_version(home, "wikidata_facts", partition, settings), imported(home)[0]
    kcal("dataset", "import-bear", str(write_bear(tmp_path / "b" / "BEAR")))  # the same content again
    load_catalog.cache_clear()
    assert expected_version(home, "wikidata_facts", partition, settings) == before
    relabelled = {**FACTS, "P36": [line("Q142", "French Republic", "Q90", 0), *FACTS["P36"][1:]]}
    kcal("dataset", "import-bear", str(write_bear(tmp_path / "c" / "BEAR", facts=relabelled)))
    load_catalog.cache_clear()
    catalog, facts = imported(home)
    assert catalog == entries  # nothing in the catalog tells the new facts from the old
    assert "French Republic" in facts["bear-P36"]["subject_label"].to_list()
    assert expected_version(home, "wikidata_facts", partition, settings) != before


def test_bear_big_as_published_imports_the_relations_it_has_files_for(tmp_path, kcal):
    """The published BEAR-big's metadata lists P414 and ships no P414.jsonl: lm-pub-quiz's loader
    skips it, and so does kcal, with one warning line for it and a count."""
    import json

    from tests.dataset.test_bear import write_bear_big

    big = write_bear_big(tmp_path / "repo" / "BEAR-big", lite=None)
    metadata = json.loads((big / "metadata_relations.json").read_text("utf-8"))
    metadata["P414"] = {"templates": ["[X] is traded on [Y]."]}
    (big / "metadata_relations.json").write_text(json.dumps(metadata), "utf-8")
    out = kcal("dataset", "import-bear", str(big))
    catalog, facts = imported(tmp_path / "home")
    assert list(catalog) == ["bear-P36", "bear-P19", "bear-P99"] and set(facts) == set(catalog)
    warnings = [row for row in out.splitlines() if row.startswith("warning: ")]
    assert warnings == [
        f"warning: metadata_relations.json [P414]: no P414.jsonl in {big}: relation skipped",
        "warning: 1 relation(s) of metadata_relations.json without a facts file skipped; 3 read",
    ]
    (big / "P19.jsonl").rename(big / "P19.jsonl.bak")
    (big / "orphan.jsonl").write_text((big / "P19.jsonl.bak").read_text("utf-8"), "utf-8")
    out = run_kcal(tmp_path / "home", "dataset", "import-bear", str(big))
    assert out.returncode != 0 and "orphan.jsonl" in out.stderr  # a file without metadata: an error
