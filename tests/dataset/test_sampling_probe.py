import random
from collections import Counter

import polars as pl
import pytest

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.labels import label_key
from kcal_pipeline.dataset.instances.probe import (
    EmptyRelationError,
    build_instances,
    build_statements,
    templates_frame,
)
from kcal_pipeline.dataset.instances.sampling import negative_rank, sample_negatives
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


def test_two_distractors_never_share_a_label_ignoring_case_and_spacing():
    # Three candidates for three slots: only the label rule keeps Lyon and lyon apart.
    pool = {"a": "Paris", "b": "Lyon", "c": "lyon", "d": "Nice"}
    picked = set()
    for s in range(40):
        neg = sample_negatives(
            gold_ids=["a"], pool=pool, k=3, seed=s, relation_id="P36", subject_id="x", labels=pool
        )
        assert len(neg) == 2 and "d" in neg and len({"b", "c"} & set(neg)) == 1, neg
        picked |= set(neg)
    assert picked == {"b", "c", "d"}  # either spelling can be the one kept
    spaced = {"a": "Paris", "b": "Saint  Denis", "c": "saint denis ", "d": "Nice"}
    neg = sample_negatives(gold_ids=["a"], pool=spaced, k=3, seed=0, relation_id="P36", subject_id="x")
    assert len(neg) == 2 and "d" in neg


def check_change(old, new, x, k, pool_ids, rank, labels):
    """What adding the new candidate x may do to one subject's distractors (sampling.py docstring):
    nothing; or, where the subject had fewer than k or x outranks one of them (a pool object
    outranking every top-up one), x comes in and at most one old distractor leaves: the one with
    x's label if any, else (when there were k) the lowest-ranked. Returns which of these it was."""
    if set(new) == set(old):
        return "unchanged"

    def key(o):
        return (o not in pool_ids, rank(o), o)

    assert x in new
    assert len(old) < k or key(x) < max(key(o) for o in old)
    assert set(new) - {x} <= set(old)
    left = sorted(set(old) - set(new))
    same_label = [o for o in old if label_key(labels[o]) == label_key(labels[x])]
    if same_label:
        assert left == same_label and key(x) < key(same_label[0])
        return "replaced its namesake"
    if len(old) == k:
        assert left == [max(old, key=key)]
        return "replaced the lowest-ranked"
    assert left == []
    return "joined"


def random_labels(rng, n, prefix):
    """n object ids with labels from a small vocabulary in random case: label clashes are common."""
    words = ["Lyon", "Nice", "Paris", "Rome", "Oslo", "Bern", "Kyiv", "Lima", "Riga", "Baku"]
    return {
        f"{prefix}{i}": rng.choice([str.lower, str.upper, str.title])(rng.choice(words)) for i in range(n)
    }


def new_label(rng, labels):
    """An existing label in another case (a clash) or a new one, half the time each."""
    return rng.choice([rng.choice(sorted(labels.values())), "Quito"]).swapcase()


def test_adding_a_candidate_changes_a_subject_only_where_it_outranks_a_distractor():
    outcomes = Counter()
    for trial in range(60):
        rng = random.Random(trial)
        pool = random_labels(rng, rng.randint(3, 14), "o")
        topup = random_labels(rng, rng.randint(0, 6), "t")
        labels = {**topup, **pool}
        k = rng.randint(1, 6)
        golds = {f"s{i}": rng.sample(sorted(pool), rng.randint(1, 2)) for i in range(8)}

        def negatives(pool, topup, golds=golds, k=k, trial=trial):
            return {
                s: sample_negatives(
                    gold_ids=g, pool=pool, k=k, seed=trial, relation_id="P36", subject_id=s,
                    topup_pool=topup, labels={**topup, **pool},
                )
                for s, g in golds.items()
            }  # fmt: skip

        before = negatives(pool, topup)
        # the same candidates listed in another order (as when facts are added or reordered)
        assert negatives(dict(reversed(list(pool.items()))), topup) == before
        # a new object x, in the pool or in the top-up pool, with a label that may clash
        x_label = new_label(rng, labels)
        for new_pool, new_topup in (({**pool, "x": x_label}, topup), (pool, {**topup, "x": x_label})):
            after = negatives(new_pool, new_topup)
            for s in golds:
                outcomes[
                    check_change(
                        before[s], after[s], "x", k, set(new_pool),
                        lambda o, s=s, trial=trial: negative_rank(trial, "P36", s, o),
                        {**labels, "x": x_label},
                    )
                ] += 1  # fmt: skip
    assert min(outcomes.values()) >= 20 and len(outcomes) == 4, outcomes  # every case is exercised


def random_facts(rng, n_subjects, n_objects):
    objects = random_labels(rng, n_objects, "o")
    rows = []
    for i in range(n_subjects):
        for o in rng.sample(sorted(objects), rng.randint(1, 2)):
            rows.append(("P36", f"s{i:02d}", f"Subject {i}", o, objects[o]))
    return rows


def facts_frame(rows):
    schema = ["relation_id", "subject_id", "subject_label", "object_id", "object_label"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def by_subject(instances):
    return {r["subject_id"]: r for r in instances.iter_rows(named=True)}


def test_adding_subjects_leaves_earlier_instances_untouched_unless_a_new_object_outranks():
    outcomes = Counter()
    for trial in range(30):
        rng = random.Random(100 + trial)
        rows = random_facts(rng, rng.randint(3, 10), rng.randint(3, 12))
        options = ProbeOptions(
            answer_space="sampled", n_negatives=rng.randint(1, 5), max_instances=0, seed=trial
        )
        before = by_subject(build_instances(facts_frame(rows), "P36", options))
        labels = {r[3]: r[4] for r in rows}

        # new subjects whose objects are all in the pool already: every earlier instance stays
        known = [rng.choice(sorted(labels)) for _ in range(3)]
        more = [("P36", f"n{j}", f"New {j}", o, labels[o]) for j, o in enumerate(known)]
        after = by_subject(build_instances(facts_frame(rows + more), "P36", options))
        assert {s: after[s] for s in before} == before

        # a new subject with a new object x: an earlier instance changes only where x outranks
        # one of its distractors (x in, at most one out); every other instance is equal
        x_label = new_label(rng, labels)
        new_fact = ("P36", "new", "New", "x", x_label)
        after = by_subject(build_instances(facts_frame([*rows, new_fact]), "P36", options))
        for s, old in before.items():
            gold = set(old["gold_ids"])
            outcome = check_change(
                [o for o in old["option_ids"] if o not in gold],
                [o for o in after[s]["option_ids"] if o not in gold],
                "x", options.n_negatives, {*labels, "x"},
                lambda o, s=s, trial=trial: negative_rank(trial, "P36", s, o),
                {**labels, "x": x_label},
            )  # fmt: skip
            outcomes[outcome] += 1
            if outcome == "unchanged":
                assert after[s] == old  # option order, split and all
            else:
                assert {k: v for k, v in after[s].items() if "option" not in k} == {
                    k: v for k, v in old.items() if "option" not in k
                }
    assert outcomes["unchanged"] >= 20 and sum(outcomes.values()) - outcomes["unchanged"] >= 20, outcomes


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


SAMPLED = {
    "answer_space": "sampled"
}  # Tinner's per-subject distractors (the relation space: test_answer_spaces)


def test_instances_options_and_gold_sets():
    inst = build_instances(FACTS, "P36", ProbeOptions(n_negatives=3, max_instances=0, **SAMPLED))
    assert inst.height == 5
    bol = inst.filter(pl.col("subject_id") == "s5").row(0, named=True)
    assert sorted(bol["gold_ids"]) == ["o5", "o6"] and bol["n_gold"] == 2 and bol["n_options"] == 5
    for row in inst.iter_rows(named=True):
        assert set(row["gold_ids"]) <= set(row["option_ids"])
        assert len(set(row["option_ids"])) == row["n_options"]
    assert set(inst["answer_space"]) == {"sampled"} and inst["answer_space_size"].null_count() == 5
    again = build_instances(FACTS, "P36", ProbeOptions(n_negatives=3, max_instances=0, **SAMPLED))
    assert again.equals(inst)


@pytest.mark.parametrize("mode", ["relation", "sampled"])
def test_max_instances_picks_a_stable_subset(mode):
    def probe(n):
        return build_instances(FACTS, "P36", ProbeOptions(n_negatives=2, max_instances=n, answer_space=mode))

    small = probe(2)
    assert small.height == 2
    assert small.equals(probe(2))
    # the smaller subset lies inside the larger one, instance for instance
    for larger in (3, 0):
        large = probe(larger)
        assert large.height == (larger or 5)
        assert small.join(large, on=small.columns, how="anti", nulls_equal=True).height == 0
    middle = probe(3)
    assert set(small["subject_id"]) < set(middle["subject_id"])


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


def test_packaged_catalog_has_five_templates_per_relation():
    cat = load_catalog()
    assert {"P36", "P30", "P37"} <= set(cat)
    assert all(len(s.templates) >= 5 for s in cat.values())


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
    inst = build_instances(
        facts, "P30", ProbeOptions(n_negatives=3, max_instances=0, **SAMPLED), topup_pool=topup
    )
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
