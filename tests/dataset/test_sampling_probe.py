import polars as pl
import pytest

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.probe import (
    EmptyRelationError,
    build_instances,
    build_statements,
    templates_frame,
)
from kcal_pipeline.dataset.instances.sampling import sample_negatives
from kcal_pipeline.dataset.relations import load_catalog, parse_catalog
from kcal_pipeline.dataset.templates import TemplateError, fill

POOL = {f"o{i}": f"Object {i}" for i in range(20)}


def test_gold_never_among_negatives_and_labels_distinct():
    for subject in range(50):
        gold = [f"o{subject % 20}", f"o{(subject + 3) % 20}"]
        neg = sample_negatives(
            gold_ids=gold, pool=POOL, k=8, seed=1, relation_id="P36", subject_id=f"s{subject}", labels=POOL
        )
        assert len(neg) == 8 and not set(neg) & set(gold) and len(set(neg)) == 8


def test_sampling_is_deterministic_and_independent_of_other_subjects():
    args = {"gold_ids": ["o1"], "k": 5, "seed": 7, "relation_id": "P36", "subject_id": "s1"}
    a = sample_negatives(pool=POOL, **args)
    assert a == sample_negatives(pool=dict(reversed(list(POOL.items()))), **args)
    assert a != sample_negatives(pool=POOL, **{**args, "seed": 8})


def test_duplicate_labels_never_share_an_answer_space():
    pool = {"a": "Paris", "b": "paris", "c": "Lyon", "d": "Nice"}
    for s in range(20):
        neg = sample_negatives(
            gold_ids=["a"], pool=pool, k=3, seed=s, relation_id="P36", subject_id="x", labels=pool
        )
        assert "b" not in neg and sorted(neg) == ["c", "d"]


def test_topup_used_only_when_pool_is_short():
    neg = sample_negatives(
        gold_ids=["o0"],
        pool={"o0": "A", "o1": "B"},
        k=3,
        seed=1,
        relation_id="P1",
        subject_id="s",
        topup_pool={"t1": "C", "t2": "D", "t3": "E"},
    )
    assert neg[0] == "o1" and len(neg) == 3 and set(neg[1:]) <= {"t1", "t2", "t3"}


FACTS = pl.DataFrame(
    {
        "relation_id": ["P36"] * 6,
        "subject_id": ["s1", "s2", "s3", "s4", "s5", "s5"],
        "subject_label": ["France", "Germany", "Italy", "Spain", "Bolivia", "Bolivia"],
        "object_id": ["o1", "o2", "o3", "o4", "o5", "o6"],
        "object_label": ["Paris", "Berlin", "Rome", "Madrid", "Sucre", "La Paz"],
    }
)


def test_instances_options_and_gold_sets():
    inst = build_instances(FACTS, "P36", ProbeOptions(n_negatives=3, max_instances=0))
    assert inst.height == 5
    bol = inst.filter(pl.col("subject_id") == "s5").row(0, named=True)
    assert sorted(bol["gold_ids"]) == ["o5", "o6"] and bol["n_gold"] == 2 and bol["n_options"] == 5
    for row in inst.iter_rows(named=True):
        assert set(row["gold_ids"]) <= set(row["option_ids"])
        assert len(set(row["option_ids"])) == row["n_options"]
    again = build_instances(FACTS, "P36", ProbeOptions(n_negatives=3, max_instances=0))
    assert again.equals(inst)


def test_max_instances_picks_a_stable_subset():
    small = build_instances(FACTS, "P36", ProbeOptions(n_negatives=2, max_instances=2))
    assert small.height == 2
    assert small.equals(build_instances(FACTS, "P36", ProbeOptions(n_negatives=2, max_instances=2)))


def test_empty_relation_is_a_clear_error():
    with pytest.raises(EmptyRelationError, match="'P30' has no facts"):
        build_instances(FACTS, "P30", ProbeOptions())


def test_statements_cover_instances_templates_options_with_spans():
    inst = build_instances(FACTS, "P36", ProbeOptions(n_negatives=3, max_instances=0))
    tmpl = templates_frame(load_catalog(), max_templates=3).filter(pl.col("relation_id") == "P36")
    st = build_statements(inst, tmpl)
    assert st.height == int(inst["n_options"].sum()) * 3
    assert st["statement_id"].n_unique() == st.height
    for r in st.iter_rows(named=True):
        assert r["text"][r["subject_start"] : r["subject_end"]] in set(FACTS["subject_label"])
        assert r["text"][r["object_start"] : r["object_end"]] == r["object_label"]
    gold_per_instance_template = st.group_by("instance_id", "template_id").agg(pl.col("is_gold").sum())
    assert gold_per_instance_template["is_gold"].min() >= 1


def test_fill_spans_when_object_precedes_subject():
    f = fill("[Y] is the capital of [X].", "Côte d'Ivoire", "Yamoussoukro")
    assert f.text == "Yamoussoukro is the capital of Côte d'Ivoire."
    assert (
        f.text[slice(*f.object_span)] == "Yamoussoukro" and f.text[slice(*f.subject_span)] == "Côte d'Ivoire"
    )


@pytest.mark.parametrize("bad", ["The capital of [X] is Paris.", "[Y] [Y] in [X]", "", "[X] and [Y] and [X]"])
def test_template_without_slots_names_relation_and_text(bad):
    cat = {
        "P36": {
            "label": "capital",
            "kind": "n_to_1",
            "property": "P36",
            "object_type": "city",
            "templates": [bad],
        }
    }
    with pytest.raises(TemplateError, match=r"\[P36\] template"):
        parse_catalog(cat)


def test_catalog_errors_name_field():
    with pytest.raises(ValueError, match=r"\[P36\]: missing field\(s\) property"):
        parse_catalog(
            {"P36": {"label": "c", "kind": "n_to_1", "object_type": "city", "templates": ["[X] [Y]"]}}
        )
    with pytest.raises(ValueError, match="kind 'weird'"):
        parse_catalog(
            {
                "P36": {
                    "label": "c",
                    "kind": "weird",
                    "property": "P36",
                    "object_type": "city",
                    "templates": ["[X] [Y]"],
                }
            }
        )


def test_packaged_catalog_has_three_templates_per_relation():
    cat = load_catalog()
    assert {"P36", "P30", "P37"} <= set(cat)
    assert all(len(s.templates) >= 3 for s in cat.values())


def test_short_pool_is_topped_up_from_same_type_and_stays_stable():
    from kcal_pipeline.dataset.instances.probe import object_pools, topup_pool_for
    from kcal_pipeline.dataset.relations import RelationSpec

    facts = pl.DataFrame(
        {
            "relation_id": ["P30", "P30", "P36", "P36"],
            "subject_id": ["a", "b", "c", "d"],
            "subject_label": ["A", "B", "C", "D"],
            "object_id": ["x1", "x2", "x3", "x4"],
            "object_label": ["X1", "X2", "X3", "X4"],
        }
    )
    spec = {
        "label": "l",
        "kind": "n_to_1",
        "object_type": "thing",
        "templates": ("[X] [Y]",),
        "property": "P1",
    }
    catalog = {"P30": RelationSpec(relation_id="P30", **spec), "P36": RelationSpec(relation_id="P36", **spec)}
    pools = object_pools(facts, catalog)
    topup = topup_pool_for(pools, "P30", "thing")
    assert topup == {"x3": "X3", "x4": "X4"}  # only other relations' objects
    inst = build_instances(facts, "P30", ProbeOptions(n_negatives=3, max_instances=0), topup_pool=topup)
    a = inst.filter(pl.col("subject_id") == "a").row(0, named=True)
    assert a["n_options"] == 4 and set(a["option_ids"]) == {"x1", "x2", "x3", "x4"}
    assert a["option_labels"] == [
        {"x1": "X1", "x2": "X2", "x3": "X3", "x4": "X4"}[o] for o in a["option_ids"]
    ]


def test_a_relation_id_defined_in_two_catalog_files_is_an_error():
    from kcal_pipeline.dataset.relations import merge_catalogs

    entry = {
        "label": "c",
        "kind": "n_to_1",
        "property": "P36",
        "object_type": "city",
        "templates": ["[X] [Y]"],
    }
    assert set(
        merge_catalogs([({"P36": entry}, "a.toml"), ({"P30": {**entry, "property": "P30"}}, "b.toml")])
    ) == {"P36", "P30"}
    with pytest.raises(ValueError, match=r"b\.toml: relation id\(s\) P36 already defined in a\.toml"):
        merge_catalogs([({"P36": entry}, "a.toml"), ({"P36": entry}, "b.toml")])
