"""The option-count sweep (issue 29, part 2; Kissling et al. §5.4): every instance cut to each k,
answer_space_draws times, each draw its own seeded subsample with every gold kept; smaller k nest
in larger ones within a draw; a k that cuts nothing (or leaves no distractor) makes no copy."""

import re

import polars as pl
import pytest

from kcal_pipeline.core.options import OptionsError, ProbeOptions
from kcal_pipeline.dataset.instances.variants import (
    answer_space_sweep,
    subsample_answer_space,
)


def instances() -> pl.DataFrame:
    """i0: 12 options, gold o3; i1: 12 options, golds o0 and o11; i2: 4 options, gold o1;
    i3: 6 options, golds o0, o1, o2 (a MACE-like question)."""
    rows = []
    for i, (n, golds) in enumerate([(12, ["o3"]), (12, ["o0", "o11"]), (4, ["o1"]), (6, ["o0", "o1", "o2"])]):
        options = [f"o{j}" for j in range(n)]
        rows.append(
            {
                "instance_id": f"P1/s{i}",
                "gold_ids": golds,
                "option_ids": options,
                "option_labels": [o.upper() for o in options],
                "n_options": n,
                "split": "dev" if i % 2 else "test",
            }
        )
    return pl.DataFrame(rows, schema_overrides={"n_options": pl.Int32})


def test_each_k_and_draw_is_a_copy_of_the_instances_it_cuts():
    base = instances()
    sweep = answer_space_sweep(base, [3, 5], draws=2, seed=7)
    # k 3: i0 (12 > 3, 1 gold) and i1 (2 golds < 3); i2 (4 options) too; i3 has 3 golds = k: no
    # distractor would be left, no copy. k 5: i0, i1, i3 (6 > 5); i2 has only 4 options: no copy.
    assert sweep["instance_id"].to_list() == [
        "P1/s0#k3d1", "P1/s1#k3d1", "P1/s2#k3d1", "P1/s0#k5d1", "P1/s1#k5d1", "P1/s3#k5d1",
        "P1/s0#k3d2", "P1/s1#k3d2", "P1/s2#k3d2", "P1/s0#k5d2", "P1/s1#k5d2", "P1/s3#k5d2",
    ]  # fmt: skip
    assert sweep["answer_space_k"].to_list() == [3, 3, 3, 5, 5, 5] * 2
    assert sweep["answer_space_draw"].to_list() == [1] * 6 + [2] * 6
    assert set(sweep["answer_space_status"]) == {"ok"}
    parents = {r["instance_id"]: r for r in base.iter_rows(named=True)}
    for row in sweep.iter_rows(named=True):
        parent = parents[row["parent_instance_id"]]
        assert row["instance_id"].startswith(parent["instance_id"] + "#k")
        assert set(parent["gold_ids"]) <= set(row["option_ids"])  # every gold kept
        assert len(row["option_ids"]) == row["n_options"] == row["answer_space_k"]
        assert row["option_ids"] == [o for o in parent["option_ids"] if o in row["option_ids"]]  # order
        assert row["option_labels"] == [o.upper() for o in row["option_ids"]]
        assert row["split"] == parent["split"]  # a copy is tuned and tested with its parent
    assert sweep.equals(answer_space_sweep(base, [3, 5], draws=2, seed=7))  # seeded: reproducible


def test_draws_differ_and_nest_across_k_within_a_draw():
    one = instances().head(1)  # 12 options, gold o3: C(11, 4) = 330 ways to keep 4 distractors
    sweep = answer_space_sweep(one, [2, 5, 9], draws=8, seed=13)
    kept = {
        (r["answer_space_k"], r["answer_space_draw"]): set(r["option_ids"])
        for r in sweep.iter_rows(named=True)
    }
    for draw in range(1, 9):
        assert kept[(2, draw)] <= kept[(5, draw)] <= kept[(9, draw)]  # one seeded order per draw
    fives = [frozenset(kept[(5, d)]) for d in range(1, 9)]
    assert len(set(fives)) >= 6  # each draw its own subsample (8 draws of 330: repeats are rare)
    # a draw is a function of (seed, instance, draw) alone, not of k, the other draws or instances
    alone = subsample_answer_space(one, 5, seed=13, draw=3)
    assert set(alone["option_ids"][0]) == kept[(5, 3)]
    other_seed = answer_space_sweep(one, [5], draws=8, seed=14)
    assert [set(o) for o in other_seed["option_ids"]] != [set(f) for f in fives]


def test_a_sweep_that_cuts_nothing_has_the_columns_and_no_rows():
    out = answer_space_sweep(instances(), [12, 20], draws=3, seed=1)
    assert out.is_empty()
    assert {"parent_instance_id", "answer_space_k", "answer_space_draw", "answer_space_status"} <= set(
        out.columns
    )
    with pytest.raises(ValueError, match="answer_space_draws must be >= 1, got 0"):
        answer_space_sweep(instances(), [3], draws=0, seed=1)


def test_the_settings_take_a_list_a_single_k_or_nothing():
    assert ProbeOptions().answer_space_k == [] and ProbeOptions().answer_space_draws == 3
    assert ProbeOptions(answer_space_k=3).answer_space_k == [3]  # a single k keeps working
    assert ProbeOptions(answer_space_k=0).answer_space_k == []  # 0 = off, as before
    assert ProbeOptions(answer_space_k=["10", "5"]).answer_space_k == [5, 10]  # the CLI's parts, sorted
    for bad, says in (
        (1, "answer_space_k=1: a one-option copy is always 'correct'"),
        ([5, 1], "answer_space_k=1,5: a one-option copy"),
        ([0, 5], "answer_space_k=0,5: every k must be >= 2"),
        ([5, 5], "answer_space_k=5,5: each k once, got [5] more than once"),
    ):
        with pytest.raises(OptionsError, match="^probe settings: " + re.escape(says)):
            ProbeOptions(answer_space_k=bad)
    with pytest.raises(OptionsError, match="answer_space_draws=0"):
        ProbeOptions(answer_space_draws=0)


def test_the_demo_flags_parse_a_comma_separated_sweep():
    from assets.cli import build_parser, option_values

    args = build_parser().parse_args(["demo", "--answer-space-k", "5,10", "--answer-space-draws", "2"])
    options = ProbeOptions(**option_values(args, ProbeOptions))
    assert (options.answer_space_k, options.answer_space_draws) == ([5, 10], 2)
