"""BEAR import: a tiny directory in BEAR's format, round-tripped into catalog, facts and instances."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.core.keys import InvalidIdError
from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.answer_spaces import instances_from_fixed_space
from kcal_pipeline.dataset.instances.probe import (
    INSTANCE_COLUMNS,
    EmptyRelationError,
    build_statements,
    instance_row,
    instances_frame,
    relations_frame,
    templates_frame,
)
from kcal_pipeline.dataset.instances.quality import quality_report
from kcal_pipeline.dataset.instances.relation_probe import curated_and_variants, run_templates
from kcal_pipeline.dataset.relations import RelationSpec, load_catalog, merge_catalogs, parse_entry
from kcal_pipeline.dataset.sources.bear.catalog import (
    catalog_entries,
    catalog_toml,
    toml_string,
    write_catalog_toml,
)
from kcal_pipeline.dataset.sources.bear.importing import import_bear
from kcal_pipeline.dataset.sources.bear.parsed import BearFormatError
from kcal_pipeline.dataset.sources.bear.reading import read_bear
from kcal_pipeline.dataset.sources.bear.tables import dropped_frame, facts_frame, split_stored
from kcal_pipeline.dataset.sources.bear.templates_file import split_templates, with_templates_file
from kcal_pipeline.dataset.sources.facts import relation_facts
from kcal_pipeline.dataset.templates import TemplateError, marker_variant_of

PACKAGED_DIR = Path(__file__).resolve().parents[2] / "kcal_pipeline" / "dataset" / "data"
METADATA = {
    "P19": {
        "templates": ["[X] was born in [Y].", "[X] wurde in [Y] geboren.", 'The "birthplace" of [X] is [Y].'],
        "answer_space_ids": ["Q174", "Q72", "Q90"],
        "answer_space_labels": ["São Paulo", "Zürich", "Paris"],
    },
    "P36": {
        "templates": ["The capital of [X] is [Y]."],
        "answer_space_ids": ["Q90", "Q64"],
        "answer_space_labels": ["Paris", "Berlin"],
    },
}


def line(sub_id, sub_label, obj_id, answer_idx, obj_label="", aliases=()):
    return json.dumps(
        {
            "sub_id": sub_id,
            "sub_label": sub_label,
            "sub_aliases": list(aliases),
            "obj_id": obj_id,
            "obj_label": obj_label,
            "answer_idx": answer_idx,
        },
        ensure_ascii=False,
    )


FACTS = {
    "P19": [
        line("Q1", "Pelé", "Q174", 0, "São Paulo", ["Edson Arantes do Nascimento", "O Rei"]),
        line("Q2", "Ursula Andress", "Q72", 1, "Zürich"),
        line("Q3", "Édith Piaf", "Q90", 2, "Paris", ["La Môme"]),
        line("Q3", "Édith Piaf", "Q90", 2, "Paris"),  # duplicate
        line("Q4", "Q4", "Q90", 2, "Paris"),  # label_is_id
        line("Q5", "  ", "Q90", 2, "Paris"),
    ],  # missing_label
    "P36": [
        line("Q142", "France", "Q90", 0, "Paris", ["République française"]),
        line("Q183", "Germany", "Q64", 1, "Berlin"),
    ],
}


def write_bear(root, metadata=None, facts=None, raw_metadata=None):
    root.mkdir(parents=True, exist_ok=True)
    (root / "metadata_relations.json").write_text(
        raw_metadata if raw_metadata is not None else json.dumps(metadata or METADATA, ensure_ascii=False),
        "utf-8",
    )
    for rid, lines in (facts or FACTS).items():
        (root / f"{rid}.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    return root


@pytest.fixture
def bear_dir(tmp_path):
    return write_bear(tmp_path / "BEAR-tiny")


@pytest.fixture
def fresh_catalog():
    load_catalog.cache_clear()
    yield load_catalog
    load_catalog.cache_clear()


def test_read_bear_keeps_good_lines_and_counts_drops(bear_dir):
    ds = read_bear(bear_dir)
    assert ds.name == "BEAR-tiny" and list(ds.relations) == ["P19", "P36"]
    p19 = ds.relations["P19"]
    assert [f["subject_id"] for f in p19.facts] == ["Q1", "Q2", "Q3"]
    assert p19.dropped_counts() == {"duplicate": 1, "label_is_id": 1, "missing_label": 1}
    assert [d["line"] for d in p19.dropped] == [4, 5, 6]
    assert p19.kind == "one_to_one" and ds.relations["P36"].kind == "one_to_one"


def test_facts_frame(bear_dir):
    frame = facts_frame(read_bear(bear_dir))
    assert frame.columns == [
        "relation_id",
        "subject_id",
        "subject_label",
        "object_id",
        "object_label",
        "qualifiers",
        "source",
        "retrieved_at",
    ]
    assert frame.select("relation_id", "subject_id", "subject_label", "object_label").rows() == [
        ("P19", "Q1", "Pelé", "São Paulo"),
        ("P19", "Q2", "Ursula Andress", "Zürich"),
        ("P19", "Q3", "Édith Piaf", "Paris"),
        ("P36", "Q142", "France", "Paris"),
        ("P36", "Q183", "Germany", "Berlin"),
    ]
    assert json.loads(frame["qualifiers"][0]) == {"sub_aliases": ["Edson Arantes do Nascimento", "O Rei"]}
    assert set(frame["source"]) == {"bear:BEAR-tiny"}
    assert frame["retrieved_at"].null_count() == frame.height
    dropped = dropped_frame(read_bear(bear_dir))
    assert sorted(dropped["drop_reason"]) == ["duplicate", "label_is_id", "missing_label"]


def test_import_round_trip(bear_dir, tmp_path, fresh_catalog):
    home = tmp_path / "home"
    notes = []
    catalog_path, facts_paths = import_bear(bear_dir, home, prefix="", log=notes.append)
    assert catalog_path == home / "datasets" / "bear" / "catalog.toml"
    assert facts_paths == {r: home / "datasets" / "bear" / "facts" / f"{r}.parquet" for r in ("P19", "P36")}
    assert (
        notes[0] == "BEAR P19 -> P19: 3 facts, 3 options, dropped {'duplicate': 1, 'label_is_id': 1, "
        "'missing_label': 1}"
    )
    catalog = fresh_catalog(path=str(catalog_path))
    spec = catalog["P19"]
    assert (spec.source, spec.answer_space, spec.domain, spec.kind) == (
        "bear",
        "fixed",
        "closed_set",
        "one_to_one",
    )
    assert spec.templates == tuple(METADATA["P19"]["templates"])
    assert spec.answer_space_labels == ("São Paulo", "Zürich", "Paris")
    assert spec.object_type == "P19" and spec.data == str(facts_paths["P19"])
    assert "P30" in catalog  # the packaged relations are still there
    kept, dropped = split_stored(pl.read_parquet(facts_paths["P19"]))
    assert kept.equals(facts_frame(read_bear(bear_dir)).filter(pl.col("relation_id") == "P19"))
    assert dropped["drop_reason"].to_list() == ["duplicate", "label_is_id", "missing_label"]


def test_default_prefix_keeps_imported_ids_apart_from_packaged_ones(bear_dir, fresh_catalog, tmp_path):
    catalog_path, facts_paths = import_bear(bear_dir, tmp_path / "home", log=lambda _: None)
    catalog = fresh_catalog(path=str(catalog_path))
    assert set(facts_paths) == {"bear-P19", "bear-P36"}
    assert catalog["bear-P19"].source == "bear" and catalog["P19"].source == "sparql"
    assert set(pl.read_parquet(facts_paths["bear-P19"])["relation_id"]) == {"bear-P19"}


def test_a_relation_subset_imports_only_those_relations(bear_dir, fresh_catalog, tmp_path):
    home = tmp_path / "home"
    catalog_path, facts_paths = import_bear(bear_dir, home, relations=["P36"], log=lambda _: None)
    assert set(facts_paths) == {"bear-P36"}  # BEAR's id
    assert sorted(p.name for p in (home / "datasets" / "bear" / "facts").iterdir()) == ["bear-P36.parquet"]
    catalog = fresh_catalog(path=str(catalog_path))
    assert "bear-P36" in catalog and "bear-P19" not in catalog
    # the prefixed id names the same relation; a later subset merges with the first
    _, facts_paths = import_bear(bear_dir, home, relations=["bear-P19", "P19"], log=lambda _: None)
    assert set(facts_paths) == {"bear-P19"}
    fresh_catalog.cache_clear()
    assert {"bear-P19", "bear-P36"} <= set(fresh_catalog(path=str(catalog_path)))


def test_an_unknown_relation_in_a_subset_is_named_and_nothing_is_written(bear_dir, tmp_path):
    with pytest.raises(ValueError, match=r"--relation P999: not in .*; it has P19, P36"):
        import_bear(bear_dir, tmp_path / "home", relations=["P19", "P999"], log=lambda _: None)
    assert not (tmp_path / "home").exists()


def test_fixed_space_instances_have_every_option_and_the_gold(bear_dir, fresh_catalog, tmp_path):
    catalog_path, _ = import_bear(bear_dir, tmp_path / "home", prefix="", log=lambda _: None)
    catalog = fresh_catalog(path=str(catalog_path))
    facts = facts_frame(read_bear(bear_dir))
    inst = instances_from_fixed_space(facts, catalog["P19"], seed=13, dev_fraction=0.5)
    assert inst.columns == INSTANCE_COLUMNS
    assert inst["option_ids"].to_list() == [["Q174", "Q72", "Q90"]] * 3
    assert inst["n_options"].to_list() == [3, 3, 3]
    assert inst["gold_ids"].to_list() == [["Q174"], ["Q72"], ["Q90"]]
    assert inst["gold_labels"].to_list() == [["São Paulo"], ["Zürich"], ["Paris"]]
    assert inst["instance_id"].to_list() == ["P19:Q1", "P19:Q2", "P19:Q3"]
    assert inst.equals(instances_from_fixed_space(facts, catalog["P19"], seed=13, dev_fraction=0.5))
    assert set(inst["split"]) <= {"dev", "test"}
    statements = build_statements(inst, templates_frame({"P19": catalog["P19"]}))
    assert statements.height == 3 * 3 * 3
    assert "Pelé was born in São Paulo." in statements["text"].to_list()


def test_fixed_space_resolves_duplicate_labels(bear_dir):
    spec = RelationSpec(
        relation_id="P19",
        label="p",
        kind="n_to_1",
        object_type="P19",
        templates=("[X] [Y]",),
        source="bear",
        answer_space="fixed",
        answer_space_ids=("Q174", "Q72", "Q90"),
        answer_space_labels=("Paris", "Zürich", " paris"),
    )
    facts = facts_frame(read_bear(bear_dir))
    notes = []
    inst = instances_from_fixed_space(facts, spec, seed=1, dev_fraction=0.0, log=notes.append)
    by_subject = {r["subject_id"]: r for r in inst.iter_rows(named=True)}
    assert by_subject["Q1"]["option_ids"] == ["Q174", "Q72"]  # gold Q174 kept, later twin Q90 gone
    assert by_subject["Q3"]["option_ids"] == ["Q72", "Q90"]  # gold Q90 kept, its twin Q174 gone
    assert notes == ["relation P19: removed 3 duplicate-label option(s) across 3 instances"]


def test_fixed_space_refuses_objects_outside_the_space_and_empty_relations(bear_dir, fresh_catalog, tmp_path):
    catalog_path, _ = import_bear(bear_dir, tmp_path / "home", prefix="", log=lambda _: None)
    spec = fresh_catalog(path=str(catalog_path))["P36"]
    facts = facts_frame(read_bear(bear_dir))
    with pytest.raises(ValueError, match=r"relation P36: object\(s\) Q174, Q72 are not in .* \(2 in all\)"):
        instances_from_fixed_space(facts.with_columns(relation_id=pl.lit("P36")), spec, 1, 0.2)
    with pytest.raises(EmptyRelationError, match="P36"):
        instances_from_fixed_space(facts.filter(pl.col("relation_id") == "P19"), spec, 1, 0.2)
    with pytest.raises(ValueError, match="no fixed answer space"):
        instances_from_fixed_space(facts, fresh_catalog()["P30"], 1, 0.2)


# --- malformed input ---------------------------------------------------------------------------


def test_truncated_line_names_file_and_line(tmp_path):
    lines = [*FACTS["P36"][:1], FACTS["P36"][1][:25]]
    root = write_bear(tmp_path / "b", facts={**FACTS, "P36": lines})
    with pytest.raises(BearFormatError, match=r"P36\.jsonl:2: malformed or truncated JSON line"):
        read_bear(root)


def test_bad_template_names_relation_and_template(tmp_path):
    meta = {**METADATA, "P36": {**METADATA["P36"], "templates": ["ok [X] [Y]", "The capital is [Y]."]}}
    with pytest.raises(
        TemplateError,
        match=r"\[P36\] templates\[1\]: 'The capital is \[Y\]\.' must "
        r"contain \[X\] exactly once",
    ):
        read_bear(write_bear(tmp_path / "b", metadata=meta))


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (line("Q142", "France", "Q64", 0), r"P36\.jsonl:1: answer_idx 0 points to Q90 but obj_id is Q64"),
        (line("Q142", "France", "Q90", 5), r"P36\.jsonl:1: answer_idx 5 is not an index into the 2"),
        (line("Q142", "France", "Q90", True), r"P36\.jsonl:1: answer_idx True"),
        (
            json.dumps({"sub_id": "Q142", "sub_label": "France"}),
            r"P36\.jsonl:1: missing key\(s\) sub_aliases, obj_id",
        ),
        ("[1, 2]", r"P36\.jsonl:1: expected a JSON object"),
        (
            line("Q142", "France", "Q90", 0).replace('"sub_aliases": []', '"sub_aliases": "x"'),
            r"P36\.jsonl:1: sub_aliases must be a list",
        ),
    ],
)
def test_inconsistent_lines_are_errors(tmp_path, bad_line, message):
    root = write_bear(tmp_path / "b", facts={**FACTS, "P36": [bad_line]})
    with pytest.raises(BearFormatError, match=message):
        read_bear(root)


def test_bad_entity_id_in_a_line(tmp_path):
    root = write_bear(tmp_path / "b", facts={**FACTS, "P36": [line("Q1> ; DROP", "x", "Q90", 0)]})
    with pytest.raises(InvalidIdError, match=r"P36\.jsonl:1 sub_id"):
        read_bear(root)


def test_duplicate_relation_ids_are_rejected(tmp_path):
    p36, p19 = json.dumps(METADATA["P36"]), json.dumps(METADATA["P19"])
    raw = f'{{"P36": {p36}, "P19": {p19}, "P36": {p36}}}'
    with pytest.raises(BearFormatError, match=r"metadata_relations\.json: duplicate key\(s\) 'P36'"):
        read_bear(write_bear(tmp_path / "b", raw_metadata=raw))


@pytest.mark.parametrize(
    "meta, message",
    [
        (
            {"P36": {**METADATA["P36"], "answer_space_labels": ["Paris"]}},
            r"\[P36\]: answer_space_ids \(2\) and answer_space_labels \(1\) differ",
        ),
        ({"P36": {**METADATA["P36"], "templates": []}}, r"\[P36\]: templates must be a non-empty list"),
        (
            {"P36": {**METADATA["P36"], "answer_space_ids": ["Q90", "Q90"]}},
            r"answer_space_ids has duplicates",
        ),
        ({"P36": {**METADATA["P36"], "answer_space_labels": ["Paris", ""]}}, r"non-empty strings"),
        ({"P36": ["not", "an", "object"]}, r"\[P36\]: expected an object"),
        ({}, r"expected a non-empty object"),
    ],
)
def test_bad_metadata(tmp_path, meta, message):
    root = write_bear(tmp_path / "b", raw_metadata=json.dumps(meta), facts={"P36": FACTS["P36"]})
    with pytest.raises(BearFormatError, match=message):
        read_bear(root)


def test_bad_relation_id(tmp_path):
    meta = json.dumps({"../P36": METADATA["P36"]})
    with pytest.raises(InvalidIdError, match=r"relation id in .*metadata_relations\.json '\.\./P36'"):
        read_bear(write_bear(tmp_path / "b", raw_metadata=meta, facts={}))


def test_missing_and_orphan_files(tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    with pytest.raises(BearFormatError, match=r"missing metadata_relations\.json"):
        read_bear(root)
    write_bear(root, facts={"P36": FACTS["P36"]})
    # an entry without its facts file is skipped with a warning (BEAR-big lists P414, ships no file)
    partial = read_bear(root)
    assert list(partial.relations) == ["P36"] and partial.missing_facts == ("P19",)
    assert partial.warnings() == [
        f"warning: metadata_relations.json [P19]: no P19.jsonl in {root}: relation skipped",
        "warning: 1 relation(s) of metadata_relations.json without a facts file skipped; 1 read",
    ]
    (root / "P36.jsonl").unlink()
    with pytest.raises(BearFormatError, match=r"no facts file \(<relation>\.jsonl\) for any relation"):
        read_bear(root)
    write_bear(root, metadata={"P19": METADATA["P19"]}, facts=FACTS)  # P36.jsonl without an entry
    with pytest.raises(BearFormatError, match=r"P36\.jsonl have no entry"):
        read_bear(root)
    with pytest.raises(BearFormatError, match="not a directory"):
        read_bear(root / "nope")
    with pytest.raises(BearFormatError, match=r"metadata_relations\.json: malformed JSON at line 1"):
        read_bear(write_bear(tmp_path / "c", raw_metadata='{"P36": {'))


def test_a_relation_without_usable_facts_is_an_error(tmp_path):
    root = write_bear(
        tmp_path / "b", metadata={"P36": METADATA["P36"]}, facts={"P36": [line("Q142", "Q142", "Q90", 0)]}
    )
    with pytest.raises(
        BearFormatError,
        match=r"P36\.jsonl: no usable facts \(1 line\(s\) dropped: "
        r"\{'label_is_id': 1\}\)",
    ):
        read_bear(root)
    (root / "P36.jsonl").write_text("\n", "utf-8")
    with pytest.raises(BearFormatError, match="no usable facts"):
        read_bear(root)


# --- the TOML writer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'say "hi"',
        "back\\slash [X]",
        "tab\tnew\nline\r",
        "bell\x07 del\x7f",
        "ünïcødé ✓ 北京",
        '\'single\' and """triple"""',
    ],
)
def test_toml_strings_round_trip(text):
    assert tomllib.loads(f"v = {toml_string(text)}")["v"] == text


def test_catalog_writer_refuses_other_types_and_invalid_entries(tmp_path):
    with pytest.raises(TypeError, match=r"\[P1\] n: cannot write int"):
        catalog_toml({"P1": {"n": 1}})
    with pytest.raises(ValueError, match="missing field"):
        write_catalog_toml({"P1": {"label": "x"}}, tmp_path / "c.toml")
    assert not (tmp_path / "c.toml").exists()


def test_quality_report_sees_the_imported_drops(bear_dir, tmp_path):
    ds = read_bear(bear_dir)
    specs = {rid: parse_entry(rid, entry, "test") for rid, entry in catalog_entries(ds, tmp_path).items()}
    facts = facts_frame(ds)
    instances = pl.concat([instances_from_fixed_space(facts, spec, 13, 0.2) for spec in specs.values()])
    report = quality_report(pl.concat([facts, dropped_frame(ds)], how="diagonal"), instances)
    got = {(r, c): v for r, c, v in report.iter_rows()}
    assert got[("P19", "facts")] == 3 and got[("P36", "facts")] == 2
    assert [got[("P19", f"dropped:{r}")] for r in ("duplicate", "label_is_id", "missing_label")] == [1, 1, 1]
    assert (got[("P19", "options_min")], got[("P36", "options_max")]) == (3, 2)
    assert got[("P19", "duplicate_option_labels")] == 0


# --- issue 12: BEAR as it really is ---------------------------------------------------------------

REAL_BEAR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bear"
needs_real_bear = pytest.mark.skipif(
    not (REAL_BEAR / "metadata_relations.json").is_file(),
    reason=f"BEAR's own files are not at {REAL_BEAR} (../shared/data/bear beside the repository)",
)


@needs_real_bear
def test_the_real_bear_reads_whole_every_line_and_label_as_written():
    ds = read_bear(REAL_BEAR)
    assert len(ds.relations) == 60
    assert sum(len(rel.facts) for rel in ds.relations.values()) == 7731  # every line of the 60 files
    assert [rid for rid, rel in ds.relations.items() if rel.dropped] == []  # "pig" (P105) stays
    assert ds.warnings() == [
        "warning: metadata_relations.json [P103]: template 'The native language of [X] is [Y].' "
        "is given more than once; kept the first"
    ]
    assert len(ds.relations["P103"].templates) == 2
    assert "J.\xa0R.\xa0R. Tolkien" in ds.relations["P50"].answer_space_labels
    assert "Vijayanagara Gadariya  Empire" in ds.relations["P466"].answer_space_labels
    subjects = {f["subject_label"] for rel in ds.relations.values() for f in rel.facts}
    assert {"pig", "T.\xa0S. Eliot", "SS Parthia ", " Crazy"} <= subjects


def test_a_repeated_template_is_dropped_with_one_warning(tmp_path, fresh_catalog):
    first, other = "The capital of [X] is [Y].", "[Y] is the capital of [X]."
    meta = {"P36": {**METADATA["P36"], "templates": [first, other, first, first]}}
    root = write_bear(tmp_path / "b", metadata=meta, facts={"P36": FACTS["P36"]})
    notes = []
    catalog_path, _ = import_bear(root, tmp_path / "home", prefix="", log=notes.append)
    assert fresh_catalog(path=str(catalog_path))["P36"].templates == (first, other)
    assert [n for n in notes if "template" in n] == [
        f"warning: metadata_relations.json [P36]: template {first!r} is given more than once; kept the first"
    ]


def test_short_lower_case_names_are_kept_and_only_ids_dropped(tmp_path):
    meta = {
        "P105": {
            "templates": ["[X] is classified at the [Y] level."],
            "answer_space_ids": ["Q7432", "Q34740"],
            "answer_space_labels": ["species", "genus"],
        }
    }
    facts = {
        "P105": [
            line("Q787", "pig", "Q7432", 0),  # dropped as a "language code" before
            line("Q1", "oud", "Q7432", 0),
            line("Q2", "zh", "Q34740", 1),
            line("Q3", "Q3", "Q34740", 1),  # what an endpoint shows for a missing label: dropped
            line("Q4", "http://www.wikidata.org/entity/Q4", "Q34740", 1),
        ]
    }
    p105 = read_bear(write_bear(tmp_path / "b", metadata=meta, facts=facts)).relations["P105"]
    assert [f["subject_label"] for f in p105.facts] == ["pig", "oud", "zh"]
    assert [(d["subject_id"], d["drop_reason"]) for d in p105.dropped] == [
        ("Q3", "label_is_id"),
        ("Q4", "label_is_id"),
    ]


def test_the_imports_drops_reach_dropped_facts_and_the_quality_table(bear_dir, tmp_path, fresh_catalog):
    catalog_path, _ = import_bear(bear_dir, tmp_path / "home", prefix="", log=lambda _: None)
    spec = fresh_catalog(path=str(catalog_path))["P19"]
    result = relation_facts(spec, None)  # what the wikidata_facts / dropped_facts asset returns
    assert result.facts["subject_id"].to_list() == ["Q1", "Q2", "Q3"]
    assert result.drop_counts == {"duplicate": 1, "label_is_id": 1, "missing_label": 1}
    assert sorted(zip(result.dropped["subject_id"], result.dropped["drop_reason"], strict=True)) == [
        ("Q3", "duplicate"),
        ("Q4", "label_is_id"),
        ("Q5", "missing_label"),
    ]
    instances = instances_from_fixed_space(result.facts, spec, 13, 0.2)
    report = quality_report(pl.concat([result.facts, result.dropped], how="diagonal"), instances)
    got = {c: v for r, c, v in report.iter_rows() if r == "P19"}
    assert (got["facts"], got["dropped:duplicate"], got["dropped:label_is_id"]) == (3, 1, 1)
    assert got["dropped:missing_label"] == 1


def test_labels_are_kept_exactly_as_written(tmp_path, fresh_catalog):
    tolkien, empire = "J.\xa0R.\xa0R. Tolkien", "Vijayanagara Gadariya  Empire"  # BEAR P50, P466
    meta = {
        "P50": {
            "templates": ["[X] was written by [Y]."],
            "answer_space_ids": ["Q892", "Q1"],
            "answer_space_labels": [tolkien, empire],
        }
    }
    facts = {"P50": [line("Q15228", "The\xa0Hobbit", "Q892", 0), line("Q2", "SS Parthia ", "Q1", 1)]}
    root = write_bear(tmp_path / "b", metadata=meta, facts=facts)
    catalog_path, paths = import_bear(root, tmp_path / "home", prefix="", log=lambda _: None)
    spec = fresh_catalog(path=str(catalog_path))["P50"]
    assert spec.answer_space_labels == (tolkien, empire)
    kept, _ = split_stored(pl.read_parquet(paths["P50"]))
    assert sorted(kept["subject_label"]) == ["SS Parthia ", "The\xa0Hobbit"]
    assert sorted(kept["object_label"]) == [tolkien, empire]
    inst = instances_from_fixed_space(kept, spec, 13, 0.0)
    texts = build_statements(inst, templates_frame({"P50": spec}))["text"].to_list()
    assert f"The\xa0Hobbit was written by {tolkien}." in texts
    assert f"SS Parthia  was written by {empire}." in texts


def _one_instance(subject: str, options: list[str]) -> pl.DataFrame:
    labels = {f"Q{i}": lab for i, lab in enumerate(options)}
    row = instance_row("P105", "Q787", subject, ["Q0"], list(labels), labels, split_seed=1, dev_fraction=0)
    return instances_frame([row])


def _templates(*texts: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "relation_id": ["P105"] * len(texts),
            "template_id": [f"P105:c{i}" for i in range(len(texts))],
            "text": list(texts),
            "rank": list(range(len(texts))),
        }
    )


SPAN_COLUMNS = ["text", "capitalized", "subject_start", "subject_end", "object_start", "object_end"]


def test_statements_are_capitalized_like_lm_pub_quiz_only_when_asked():
    inst = _one_instance("pig", ["species", "Genus"])
    templates = _templates("[X] is classified at the [Y] level.", "[Y] is the rank of [X].")
    assert build_statements(inst, templates).select(SPAN_COLUMNS).rows() == [
        ("pig is classified at the species level.", False, 0, 3, 25, 32),
        ("pig is classified at the Genus level.", False, 0, 3, 25, 30),
        ("species is the rank of pig.", False, 23, 26, 0, 7),
        ("Genus is the rank of pig.", False, 21, 24, 0, 5),
    ]
    # lm-pub-quiz 0.3.3, Templater.capitalize: text[0].upper() + text[1:], on by default.
    assert build_statements(inst, templates, capitalize=True).select(SPAN_COLUMNS).rows() == [
        ("Pig is classified at the species level.", True, 0, 3, 25, 32),
        ("Pig is classified at the Genus level.", True, 0, 3, 25, 30),
        ("Species is the rank of pig.", True, 23, 26, 0, 7),
        ("Genus is the rank of pig.", False, 21, 24, 0, 5),  # already upper case: unchanged
    ]


def test_capitalizing_keeps_spans_on_their_words_where_the_length_changes():
    templates = _templates("[X] is classified at the [Y] level.")
    rows = build_statements(_one_instance("ßeta", ["species"]), templates, capitalize=True)
    assert rows.select(SPAN_COLUMNS).rows() == [
        ("SSeta is classified at the species level.", True, 0, 5, 27, 34)
    ]
    rows = build_statements(_one_instance(" Crazy", ["species"]), templates, capitalize=True)  # BEAR P175
    assert rows.select(SPAN_COLUMNS).rows() == [
        (" Crazy is classified at the species level.", False, 0, 6, 28, 35)
    ]


def test_statements_are_capitalized_by_default_as_in_lm_pub_quiz():
    assert ProbeOptions().capitalize_statements is True
    assert ProbeOptions(capitalize_statements=False).capitalize_statements is False


# --- issue 29: Kissling et al.'s templates, BEAR-big, --subset lite, BEAR's topic domains ---------

# One relation as Kissling et al.'s file has it (P412 is one whose markers are not the first
# paraphrase with a word inserted), cut to 2 paraphrases + 3 markers, on P36's tiny answer space.
KISSLING_P36 = [
    "[X]'s voice type is [Y].",
    "The voice type of [X] is [Y].",
    "[X] is possibly of voice type [Y].",
    "[X] is certainly of voice type [Y].",
    "I'm 50% confident [X]'s voice type is [Y].",
]


def write_templates_file(path, relations, templates=None, **answer_space):
    data = {
        rid: {
            "templates": (templates or {}).get(rid, KISSLING_P36),
            "answer_space_ids": answer_space.get(
                "ids", METADATA.get(rid, METADATA["P36"])["answer_space_ids"]
            ),
            "answer_space_labels": answer_space.get(
                "labels", METADATA.get(rid, METADATA["P36"])["answer_space_labels"]
            ),
        }
        for rid in relations
    }
    path.write_text(json.dumps(data), "utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "variant"),
    [
        ("[X] is possibly of voice type [Y].", "possibly"),  # not the parent with a word inserted
        ("The home venue of the [X] is certainly the [Y].", "certainly"),
        ("I'm 0% confident [X]'s voice type is [Y].", "numeric-0"),
        ("I'm 100% confident the capital of [X] is [Y].", "numeric-100"),
        ("The voice type of [X] is [Y].", None),  # a paraphrase
        ("[X] Possibly sings [Y].", "possibly"),  # any case, as a word
        ("[X] impossibly sings [Y].", None),  # inside another word: no marker
    ],
)
def test_a_marker_template_is_read_from_its_text(text, variant):
    assert marker_variant_of(text, "[X]'s voice type is [Y].") == variant


def test_a_marker_word_the_parent_has_is_no_marker_and_odd_markers_are_errors():
    assert marker_variant_of("[X] certainly was in [Y].", "[X] was certainly in [Y].") is None
    with pytest.raises(TemplateError, match=r"here: .*says 30%, not one of the numeric marker levels"):
        marker_variant_of("I'm 30% confident [X] is in [Y].", "[X] is in [Y].", "here")
    with pytest.raises(TemplateError, match=r"more than one marker \(I'm 50% confident, possibly\)"):
        marker_variant_of("I'm 50% confident [X] is possibly in [Y].", "[X] is in [Y].")
    with pytest.raises(TemplateError, match=r"more than one marker \(certainly, possibly\)"):
        marker_variant_of("[X] is certainly, possibly in [Y].", "[X] is in [Y].")


def test_a_templates_file_splits_into_paraphrases_and_the_markers_of_the_first():
    assert split_templates("P36", KISSLING_P36, "f [P36]") == (
        ("[X]'s voice type is [Y].", "The voice type of [X] is [Y]."),
        (
            "[X] is possibly of voice type [Y].",
            "[X] is certainly of voice type [Y].",
            "I'm 50% confident [X]'s voice type is [Y].",
        ),
        ("possibly", "certainly", "numeric-50"),
    )


@pytest.mark.parametrize(
    ("templates", "message"),
    [
        (
            ["I'm 0% confident [X] is [Y].", "[X] is [Y]."],
            r"templates\[0\].*the first template must be a paraphrase",
        ),
        (
            ["[X] is in [Y].", "[X] is possibly in [Y].", "[Y] holds [X]."],
            r"templates\[2\]: '\[Y\] holds \[X\].' has no marker but follows the marker templates",
        ),
        (
            ["[X] is in [Y].", "[X] is possibly in [Y].", "[X] possibly is in [Y]."],
            r"templates\[2\]: a second 'possibly' marker template \(the first is templates\[1\]\)",
        ),
        (
            ["[X] is in [Y].", "[Y] holds [X].", "[X] is in [Y]."],
            r"templates\[2\]: .* repeats templates\[0\]",
        ),
        (["[X] is in [Y].", "I'm 60% confident [X] is in [Y]."], r"templates\[1\]: .*says 60%"),
        (["[X] is in [Y].", "[X] is possibly in."], r"templates\[1\]: .*must contain \[Y\] exactly once"),
    ],
)
def test_odd_template_lists_are_refused_naming_relation_and_index(templates, message):
    with pytest.raises(ValueError, match=r"f \[P36\] " + message):
        split_templates("P36", templates, "f [P36]")


def test_import_with_a_templates_file_gives_curated_templates_and_explicit_markers(
    bear_dir, tmp_path, fresh_catalog
):
    path = write_templates_file(tmp_path / "kissling.json", ["P36", "P19", "P99"])  # P99: not imported
    notes = []
    catalog_path, _ = import_bear(
        bear_dir, tmp_path / "home", prefix="", relations=["P36"], templates=path, log=notes.append
    )
    assert notes[0] == "BEAR P36 -> P36: 2 facts, 2 options, 2 templates + 3 markers, dropped none"
    entry = tomllib.loads(catalog_path.read_text("utf-8"))["P36"]
    assert entry["templates"] == KISSLING_P36[:2]
    assert entry["marker_templates"] == KISSLING_P36[2:]
    assert entry["marker_variants"] == ["possibly", "certainly", "numeric-50"]
    spec = fresh_catalog(path=str(catalog_path))["P36"]
    assert spec.templates == tuple(KISSLING_P36[:2]) and spec.marker_variants == (
        "possibly",
        "certainly",
        "numeric-50",
    )

    # Every existing marker estimator reads these: the catalog's markers, verbatim, on c0 only
    # (the paper's setting); c1 gets none, not even rule-made ones.
    table = curated_and_variants(templates_frame({"P36": spec}), [4])
    markers = table.filter(pl.col("kind").str.starts_with("marker")).sort("template_id")
    assert markers.select("template_id", "text", "kind", "parent_id", "variant").rows() == [
        ("P36:c0:certainly", KISSLING_P36[3], "marker_verbal", "P36:c0", "certainly"),
        ("P36:c0:numeric-50", KISSLING_P36[4], "marker_numeric", "P36:c0", "numeric-50"),
        ("P36:c0:possibly", KISSLING_P36[2], "marker_verbal", "P36:c0", "possibly"),
    ]
    chosen = run_templates(table, None, ["curated", "marker_verbal", "marker_numeric"], 5, [4])
    assert chosen["template_id"].to_list() == [
        "P36:c0",
        "P36:c0:certainly",
        "P36:c0:numeric-50",
        "P36:c0:possibly",
        "P36:c1",
    ]
    # a relation without explicit markers keeps the rule-made ones on every template
    packaged = curated_and_variants(templates_frame({"P36": load_catalog()["P36"]}), [4])
    assert packaged.filter(pl.col("kind") == "marker_numeric")["parent_id"].n_unique() == 5


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            {"ids": ["Q90", "Q65"]},
            r"\[P36\]: answer_space_ids differs from the imported directory's .* \(first difference at "
            r"\[1\]: 'Q65' there, 'Q64' here\)",
        ),
        ({"labels": ["Paris"]}, r"\[P36\]: answer_space_labels differs .* \(1 entries there, 2 here\)"),
        ({"ids": None}, r"\[P36\]: answer_space_ids differs .* \(the templates file gives None\)"),
    ],
)
def test_a_templates_file_with_another_answer_space_is_refused(bear_dir, tmp_path, space, message):
    path = write_templates_file(tmp_path / "k.json", ["P36"], **space)
    with pytest.raises(BearFormatError, match=message):
        import_bear(bear_dir, tmp_path / "home", relations=["P36"], templates=path, log=lambda _: None)
    assert not (tmp_path / "home").exists()


def test_a_templates_file_must_have_every_imported_relation(bear_dir, tmp_path):
    path = write_templates_file(tmp_path / "k.json", ["P36"])
    with pytest.raises(
        BearFormatError, match=r"k.json \[P19\]: the templates file has no entry for relation P19"
    ):
        import_bear(bear_dir, tmp_path / "home", templates=path, log=lambda _: None)


def _entry(**fields):
    return {
        "label": "l",
        "kind": "n_to_1",
        "object_type": "t",
        "source": "rule",
        "templates": KISSLING_P36[:2],
    } | fields


def test_a_user_catalog_can_give_explicit_markers_and_domains():
    spec = parse_entry(
        "X1",
        _entry(
            marker_templates=KISSLING_P36[2:], marker_variants=["possibly", "certainly", "numeric-50"],
            bear_domains=["Arts", "Biographical"],
        ),
        "user.toml",
    )  # fmt: skip
    assert spec.marker_templates == tuple(KISSLING_P36[2:]) and spec.bear_domains == ("Arts", "Biographical")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"marker_templates": KISSLING_P36[2:4], "marker_variants": ["possibly"]},
            "marker_templates has 2 entries but marker_variants has 1",
        ),
        (
            {"marker_templates": KISSLING_P36[2:3], "marker_variants": ["perhaps"]},
            r"marker_variants\[0\] 'perhaps' is not one of",
        ),
        (
            {"marker_templates": KISSLING_P36[3:4], "marker_variants": ["possibly"]},
            r"marker_templates\[0\]: .* reads as 'certainly' .* but marker_variants\[0\] says 'possibly'",
        ),
        (
            {"marker_templates": KISSLING_P36[1:2], "marker_variants": ["possibly"]},
            r"marker_templates\[0\]: .* is one of the templates",
        ),
        (
            {
                "marker_templates": ["[X] is possibly [Y]"],
                "marker_variants": ["possibly"],
                "marked_templates": ["[X]'s voice type is [M] [Y].", "The voice type of [X] is [M] [Y]."],
            },
            "marker_templates and marked_templates both say where markers go",
        ),
        (
            {"marker_templates": "[X] [Y]", "marker_variants": []},
            "marker_templates must be a list of non-empty",
        ),
        ({"bear_domains": "Arts"}, "bear_domains must be a list of non-empty strings, got 'Arts'"),
        ({"bear_domains": ["Arts", "Arts"]}, "bear_domains has duplicates"),
    ],
)
def test_bad_explicit_markers_and_domains_name_relation_and_field(fields, message):
    with pytest.raises(ValueError, match=r"user.toml \[X1\]"):
        parse_entry("X1", _entry(**fields), "user.toml")
    with pytest.raises(ValueError, match=message):
        parse_entry("X1", _entry(**fields), "user.toml")


KISSLING = REAL_BEAR.parent / "kissling-templates" / "metadata_relations.json"


@pytest.mark.skipif(
    not (REAL_BEAR / "metadata_relations.json").is_file() or not KISSLING.is_file(),
    reason=f"BEAR's files or Kissling et al.'s templates are not at {REAL_BEAR} and {KISSLING}",
)
def test_kissling_templates_on_the_real_bear_are_5_paraphrases_and_7_markers_each():
    ds = with_templates_file(read_bear(REAL_BEAR), KISSLING)
    assert len(ds.relations) == 60 and ds.warnings() == []
    assert {(len(r.templates), r.marker_variants) for r in ds.relations.values()} == {
        (5, ("possibly", "certainly", "numeric-0", "numeric-25", "numeric-50", "numeric-75", "numeric-100"))
    }
    assert ds.relations["P103"].templates[2] == "The first language of [X] is [Y]."  # not BEAR's repeat
    assert ds.relations["P6886"].marker_templates[:3] == (
        "The works of [X] were possibly primarily written in [Y].",
        "The works of [X] were certainly primarily written in [Y].",
        "I'm 0% confident [X]'s works were primarily written in [Y].",
    )


# BEAR-big: no answer space in the metadata, no answer_idx in the lines. P36's lines 1 and 3 are
# not in the lite selection, so Q65 (Rome) is in BEAR-big's P36 space but not in lite's; P99 is
# not part of lite at all.
def big_line(sub_id, sub_label, obj_id, obj_label, aliases=()):
    return json.dumps(
        {
            "sub_id": sub_id,
            "sub_label": sub_label,
            "sub_aliases": list(aliases),
            "obj_id": obj_id,
            "obj_label": obj_label,
        },
        ensure_ascii=False,
    )


BIG_FACTS = {
    "P36": [
        big_line("Q183", "Germany", "Q64", "Berlin", ["Deutschland", "BRD"]),
        big_line("Q38", "Italy", "Q220", "Rome", ["Italia"]),
        big_line("Q142", "France", "Q90", "Paris", ["République française"]),
        big_line("Q1", "Q1", "Q90", "Paris"),  # label_is_id: dropped, not lost
        big_line("Q39", "Switzerland", "Q70", "Bern"),
    ],
    "P19": [
        big_line("Q1", "Pelé", "Q174", "São Paulo", ["O Rei"]),
        big_line("Q2", "Ursula Andress", "Q72", "Zürich"),
        big_line("Q3", "Édith Piaf", "Q90", "Paris", ["La Môme"]),
    ],
    "P99": [big_line("Q5", "Five", "Q6", "Six")],
}
LITE = {"P36": [0, 2, 3, 4], "P19": [2, 0]}
# What BEAR itself has for those lines: the same lines with answer_idx into the space of the
# kept lines' objects in order of first appearance.
LITE_METADATA = {
    "P36": {"templates": ["The capital of [X] is [Y]."], "answer_space_ids": ["Q64", "Q90", "Q70"],
            "answer_space_labels": ["Berlin", "Paris", "Bern"]},
    "P19": {"templates": ["[X] was born in [Y]."], "answer_space_ids": ["Q174", "Q90"],
            "answer_space_labels": ["São Paulo", "Paris"]},
}  # fmt: skip
LITE_FACTS = {
    "P36": [
        line("Q183", "Germany", "Q64", 0, "Berlin", ["Deutschland", "BRD"]),
        line("Q142", "France", "Q90", 1, "Paris", ["République française"]),
        line("Q1", "Q1", "Q90", 1, "Paris"),
        line("Q39", "Switzerland", "Q70", 2, "Bern"),
    ],
    "P19": [
        line("Q1", "Pelé", "Q174", 0, "São Paulo", ["O Rei"]),
        line("Q3", "Édith Piaf", "Q90", 1, "Paris", ["La Môme"]),
    ],
}


def write_bear_big(root, lite=LITE, info=None):
    meta = {
        rid: {"templates": LITE_METADATA.get(rid, {"templates": ["[X] x [Y]."]})["templates"]}
        for rid in BIG_FACTS
    }
    write_bear(root, metadata=meta, facts=BIG_FACTS)
    if lite is not None:
        (root.parent / "bear_lite_indices.json").write_text(
            json.dumps(lite), "utf-8"
        )  # the repository's root
    if info is not None:
        (root / "relation_info.json").write_text(json.dumps(info), "utf-8")
    return root


def test_bear_big_gets_the_objects_of_its_instances_as_answer_space(tmp_path):
    ds = read_bear(write_bear_big(tmp_path / "BEAR-big", lite=None))
    p36 = ds.relations["P36"]
    assert p36.derived_space
    # first appearance in the file, each with its first line's label (lm-pub-quiz's order)
    assert p36.answer_space_ids == ("Q64", "Q220", "Q90", "Q70")
    assert p36.answer_space_labels == ("Berlin", "Rome", "Paris", "Bern")
    assert [f["subject_id"] for f in p36.facts] == ["Q183", "Q38", "Q142", "Q39"]
    assert [(d["line"], d["drop_reason"]) for d in p36.dropped] == [(4, "label_is_id")]
    assert p36.facts[0]["aliases"] == ("Deutschland", "BRD")  # sub_aliases kept
    frame = facts_frame(ds).filter(pl.col("subject_id") == "Q183")
    assert json.loads(frame["qualifiers"][0]) == {"sub_aliases": ["Deutschland", "BRD"]}
    assert set(ds.relations) == {"P36", "P19", "P99"}


def test_bear_big_answer_idx_may_be_given_and_must_then_agree(tmp_path):
    facts = {"P36": [line("Q183", "Germany", "Q64", 0, "Berlin"), line("Q38", "Italy", "Q220", 1, "Rome")]}
    meta = {"P36": {"templates": ["The capital of [X] is [Y]."]}}
    ds = read_bear(write_bear(tmp_path / "ok", metadata=meta, facts=facts))
    assert ds.relations["P36"].answer_space_ids == ("Q64", "Q220")
    facts["P36"][1] = line("Q38", "Italy", "Q220", 0, "Rome")
    with pytest.raises(BearFormatError, match=r"P36.jsonl:2: answer_idx 0 points to Q64 but obj_id is Q220"):
        read_bear(write_bear(tmp_path / "bad", metadata=meta, facts=facts))
    facts["P36"] = [json.dumps({**json.loads(big_line("Q38", "Italy", "Q220", " ")), "answer_idx": 0})]
    with pytest.raises(
        BearFormatError, match=r"P36.jsonl:1: obj_label ' ' of Q220 must be a non-empty string"
    ):
        read_bear(write_bear(tmp_path / "nolabel", metadata=meta, facts=facts))


def test_the_lite_subset_of_bear_big_is_the_matching_bear(tmp_path, fresh_catalog):
    big = write_bear_big(tmp_path / "repo" / "BEAR-big")
    bear = write_bear(tmp_path / "repo" / "BEAR", metadata=LITE_METADATA, facts=LITE_FACTS)
    ds = read_bear(big, subset="lite")
    assert list(ds.relations) == ["P36", "P19"] and ds.name == "BEAR-big-lite"  # P99 is not in lite
    assert ds.relations["P36"].answer_space_labels == ("Berlin", "Paris", "Bern")  # no Rome
    assert [d["line"] for d in ds.relations["P36"].dropped] == [4]  # the file's line number
    lite_catalog, lite_paths = import_bear(big, tmp_path / "lite", subset="lite", log=lambda _: None)
    bear_catalog, bear_paths = import_bear(bear, tmp_path / "bear", log=lambda _: None)
    assert list(lite_paths) == list(bear_paths) == ["bear-P36", "bear-P19"]
    for rid in lite_paths:
        lite, bear_facts = (pl.read_parquet(p[rid]).drop("source") for p in (lite_paths, bear_paths))
        assert lite.equals(bear_facts), rid  # facts, drops and aliases alike
    entries = [tomllib.loads(c.read_text("utf-8")) for c in (lite_catalog, bear_catalog)]
    for rid in lite_paths:
        same = ("templates", "answer_space_ids", "answer_space_labels", "kind")
        assert {k: entries[0][rid][k] for k in same} == {k: entries[1][rid][k] for k in same}


@pytest.mark.parametrize(
    ("lite", "message"),
    [
        (
            {"P36": [0, 5]},
            r"bear_lite_indices.json \[P36\]: index 5 is not a line of .*P36.jsonl \(5 instance lines",
        ),
        ({"P36": [-1]}, r"\[P36\]: index -1 is not a line"),
        ({"P36": [0, 2, 0]}, r"\[P36\]: index 0 is listed more than once"),
        ({"P7": [0]}, r"bear_lite_indices.json \[P7\]: no such relation in"),
        ({"P36": 3}, r"\[P36\]: expected a list of line indices, got 3"),
    ],
)
def test_a_bad_lite_selection_names_relation_and_index(tmp_path, lite, message):
    big = write_bear_big(tmp_path / "repo" / "BEAR-big", lite=lite)
    with pytest.raises(BearFormatError, match=message):
        import_bear(big, tmp_path / "home", subset="lite", log=lambda _: None)
    assert not (tmp_path / "home").exists()


def test_lite_without_its_indices_file_says_where_it_looked(tmp_path):
    big = write_bear_big(tmp_path / "repo" / "BEAR-big", lite=None)
    with pytest.raises(
        BearFormatError, match=r"--subset lite needs bear_lite_indices.json .* in .*BEAR-big or .*repo"
    ):
        read_bear(big, subset="lite")
    with pytest.raises(ValueError, match=r"--subset 'big' is not one of \['lite'\]"):
        read_bear(big, subset="big")


def test_bear_domains_reach_the_catalog_and_the_relations_table(tmp_path, fresh_catalog):
    info = {"P36": {"domains": ["Geographic", "Political"]}, "P6": {"domains": ["Political"]}}
    big = write_bear_big(tmp_path / "BEAR-big", lite=None, info=info)
    catalog_path, _ = import_bear(big, tmp_path / "home", prefix="", log=lambda _: None)
    entries = tomllib.loads(catalog_path.read_text("utf-8"))
    assert entries["P36"]["bear_domains"] == ["Geographic", "Political"]
    assert "bear_domains" not in entries["P19"]  # relation_info.json does not list it
    table = relations_frame(fresh_catalog(path=str(catalog_path)))
    domains = dict(table.select("relation_id", "bear_domains").iter_rows())
    assert domains["P36"] == ["Geographic", "Political"] and domains["P19"] == []
    (big / "relation_info.json").write_text(json.dumps({"P36": {"domains": "Geographic"}}), "utf-8")
    with pytest.raises(BearFormatError, match=r"relation_info.json \[P36\]: domains must be a list"):
        read_bear(big)


@pytest.mark.skipif(
    not (REAL_BEAR / "relation_info.json").is_file(),
    reason=f"BEAR's relation_info.json is not in {REAL_BEAR}",
)
def test_packaged_relations_carry_bears_domains_where_bear_has_the_relation():
    info = json.loads((REAL_BEAR / "relation_info.json").read_text("utf-8"))
    packaged = merge_catalogs(
        [(tomllib.loads((PACKAGED_DIR / "relations.toml").read_text("utf-8")), "relations.toml")]
    )
    assert {rid: list(s.bear_domains) for rid, s in packaged.items()} == {
        rid: info.get(rid, {"domains": []})["domains"] for rid in packaged
    }
    assert packaged["P37"].bear_domains == ("Political", "Geographic")


def test_the_cli_imports_lite_with_a_templates_file(tmp_path, capsys):
    from assets.cli import build_parser

    big = write_bear_big(tmp_path / "repo" / "BEAR-big")
    templates = tmp_path / "templates.json"
    space = {
        rid: {k: meta[k] for k in ("answer_space_ids", "answer_space_labels")}
        for rid, meta in LITE_METADATA.items()
    }
    templates.write_text(
        json.dumps({rid: {"templates": KISSLING_P36, **s} for rid, s in space.items()}), "utf-8"
    )
    args = build_parser().parse_args(
        ["--home", str(tmp_path / "home"), "dataset", "import-bear", str(big), "--subset", "lite",
         "--templates", str(templates)]
    )  # fmt: skip
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "BEAR P36 -> bear-P36: 3 facts, 3 options (the objects of its instances), 2 templates + 3 markers, "
        "dropped {'label_is_id': 1}",
        "BEAR P19 -> bear-P19: 2 facts, 2 options (the objects of its instances), 2 templates + 3 markers, "
        "dropped none",
    ]
