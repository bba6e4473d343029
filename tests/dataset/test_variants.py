import re

import polars as pl
import pytest

from kcal_pipeline.dataset.instances.probe import templates_frame
from kcal_pipeline.dataset.instances.variants import (
    BASE_KINDS,
    NUMERIC_LEVELS,
    VARIANT_COLUMNS,
    VERBAL_MARKERS,
    marker_position,
    marker_variants,
    perturbation_variants,
    subsample_answer_space,
    verbal_marker,
)
from kcal_pipeline.dataset.relations import load_catalog, parse_catalog
from kcal_pipeline.dataset.templates import MARKER_SLOT, TemplateError, check_template, fill

EXTRA = [  # edge shapes: object first, slots at both ends, adjacent slots, no long word, unicode
    "[Y] is where [X] keeps its government.",
    "[X] [Y].",
    "In [X] one says [Y]!",
    "Die Hauptstadt von [X] ist [Y].",
    "[X]: [Y]",
    "Ça, c'est [X] et [Y].",
    "THE capital of [X] is [Y].",
]
SUBJECTS = ["France", "Côte d'Ivoire", "São Tomé and Príncipe", "[Y]", "Ελλάδα", " spaced  out ", "日本"]
OBJECTS = ["Paris", "Yamoussoukro", "[X]", "Αθήνα", "東京", "certainly", "I'm 50% confident that"]


def _templates() -> pl.DataFrame:
    curated = templates_frame(load_catalog())
    extra = pl.DataFrame(
        {
            "relation_id": "PX",
            "template_id": [f"PX:c{i}" for i in range(len(EXTRA))],
            "text": EXTRA,
            "kind": "curated",
            "source": "test",
            "rank": range(len(EXTRA)),
        },
        schema_overrides={"rank": pl.Int32},
    )
    return pl.concat([curated, extra], how="diagonal")  # the extra ones have no marked form


TEMPLATES = _templates()
PARENTS = dict(TEMPLATES.select("template_id", "text").iter_rows())
MARKED = dict(TEMPLATES.select("template_id", "marked_text").iter_rows())
N_BASE = TEMPLATES.filter(pl.col("kind").is_in(BASE_KINDS)).height


SEEDS = (4, 44, 99)  # Zhao et al.'s, the default perturbation_seeds


def _all_variants(seeds=SEEDS) -> pl.DataFrame:
    return pl.concat([marker_variants(TEMPLATES), perturbation_variants(TEMPLATES, seeds)])


def _skeleton(text: str) -> str:
    """The template text with the slots marked, so edits can be compared outside them."""
    return text.replace("[X]", "\x01").replace("[Y]", "\x02")


def test_variant_table_shape_and_ids():
    variants = _all_variants()
    assert variants.columns == VARIANT_COLUMNS
    assert variants["template_id"].n_unique() == variants.height
    assert set(variants["kind"]) == {"marker_verbal", "marker_numeric", "perturbation"}
    assert set(variants["source"]) == {"variant"}
    for row in variants.iter_rows(named=True):
        check_template(row["text"], row["template_id"])
        seed = row["perturbation_seed"]  # the random perturbations: one draw per seed, its own id
        assert row["template_id"] == f"{row['parent_id']}:{row['variant']}" + (f"-s{seed}" if seed else "")
        assert (seed is not None) == (row["variant"] in ("extra-space", "typo"))
    # Every base template gets the numeric markers; the verbal ones go to every curated catalog
    # template (all have a marked form) and to 2 of the 7 extra ones, whose only place for a
    # marker is after "is" (PX:c0, PX:c6); the other 5 have no copula, modal or verb after a slot.
    verbal_parents = N_BASE - len(EXTRA) + 2
    expected = N_BASE * len(NUMERIC_LEVELS) + verbal_parents * len(VERBAL_MARKERS)
    assert marker_variants(TEMPLATES).height == expected


def test_variants_never_touch_subject_or_object():
    for row in _all_variants().iter_rows(named=True):
        for subject in SUBJECTS:
            for obj in OBJECTS:
                filled = fill(row["text"], subject, obj)
                assert filled.text[slice(*filled.subject_span)] == subject
                assert filled.text[slice(*filled.object_span)] == obj


def _diff(parent: str, child: str) -> tuple[str, str]:
    """The differing middle of two strings (common prefix and suffix removed)."""
    i = 0
    while i < min(len(parent), len(child)) and parent[i] == child[i]:
        i += 1
    j = 0
    while j < min(len(parent), len(child)) - i and parent[-1 - j] == child[-1 - j]:
        j += 1
    return parent[i : len(parent) - j], child[i : len(child) - j]


def test_non_slot_text_changes_only_as_the_variant_says():
    for row in _all_variants().iter_rows(named=True):
        parent, child, variant = _skeleton(PARENTS[row["parent_id"]]), _skeleton(row["text"]), row["variant"]
        if variant == "extra-space":
            old, new = _diff(parent, child)
            assert old == "" and new == " " and len(child) == len(parent) + 1
            i = child.index("  ")
            if re.search(r"[^\W\d_] [^\W\d_]", parent):  # prefer a space between two template words
                assert child[i - 1].isalpha() and child[i + 2].isalpha()
        elif variant == "typo":
            assert len(child) == len(parent)
            (i,) = [k for k, (a, b) in enumerate(zip(parent, child, strict=True)) if a != b]
            word = next(m for m in re.finditer(r"[^\W\d_]+", parent) if m.start() < i < m.end())
            assert len(word.group()) >= 4 and child[i].isalpha()  # inside, not first, letter of a word
        elif variant.startswith("numeric-"):
            pct = variant.removeprefix("numeric-")
            assert child.startswith(f"I'm {pct}% confident that ")
            rest = child.removeprefix(f"I'm {pct}% confident that ")
            assert rest == parent or rest == parent[0].lower() + parent[1:]
        else:  # a verbal marker: inserted once, inside the clause, nothing else changed
            assert variant in VERBAL_MARKERS and f" {variant} " in child
            assert child.replace(f"{variant} ", "", 1) == parent
            marked = MARKED[row["parent_id"]]
            if marked is not None:  # the curated place
                assert row["text"] == marked.replace(MARKER_SLOT, variant)


def test_markers_read_fluently():
    rows = dict(marker_variants(TEMPLATES).select("template_id", "text").iter_rows())
    assert rows["P36:c0:certainly"] == "The capital of [X] is certainly [Y]."
    assert rows["P36:c4:possibly"] == "[X] possibly has its capital in [Y]."
    assert rows["P20:c0:certainly"] == "[X] certainly died in [Y]."  # the seed's example
    assert rows["P20:c4:possibly"] == "In [Y], [X] possibly died."
    assert rows["P30:c4:certainly"] == "[X] can certainly be found in [Y]."
    assert rows["P37:c4:possibly"] == "People in [X] possibly officially speak [Y]."
    assert rows["PX:c0:certainly"] == "[Y] is certainly where [X] keeps its government."
    assert "PX:c1:certainly" not in rows and "PX:c2:possibly" not in rows  # no place: no variant
    assert rows["P36:c0:numeric-75"] == "I'm 75% confident that the capital of [X] is [Y]."
    assert rows["P36:c1:numeric-0"] == "I'm 0% confident that [Y] is the capital of [X]."
    assert rows["PX:c6:numeric-50"] == "I'm 50% confident that THE capital of [X] is [Y]."


def test_no_verbal_marker_opens_a_sentence():
    verbal = marker_variants(TEMPLATES).filter(pl.col("kind") == "marker_verbal")
    assert verbal.height > 0
    for text in verbal["text"]:
        first = text.split()[0].strip(",").lower()
        assert first not in VERBAL_MARKERS, text


def test_every_catalog_template_has_a_hand_marked_form_inside_the_clause():
    catalog = load_catalog()
    for rid, spec in catalog.items():
        assert len(spec.marked_templates) == len(spec.templates), rid
        for template, marked in zip(spec.templates, spec.marked_templates, strict=True):
            check_template(marked, rid)  # [X] and [Y] exactly once
            assert marked.count(MARKER_SLOT) == 1 and not marked.startswith(MARKER_SLOT), marked
            assert marked.replace(f"{MARKER_SLOT} ", "", 1) == template
            for marker in VERBAL_MARKERS:
                check_template(verbal_marker(template, marker, marked), rid)


ENTRY = {"label": "c", "kind": "n_to_1", "property": "P20", "object_type": "city"}


@pytest.mark.parametrize(
    ("marked", "message"),
    [
        (["[X] [M] died in [Y].", "[X] [M] passed away in [Y]."], r"has 2 entries but templates has 1"),
        (["[X] died in [Y]."], r"marked_templates\[0\].*must contain \[M\] exactly once \(found 0\)"),
        (["[X] [M] [M] died in [Y]."], r"marked_templates\[0\].*\[M\] exactly once \(found 2\)"),
        (["[M] [X] died in [Y]."], r"marked_templates\[0\].*puts \[M\] first"),
        (["[X] [M] died in [Y] and [X]."], r"marked_templates\[0\].*\[X\] exactly once \(found 2\)"),
        (["[X] [M] perished in [Y]."], r"marked_templates\[0\].*with '\[M\] ' inserted once"),
        ("[X] [M] died in [Y].", r"marked_templates must be a list of strings"),
    ],
)
def test_bad_marked_templates_are_refused_naming_relation_and_index(marked, message):
    entry = {**ENTRY, "templates": ["[X] died in [Y]."], "marked_templates": marked}
    with pytest.raises((ValueError, TemplateError), match=rf"\[P20\].*{message}"):
        parse_catalog({"P20": entry}, origin="test.toml")


def test_marked_templates_are_optional_for_other_catalogs():
    spec = parse_catalog({"P20": {**ENTRY, "templates": ["[X] died in [Y]."]}})["P20"]
    assert spec.marked_templates == ()


def test_rule_places_a_marker_after_a_copula_or_before_a_verb_after_a_slot_or_nowhere():
    # generated (or imported) templates have no hand-marked form
    assert verbal_marker("[Y] serves as the capital of [X].", "certainly") == (
        "[Y] certainly serves as the capital of [X]."
    )
    assert verbal_marker("[X] can be found in [Y].", "possibly") == "[X] can possibly be found in [Y]."
    assert verbal_marker("The seat of [X] was [Y].", "possibly") == "The seat of [X] was possibly [Y]."
    assert verbal_marker("In [Y], [X] died.", "certainly") == "In [Y], [X] certainly died."
    assert verbal_marker("[X] won [Y].", "certainly") == "[X] certainly won [Y]."
    for nowhere in ("In [X] one says [Y]!", "[X]: [Y]", "[X] and its [Y].", "Capital: [X], [Y]."):
        assert marker_position(nowhere) is None and verbal_marker(nowhere, "certainly") is None
    generated = pl.DataFrame(
        {
            "relation_id": "PX",
            "template_id": ["PX:g0", "PX:g1"],
            "text": ["[X] [Y].", "[X] is near [Y]."],
            "kind": "generated",
            "source": "test",
            "rank": [0, 1],
        },
        schema_overrides={"rank": pl.Int32},
    )
    notes = []
    rows = marker_variants(generated, log=notes.append)
    verbal = rows.filter(pl.col("kind") == "marker_verbal")
    assert verbal["text"].to_list() == ["[X] is certainly near [Y].", "[X] is possibly near [Y]."]
    assert rows.filter(pl.col("kind") == "marker_numeric").height == 2 * len(NUMERIC_LEVELS)
    assert notes == [
        "1 template(s) without a marked form got no verbal marker variant (no copula, modal or "
        "verb after a slot to place it by): PX:g0"
    ]


def test_perturbations_are_deterministic_and_seeded():
    a, b = perturbation_variants(TEMPLATES, [5]), perturbation_variants(TEMPLATES, [5])
    assert a.equals(b)
    assert not a.equals(perturbation_variants(TEMPLATES, [6]).with_columns(perturbation_seed=pl.lit(5)))
    alone = perturbation_variants(TEMPLATES.filter(pl.col("template_id") == "P36:c0"), [5])
    assert alone.equals(a.filter(pl.col("parent_id") == "P36:c0"))  # independent of other templates


def test_three_seeds_give_three_distinct_reproducible_draws():
    p17 = TEMPLATES.filter(pl.col("template_id") == "P17:c0")  # "[X] is a city in [Y]."
    rows = perturbation_variants(p17, SEEDS)
    assert rows.select("template_id", "variant", "perturbation_seed", "text").rows() == [
        ("P17:c0:extra-space-s4", "extra-space", 4, "[X] is  a city in [Y]."),
        ("P17:c0:typo-s4", "typo", 4, "[X] is a citt in [Y]."),
        ("P17:c0:extra-space-s44", "extra-space", 44, "[X] is a city  in [Y]."),
        ("P17:c0:typo-s44", "typo", 44, "[X] is a ciyy in [Y]."),
        ("P17:c0:extra-space-s99", "extra-space", 99, "[X] is a  city in [Y]."),
        ("P17:c0:typo-s99", "typo", 99, "[X] is a citu in [Y]."),
    ]
    assert rows.equals(perturbation_variants(p17, SEEDS))
    # two seeds may draw the same edit of a short template (P36:c0 has few letters to mistype);
    # each draw keeps its own id all the same
    p36 = perturbation_variants(TEMPLATES.filter(pl.col("template_id") == "P36:c0"), SEEDS)
    assert p36.filter(pl.col("variant") == "typo")["template_id"].to_list() == [
        "P36:c0:typo-s4", "P36:c0:typo-s44", "P36:c0:typo-s99",
    ]  # fmt: skip
    # each seed's draw is the one a run with that seed alone makes: seeds do not interact
    every = perturbation_variants(TEMPLATES, SEEDS)
    for seed in SEEDS:
        alone = perturbation_variants(TEMPLATES, [seed]).filter(pl.col("perturbation_seed") == seed)
        assert alone.equals(every.filter(pl.col("perturbation_seed") == seed))


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        (13, r"perturbation_seeds must be a list of ints, got 13"),
        ([4, "44"], r"must be a list of ints, got \[4, '44'\]"),
        ([4, 4], r"distinct non-negative ints \(at least one\), got \[4, 4\]"),
        ([-1], r"got \[-1\]"),
        ([], r"got \[\]"),
    ],
)
def test_bad_perturbation_seeds_are_named(seeds, message):
    with pytest.raises(ValueError, match=message):
        perturbation_variants(TEMPLATES, seeds)


def test_templates_without_room_get_no_typo_or_extra_space():
    rows = perturbation_variants(TEMPLATES.filter(pl.col("template_id") == "PX:c1"), [0])  # "[X] [Y]."
    assert rows["variant"].to_list() == ["extra-space"]
    assert rows["text"][0] == "[X]  [Y]."


def test_variants_of_variants_are_not_made():
    assert marker_variants(marker_variants(TEMPLATES)).height == 0


def _instances() -> pl.DataFrame:
    rows = []
    for i in range(20):
        options = [f"o{j}" for j in range(i % 7 + 1)]
        golds = options[i % len(options) :][: 1 + i % 3]
        rows.append(
            {
                "instance_id": f"P36:s{i}",
                "gold_ids": golds,
                "option_ids": options,
                "option_labels": [o.upper() for o in options],
                "n_options": len(options),
            }
        )
    return pl.DataFrame(rows, schema_overrides={"n_options": pl.Int32})


def test_subsampling_keeps_golds_order_and_size():
    instances = _instances()
    for k in (1, 2, 3, 5):
        sub = subsample_answer_space(instances, k, seed=1)
        assert sub.equals(subsample_answer_space(instances, k, seed=1))
        for parent, row in zip(instances.iter_rows(named=True), sub.iter_rows(named=True), strict=True):
            assert row["instance_id"] == f"{parent['instance_id']}#k{k}d1"
            assert set(row["gold_ids"]) <= set(row["option_ids"])
            assert row["option_ids"] == [o for o in parent["option_ids"] if o in row["option_ids"]]
            assert row["option_labels"] == [o.upper() for o in row["option_ids"]]
            assert row["n_options"] == len(row["option_ids"])
            expected = max(min(k, parent["n_options"]), len(parent["gold_ids"]))
            assert row["n_options"] == expected
            status = (
                "golds_exceed_k"
                if len(parent["gold_ids"]) > k
                else "fewer_options_than_k"
                if parent["n_options"] < k
                else "ok"
            )
            assert row["answer_space_status"] == status


def test_subsamples_nest_and_depend_on_seed():
    instances = _instances()
    small, large = subsample_answer_space(instances, 2, 4), subsample_answer_space(instances, 4, 4)
    for a, b in zip(small["option_ids"], large["option_ids"], strict=True):
        assert set(a) <= set(b)
    seeds = {tuple(subsample_answer_space(instances, 3, s)["option_ids"][6]) for s in range(20)}
    assert len(seeds) > 1
    with pytest.raises(ValueError, match="k must be"):
        subsample_answer_space(instances, 0, 1)
