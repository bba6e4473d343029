"""build_cube and partition_cubes on small hand-made frames: layout, padding, metadata, and errors."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation import build_cube, partition_cubes

NEG_INF = -np.inf


def scores():
    """Model m, relation P36, two templates; rows deliberately not in (instance, template, option) order.

    i1: t0 options 0 (gold, Q1), 1 (Q2), 2 (Q3); t1 options 0, 1 only (option 2 unscored there)
    i2: t0 options 0 (Q4), 1 (gold, Q5); no t1 statement at all
    → I = 2, T = 2, O = 3 (the largest option_index + 1).
    ll_sum_dropout holds 2 passes per statement; ll_mean and ll_answer_sum_dropout are all null.
    """
    rows = [
        # instance, template, option, object, gold, ll_sum, dropout passes
        ("i2", "t0", 1, "Q5", True, -5.0, [-5.1, -4.9]),
        ("i1", "t1", 0, "Q1", True, -1.5, [-1.6, -1.4]),
        ("i1", "t0", 2, "Q3", False, -3.0, [-3.1, -2.9]),
        ("i1", "t0", 0, "Q1", True, -1.0, [-1.1, -0.9]),
        ("i2", "t0", 0, "Q4", False, -4.0, [-4.1, -3.9]),
        ("i1", "t1", 1, "Q2", False, -2.5, [-2.6, -2.4]),
        ("i1", "t0", 1, "Q2", False, -2.0, [-2.1, -1.9]),
    ]
    frame = pl.DataFrame(
        rows,
        schema={
            "instance_id": pl.String,
            "template_id": pl.String,
            "option_index": pl.Int32,
            "object_id": pl.String,
            "is_gold": pl.Boolean,
            "ll_sum": pl.Float64,
            "ll_sum_dropout": pl.List(pl.Float64),
        },
        orient="row",
    )
    return frame.select(
        pl.lit("m").alias("model_id"),
        pl.lit("P36").alias("relation_id"),
        *frame.columns,
        pl.lit(None, pl.Float64).alias("ll_mean"),
        pl.lit(None, pl.List(pl.Float64)).alias("ll_answer_sum_dropout"),
        pl.lit("not a score column").alias("text"),
    )


def probe_instances():
    # unsorted, with an instance (i9) that was not scored: it must be ignored
    return pl.DataFrame(
        {"instance_id": ["i9", "i2", "i1"], "n_options": [7, 2, 3], "split": ["test", "dev", "test"]}
    )


def templates():
    # t1 is a verbal-marker variant sharing t0's rank 0; P30 also has a 't0' of another kind,
    # which must not leak into P36's cube
    return pl.DataFrame(
        {
            "relation_id": ["P30", "P36", "P36"],
            "template_id": ["t0", "t1", "t0"],
            "kind": ["generated", "marker_verbal", "curated"],
            "rank": [3, 0, 0],
        }
    )


def test_layout_padding_and_masks():
    cube = build_cube(scores())
    assert (cube.model_id, cube.relation_id) == ("m", "P36")
    assert cube.shape == (2, 2, 3)
    assert cube.instance_ids.tolist() == ["i1", "i2"]
    assert cube.template_ids.tolist() == ["t0", "t1"]
    # valid[i, t, o]: i1/t0 all three, i1/t1 options 0 and 1, i2/t0 options 0 and 1, i2/t1 nothing
    assert cube.valid.tolist() == [
        [[True, True, True], [True, True, False]],
        [[True, True, False], [False, False, False]],
    ]
    assert cube.present.tolist() == [[True, True], [True, False]]
    # gold[i, o]: i1's option 0, i2's option 1
    assert cube.gold.tolist() == [[True, False, False], [False, True, False]]
    # option_ids[i, o]: None where the instance has no option 2
    assert cube.option_ids.tolist() == [["Q1", "Q2", "Q3"], ["Q4", "Q5", None]]
    # ll_sum at its (i, t, o), −inf wherever valid is False
    ll = cube.scores["ll_sum"]
    assert ll.dtype == np.float64
    assert ll.tolist() == [
        [[-1.0, -2.0, -3.0], [-1.5, -2.5, NEG_INF]],
        [[-4.0, -5.0, NEG_INF], [NEG_INF, NEG_INF, NEG_INF]],
    ]
    np.testing.assert_array_equal(cube.ll("sum"), ll)
    assert np.isneginf(ll[~cube.valid]).all()


def test_row_order_does_not_matter():
    a = build_cube(scores())
    b = build_cube(scores().reverse())
    for name in ("instance_ids", "template_ids", "option_ids", "valid", "gold", "n_options"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.scores["ll_sum"], b.scores["ll_sum"])


def test_counts_and_splits_from_probe_instances():
    # without probe_instances: the scored options per instance (i1: 0, 1, 2 → 3; i2: 0, 1 → 2), no split
    cube = build_cube(scores())
    assert cube.n_options.tolist() == [3, 2]
    assert cube.split.tolist() == [None, None]
    # with it: its n_options and split, aligned to the cube's sorted instances (i9 ignored)
    cube = build_cube(scores(), instances=probe_instances())
    assert cube.n_options.tolist() == [3, 2]
    assert cube.split.tolist() == ["test", "dev"]
    # the table's count wins over the scored count (an option may be unscored everywhere)
    more = probe_instances().with_columns(n_options=pl.Series([7, 4, 5]))
    assert build_cube(scores(), instances=more).n_options.tolist() == [5, 4]


def test_answer_space_k_from_probe_instances():
    # probe_instances from `kcal demo --answer-space-k 2 --answer-space-draws 2`: full instances
    # have answer_space_k and answer_space_draw 0, their `#k2d1`, `#k2d2` copies k 2 and draw 1, 2.
    # The cube keeps them (0 also when a hand-built frame lacks the columns, and without
    # probe_instances), so metrics keep every answer space apart; a null is refused by name.
    copies = pl.concat(
        [
            probe_instances().with_columns(
                answer_space_k=pl.lit(0, pl.Int32), answer_space_draw=pl.lit(0, pl.Int32)
            ),
            *(
                probe_instances().with_columns(
                    instance_id=pl.col("instance_id") + f"#k2d{draw}",
                    n_options=pl.lit(2, pl.Int64),
                    answer_space_k=pl.lit(2, pl.Int32),
                    answer_space_draw=pl.lit(draw, pl.Int32),
                )
                for draw in (1, 2)
            ),
        ]
    )
    frame = pl.concat(
        [scores(), *(scores().with_columns(instance_id=pl.col("instance_id") + f"#k2d{d}") for d in (1, 2))]
    )
    cube = build_cube(frame, instances=copies)
    assert cube.instance_ids.tolist() == ["i1", "i1#k2d1", "i1#k2d2", "i2", "i2#k2d1", "i2#k2d2"]
    assert cube.answer_space_k.tolist() == [0, 2, 2, 0, 2, 2]
    assert cube.answer_space_draw.tolist() == [0, 1, 2, 0, 1, 2]
    spaces, space_of = cube.answer_spaces()
    assert (spaces, space_of.tolist()) == ([(0, 0), (2, 1), (2, 2)], [0, 1, 2, 0, 1, 2])
    assert cube.split.tolist() == ["test"] * 3 + ["dev"] * 3  # a copy keeps its parent's split
    nulled = copies.with_columns(
        answer_space_draw=pl.when(pl.col("answer_space_draw") == 2)
        .then(None)
        .otherwise(pl.col("answer_space_draw"))
    )
    with pytest.raises(ValueError, match=r"answer_space_draw is null for instance 'i1#k2d2'"):
        build_cube(frame, instances=nulled)
    assert build_cube(scores(), instances=probe_instances()).answer_space_k.tolist() == [0, 0]
    assert build_cube(scores()).answer_space_draw.tolist() == [0, 0]


def test_template_kinds_and_ranks():
    # without a templates table: kinds None, ranks −1
    cube = build_cube(scores())
    assert cube.template_kinds.tolist() == [None, None]
    assert cube.template_ranks.tolist() == [-1, -1]
    # with it: P36's rows only (P30's 't0' is 'generated', rank 3), aligned to t0, t1
    cube = build_cube(scores(), templates=templates())
    assert cube.template_kinds.tolist() == ["curated", "marker_verbal"]
    assert cube.template_ranks.tolist() == [0, 0]


def test_dropout_passes_become_an_axis_and_null_columns_are_left_out():
    cube = build_cube(scores())
    # ll_mean and ll_answer_sum_dropout are all null, `text` is no score column: none is carried
    assert sorted(cube.scores) == ["ll_sum", "ll_sum_dropout"]
    passes = cube.scores["ll_sum_dropout"]
    assert passes.shape == (2, 2, 3, 2)  # [I, T, O, M], M = 2 passes
    assert passes[0, 0, 0].tolist() == [-1.1, -0.9]  # i1, t0, option 0
    assert passes[1, 0, 1].tolist() == [-5.1, -4.9]  # i2, t0, option 1
    assert np.isneginf(passes[~cube.valid]).all()  # padded cells: −inf in every pass
    with pytest.raises(KeyError):
        cube.ll("mean")


# --- errors ------------------------------------------------------------------------------------------


def test_duplicate_statement_is_named():
    frame = scores()
    with pytest.raises(ValueError, match=r"duplicate rows for instance 'i1', template 't0', option_index 2"):
        build_cube(
            pl.concat([frame, frame.filter((pl.col("instance_id") == "i1") & (pl.col("option_index") == 2))])
        )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_score_is_named(bad):
    frame = scores().with_columns(
        ll_sum=pl.when((pl.col("template_id") == "t1") & (pl.col("option_index") == 1))
        .then(bad)
        .otherwise(pl.col("ll_sum"))
    )
    with pytest.raises(
        ValueError, match=rf"column 'll_sum' has a non-finite value {bad!r} \(instance 'i1', template 't1'\)"
    ):
        build_cube(frame)


def test_non_finite_dropout_pass_is_named():
    # the second pass of i2/t0/option 0 is NaN
    frame = scores().with_columns(
        ll_sum_dropout=pl.when(pl.col("object_id") == "Q4")
        .then(pl.lit([-4.1, float("nan")], pl.List(pl.Float64)))
        .otherwise(pl.col("ll_sum_dropout"))
    )
    with pytest.raises(
        ValueError, match=r"column 'll_sum_dropout' has a non-finite value .*\(instance 'i2', template 't0'\)"
    ):
        build_cube(frame)


def test_partly_null_score_column_is_rejected():
    # a column computed for some statements only is not "absent": it is broken
    frame = scores().with_columns(ll_mean=pl.when(pl.col("instance_id") == "i1").then(-1.0))
    with pytest.raises(ValueError, match=r"column 'll_mean' has a non-finite value None \(instance 'i2'"):
        build_cube(frame)


def test_scored_instance_missing_from_probe_instances():
    with pytest.raises(ValueError, match=r"probe_instances: no row for scored instance 'i2'"):
        build_cube(scores(), instances=probe_instances().filter(pl.col("instance_id") != "i2"))


def test_template_missing_from_templates():
    with pytest.raises(ValueError, match=r"templates: no row for template 't1' of P36"):
        build_cube(scores(), templates=templates().filter(pl.col("template_id") != "t1"))


def test_two_relations_in_one_cube():
    frame = pl.concat([scores(), scores().with_columns(relation_id=pl.lit("P30"))])
    with pytest.raises(ValueError, match=r"a cube holds one partition, but relation_id has \['P30', 'P36'\]"):
        build_cube(frame)


def test_two_models_in_one_cube():
    frame = pl.concat([scores(), scores().with_columns(model_id=pl.lit("m2"))])
    with pytest.raises(ValueError, match=r"model_id has \['m', 'm2'\]"):
        build_cube(frame)


def test_empty_frame():
    with pytest.raises(ValueError, match="scores: no rows"):
        build_cube(scores().clear())


@pytest.mark.parametrize(
    "column", ["model_id", "instance_id", "template_id", "option_index", "object_id", "is_gold", "ll_sum"]
)
def test_missing_column_is_named(column):
    with pytest.raises(ValueError, match=f"scores: missing column '{column}'"):
        build_cube(scores().drop(column))


def test_null_key_and_negative_option_index():
    frame = scores().with_columns(
        instance_id=pl.when(pl.col("object_id") == "Q4").then(None).otherwise("instance_id")
    )
    with pytest.raises(ValueError, match=r"column 'instance_id' has 1 null value"):
        build_cube(frame)
    with pytest.raises(ValueError, match=r"option_index must be >= 0, got -1"):
        build_cube(scores().with_columns(option_index=pl.col("option_index") - 1))


def test_probe_instances_and_templates_need_their_columns():
    with pytest.raises(ValueError, match="probe_instances: missing column 'split'"):
        build_cube(scores(), instances=probe_instances().drop("split"))
    with pytest.raises(ValueError, match="templates: missing column 'rank'"):
        build_cube(scores(), templates=templates().drop("rank"))


# --- partition_cubes ---------------------------------------------------------------------------------


def test_partition_cubes_splits_by_model_and_relation_in_sorted_order():
    # four partitions, listed out of order; P30's copy keeps only instance i2
    frame = pl.concat(
        [
            scores().with_columns(model_id=pl.lit("m2")),
            scores().with_columns(relation_id=pl.lit("P30")).filter(pl.col("instance_id") == "i2"),
            scores(),
            scores().with_columns(model_id=pl.lit("m2"), relation_id=pl.lit("P30")),
        ]
    )
    cubes = partition_cubes(frame, instances=probe_instances())
    assert [(c.model_id, c.relation_id) for c in cubes] == [
        ("m", "P30"),
        ("m", "P36"),
        ("m2", "P30"),
        ("m2", "P36"),
    ]
    assert [c.instance_ids.tolist() for c in cubes] == [["i2"], ["i1", "i2"], ["i1", "i2"], ["i1", "i2"]]
    assert [c.shape for c in cubes] == [(1, 1, 2), (2, 2, 3), (2, 2, 3), (2, 2, 3)]
    assert cubes[0].split.tolist() == ["dev"]  # probe_instances reaches every cube
    # each cube equals the one built from its partition alone
    alone = build_cube(scores())
    np.testing.assert_array_equal(cubes[1].scores["ll_sum"], alone.scores["ll_sum"])
    np.testing.assert_array_equal(cubes[1].valid, alone.valid)


def test_partition_cubes_needs_the_partition_columns():
    with pytest.raises(ValueError, match="scores: missing column 'relation_id'"):
        partition_cubes(scores().drop("relation_id"))
