"""Metrics on examples computed by hand (the arithmetic is in the comments)."""

import itertools

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation import METRICS, compute_curves, compute_metrics
from kcal_pipeline.evaluation.accuracy import accuracy
from kcal_pipeline.evaluation.calibration import ace, brier, calibration_curve, ece
from kcal_pipeline.evaluation.registry import register, summary_metrics
from kcal_pipeline.evaluation.selective import aurc, auroc

# Three points, fewer than the 20 bins.
C3 = np.array([0.9, 0.6, 0.3])
Y3 = np.array([True, False, False])


def test_registry_holds_the_first_slice():
    assert list(METRICS) == ["accuracy", "ace", "ece", "brier", "auroc", "aurc"]


def test_accuracy():
    assert accuracy(C3, Y3) == pytest.approx(1 / 3)
    assert accuracy([0.2, 0.4], [1, 1]) == 1.0  # 0/1 ints are accepted as correctness


def test_ace_with_fewer_points_than_bins():
    # each point is its own bin, the 17 empty bins are skipped:
    # (|1 − 0.9| + |0 − 0.6| + |0 − 0.3|) / 3 = (0.1 + 0.6 + 0.3) / 3 = 1/3
    assert ace(C3, Y3) == pytest.approx(1 / 3)


def forty_points():
    """c_i = (i + 0.5)/40, i = 0..39; bin b holds i = 2b, 2b+1 (one right, one wrong).

    conf_b = (2b + 1)/40, acc_b = 0.5 → |acc_b − conf_b| = |19 − 2b| / 40.
    Σ_b |19 − 2b| = 2·(1 + 3 + … + 19) = 200 → ACE = 200 / (40·20) = 0.25.
    """
    c = (np.arange(40) + 0.5) / 40
    y = np.arange(40) % 2 == 0
    return c, y


def test_ace_with_exact_bins_of_two():
    c, y = forty_points()
    assert ace(c, y) == pytest.approx(0.25)
    perm = np.random.default_rng(1).permutation(40)  # no ties, so input order must not matter
    assert ace(c[perm], y[perm]) == pytest.approx(0.25)
    curve = calibration_curve(c, y)
    assert curve["n"].to_list() == [2] * 20
    assert curve["conf"].to_list() == pytest.approx([(2 * b + 1) / 40 for b in range(20)])


def test_quantile_bins_are_near_equal_count():
    # 41 points → numpy.array_split: the first 41 mod 20 = 1 bin gets 3, the rest 2
    c = np.linspace(0, 1, 41)
    assert calibration_curve(c, c > 0.5)["n"].to_list() == [3] + [2] * 19


def test_ace_ties_keep_input_order():
    # 40 identical confidences 0.5: the stable sort keeps input order, so bins are input pairs.
    c = np.full(40, 0.5)
    blocks = np.array([True] * 20 + [False] * 20)  # pairs (1,1)…(0,0): every |acc − 0.5| = 0.5
    alternating = np.arange(40) % 2 == 0  # pairs (1,0): every |acc − 0.5| = 0
    assert ace(c, blocks) == pytest.approx(0.5)
    assert ace(c, alternating) == pytest.approx(0.0)


def test_ace_ties_mixed_with_distinct_values_keep_input_order():
    # 19 distinct wrong points d_k = 0.02·(k+1), k = 0..18, and 21 ties at 0.5 whose correctness,
    # in input order, is T, then pairs TT FF TT FF … (5 of each). Sorted: d_0..d_18, then the ties.
    # 40 points → 20 bins of 2:
    #   bins 0..8: (d_2b, d_2b+1), acc 0, conf 0.04b + 0.03 → Σ_b (0.04b + 0.03) = 1.44 + 0.27 = 1.71
    #   bin 9: (d_18 = 0.38 ✗, first tie 0.5 ✓): conf 0.44, acc 0.5 → 0.06
    #   bins 10..19: the tie pairs TT or FF: |1 − 0.5| = |0 − 0.5| = 0.5 each → 5.0
    # ACE = (1.71 + 0.06 + 5.0) / 20 = 0.3385. An unstable sort that moves another tie into bin 9 or
    # splits a TT/FF pair gives less (a TF pair has gap 0).
    ties_y = [True] + [True, True, False, False] * 5
    distinct = [0.02 * (k + 1) for k in range(19)]
    c, y = [], []
    for i, tie_y in enumerate(ties_y):  # interleave so the sort has to move points
        c.append(0.5)
        y.append(tie_y)
        if i < 19:
            c.append(distinct[18 - i])
            y.append(False)
    c, y = np.array(c), np.array(y)
    assert ace(c, y) == pytest.approx(0.3385)
    curve = calibration_curve(c, y)
    assert curve["conf"][9] == pytest.approx(0.44) and curve["acc"][9] == 0.5
    assert curve["acc"][10:].to_list() == [1.0, 0.0] * 5


def test_ece_edges_and_closed_last_bin():
    # width 0.05; 1.0 falls in the closed last bin [0.95, 1.0] together with 0.95;
    # 0.15 sits exactly on an edge → bin 3 [0.15, 0.20); 0.1499 → bin 2.
    #   bin 19: conf (1.0 + 0.95)/2 = 0.975, acc 1/2 → gap 0.475, weight 2/4
    #   bin 3:  conf 0.15, acc 1 → gap 0.85, weight 1/4
    #   bin 2:  conf 0.1499, acc 0 → gap 0.1499, weight 1/4
    # ECE = (2·0.475 + 0.85 + 0.1499) / 4 = 1.9499 / 4 = 0.487475
    c = np.array([1.0, 0.95, 0.15, 0.1499])
    y = np.array([True, False, True, False])
    assert ece(c, y) == pytest.approx(0.487475)
    curve = calibration_curve(c, y, strategy="uniform")
    assert curve["bin"].to_list() == [2, 3, 19]
    assert curve["n"].to_list() == [1, 1, 2]


def test_every_decimal_edge_lands_in_its_upper_bin():
    # k/20 is the left edge of bin k; 1.0 joins bin 19
    c = np.array([k / 20 for k in range(21)])
    curve = calibration_curve(c, np.ones(21, dtype=bool), strategy="uniform")
    assert curve["bin"].to_list() == list(range(20))
    assert curve["n"].to_list() == [1] * 19 + [2]


def test_brier():
    # ((0.9 − 1)² + (0.6 − 0)² + (0.3 − 0)²) / 3 = (0.01 + 0.36 + 0.09) / 3 = 0.46 / 3
    assert brier(C3, Y3) == pytest.approx(0.46 / 3)
    # always 0.2, right on i = 0, 3, 6, 9 (4 of 10): (4·0.8² + 6·0.2²) / 10 = (2.56 + 0.24) / 10 = 0.28
    assert brier(np.full(10, 0.2), np.arange(10) % 3 == 0) == pytest.approx(0.28)
    # the same confidences, all wrong: 0.2² = 0.04
    assert brier(np.full(10, 0.2), np.zeros(10, dtype=bool)) == pytest.approx(0.04)


def test_auroc_ties_get_half_credit():
    # correct: {0.9, 0.5}, wrong: {0.5, 0.2}; pairs (correct, wrong):
    # (0.9,0.5)=1 (0.9,0.2)=1 (0.5,0.5)=½ (0.5,0.2)=1 → 3.5 / 4 = 0.875
    assert auroc([0.9, 0.5, 0.5, 0.2], [1, 1, 0, 0]) == pytest.approx(0.875)


def brute_auroc(c, y):
    pairs = list(itertools.product(c[y], c[~y]))
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_brute_force_pair_count(seed):
    rng = np.random.default_rng(seed)
    c = np.round(rng.random(60), 1)  # only 11 distinct values → many ties
    y = rng.random(60) < c
    assert auroc(c, y) == pytest.approx(brute_auroc(c, y))


def test_auroc_is_nan_with_one_class():
    assert np.isnan(auroc([0.2, 0.9], [1, 1]))
    assert np.isnan(auroc([0.2, 0.9], [0, 0]))


def test_aurc_by_hand():
    # sorted by confidence 0.9, 0.8, 0.7, 0.6 → errors 0, 1, 0, 1
    # risk(1..4) = 0/1, 1/2, 1/3, 2/4 → AURC = (0 + 0.5 + 0.3333 + 0.5) / 4 = 1/3
    c = np.array([0.7, 0.9, 0.6, 0.8])
    y = np.array([True, True, False, False])
    assert aurc(c, y) == pytest.approx(1 / 3)


def test_aurc_ties_keep_input_order():
    # tie at 0.5: errors [1, 0] → risks 1, 1/2 → 0.75; reversed [0, 1] → 0, 1/2 → 0.25
    assert aurc([0.5, 0.5], [0, 1]) == pytest.approx(0.75)
    assert aurc([0.5, 0.5], [1, 0]) == pytest.approx(0.25)


def test_aurc_ties_mixed_with_distinct_values_keep_input_order():
    # Most confident first: 0.9, 0.8, 0.7, 0.6 (all right); 16 ties at 0.5, in input order right,
    # wrong, right, wrong, …; then 0.4, 0.3, 0.2, 0.1 (all wrong). Errors among the k most confident:
    #   k = 1..4: E_k = 0;  k = 4 + j, j = 1..16: E_k = ⌊j/2⌋;  k = 21..24: E_k = k − 12.
    # Σ E_k/k = (1/6 + 1/7 + 2/8 + 2/9 + 3/10 + 3/11 + 4/12 + 4/13 + 5/14 + 5/15 + 6/16 + 6/17
    #            + 7/18 + 7/19 + 8/20) + (9/21 + 10/22 + 11/23 + 12/24)
    #         = 4.571226 + 1.861378 = 6.432604 → AURC = 6.432604 / 24 = 0.268025.
    # Swapping a right tie with the wrong tie after it (an unstable sort may) raises an E_k.
    high, low = [0.9, 0.8, 0.7, 0.6], [0.4, 0.3, 0.2, 0.1]
    c, y = [], []
    for i in range(16):  # interleave so the sort has to move points
        c.append(0.5)
        y.append(i % 2 == 0)
        if i < 4:
            c.append(low[i])
            y.append(False)
        elif i < 8:
            c.append(high[i - 4])
            y.append(True)
    assert aurc(np.array(c), np.array(y)) == pytest.approx(0.268025, abs=1e-6)


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan")])
def test_confidence_outside_unit_interval_is_named(bad):
    with pytest.raises(ValueError, match=f"confidence {bad} is outside"):
        ace([0.5, bad], [1, 0])


def test_bad_correctness_and_shapes_are_rejected():
    with pytest.raises(ValueError, match="got value 2"):
        brier([0.5, 0.5], [1, 2])
    with pytest.raises(ValueError, match="equal length"):
        brier([0.5, 0.5], [1])
    with pytest.raises(ValueError, match="empty"):
        ece([], [])
    with pytest.raises(ValueError, match="unknown binning strategy 'equal'"):
        calibration_curve([0.5], [1], strategy="equal")


def estimates_frame():
    """Two relations, two estimators; instance ids unique within a relation."""
    rng = np.random.default_rng(11)
    rows = []
    for rel, n in (("P36", 30), ("P17", 25)):
        for i in range(n):
            for est in ("base", "margin"):
                c = float(np.round(rng.random(), 2))
                rows.append(("m1", rel, f"Q{i:03d}", "t0", est, c, bool(rng.random() < c)))
    return pl.DataFrame(
        rows,
        orient="row",
        schema=[
            "model_id",
            "relation_id",
            "instance_id",
            "template_id",
            "estimator",
            "confidence",
            "correct",
        ],
    )


def test_compute_metrics_matches_the_metric_functions():
    est = estimates_frame()
    out = compute_metrics(est)
    assert out.columns == [
        "model_id", "estimator", "reduction", "scope", "scope_value", "metric", "value", "n",
        "higher_is_better",
    ]  # fmt: skip
    # 2 estimators × (all + 2 relations) × 6 metrics
    assert out.height == 2 * 3 * 6
    for (e, rel), g in est.sort("relation_id", "instance_id").group_by("estimator", "relation_id"):
        for name, fn in METRICS.items():
            row = out.filter(estimator=e, scope="relation", scope_value=rel, metric=name).row(0, named=True)
            assert row["value"] == pytest.approx(fn(g["confidence"].to_numpy(), g["correct"].to_numpy()))
            assert row["n"] == g.height
    allrow = out.filter(estimator="base", scope="all", metric="accuracy").row(0, named=True)
    base = est.filter(estimator="base")
    assert allrow["scope_value"] == "all" and allrow["n"] == 55
    assert allrow["value"] == pytest.approx(base["correct"].mean())


def test_compute_metrics_is_independent_of_row_order():
    # confidences are rounded to 2 decimals, so ties exist and the internal sort matters
    est = estimates_frame()
    a = compute_metrics(est)
    b = compute_metrics(est.sample(fraction=1.0, shuffle=True, seed=2))
    assert a.equals(b)


def test_compute_metrics_subset_and_errors():
    est = estimates_frame()
    assert compute_metrics(est, ["brier"])["metric"].unique().to_list() == ["brier"]
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['acc'\]"):
        compute_metrics(est, ["acc"])
    with pytest.raises(ValueError, match="no rows"):
        compute_metrics(est.clear())
    with pytest.raises(ValueError, match="missing column 'correct'"):
        compute_metrics(est.drop("correct"))
    with pytest.raises(ValueError, match="filter to one template"):
        compute_metrics(pl.concat([est, est.with_columns(template_id=pl.lit("t1"))]))
    with pytest.raises(ValueError, match=r"confidence 1\.2 is outside"):
        compute_metrics(est.with_columns(confidence=pl.lit(1.2)))


def test_compute_curves_reuse_the_ace_bins():
    est = estimates_frame()
    curves = compute_curves(est)
    assert curves.columns == [
        "model_id", "estimator", "reduction", "scope", "scope_value", "curve", "x", "y", "n", "bin"
    ]  # fmt: skip
    assert curves["curve"].unique().to_list() == ["calibration"]
    g = est.filter(estimator="margin").sort("relation_id", "instance_id")
    c, y = g["confidence"].to_numpy(), g["correct"].to_numpy()
    overall = curves.filter(estimator="margin", scope="all")
    assert overall["n"].sum() == 55
    # ACE recomputed from the drawn points equals the reported ACE
    assert (overall["y"] - overall["x"]).abs().mean() == pytest.approx(ace(c, y))
    expected = calibration_curve(c, y)
    assert overall["x"].to_list() == pytest.approx(expected["conf"].to_list())


def test_curve_and_ace_on_unequal_bins_by_hand():
    # 22 points → numpy.array_split into 20 bins: bins 0 and 1 get 2 points, bins 2..19 get 1.
    #   bin 0: 0.1 ✓, 0.2 ✗ → conf 0.15, acc 0.5 → gap 0.35
    #   bin 1: 0.3 ✗, 0.4 ✗ → conf 0.35, acc 0   → gap 0.35
    #   bins 2..19: 0.9 each, 9 right (gap 0.1) and 9 wrong (gap 0.9) → Σ 9·0.1 + 9·0.9 = 9.0
    # ACE = (0.35 + 0.35 + 9.0) / 20 = 0.485
    c = [0.1, 0.2, 0.3, 0.4] + [0.9] * 18
    y = [True, False, False, False] + [True, False] * 9
    est = pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": "P36",
            "instance_id": [f"Q{i:02d}" for i in range(22)],
            "template_id": "t0",
            "estimator": "base",
            "confidence": c,
            "correct": y,
        }
    )
    curve = compute_curves(est).filter(scope="all")
    assert curve["bin"].to_list() == list(range(20))
    assert curve["n"].to_list() == [2, 2] + [1] * 18
    assert curve["x"].to_list() == pytest.approx([0.15, 0.35] + [0.9] * 18)
    assert curve["y"].to_list() == [0.5, 0.0] + [1.0, 0.0] * 9
    reported = compute_metrics(est, ["ace"]).filter(scope="all")["value"].item()
    assert reported == pytest.approx(0.485)


# The metric contract: what each metric needs, and which direction is better.


def test_every_metric_declares_needs_and_direction():
    declared = {m.name: (m.needs, m.higher_is_better) for m in METRICS.values()}
    assert declared == {
        "accuracy": ("any", True),
        "ace": ("probability", False),
        "ece": ("probability", False),
        "brier": ("probability", False),
        "auroc": ("any", True),
        "aurc": ("any", False),
    }
    assert [m.name for m in summary_metrics()] == ["accuracy", "ace", "brier"]


def test_a_calibration_metric_refuses_scores_and_names_the_ones_that_apply():
    with pytest.raises(
        ValueError, match=r"'ace' needs probabilities.*unbounded score.*accuracy, auroc, aurc"
    ):
        METRICS["ace"]([0.5, 3.0], [1, 0], "score")
    # a ranking metric takes any real score: scores 3.0 (correct) > -2.0 (wrong) → AUROC 1
    assert METRICS["auroc"]([3.0, -2.0], [1, 0], "score") == 1.0
    with pytest.raises(ValueError, match="confidence inf is not a finite score"):
        METRICS["auroc"]([float("inf"), -2.0], [1, 0], "score")
    with pytest.raises(ValueError, match=r"confidence 3\.0 is outside"):
        METRICS["auroc"]([3.0, -2.0], [1, 0])  # without saying so, a confidence is a probability


def test_compute_metrics_leaves_probability_metrics_out_for_score_estimators():
    # "gap" is score-valued: values outside [0, 1]. Per relation P36 (3 instances):
    # scores 2.5 (correct), 0.1 (wrong), 7.0 (correct) → accuracy 2/3, AUROC 1 (both correct
    # above the wrong one), AURC: order 7.0 ✓, 2.5 ✓, 0.1 ✗ → risks 0, 0, 1/3 → mean 1/9.
    est = pl.DataFrame(
        {
            "model_id": ["m"] * 3,
            "estimator": ["gap"] * 3,
            "reduction": ["sum"] * 3,
            "output_kind": ["score"] * 3,
            "relation_id": ["P36"] * 3,
            "instance_id": ["a", "b", "c"],
            "confidence": [2.5, 0.1, 7.0],
            "correct": [True, False, True],
        }
    )
    out = compute_metrics(est).filter(scope="relation")
    got = {r["metric"]: (r["value"], r["higher_is_better"]) for r in out.iter_rows(named=True)}
    assert got == {
        "accuracy": (pytest.approx(2 / 3), True),
        "auroc": (1.0, True),
        "aurc": (pytest.approx(1 / 9), False),
    }
    with pytest.raises(ValueError, match="no probability-valued estimator"):
        compute_curves(est)


def test_reductions_are_separate_groups_not_duplicates():
    est = estimates_frame().with_columns(reduction=pl.lit("sum"))
    both = pl.concat([est, est.with_columns(reduction=pl.lit("mean"), confidence=pl.col("confidence") / 2)])
    out = compute_metrics(both, ["brier"]).filter(scope="all", estimator="base")
    assert out["reduction"].to_list() == ["mean", "sum"]
    assert out["value"][0] != out["value"][1]


def test_registering_a_metric_twice_or_with_unknown_needs_fails():
    with pytest.raises(ValueError, match="'ace' is already registered"):
        register("ace", label="x", family="x", needs="any", higher_is_better=True)(lambda c, y: 0.0)
    with pytest.raises(ValueError, match="needs must be 'probability' or 'any', got 'scores'"):
        register("new_metric", label="x", family="x", needs="scores", higher_is_better=True)(lambda c, y: 0.0)
    assert "new_metric" not in METRICS
