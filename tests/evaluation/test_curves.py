"""Rejection, risk–coverage and ROC curves on examples computed by hand (arithmetic in the comments),
against sklearn's roc_curve, and the long `curves` table compute_curves writes."""

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcal_pipeline.evaluation import METRICS, compute_curves
from kcal_pipeline.evaluation.curves import (
    REJECTION_THRESHOLDS,
    SCHEMA,
    rejection_curve,
    risk_coverage_curve,
    roc_curve,
)

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
aurc, auroc = METRICS["aurc"], METRICS["auroc"]

# 0.9 ✓, 0.8 ✗, 0.8 ✓, 0.3 ✗, 0.1 ✓ (a tie at 0.8, wrong first in input order)
C5 = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
Y5 = np.array([True, False, True, False, True])


def test_rejection_curve_by_hand():
    # τ = 0.1: none rejected (C < 0.1), kept 5, accuracy 3/5
    # τ = 0.2, 0.3: 0.1 rejected → x 1/5, kept 0.9 ✓ 0.8 ✗ 0.8 ✓ 0.3 ✗ → 2/4 (0.3 is kept at τ = 0.3: C ≥ τ)
    # τ = 0.4 … 0.8: 0.3 rejected too → x 2/5, kept 0.9 ✓ 0.8 ✗ 0.8 ✓ → 2/3
    # τ = 0.9: only 0.9 kept → x 4/5, accuracy 1
    curve = rejection_curve(C5, Y5)
    assert curve["threshold"].to_list() == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert curve["x"].to_list() == pytest.approx([0, 0.2, 0.2, 0.4, 0.4, 0.4, 0.4, 0.4, 0.8])
    assert curve["y"].to_list() == pytest.approx([0.6, 0.5, 0.5] + [2 / 3] * 5 + [1.0])
    assert curve["n"].to_list() == [5, 4, 4, 3, 3, 3, 3, 3, 1]
    assert curve["bin"].null_count() == 9


def test_rejection_curve_with_nothing_kept_is_nan():
    # 0.05 and 0.35: from τ = 0.4 on nothing is kept → x = 1, accuracy NaN, n = 0
    curve = rejection_curve([0.05, 0.35], [True, False])
    assert curve["n"].to_list() == [1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert curve["x"].to_list() == [0.5, 0.5, 0.5] + [1.0] * 6
    assert curve["y"][0] == 0.0 and all(math.isnan(v) for v in curve["y"][3:].to_list())


def test_rejection_thresholds_are_the_decimals():
    assert REJECTION_THRESHOLDS == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def test_risk_coverage_curve_by_hand():
    # stable descending order: 0.9 ✓, 0.8 ✗, 0.8 ✓ (tie kept in input order), 0.3 ✗, 0.1 ✓
    # errors among the top k: 0, 1, 1, 2, 2 → risk 0, 1/2, 1/3, 1/2, 2/5 at coverage k/5
    curve = risk_coverage_curve(C5, Y5)
    assert curve["x"].to_list() == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert curve["y"].to_list() == pytest.approx([0, 1 / 2, 1 / 3, 1 / 2, 2 / 5])
    assert curve["n"].to_list() == [1, 2, 3, 4, 5]
    assert curve["threshold"].null_count() == 5


def test_risk_coverage_curve_stays_small():
    # N = 250: k = ⌈q·250⌉ for q = 1 … 100 % = 3, 5, 8, 10, … 250: 100 distinct points, not 250
    rng = np.random.default_rng(0)
    c, y = rng.random(250), rng.random(250) < 0.5
    curve = risk_coverage_curve(c, y)
    assert curve.height == 100
    assert curve["n"][:4].to_list() == [3, 5, 8, 10] and curve["n"][-1] == 250
    # N = 3: q 1–33 % → k 1, 34–66 % → 2 (⌈1.02⌉), 67–100 % → 3
    assert risk_coverage_curve([0.1, 0.5, 0.9], [1, 0, 1])["n"].to_list() == [1, 2, 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.1, 0.4, 0.4, 0.8]), st.booleans()), min_size=1, max_size=100))
def test_risk_coverage_curve_of_at_most_100_points_averages_to_aurc(points):
    # with N ≤ 100 every k = 1..N is drawn, so the mean of the risks is AURC exactly
    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    curve = risk_coverage_curve(c, y)
    assert curve["n"].to_list() == list(range(1, len(points) + 1))
    assert curve["y"].mean() == pytest.approx(aurc(c, y), abs=1e-12)


def test_roc_curve_by_hand():
    # positives (correct) 3, negatives 2. Accept C ≥ t, t descending over the distinct values:
    #   t = inf: (0, 0), n 0;  0.9: TP 1 → (0, 1/3), n 1;  0.8: TP 2, FP 1 → (1/2, 2/3), n 3
    #   0.3: FP 2 → (1, 2/3), n 4;  0.1: TP 3 → (1, 1), n 5
    curve = roc_curve(C5, Y5)
    assert curve["threshold"].to_list() == [math.inf, 0.9, 0.8, 0.3, 0.1]
    assert curve["x"].to_list() == pytest.approx([0, 0, 0.5, 1, 1])
    assert curve["y"].to_list() == pytest.approx([0, 1 / 3, 2 / 3, 2 / 3, 1])
    assert curve["n"].to_list() == [0, 1, 3, 4, 5]
    # trapezoids: 0.5·(1/3 + 2/3)·0.5 + 0.5·(2/3 + 2/3)·0.5 = 0.25 + 0.3333 = 7/12 = AUROC
    # (pairs: 0.9 beats both ✗, 0.8✓ beats 0.3 and ties 0.8 → 1.5, 0.1 beats none → 3.5/6)
    assert np.trapezoid(curve["y"], curve["x"]) == pytest.approx(7 / 12)
    assert auroc(C5, Y5) == pytest.approx(7 / 12)


def test_roc_curve_with_one_class_has_nan_rates():
    curve = roc_curve([0.2, 0.7], [1, 1])
    assert curve["y"].to_list() == [0.0, 0.5, 1.0]
    assert all(math.isnan(v) for v in curve["x"].to_list())


TIE_PRONE = st.lists(
    st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]), st.booleans()),
    min_size=2,
    max_size=80,
)


@settings(max_examples=100, deadline=None)
@given(TIE_PRONE)
def test_roc_curve_equals_sklearn_and_its_area_auroc(points):
    from sklearn.metrics import roc_curve as sklearn_roc

    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    if not 0 < y.sum() < y.size:
        return
    fpr, tpr, thresholds = sklearn_roc(y, c, drop_intermediate=False)
    curve = roc_curve(c, y)
    np.testing.assert_allclose(curve["x"].to_numpy(), fpr, atol=1e-12)
    np.testing.assert_allclose(curve["y"].to_numpy(), tpr, atol=1e-12)
    np.testing.assert_array_equal(curve["threshold"].to_numpy(), thresholds)
    assert np.trapezoid(curve["y"], curve["x"]) == pytest.approx(auroc(c, y), abs=1e-12)


def frame(confidence, correct, output_kind="probability", estimator="base"):
    n = len(confidence)
    return pl.DataFrame(
        {
            "model_id": "m",
            "estimator": estimator,
            "output_kind": output_kind,
            "relation_id": "P36",
            "instance_id": [f"i{i}" for i in range(n)],
            "confidence": confidence,
            "correct": correct,
        }
    )


def test_compute_curves_writes_every_curve_in_one_table():
    # instance ids i0..i4 keep C5's input order after scopes() sorts by (relation, instance)
    out = compute_curves(frame(C5.tolist(), Y5.tolist()))
    assert out.schema == pl.Schema(SCHEMA)
    per = out.filter(scope="all").group_by("curve", maintain_order=True).len()
    # calibration: 5 points, 4 distinct values → 4 ACE bins (0.8 ×2 share one); rejection 9 τ;
    # risk–coverage k = 1..5; ROC (0, 0) + 4 distinct thresholds
    assert per.rows() == [("calibration", 4), ("rejection", 9), ("risk_coverage", 5), ("roc", 5)]
    # the one relation is scope "relation" with the same points
    assert (
        out.filter(scope="relation")
        .drop("scope", "scope_value")
        .equals(out.filter(scope="all").drop("scope", "scope_value"))
    )
    roc = out.filter(scope="all", curve="roc")
    assert roc["threshold"].to_list() == [math.inf, 0.9, 0.8, 0.3, 0.1]
    rejection = out.filter(scope="all", curve="rejection")
    assert rejection["y"].to_list() == pytest.approx([0.6, 0.5, 0.5] + [2 / 3] * 5 + [1.0])
    calibration = out.filter(scope="all", curve="calibration")
    assert calibration["threshold"].null_count() == 4 and calibration["bin"].null_count() == 0
    assert out.filter(curve="risk_coverage")["threshold"].null_count() == 10


def test_score_estimators_get_order_curves_only():
    # a score-valued estimator (values outside [0, 1]): no reliability or rejection curve
    out = compute_curves(frame([3.0, -1.0, 7.5], [True, False, True], output_kind="score"))
    assert out["curve"].unique(maintain_order=True).to_list() == ["risk_coverage", "roc"]
    # most confident first 7.5 ✓, 3.0 ✓, −1.0 ✗ → risks 0, 0, 1/3; ROC (0,0) (0,½) (0,1) (1,1)
    rc = out.filter(scope="all", curve="risk_coverage")
    assert rc["y"].to_list() == pytest.approx([0, 0, 1 / 3])
    roc = out.filter(scope="all", curve="roc")
    assert list(zip(roc["x"], roc["y"], strict=True)) == [(0, 0), (0, 0.5), (0, 1), (1, 1)]
    with pytest.raises(ValueError, match="no probability-valued estimator to draw rejection curves"):
        compute_curves(frame([3.0], [True], output_kind="score"), curves=["rejection"])


def test_compute_curves_selects_and_names_curves():
    out = compute_curves(frame(C5.tolist(), Y5.tolist()), curves=["roc"])
    assert out["curve"].unique().to_list() == ["roc"]
    with pytest.raises(ValueError, match=r"unknown curve\(s\) \['reliability'\]"):
        compute_curves(frame(C5.tolist(), Y5.tolist()), curves=["reliability"])


def test_compute_curves_equals_the_per_sample_curves_on_every_scope():
    """The vectorised table, scope by scope, equals the per-sample functions above (ties, one-class
    relations, one-row relations, bin edges included)."""
    from kcal_pipeline.evaluation.calibration import calibration_curve

    rng = np.random.default_rng(3)
    rows = []
    for r in range(12):
        n = int(rng.integers(1, 40))
        c = rng.choice([0.0, 0.15, 0.5, 0.9, 1.0], n) if r % 3 == 0 else rng.random(n)
        y = rng.random(n) < c if r % 4 else np.full(n, r % 8 == 0)
        rows += [
            (f"P{r:02d}", f"i{i:03d}", float(ci), bool(yi))
            for i, (ci, yi) in enumerate(zip(c, y, strict=True))
        ]
    est = pl.DataFrame(rows, schema=["relation_id", "instance_id", "confidence", "correct"], orient="row")
    est = est.with_columns(model_id=pl.lit("m"), estimator=pl.lit("base"))
    out = compute_curves(est)
    reference = {
        "calibration": lambda c, y: calibration_curve(c, y).rename({"conf": "x", "acc": "y"}),
        "rejection": rejection_curve,
        "risk_coverage": risk_coverage_curve,
        "roc": roc_curve,
    }
    scopes = [("all", "all", est)] + [
        ("relation", rel, g)
        for (rel,), g in est.sort("relation_id").group_by("relation_id", maintain_order=True)
    ]
    for scope, value, g in scopes:
        g = g.sort("relation_id", "instance_id")
        for curve, fn in reference.items():
            want = fn(g["confidence"].to_numpy(), g["correct"].to_numpy())
            got = out.filter(scope=scope, scope_value=value, curve=curve)
            assert got.height == want.height, (scope, value, curve)
            for col in ("x", "y", "n"):
                np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=0, atol=1e-12)
            if "threshold" in want.columns and want["threshold"].null_count() < want.height:
                assert got["threshold"].to_list() == want["threshold"].to_list()
            if curve == "calibration":
                assert got["bin"].to_list() == want["bin"].to_list()
