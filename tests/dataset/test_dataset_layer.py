"""The dataset layer: which templates a run scores, context statements, instances per kind."""

import polars as pl
import pytest

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.probe import object_pools, relations_frame, templates_frame
from kcal_pipeline.dataset.instances.relation_probe import (
    curated_and_variants,
    relation_instances,
    relation_statements,
    run_templates,
)
from kcal_pipeline.dataset.relations import get_relation, load_catalog

CATALOG = load_catalog()
SEEDS = ProbeOptions().perturbation_seeds
TEMPLATES = curated_and_variants(templates_frame({"P36": CATALOG["P36"]}), SEEDS)
FACTS = pl.DataFrame(
    {
        "relation_id": ["P36"] * 5,
        "subject_id": ["s1", "s2", "s3", "s4", "s5"],
        "subject_label": ["France", "Germany", "Italy", "Spain", "Côte d'Ivoire"],
        "object_id": ["o1", "o2", "o3", "o4", "o5"],
        "object_label": ["Paris", "Berlin", "Rome", "Madrid", "Yamoussoukro"],
    }
)


def test_default_run_scores_the_first_curated_templates_only():
    chosen = run_templates(TEMPLATES, None, ["curated"], 3, SEEDS)
    assert chosen["template_id"].to_list() == ["P36:c0", "P36:c1", "P36:c2"]


def test_variant_kinds_follow_exactly_the_chosen_parents():
    chosen = run_templates(TEMPLATES, None, ["curated", "marker_numeric", "perturbation"], 2, SEEDS)
    variants = chosen.filter(pl.col("kind") != "curated")
    assert set(variants["parent_id"]) == {"P36:c0", "P36:c1"}
    assert set(variants["kind"]) == {"marker_numeric", "perturbation"}
    assert variants.filter(pl.col("kind") == "marker_numeric").height == 2 * 5  # 5 confidence levels


def test_generated_kind_needs_generated_templates():
    with pytest.raises(ValueError, match="generated_templates is empty or not materialized"):
        run_templates(TEMPLATES, None, ["generated"], 3, SEEDS)


CONTEXT_KINDS = ["context_1shot", "context_3shot", "context_wrong", "context_fixed"]


def test_context_statements_are_the_plain_statements_behind_a_context_that_names_no_option():
    """Each context statement is its parent's statement, unchanged (capitalisation included),
    behind demonstrations that end in a line break; context_end marks where it starts and the spans
    stay exact. No demonstration names the instance's subject or any of its options."""
    inst = relation_instances(
        CATALOG["P36"],
        FACTS,
        pl.DataFrame(),
        ProbeOptions(answer_space="sampled", n_negatives=1, max_instances=0),
    )
    chosen = run_templates(TEMPLATES, None, ["curated", *CONTEXT_KINDS], 1, SEEDS)
    st = relation_statements(inst, chosen, seed=13, capitalize=True, facts=FACTS, log=pytest.fail)
    plain = {
        (r["instance_id"], r["option_index"]): r
        for r in st.filter(pl.col("context_end") == 0).iter_rows(named=True)
    }
    assert {r["template_id"] for r in plain.values()} == {"P36:c0"}
    facts = {
        f"The capital of {s} is {o}." for s, o in FACTS.select("subject_label", "object_label").iter_rows()
    }
    kinds = dict(TEMPLATES.select("template_id", "kind").iter_rows())
    assert st.height == 5 * inst["n_options"].sum()  # every instance has a valid context of each kind
    for row in st.filter(pl.col("context_end") > 0).iter_rows(named=True):
        end, base = row["context_end"], plain[(row["instance_id"], row["option_index"])]
        assert row["text"][end:] == base["text"] and row["text"][end - 1] == "\n"
        for column in ("subject_start", "subject_end", "object_start", "object_end"):
            assert row[column] == base[column] + end
        assert row["text"][row["object_start"] : row["object_end"]] == row["object_label"]
        assert row["capitalized"] == base["capitalized"]
        own = inst.filter(pl.col("instance_id") == row["instance_id"]).row(0, named=True)
        named = {own["subject_label"], *own["option_labels"]}
        demos = row["text"][:end].splitlines()
        kind = kinds[row["template_id"]]
        assert (
            len(demos)
            == {"context_1shot": 1, "context_3shot": 3, "context_wrong": 1, "context_fixed": 1}[kind]
        )
        if kind == "context_fixed":
            assert demos == ["What is 2+2? 4"]
            continue
        assert all((d in facts) == (kind != "context_wrong") for d in demos)  # true facts, or a wrong one
        assert not any(name in d for d in demos for name in named)


def test_a_namesake_of_the_instances_subject_never_demonstrates():
    """Namesakes: Georgia the US state never demonstrates for Georgia the country (same label, other id)."""
    facts = pl.DataFrame(
        {
            "relation_id": "P36",
            "subject_id": ["Q1428", "Q230", "Q419"],
            "subject_label": ["Georgia", "Georgia", "Peru"],
            "object_id": ["Q23556", "Q994", "Q2868"],
            "object_label": ["Atlanta", "Tbilisi", "Lima"],
        }
    )
    inst = pl.DataFrame(
        {
            "instance_id": ["P36:Q230"],
            "relation_id": "P36",
            "subject_id": "Q230",
            "subject_label": "Georgia",
            "gold_ids": [["Q994"]],
            "option_ids": [["Q994", "Q90"]],
            "option_labels": [["Tbilisi", "Paris"]],
        }
    )
    chosen = run_templates(TEMPLATES, None, ["context_1shot"], 1, SEEDS)
    contexts = set()
    for seed in range(10):  # the pool's order is seeded: the namesake comes first under some seeds
        st = relation_statements(inst, chosen, seed=seed, facts=facts, log=pytest.fail)
        contexts |= {text[:end] for text, end in st.select("text", "context_end").iter_rows()}
    assert contexts == {"The capital of Peru is Lima.\n"}


def test_a_relation_whose_objects_are_all_options_gets_no_demonstration_and_says_so():
    """BEAR-style answer space: all five capitals are options of every instance, so no fact can
    demonstrate without naming one; only the fixed, knowledge-free context is left."""
    inst = relation_instances(CATALOG["P36"], FACTS, pl.DataFrame(), ProbeOptions(max_instances=0))
    assert set(inst["n_options"]) == {5}
    chosen = run_templates(TEMPLATES, None, CONTEXT_KINDS, 1, SEEDS)
    logged = []
    st = relation_statements(inst, chosen, seed=13, facts=FACTS, log=logged.append)
    assert set(st["template_id"]) == {"P36:c0:context-fixed"} and st.height == 25
    assert len(logged) == 3 and all("5 of 5 instance(s) have no valid" in m for m in logged)
    with pytest.raises(ValueError, match="no instance had a valid demonstration"):
        relation_statements(inst, chosen.filter(pl.col("kind") == "context_1shot"), seed=13, facts=FACTS)


def test_answer_space_subsampling_adds_cut_instances():
    inst = relation_instances(
        CATALOG["P36"],
        FACTS,
        pl.DataFrame(),
        ProbeOptions(n_negatives=4, max_instances=0, answer_space_k=2, answer_space_draws=2),
    )
    cut = inst.filter(pl.col("instance_id").str.contains("#k2d", literal=True))
    assert cut.height == 10 and cut["n_options"].to_list() == [2] * 10  # 5 instances × 2 draws
    assert cut["answer_space_draw"].to_list() == [1] * 5 + [2] * 5
    assert all(set(g) <= set(o) for g, o in zip(cut["gold_ids"], cut["option_ids"], strict=True))


def test_mace_instances_have_exact_gold_counts():
    facts = __import__("kcal_pipeline.dataset.sources.mace", fromlist=["math_facts"]).math_facts("mace-math")
    inst = relation_instances(
        get_relation("mace-math"), facts, object_pools(facts, CATALOG), ProbeOptions(max_instances=40)
    )
    counts = inst.group_by("n_gold").len().sort("n_gold")
    assert counts.rows() == [(1, 10), (2, 10), (4, 10), (6, 10)]
    assert all(len(g) == n for g, n in zip(inst["gold_ids"], inst["n_gold"], strict=True))


def test_one_to_one_relations_share_one_bear_style_answer_space():
    """P1376 (one_to_one) gets one relation-level space from its facts, capped at 60 (BEAR's 1:1
    size): every probed city chooses among all four countries, also the unprobed one's."""
    spec = get_relation("P1376")
    assert spec.kind == "one_to_one" and not spec.answer_space_ids
    facts = pl.DataFrame(
        {
            "relation_id": ["P1376"] * 4,
            "subject_id": ["c1", "c2", "c3", "c4"],
            "subject_label": ["Paris", "Berlin", "Rome", "Madrid"],
            "object_id": ["k1", "k2", "k3", "k4"],
            "object_label": ["France", "Germany", "Italy", "Spain"],
        }
    )
    inst = relation_instances(spec, facts, pl.DataFrame(), ProbeOptions(max_instances=3))
    assert inst.height == 3
    assert all(sorted(o) == ["k1", "k2", "k3", "k4"] for o in inst["option_ids"].to_list())
    assert set(inst["answer_space"]) == {"relation"} and set(inst["answer_space_size"]) == {4}
    capped = relation_instances(
        spec, facts, pl.DataFrame(), ProbeOptions(max_instances=0, answer_space_size_one_to_one=2)
    )
    assert set(capped["n_options"]) == {2}  # the one_to_one cap, not answer_space_size (25)


def test_generated_templates_join_the_run_with_their_variants():
    from kcal_pipeline.dataset.instances.paraphrases import Candidate, paraphrase_rows

    generated = paraphrase_rows([Candidate("P36", "[Y] serves as the capital of [X].", "m", "m@r", "prompt")])
    chosen = run_templates(TEMPLATES, generated, ["curated", "generated", "marker_verbal"], 1, SEEDS)
    assert set(chosen.filter(pl.col("kind") != "marker_verbal")["template_id"]) == {"P36:c0", "P36:g0"}
    assert set(chosen.filter(pl.col("kind") == "marker_verbal")["parent_id"]) == {"P36:c0", "P36:g0"}
    assert chosen.filter(pl.col("template_id") == "P36:g0")["generator"].to_list() == ["m@r"]


def test_a_default_run_scores_five_curated_templates_per_relation():
    """The seed's five paraphrases per relation (P30 has six in the catalog: the first five)."""
    demo = {rid: CATALOG[rid] for rid in ("P36", "P30", "P37")}
    options = ProbeOptions()
    chosen = run_templates(
        curated_and_variants(templates_frame(demo), options.perturbation_seeds),
        None,
        options.template_kinds,
        options.template_limit,
        options.perturbation_seeds,
    )
    counts = dict(chosen.group_by("relation_id").len().iter_rows())
    assert counts == {"P36": 5, "P30": 5, "P37": 5}


def test_the_relations_table_names_each_relations_domain():
    """MACE domains were written as closed_set: the table must say what the catalog says."""
    frame = relations_frame(load_catalog())
    domains = dict(frame.select("relation_id", "domain").iter_rows())
    assert domains["P36"] == "closed_set"
    assert domains["mace-award"] == "mace"
    assert {d for r, d in domains.items() if r.startswith("mace-")} == {"mace"}
