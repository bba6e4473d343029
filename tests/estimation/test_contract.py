"""The estimator contract's extensions: row masks, fitted parameters, the "{ll}" column
placeholder, data requirements, the estimator_status table and the paraphrase selection."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    Estimate,
    compute_estimate_tables,
)
from kcal_pipeline.reporting.coverage import estimator_coverage_lines

SCHEMA = ["instance_id", "template_id", "option_index", "object_id", "is_gold", "ll_sum"]


def frame(rows, **extra):
    scores = pl.DataFrame(rows, schema=SCHEMA, orient="row").with_columns(
        model_id=pl.lit("m"), relation_id=pl.lit("P1"), **{k: pl.lit(v) for k, v in extra.items()}
    )
    return scores


# i1, i2 × templates t0, t1 × options 0, 1 (option 0 gold)
ROWS = [(i, t, o, f"Q{o}", o == 0, -1.0 - o) for i in ("i1", "i2") for t in ("t0", "t1") for o in (0, 1)]


def test_rows_mask_keeps_only_the_chosen_cells(temp_estimators):
    # template grain: only (i1, t1) and (i2, t0) become rows; instance grain: only i2
    def some_templates(cube, reduction):
        rows = np.array([[False, True], [True, False]])
        return Estimate(np.zeros((2, 2), int), np.full((2, 2), 0.5), rows=rows)

    def some_instances(cube, reduction):
        return Estimate(np.array([0, 1]), np.array([0.9, 0.8]), rows=np.array([False, True]))

    temp_estimators("some_templates", some_templates)
    temp_estimators("some_instances", some_instances, grain="instance")
    out = compute_estimate_tables(build_cube(frame(ROWS)), ["some_templates", "some_instances"]).estimates
    assert out.select("instance_id", "template_id", "estimator", "correct").rows() == [
        ("i1", "t1", "some_templates", True),
        ("i2", "t0", "some_templates", True),
        ("i2", None, "some_instances", False),  # option 1 is not gold
    ]


def test_rows_mask_of_the_wrong_shape_is_named(temp_estimators):
    temp_estimators(
        "bad_rows", lambda cube, r: Estimate(np.zeros((2, 2), int), np.zeros((2, 2)), rows=np.ones(2, bool))
    )
    with pytest.raises(ValueError, match=r"'bad_rows'.*rows \(2,\)"):
        compute_estimate_tables(build_cube(frame(ROWS)), ["bad_rows"])


def test_fits_become_rows_with_defaults(temp_estimators):
    fits = (
        {"parameter": "tau", "value": 0.01, "n_dev": 3},
        {"parameter": "tau", "template_id": "t0", "note": "x"},
    )
    temp_estimators(
        "fitted", lambda cube, r: Estimate(np.zeros(2, int), np.ones(2), fits=fits), grain="instance"
    )
    out = compute_estimate_tables(build_cube(frame(ROWS)), ["fitted"]).fits
    assert out.rows() == [
        ("m", "P1", "fitted", "sum", None, 0, 0, "tau", 0.01, 3, None),
        ("m", "P1", "fitted", "sum", "t0", 0, 0, "tau", None, None, "x"),
    ]


def test_a_fit_with_unknown_keys_is_named(temp_estimators):
    temp_estimators(
        "badfit",
        lambda cube, r: Estimate(np.zeros(2, int), np.ones(2), fits=({"alpha": 1},)),
        grain="instance",
    )
    with pytest.raises(ValueError, match=r"'badfit': a fit needs 'parameter'.*got \['alpha'\]"):
        compute_estimate_tables(build_cube(frame(ROWS)), ["badfit"])


def test_ll_placeholder_names_the_reductions_own_column(temp_estimators):
    # "{ll}_masked" under 'sum' is ll_sum_masked: absent → skipped naming that column; present → runs
    temp_estimators(
        "masked", lambda cube, r: Estimate(np.zeros((2, 2), int), np.ones((2, 2))), needs=("{ll}_masked",)
    )
    assert ESTIMATORS["masked"].columns("sum") == ["ll_sum", "ll_sum_masked"]
    assert ESTIMATORS["masked"].columns("answer_sum") == ["ll_answer_sum", "ll_answer_sum_masked"]
    logged = []
    tables = compute_estimate_tables(build_cube(frame(ROWS)), ["masked"], log=logged.append)
    assert tables.estimates.is_empty()
    assert logged == ["skipped, no ll_sum_masked scores (P1): masked (sum)"]
    with_masked = frame(ROWS, ll_sum_masked=-3.0)
    assert compute_estimate_tables(build_cube(with_masked), ["masked"]).estimates.height == 4


def test_requirement_skips_with_its_reason_and_status_records_everything(temp_estimators):
    def three(cube, reduction):
        return None if cube.shape[1] >= 3 else f"needs ≥ 3 templates; the cube has {cube.shape[1]}"

    temp_estimators(
        "needs_three",
        lambda cube, r: Estimate(np.zeros(2, int), np.ones(2)),
        grain="instance",
        requires=three,
    )
    temp_estimators("always", lambda cube, r: Estimate(np.zeros(2, int), np.ones(2)), grain="instance")
    logged = []
    tables = compute_estimate_tables(build_cube(frame(ROWS)), ["needs_three", "always"], log=logged.append)
    assert logged == ["skipped, needs ≥ 3 templates; the cube has 2 (P1): needs_three (sum)"]
    assert tables.status.rows() == [
        ("m", "P1", "needs_three", "test", "sum", "skipped", 0, "needs ≥ 3 templates; the cube has 2"),
        ("m", "P1", "always", "test", "sum", "ran", 2, None),
    ]


def test_one_log_line_per_reason_names_every_estimator_it_kept_out(temp_estimators):
    for name in ("a", "b"):
        temp_estimators(
            name, lambda cube, r: Estimate(np.zeros((2, 2), int), np.ones((2, 2))), needs=("ll_sum_masked",)
        )
    logged = []
    compute_estimate_tables(build_cube(frame(ROWS)), ["a", "b"], log=logged.append)
    assert logged == ["skipped, no ll_sum_masked scores (P1): a (sum), b (sum)"]


def test_paraphrase_templates_are_the_curated_and_generated_ones():
    templates = pl.DataFrame(
        {
            "relation_id": "P1",
            "template_id": ["t0", "t1", "t2", "t3", "t4"],
            "kind": ["curated", "marker_verbal", "generated", "question", "perturbation"],
            "rank": [0, 0, 0, 0, 0],
            "text": "[X] is [Y].",
            "parent_id": [None, "t0", None, None, "t0"],
            "variant": [None, "certainly", None, None, "typo"],
        }
    )
    rows = [("i1", t, o, f"Q{o}", o == 0, -1.0 - o) for t in ("t0", "t1", "t2", "t3", "t4") for o in (0, 1)]
    cube = build_cube(frame(rows), templates=templates)
    assert cube.paraphrase_templates().tolist() == [0, 2]
    assert cube.templates_of_kind("marker_verbal", "perturbation").tolist() == [1, 4]
    assert cube.template_parents.tolist() == [None, "t0", None, None, "t0"]
    assert cube.template_variants.tolist() == [None, "certainly", None, None, "typo"]
    # without a templates table every template is a paraphrase, and parents are unknown
    bare = build_cube(frame(rows))
    assert bare.paraphrase_templates().tolist() == [0, 1, 2, 3, 4]
    assert bare.template_parents is None


def test_coverage_lines_count_families_and_explain_skips():
    status = pl.DataFrame(
        [
            ("m", "P1", "base", "single", "sum", "ran", 10, None),
            ("m", "P2", "base", "single", "sum", "ran", 10, None),
            ("m", "P1", "vote2_average", "aggregation", "sum", "ran", 5, None),
            ("m", "P1", "dropout_mean", "selective", "sum", "ran", 5, None),
            ("m", "P2", "dropout_mean", "selective", "sum", "skipped", 0, "no ll_sum_dropout scores"),
            ("m", "P1", "answer_prior", "null", "sum", "skipped", 0, "no ll_sum_masked scores"),
            ("m", "P1", "answer_prior", "null", "answer_sum", "skipped", 0, "no ll_answer_sum_masked scores"),
            ("m", "P2", "answer_prior", "null", "sum", "skipped", 0, "no ll_sum_masked scores"),
        ],
        schema=["model_id", "relation_id", "estimator", "family", "reduction", "status", "rows", "reason"],
        orient="row",
    )
    assert estimator_coverage_lines(status) == [
        "estimators: 3 of 4 ran (aggregation 1, selective 1, single 1)",
        "  not run, no ll_answer_sum_masked scores; no ll_sum_masked scores (P1, P2): answer_prior",
        "  skipped on some relations, no ll_sum_dropout scores (P2): dropout_mean",
    ]


def test_an_estimator_that_gives_no_rows_is_skipped_with_why(temp_estimators):
    """base_isotonic needs ≥ 2 dev instances per group: with one dev instance it runs and fits
    nothing, and estimator_status says skipped and why (it said `ran` with 0 rows), as does a
    registered estimator whose row mask is empty and that notes nothing."""
    temp_estimators(
        "nothing",
        lambda cube, r: Estimate(np.zeros(2, int), np.ones(2), rows=np.zeros(2, bool)),
        grain="instance",
    )
    instances = pl.DataFrame({"instance_id": ["i1", "i2"], "n_options": [2, 2], "split": ["dev", "test"]})
    logged = []
    tables = compute_estimate_tables(
        build_cube(frame(ROWS), instances), ["base_isotonic", "base_platt", "nothing"], log=logged.append
    )
    status = tables.status.filter(pl.col("reduction") == "sum").select(
        "estimator", "status", "rows", "reason"
    )
    assert status.rows() == [
        ("base_isotonic", "skipped", 0, "no rows: fewer than 2 dev instances"),
        ("base_platt", "ran", 4, None),  # one class on dev: the identity map, on every row
        ("nothing", "skipped", 0, "no rows: no instance had what it estimates from"),
    ]
    assert "skipped, no rows: fewer than 2 dev instances (P1): base_isotonic (sum)" in logged
    assert set(tables.estimates["estimator"]) == {"base_platt"}
    # the fits still say, per template, why nothing was fitted
    notes = tables.fits.filter(pl.col("estimator") == "base_isotonic")["note"].to_list()
    assert notes == ["fewer than 2 dev instances: no rows"] * 2
