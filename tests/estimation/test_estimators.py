"""Base and Margin on hand-computed examples, and compute_estimates' bookkeeping and validation."""

import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation.registry import ESTIMATORS, base, compute_estimates, margin, register


def ll(*probs):
    return np.log(np.array(probs, dtype=np.float64))


def test_base_and_margin_by_hand():
    # lls = log [0.5, 0.3, 0.2] → softmax = [0.5, 0.3, 0.2] (already normalised)
    # Base = 0.5, Margin = 0.5 − 0.3 = 0.2, prediction = position 0
    assert base(ll(0.5, 0.3, 0.2)) == (0, pytest.approx(0.5))
    assert margin(ll(0.5, 0.3, 0.2)) == (0, pytest.approx(0.2))
    # the top option need not come first: log [0.2, 0.3, 0.5] → position 2, same numbers
    assert base(ll(0.2, 0.3, 0.5)) == (2, pytest.approx(0.5))
    assert margin(ll(0.2, 0.3, 0.5)) == (2, pytest.approx(0.2))


def test_softmax_is_shift_invariant_and_does_not_overflow():
    # lls [-1000, -1001]: p = [1, e^-1] / (1 + e^-1)
    # → Base = 1/(1 + e^-1) = 0.731059; Margin = (1 − e^-1)/(1 + e^-1) = 0.462117
    assert base(np.array([-1000.0, -1001.0]))[1] == pytest.approx(1 / (1 + math.e**-1))
    assert margin(np.array([-1000.0, -1001.0]))[1] == pytest.approx((1 - math.e**-1) / (1 + math.e**-1))
    # +800 would overflow a naive exp(); the max-shift keeps it exact
    assert base(ll(0.5, 0.3, 0.2) + 800.0)[1] == pytest.approx(0.5)


def test_argmax_tie_goes_to_lowest_index():
    # lls [-1, -2, -1]: positions 0 and 2 tie; p0 = p2 = 1 / (2 + e^-1) = 0.42232; Margin = p0 − p2 = 0
    lls = np.array([-1.0, -2.0, -1.0])
    assert base(lls) == (0, pytest.approx(1 / (2 + math.e**-1)))
    assert margin(lls) == (0, pytest.approx(0.0))


def test_single_option_margin_equals_base():
    # one option: p = [1]; there is no runner-up, so Margin = Base = 1
    assert base(np.array([-7.5])) == (0, 1.0)
    assert margin(np.array([-7.5])) == (0, 1.0)


def test_registry_rejects_duplicate_names():
    assert {"base", "margin"} <= set(ESTIMATORS)
    with pytest.raises(ValueError, match="'base' is already registered"):
        register("base")(lambda v: (0, 1.0))


def scores_frame():
    """Two instances, one template; option_index deliberately non-contiguous and rows unsorted.

    i1: options 0 (gold, p=0.5), 3 (p=0.2), 7 (p=0.3) → predicted option_index 0, correct;
        Base 0.5, Margin 0.2.
    i2: options 1 (p=0.6), 2 (gold, p=0.4) → predicted option_index 1 (object 'Q20'), wrong;
        Base 0.6, Margin 0.2.
    """
    return pl.DataFrame(
        {
            "model_id": ["m"] * 5,
            "relation_id": ["P36"] * 5,
            "instance_id": ["i2", "i1", "i1", "i2", "i1"],
            "template_id": ["t0"] * 5,
            "option_index": [2, 7, 0, 1, 3],
            "object_id": ["Q21", "Q13", "Q10", "Q20", "Q12"],
            "is_gold": [True, False, True, False, False],
            "ll_sum": [math.log(0.4), math.log(0.3), math.log(0.5), math.log(0.6), math.log(0.2)],
        }
    )


def test_compute_estimates_by_hand():
    out = compute_estimates(scores_frame())
    assert out.columns == [
        "model_id",
        "relation_id",
        "instance_id",
        "template_id",
        "estimator",
        "predicted_index",
        "predicted_id",
        "confidence",
        "correct",
    ]
    assert out["predicted_index"].dtype == pl.Int32
    assert out["confidence"].dtype == pl.Float64
    assert out["correct"].dtype == pl.Boolean
    rows = out.select("instance_id", "estimator", "predicted_index", "predicted_id", "correct").rows()
    assert rows == [
        ("i1", "base", 0, "Q10", True),
        ("i1", "margin", 0, "Q10", True),
        ("i2", "base", 1, "Q20", False),
        ("i2", "margin", 1, "Q20", False),
    ]
    assert out["confidence"].to_list() == pytest.approx([0.5, 0.2, 0.6, 0.2])


def test_reduction_selects_the_column_and_estimators_the_subset():
    # ll_mean makes option 3 of i1 the top one: [0.1, 0.7, 0.2] over options 0, 3, 7 → Base 0.7
    df = scores_frame().with_columns(ll_mean=pl.Series(np.log([0.5, 0.2, 0.1, 0.5, 0.7])))
    out = compute_estimates(df, estimators=["base"], reduction="ll_mean")
    assert out["estimator"].to_list() == ["base", "base"]
    i1 = out.row(0, named=True)
    assert (i1["predicted_index"], i1["predicted_id"], i1["correct"]) == (3, "Q12", False)
    assert i1["confidence"] == pytest.approx(0.7)


def test_permuting_options_changes_nothing():
    # Same statements listed in a different option order (gold flags move with their option):
    # the softmax is permutation-equivariant, so confidence, correctness and the predicted object
    # must be identical. Random lls are tie-free, so the tie rule cannot interfere.
    rng = np.random.default_rng(7)
    rows = []
    for inst in range(30):
        k = int(rng.integers(1, 8))
        gold = int(rng.integers(0, k))
        for o in range(k):
            ll_sum = float(rng.normal(-20, 3))
            rows.append(("m", "P1", f"i{inst:02d}", "t0", o, f"Q{inst}_{o}", o == gold, ll_sum))
    cols = [
        "model_id",
        "relation_id",
        "instance_id",
        "template_id",
        "option_index",
        "object_id",
        "is_gold",
        "ll_sum",
    ]
    df = pl.DataFrame(rows, schema=cols, orient="row")
    shuffled = df.with_columns(
        option_index=pl.col("option_index").shuffle(seed=3).over("instance_id")
    ).sample(fraction=1.0, shuffle=True, seed=5)
    keep = ["instance_id", "estimator", "predicted_id", "confidence", "correct"]
    a, b = compute_estimates(df).select(keep), compute_estimates(shuffled).select(keep)
    assert a["predicted_id"].to_list() == b["predicted_id"].to_list()
    assert a["correct"].to_list() == b["correct"].to_list()
    np.testing.assert_allclose(a["confidence"].to_numpy(), b["confidence"].to_numpy(), rtol=1e-12)
    assert 0 < a["correct"].sum() < a.height  # both outcomes occur, so the check has teeth


def test_unknown_estimator_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"'nope'.*known: \['base', 'margin'"):
        compute_estimates(scores_frame(), estimators=["base", "nope"])


@pytest.mark.parametrize("col", ["template_id", "is_gold", "ll_sum"])
def test_missing_column_is_named(col):
    with pytest.raises(ValueError, match=f"missing column '{col}'"):
        compute_estimates(scores_frame().drop(col))


def test_missing_reduction_column_is_named():
    with pytest.raises(ValueError, match="missing column 'll_mean'"):
        compute_estimates(scores_frame(), reduction="ll_mean")


def test_duplicate_option_rows_are_rejected():
    df = scores_frame()
    with pytest.raises(ValueError, match=r"duplicate rows for instance 'i1', template 't0', option_index 7"):
        compute_estimates(pl.concat([df, df.filter(pl.col("option_index") == 7)]))


def test_non_finite_log_likelihood_is_rejected():
    df = scores_frame().with_columns(
        ll_sum=pl.when(pl.col("option_index") == 3).then(float("nan")).otherwise(pl.col("ll_sum"))
    )
    with pytest.raises(ValueError, match=r"'ll_sum' has a non-finite value nan \(instance 'i1'"):
        compute_estimates(df)


def test_empty_scores_are_rejected():
    with pytest.raises(ValueError, match="no rows"):
        compute_estimates(scores_frame().clear())
