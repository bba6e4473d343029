"""The template marginal P(o | r, s) and its option_estimates table: by hand, properties, and the
vectorised path against the per-row reference."""

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.estimation import build_cube, partition_cubes
from kcal_pipeline.estimation.marginal import OPTION_ESTIMATES_SCHEMA, option_estimates
from kcal_pipeline.estimation.registry import compute_estimates
from tests.estimation.reference_aggregation import reference_option_estimates
from tests.estimation.test_aggregation import LL_COLUMNS, random_partition, template_rows, templates_table
from tests.estimation.test_estimators import statements


def marginal_cube():
    """Two curated templates c0, c1 and a question template q0 (never averaged in); gold option 0
    unless said. P(o) = mean over the paraphrase templates the instance has:
    i1: c0 [.5, .3, .2], c1 [.1, .6, .3]   → P = [.3, .45, .25]
    i2: c0 [.6, .4], c1 [.4, .6]           → P = [.5, .5], a tie (exact: the same two floats)
    i3: c0 [.2, .8] only (T_i = 1)         → P = [.2, .8]
    i4: c0 [.2, .3, .5], c1 [.7, .3] (option 2 not scored on c1: p = 0 there)
                                           → P = [(.2 + .7)/2, (.3 + .3)/2, (.5 + 0)/2] = [.45, .3, .25]
    i5: one option, c0 and c1              → P = [1]
    i6: gold 0 AND 1; c0 [.1, .5, .4], c1 [.1, .6, .3] → P = [.1, .55, .35]
    q0 (on i1 and i4) puts .98 on option 2: averaged in, it would make option 2 the answer of both
    (i1: P = [.61, .91, 1.48]/3).
    """
    rows = template_rows("i1", "P1:c0", [0.5, 0.3, 0.2]) + template_rows("i1", "P1:c1", [0.1, 0.6, 0.3])
    rows += template_rows("i2", "P1:c0", [0.6, 0.4]) + template_rows("i2", "P1:c1", [0.4, 0.6])
    rows += template_rows("i3", "P1:c0", [0.2, 0.8])
    rows += template_rows("i4", "P1:c0", [0.2, 0.3, 0.5]) + template_rows("i4", "P1:c1", [0.7, 0.3])
    rows += template_rows("i5", "P1:c0", [1.0]) + template_rows("i5", "P1:c1", [1.0])
    rows += template_rows("i6", "P1:c0", [0.1, 0.5, 0.4], gold=(0, 1))
    rows += template_rows("i6", "P1:c1", [0.1, 0.6, 0.3], gold=(0, 1))
    rows += template_rows("i1", "P1:q0", [0.01, 0.01, 0.98]) + template_rows(
        "i4", "P1:q0", [0.01, 0.01, 0.98]
    )
    kinds = {"P1:c0": "curated", "P1:c1": "curated", "P1:q0": "question"}
    return build_cube(statements(rows, relation="P1"), templates=templates_table("P1", kinds))


def test_template_marginal_by_hand():
    out = compute_estimates(marginal_cube(), ["template_marginal"], log=lambda _: None)
    rows = out.select(
        "instance_id", "template_id", "grain", "predicted_index", "predicted_id", "correct"
    ).rows()
    assert rows == [
        ("i1", None, "instance", 1, "Q1", False),  # .45 on option 1; gold is 0
        ("i2", None, "instance", 0, "Q0", True),  # the tie goes to the lowest option index
        ("i3", None, "instance", 1, "Q1", False),
        ("i4", None, "instance", 0, "Q0", True),
        ("i5", None, "instance", 0, "Q0", True),
        ("i6", None, "instance", 1, "Q1", True),  # one of two gold options
    ]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.45, 0.5, 0.8, 0.45, 1.0, 0.55], atol=1e-12)
    assert out["reduction"].unique().to_list() == ["sum"]  # the other columns are absent: skipped


def test_option_estimates_by_hand():
    cube = marginal_cube()
    table = option_estimates(cube)
    assert table.schema == pl.Schema(OPTION_ESTIMATES_SCHEMA)
    got = table.select("instance_id", "option_index", "option_id", "is_gold", "probability").rows()
    expected = [
        ("i1", 0, "Q0", True, 0.3), ("i1", 1, "Q1", False, 0.45), ("i1", 2, "Q2", False, 0.25),
        ("i2", 0, "Q0", True, 0.5), ("i2", 1, "Q1", False, 0.5),
        ("i3", 0, "Q0", True, 0.2), ("i3", 1, "Q1", False, 0.8),
        ("i4", 0, "Q0", True, 0.45), ("i4", 1, "Q1", False, 0.3), ("i4", 2, "Q2", False, 0.25),
        ("i5", 0, "Q0", True, 1.0),
        ("i6", 0, "Q0", True, 0.1), ("i6", 1, "Q1", True, 0.55), ("i6", 2, "Q2", False, 0.35),
    ]  # fmt: skip
    assert [r[:4] for r in got] == [e[:4] for e in expected]
    np.testing.assert_allclose([r[4] for r in got], [e[4] for e in expected], atol=1e-12)
    assert set(table["estimator"]) == {"template_marginal"} and set(table["reduction"]) == {"sum"}
    assert set(table["model_id"]) == {"m"} and set(table["relation_id"]) == {"P1"}
    # without probe_instances: split null, full answer space
    assert table["split"].null_count() == table.height and set(table["answer_space_k"]) == {0}


def test_option_estimates_carry_split_answer_space_and_every_reduction():
    # i1 (test) and its `#k2` copy (dev) on c0, c1; ll_mean = ll_sum / 2 (p = softmax(ll/2)):
    # i1 under sum: c0 [.8, .2], c1 [.6, .4] → P = [.7, .3]; its copy, one option: P = [1]
    rows = template_rows("i1", "P1:c0", [0.8, 0.2]) + template_rows("i1", "P1:c1", [0.6, 0.4])
    rows += template_rows("i1#k2", "P1:c0", [1.0]) + template_rows("i1#k2", "P1:c1", [1.0])
    scores = statements(rows, relation="P1").with_columns(ll_mean=pl.col("ll_sum") / 2)
    probe = pl.DataFrame(
        {
            "instance_id": ["i1", "i1#k2"],
            "n_options": [2, 1],
            "split": ["test", "dev"],
            "answer_space_k": [0, 2],
            "answer_space_draw": [0, 1],
        },
        schema_overrides={"answer_space_k": pl.Int32, "answer_space_draw": pl.Int32},
    )
    table = option_estimates(build_cube(scores, probe))
    assert table.select("instance_id", "split", "answer_space_k", "option_index", "reduction").rows() == [
        ("i1", "test", 0, 0, "mean"),
        ("i1", "test", 0, 0, "sum"),
        ("i1", "test", 0, 1, "mean"),
        ("i1", "test", 0, 1, "sum"),
        ("i1#k2", "dev", 2, 0, "mean"),
        ("i1#k2", "dev", 2, 0, "sum"),
    ]
    # under mean: c0 p ∝ [√.8, √.2] = [2/3, 1/3]; c1 p ∝ [√.6, √.4] → [.550510, .449490];
    # P(0) = (2/3 + .550510)/2 = 0.608588
    c1 = math.sqrt(0.6) / (math.sqrt(0.6) + math.sqrt(0.4))
    expected = [(2 / 3 + c1) / 2, 0.7, 1 - (2 / 3 + c1) / 2, 0.3, 1.0, 1.0]
    np.testing.assert_allclose(table["probability"].to_numpy(), expected, atol=1e-12)
    assert expected[0] == pytest.approx(0.608588, abs=1e-6)


def test_option_estimates_skip_what_no_paraphrase_template_scored():
    # i2 was scored on the question template only: no rows; a cube without paraphrases: an empty
    # table with the schema
    rows = template_rows("i1", "P1:c0", [0.7, 0.3]) + template_rows("i2", "P1:q0", [0.5, 0.5])
    kinds = {"P1:c0": "curated", "P1:q0": "question"}
    table = option_estimates(
        build_cube(statements(rows, relation="P1"), templates=templates_table("P1", kinds))
    )
    assert table["instance_id"].unique().to_list() == ["i1"]
    only_questions = build_cube(
        statements(template_rows("i2", "P1:q0", [0.5, 0.5]), relation="P1"),
        templates=templates_table("P1", {"P1:q0": "question"}),
    )
    empty = option_estimates(only_questions)
    assert empty.is_empty() and empty.schema == pl.Schema(OPTION_ESTIMATES_SCHEMA)
    assert option_estimates([]).schema == pl.Schema(OPTION_ESTIMATES_SCHEMA)


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_templates", [True, False], ids=["kinds", "no-templates-table"])
def test_option_estimates_equal_the_reference(seed, with_templates):
    scores, templates, probe = random_partition(seed, with_templates)
    table = option_estimates(build_cube(scores, probe, templates))
    expected = reference_option_estimates(scores, LL_COLUMNS, templates, probe)
    assert table.height > 0
    assert_frame_equal(table, expected, check_exact=False, rel_tol=0, abs_tol=1e-12)


def test_option_estimates_of_several_partitions_equal_the_reference():
    parts = [random_partition(s) for s in range(5)]
    scores, templates, probe = (pl.concat([p[k] for p in parts]) for k in range(3))
    table = option_estimates(partition_cubes(scores, probe, templates))
    expected = reference_option_estimates(scores, LL_COLUMNS, templates, probe)
    assert table.select("model_id", "relation_id").unique().height == 5
    assert_frame_equal(table, expected, check_exact=False, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_marginal_sums_to_one_and_the_estimator_reads_its_top(seed):
    scores, templates, probe = random_partition(seed)
    cube = build_cube(scores, probe, templates)
    table = option_estimates(cube)
    per_instance = table.group_by("instance_id", "reduction").agg(
        total=pl.col("probability").sum(), top=pl.col("probability").max()
    )
    np.testing.assert_allclose(per_instance["total"].to_numpy(), 1.0, atol=1e-12)
    estimates = compute_estimates(cube, ["template_marginal"], log=lambda _: None)
    joined = estimates.join(per_instance, on=["instance_id", "reduction"], how="full", coalesce=True)
    assert joined.height == estimates.height == per_instance.height
    np.testing.assert_allclose(joined["confidence"].to_numpy(), joined["top"].to_numpy(), atol=0)


def test_permuting_options_changes_no_option_probability():
    # the same statements under other option indices (one permutation per instance): each object
    # keeps its probability
    rng = np.random.default_rng(5)
    rows, permuted = [], []
    for i in range(30):
        k = int(rng.integers(1, 8))
        new_index = rng.permutation(k)
        for t in ("P1:c0", "P1:c1", "P1:g0"):
            if rng.random() < 0.2:
                continue
            for o in range(k):
                ll = float(rng.normal(-10, 3))
                rows.append((f"i{i:02d}", t, o, f"Q{i}_{o}", o == 0, ll))
                permuted.append((f"i{i:02d}", t, int(new_index[o]), f"Q{i}_{o}", o == 0, ll))
    kinds = templates_table("P1", {"P1:c0": "curated", "P1:c1": "curated", "P1:g0": "generated"})
    keep = ["instance_id", "option_id", "is_gold", "reduction", "probability"]
    a = option_estimates(build_cube(statements(rows, relation="P1"), templates=kinds))
    b = option_estimates(build_cube(statements(permuted, relation="P1"), templates=kinds))
    assert not a["option_index"].equals(b.sort("instance_id", "option_id")["option_index"])
    a, b = a.select(keep).sort("instance_id", "option_id"), b.select(keep).sort("instance_id", "option_id")
    assert a.drop("probability").equals(b.drop("probability"))
    np.testing.assert_allclose(a["probability"].to_numpy(), b["probability"].to_numpy(), rtol=0, atol=1e-12)
