"""Context demonstrations (dataset/instances/context.py): which facts demonstrate, and never the
instance's own subject or options; the fixed set; the context variants of the templates table."""

import polars as pl
import pytest

from kcal_pipeline.core.options import CONTEXT_TEMPLATE_KINDS, TEMPLATE_KINDS
from kcal_pipeline.dataset.instances.context import (
    CONTEXT_KINDS,
    CONTEXT_SLOT,
    FIXED_DEMONSTRATIONS,
    context_text,
    demo_pool,
    draw_demonstrations,
    statement_template,
)
from kcal_pipeline.dataset.instances.labels import label_key
from kcal_pipeline.dataset.instances.variants import VARIANT_COLUMNS, context_variants
from kcal_pipeline.evaluation.scopes import TEMPLATE_KIND_GROUPS

# A small relation with the awkward cases: namesakes (two Georgias), a subject named like an
# object (Luxembourg → Luxembourg), a subject with two objects (Bolivia).
FACTS = pl.DataFrame(
    {
        "relation_id": "P36",
        "subject_id": ["s0", "s1", "s2", "s3", "s4", "s5", "s5", "s6", "s7", "s8"],
        "subject_label": ["France", "Germany", "Italy", "Georgia", "Georgia", "Bolivia", "Bolivia",
                          "Luxembourg", "Peru", "Spain"],
        "object_id": ["o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9"],
        "object_label": ["Paris", "Berlin", "Rome", "Tbilisi", "Atlanta", "La Paz", "Sucre", "Luxembourg",
                         "Lima", "Madrid"],
    }
)  # fmt: skip
LABELS = dict(FACTS.select("object_id", "object_label").iter_rows())
GOLDS = FACTS.group_by("subject_id").agg("object_id", "subject_label")


def instances(n_options: int, seed: int) -> list[dict]:
    """Every subject as an instance with its golds plus seeded distractors from the relation."""
    import random

    rng = random.Random(seed)
    out = []
    for sid, golds, labels in GOLDS.sort("subject_id").iter_rows():
        others = sorted(set(LABELS) - set(golds))
        options = [*golds, *rng.sample(others, n_options)]
        out.append({"subject_id": sid, "subject_label": labels[0], "option_ids": options})
    return out


def forbidden(inst: dict) -> tuple[set[str], set[str]]:
    ids = {inst["subject_id"], *inst["option_ids"]}
    return ids, {label_key(inst["subject_label"]), *(label_key(LABELS[o]) for o in inst["option_ids"])}


def test_a_demonstration_never_names_the_instance_its_golds_or_its_distractors():
    """Property over seeds and answer-space sizes: every demonstrated subject and object is none of
    the instance's subject and options (id or label); true ones are facts; 1-shot ⊂ 3-shot."""
    pool = demo_pool(FACTS)
    facts = set(FACTS.select("subject_label", "object_label").iter_rows())
    found = dict.fromkeys(("context_1shot", "context_3shot", "context_wrong"), 0)
    for seed in range(12):
        for n_options in (1, 3):
            for inst in instances(n_options, seed):
                ids, labels = forbidden(inst)
                draws = {
                    k: draw_demonstrations(k, pool, inst["subject_id"], ids, labels, seed) for k in found
                }
                assert draws == {  # seeded: the same draw every time
                    k: draw_demonstrations(k, pool, inst["subject_id"], ids, labels, seed) for k in found
                }
                for kind, demos in draws.items():
                    if demos is None:
                        continue
                    found[kind] += 1
                    for subject, obj in demos:
                        assert label_key(subject) not in labels and label_key(obj) not in labels
                        assert ((subject, obj) in facts) == (kind != "context_wrong")
                    assert len({s for s, _ in demos}) == len(demos) == CONTEXT_KINDS[kind][1]
                if draws["context_3shot"] is not None:
                    assert draws["context_1shot"] == draws["context_3shot"][:1]
                if draws["context_wrong"] is not None:
                    (subject, obj), (right_subject, _) = draws["context_wrong"][0], draws["context_1shot"][0]
                    own = set(
                        FACTS.filter(pl.col("subject_label") == subject)["object_label"]
                    )  # namesakes too
                    assert obj not in own and subject == right_subject  # the 1-shot's subject, wrong
    assert all(n > 20 for n in found.values()), found  # the property was really exercised
    # the seed matters: France's 1-shot demonstration differs between seeds
    france = instances(1, 0)[0]
    assert (
        len(
            {tuple(draw_demonstrations("context_1shot", pool, "s0", *forbidden(france), s)) for s in range(8)}
        )
        > 1
    )


def test_too_few_valid_subjects_give_none_and_the_fixed_context_needs_none():
    pool = demo_pool(FACTS)
    everything = set(LABELS), {label_key(v) for v in LABELS.values()}
    assert draw_demonstrations("context_1shot", pool, "s0", *everything, 13) is None
    assert draw_demonstrations("context_fixed", pool, "s0", *everything, 13) == []
    # Spain is the only subject left to demonstrate with: enough for one shot, not for three
    ids = {o for o in LABELS if o != "o9"} | {"s0"}
    labels = {label_key(LABELS[o]) for o in ids if o in LABELS} | {"france"}
    assert draw_demonstrations("context_1shot", pool, "s0", ids, labels, 13) == [("Spain", "Madrid")]
    assert draw_demonstrations("context_3shot", pool, "s0", ids, labels, 13) is None
    with pytest.raises(ValueError, match="unknown context kind 'context_2shot'"):
        draw_demonstrations("context_2shot", pool, "s0", ids, labels, 13)


def test_the_fixed_demonstrations_are_the_same_for_every_relation_and_template():
    contexts = {
        context_text([], template, "context_fixed")
        for template in ("The capital of [X] is [Y].", "[X] was born in [Y].", "[Y] is spoken in [X].")
    }
    assert contexts == {"What is 2+2? 4\n"} and FIXED_DEMONSTRATIONS == ("What is 2+2? 4",)
    true = context_text(
        [("Peru", "Lima"), ("Spain", "Madrid")], "the capital of [X] is [Y].", "context_3shot"
    )
    assert true == "the capital of Peru is Lima.\nthe capital of Spain is Madrid.\n"


def test_the_pool_comes_from_facts_or_from_instances_without_subsample_copies():
    from_facts = demo_pool(FACTS)
    assert from_facts.relation_id == "P36" and len(from_facts.subjects) == 9
    assert {s: o for s, _, o in from_facts.subjects}["s5"] == (("o5", "La Paz"), ("o6", "Sucre"))
    inst = pl.DataFrame(
        {
            "instance_id": ["P36:s0", "P36:s0#k2d1", "P36:s1"],
            "relation_id": "P36",
            "subject_id": ["s0", "s0", "s1"],
            "subject_label": ["France", "France", "Germany"],
            "gold_ids": [["o0"], ["o0"], ["o1"]],
            "gold_labels": [["Paris"], ["Paris"], ["Berlin"]],
        }
    )
    assert demo_pool(inst).subjects == (
        ("s0", "France", (("o0", "Paris"),)),
        ("s1", "Germany", (("o1", "Berlin"),)),
    )
    with pytest.raises(ValueError, match=r"one relation; got rows of \['P30', 'P36'\]"):
        demo_pool(
            FACTS.with_columns(
                relation_id=pl.when(pl.col("subject_id") == "s0").then(pl.lit("P30")).otherwise(pl.lit("P36"))
            )
        )
    with pytest.raises(ValueError, match="empty frame"):
        demo_pool(FACTS.head(0))


def test_context_variants_one_per_kind_behind_the_context_slot():
    parents = pl.DataFrame(
        {
            "relation_id": "P36",
            "template_id": ["P36:c0", "P36:c1", "P36:q0"],
            "text": ["The capital of [X] is [Y].", "[Y] is the capital of [X].", "Capital of [X]? [Y]"],
            "kind": ["curated", "curated", "question"],  # question templates get no variants
            "source": "test",
            "rank": [0, 1, 0],
        },
        schema_overrides={"rank": pl.Int32},
    )
    rows = context_variants(parents)
    assert rows.columns == VARIANT_COLUMNS and rows.height == 2 * 4
    for row in rows.iter_rows(named=True):
        variant = CONTEXT_KINDS[row["kind"]][0]
        assert row["template_id"] == f"{row['parent_id']}:{variant}" and row["variant"] == variant
        parent = parents.filter(pl.col("template_id") == row["parent_id"])["text"][0]
        assert row["text"] == CONTEXT_SLOT + parent and statement_template(row["text"]) == parent
        assert row["perturbation_seed"] is None and row["rank"] in (0, 1)
    # one list of kinds: the options accept them, the template_kind scope reports each on its own
    assert tuple(CONTEXT_KINDS) == CONTEXT_TEMPLATE_KINDS and set(CONTEXT_KINDS) <= set(TEMPLATE_KINDS)
    assert all(TEMPLATE_KIND_GROUPS[k] == k for k in CONTEXT_KINDS)
    with pytest.raises(ValueError, match=r"must start with \[C\]"):
        statement_template("The capital of [X] is [Y].")
