"""Answer spaces (issue 12): one space per relation built from its facts (BEAR, the default), sampled
distractors per subject (Tinner), a catalog's own fixed space (BEAR import), MACE questions; the
mode and the space size recorded per instance; max_instances honoured for every kind."""

import polars as pl
import pytest

from kcal_pipeline.core.options import OptionsError, ProbeOptions
from kcal_pipeline.dataset.instances.probe import build_instances, relation_answer_space
from kcal_pipeline.dataset.instances.relation_probe import relation_instances
from kcal_pipeline.dataset.instances.sampling import derived_rng
from kcal_pipeline.dataset.relations import RelationSpec, get_relation

# Objects with 4, 3, 2 and 1 subjects, so the space's rank is the subject count alone:
# A (s1-s4), B (s5-s7), C (s8, s9), D (s10).
GOLD = {"A": 4, "B": 3, "C": 2, "D": 1}
SUBJECTS = [(f"s{i}", obj) for i, obj in enumerate([o for o, n in GOLD.items() for _ in range(n)], start=1)]
FACTS = pl.DataFrame(
    {
        "relation_id": "P30",
        "subject_id": [s for s, _ in SUBJECTS],
        "subject_label": [f"Country {s}" for s, _ in SUBJECTS],
        "object_id": [o for _, o in SUBJECTS],
        "object_label": [f"Continent {o}" for _, o in SUBJECTS],
    }
)


def by_subject(instances: pl.DataFrame) -> dict[str, dict]:
    return {r["subject_id"]: r for r in instances.iter_rows(named=True)}


def test_defaults_are_the_seeds_relation_space_and_five_templates():
    options = ProbeOptions()
    assert options.answer_space == "relation"
    assert (options.answer_space_size, options.answer_space_size_one_to_one) == (25, 60)
    assert options.relation_space_size("n_to_1") == 25 and options.relation_space_size("one_to_one") == 60
    assert options.max_templates == 5
    with pytest.raises(OptionsError, match="answer_space='bear'"):
        ProbeOptions(answer_space="bear")
    with pytest.raises(OptionsError, match="answer_space_size=1"):
        ProbeOptions(answer_space_size=1)
    with pytest.raises(OptionsError, match="answer_space_size_one_to_one=0"):
        ProbeOptions(answer_space_size_one_to_one=0)


def test_relation_space_is_shared_capped_and_keeps_the_gold():
    # Cap 3: the space is A, B, C (most subjects first). A subject of A, B or C gets exactly the
    # space; the subject of D gets D plus A and B (the lowest-ranked member, C, makes room).
    inst = by_subject(build_instances(FACTS, "P30", ProbeOptions(max_instances=0, answer_space_size=3)))
    assert len(inst) == 10
    for sid, gold in SUBJECTS:
        row = inst[sid]
        expected = {"A", "B", "D"} if gold == "D" else {"A", "B", "C"}
        assert set(row["option_ids"]) == expected and row["n_options"] == 3, sid
        assert row["gold_ids"] == [gold] and row["option_labels"] == [
            f"Continent {o}" for o in row["option_ids"]
        ]
        assert (row["answer_space"], row["answer_space_size"]) == ("relation", 3)
    # the default cap (25) takes every object of a relation that has fewer
    whole = build_instances(FACTS, "P30", ProbeOptions(max_instances=0))
    assert set(whole["n_options"]) == {4} and set(whole["answer_space_size"]) == {4}


def test_relation_space_ties_are_broken_by_a_seeded_hash_and_do_not_depend_on_row_order():
    facts = pl.DataFrame(
        {
            "relation_id": "P36",
            "subject_id": [f"s{i}" for i in range(8)],
            "subject_label": [f"S{i}" for i in range(8)],
            "object_id": [f"o{i}" for i in range(8)],
            "object_label": [f"O{i}" for i in range(8)],
        }
    )
    spaces = {tuple(relation_answer_space(facts, "P36", 4, seed)) for seed in range(10)}
    assert len(spaces) > 1 and all(len(s) == 4 for s in spaces)  # one subject each: the hash decides
    assert relation_answer_space(facts.reverse(), "P36", 4, 3) == relation_answer_space(facts, "P36", 4, 3)


def test_space_members_never_repeat_a_label_nor_share_a_golds_label():
    facts = pl.DataFrame(
        {
            "relation_id": "P36",
            "subject_id": ["s1", "s2", "s3", "s4", "s5"],
            "subject_label": ["S1", "S2", "S3", "S4", "S5"],
            "object_id": ["a", "a", "b", "c", "d"],
            "object_label": ["Paris", "Paris", "paris ", "Lyon", "Nice"],
        }
    )
    # a (2 subjects) ranks first; b repeats its label (case and spacing do not count): not a member
    space = relation_answer_space(facts, "P36", 25, 13)
    assert next(iter(space)) == "a" and "b" not in space and set(space) == {"a", "c", "d"}
    inst = by_subject(build_instances(facts, "P36", ProbeOptions(max_instances=0)))
    # b's own gold is kept; the member a, named like it, is not offered beside it
    assert sorted(inst["s3"]["option_ids"]) == ["b", "c", "d"]
    assert sorted(inst["s1"]["option_ids"]) == ["a", "c", "d"]


def test_option_order_is_a_seeded_shuffle_of_the_option_set_alone():
    options = ProbeOptions(max_instances=0, answer_space_size=3, seed=5)
    inst = by_subject(build_instances(FACTS, "P30", options))
    for sid, gold in SUBJECTS:
        expected = [gold, *sorted({"A", "B", "C", "D"} - {gold, "D" if gold != "D" else "C"})]
        derived_rng(5, "P30", sid, "order").shuffle(expected)
        assert inst[sid]["option_ids"] == expected
    # a probe of fewer subjects has the same space (built from every fact), so equal instances
    fewer = build_instances(FACTS, "P30", ProbeOptions(max_instances=4, answer_space_size=3, seed=5))
    assert all(inst[r["subject_id"]] == r for r in fewer.iter_rows(named=True))


def test_one_to_one_relations_get_their_own_size():
    options = ProbeOptions(max_instances=0, answer_space_size=2, answer_space_size_one_to_one=3)
    n_to_1 = build_instances(FACTS, "P30", options, kind="n_to_1")
    one_to_one = build_instances(FACTS, "P30", options, kind="one_to_one")
    assert set(n_to_1["n_options"]) == {2} and set(one_to_one["n_options"]) == {3}


def test_more_golds_than_the_space_keep_every_gold():
    facts = pl.DataFrame(
        {
            "relation_id": "P37",
            "subject_id": ["s1", "s1", "s1", "s2"],
            "subject_label": ["S1"] * 3 + ["S2"],
            "object_id": ["l1", "l2", "l3", "l4"],
            "object_label": ["L1", "L2", "L3", "L4"],
        }
    )
    inst = by_subject(build_instances(facts, "P37", ProbeOptions(max_instances=0, answer_space_size=2)))
    assert sorted(inst["s1"]["option_ids"]) == ["l1", "l2", "l3"] and inst["s1"]["n_gold"] == 3
    assert inst["s2"]["n_options"] == 2 and "l4" in inst["s2"]["option_ids"]


def test_every_instance_records_its_answer_space_mode():
    spec = get_relation("P36")
    facts = FACTS.with_columns(relation_id=pl.lit("P36"))
    relation = relation_instances(
        spec, facts, pl.DataFrame(), ProbeOptions(max_instances=0, answer_space_k=2)
    )
    base = relation.filter(~pl.col("instance_id").str.contains("#"))
    cut = relation.filter(pl.col("instance_id").str.contains("#"))
    assert set(base["answer_space"]) == {"relation"} and set(base["answer_space_size"]) == {4}
    # the #k copies keep the parent's record and are cut to k options
    assert set(cut["answer_space"]) == {"relation"} and set(cut["n_options"]) == {2}
    sampled = relation_instances(
        spec, facts, pl.DataFrame(), ProbeOptions(max_instances=0, answer_space="sampled", n_negatives=2)
    )
    assert set(sampled["answer_space"]) == {"sampled"} and sampled["answer_space_size"].null_count() == 10
    assert set(sampled["n_options"]) == {3}
    from kcal_pipeline.dataset.sources.mace import math_facts

    mace = relation_instances(
        get_relation("mace-math"), math_facts("mace-math"), pl.DataFrame(), ProbeOptions()
    )
    assert set(mace["answer_space"]) == {"sampled"}  # question-specific distractors


FIXED = RelationSpec(
    relation_id="bear-P30",
    label="continent",
    kind="n_to_1",
    object_type="bear-P30",
    templates=("[X] is located in [Y].",),
    source="bear",
    answer_space="fixed",
    answer_space_ids=("A", "B", "C", "D", "E"),
    answer_space_labels=("Continent A", "Continent B", "Continent C", "Continent D", "Continent E"),
)


def test_max_instances_is_honoured_for_a_fixed_bear_space():
    facts = FACTS.with_columns(relation_id=pl.lit("bear-P30"))

    def probe(n):
        return relation_instances(
            FIXED, facts, pl.DataFrame(), ProbeOptions(max_instances=n), log=lambda _: None
        )

    small, middle, every = probe(3), probe(6), probe(0)
    assert (small.height, middle.height, every.height) == (3, 6, 10)
    assert set(small["subject_id"]) < set(middle["subject_id"]) < set(every["subject_id"])
    for frame in (small, middle):  # each probed subject keeps its instance, space and all
        assert every.join(frame, on="instance_id", how="semi").equals(frame)
    assert all(o == list(FIXED.answer_space_ids) for o in small["option_ids"].to_list())
    assert set(small["answer_space"]) == {"fixed"} and set(small["answer_space_size"]) == {5}
    # the same seeded subset of subjects as a relation built from facts
    built = build_instances(facts, "bear-P30", ProbeOptions(max_instances=3))
    assert set(built["subject_id"]) == set(small["subject_id"])


def test_a_one_to_one_relation_probes_as_many_subjects_as_options_with_every_gold_in_the_space():
    """BEAR's 1:1 construction: 5 countries with 5 distinct capitals and a cap of 3 give 3
    instances whose golds are exactly the shared space, so no instance's answer is the odd one
    out (built from all facts instead, 2 of 5 instances had their gold outside the space)."""
    facts = pl.DataFrame(
        {
            "relation_id": "P36",
            "subject_id": [f"s{i}" for i in range(5)],
            "subject_label": [f"Country {i}" for i in range(5)],
            "object_id": [f"c{i}" for i in range(5)],
            "object_label": [f"City {i}" for i in range(5)],
        }
    )
    options = ProbeOptions(max_instances=0, answer_space_size_one_to_one=3)
    inst = build_instances(facts, "P36", options, kind="one_to_one")
    golds = {g for gs in inst["gold_ids"].to_list() for g in gs}
    assert inst.height == 3 and set(inst["n_options"]) == {3}
    assert all(set(o) == golds for o in inst["option_ids"].to_list())
    # Fewer probed subjects than the cap: their golds lead, the space is topped up to the cap.
    small = build_instances(
        facts, "P36", ProbeOptions(max_instances=2, answer_space_size_one_to_one=3), kind="one_to_one"
    )
    small_golds = {g for gs in small["gold_ids"].to_list() for g in gs}
    assert small.height == 2 and set(small["n_options"]) == {3}
    assert all(small_golds < set(o) for o in small["option_ids"].to_list())


def test_a_relation_with_one_object_is_sampled_rather_than_given_one_option():
    """Every subject on one continent: a one-member space would make each instance a one-option
    question, always 'correct' with confidence 1. Such a relation falls back to sampled
    distractors from the same-type pool, and its instances record that."""
    facts = FACTS.filter(pl.col("object_id") == "A")
    topup = {"X": "Continent X", "Y": "Continent Y"}
    inst = build_instances(facts, "P30", ProbeOptions(max_instances=0), topup_pool=topup)
    assert set(inst["answer_space"]) == {"sampled"}
    assert set(inst["n_options"]) == {3} and all("A" in o for o in inst["option_ids"].to_list())
