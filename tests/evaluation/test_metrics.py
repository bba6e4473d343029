"""Metrics on examples computed by hand (the arithmetic is in the comments)."""

import itertools

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcal_pipeline.evaluation import METRICS, compute_curves, compute_metrics
from kcal_pipeline.evaluation.calibration import calibration_curve
from kcal_pipeline.evaluation.engine import compute_template_metrics
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA, register, summary_metrics

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
accuracy, ace, brier, ece, aurc, auroc = (
    METRICS["accuracy"],
    METRICS["ace"],
    METRICS["brier"],
    METRICS["ece"],
    METRICS["aurc"],
    METRICS["auroc"],
)

# Three points, fewer than the 20 bins.
C3 = np.array([0.9, 0.6, 0.3])
Y3 = np.array([True, False, False])


def test_registry_holds_the_first_slice():
    # accuracy, calibration and selective register first, in this order; later families append
    sweep = [f"{m}_b{b}" for m in ("ace", "ece") for b in (5, 10, 15, 30, 40, 50)]
    selective = [f"selective_accuracy_c{c}" for c in (50, 80, 90)]
    selective += [f"coverage_at_risk_r{r}" for r in ("05", "10", "20")]
    first = [
        "accuracy",
        "accuracy_macro",
        "ace",
        "ece",
        "brier",
        "smooth_ece",
        "h_score",
        "mean_confidence",
        "confidence_gap",
        "multihot_brier",
        "classwise_ece",
        *sweep,
        "auroc",
        "aurc",
    ]
    first += [*selective, "prr", "aupc"]
    assert list(METRICS)[: len(first)] == first


def test_accuracy():
    assert accuracy(C3, Y3) == pytest.approx(1 / 3)
    assert accuracy([0.2, 0.4], [1, 1]) == 1.0  # 0/1 ints are accepted as correctness


def test_ace_with_fewer_points_than_bins():
    # each point is its own bin, the 17 empty bins are skipped:
    # (|1 − 0.9| + |0 − 0.6| + |0 − 0.3|) / 3 = (0.1 + 0.6 + 0.3) / 3 = 1/3
    assert ace(C3, Y3) == pytest.approx(1 / 3)


def forty_points():
    """c_i = (i + 0.5)/40, i = 0..39; quantile bin b holds i = 2b, 2b+1 (one right, one wrong).

    conf_b = (2b + 1)/40, acc_b = 0.5 → |acc_b − conf_b| = |19 − 2b| / 40.
    Σ_b |19 − 2b| = 2·(1 + 3 + … + 19) = 200 → ACE = 200 / (40·20) = 0.25.
    """
    c = (np.arange(40) + 0.5) / 40
    y = np.arange(40) % 2 == 0
    return c, y


def test_ace_with_exact_bins_of_two():
    # edges at positions 1.95·b of the sorted points: bin b = (1.95b, 1.95b + 1.95] holds 2b, 2b+1
    c, y = forty_points()
    assert ace(c, y) == pytest.approx(0.25)
    perm = np.random.default_rng(1).permutation(40)  # no ties, so input order must not matter
    assert ace(c[perm], y[perm]) == pytest.approx(0.25)
    curve = calibration_curve(c, y)
    assert curve["n"].to_list() == [2] * 20
    assert curve["conf"].to_list() == pytest.approx([(2 * b + 1) / 40 for b in range(20)])


def test_quantile_edges_and_the_lower_bin_rule():
    # 41 points k/40: the edges are the points 0, 2, 4, … (np.percentile at b/20 of 40 steps), and a
    # point equal to an inner edge goes to the LOWER bin (np.searchsorted, side "left", as sklearn):
    # bin 0 = [e0, e1] holds points 0, 1, 2; bin b = (e_b, e_b+1] holds 2b+1, 2b+2.
    c = np.linspace(0, 1, 41)
    assert calibration_curve(c, c > 0.5)["n"].to_list() == [3] + [2] * 19
    # Two bins over 0.3, 0.3, 0.3, 0.5: the median edge is 0.3, so all three 0.3s go to bin 0
    # (the old equal-count split gave 2 + 2; a "right" side would give one bin of 4).
    curve = calibration_curve([0.3, 0.3, 0.3, 0.5], [True, False, False, True], bins=2)
    assert curve["bin"].to_list() == [0, 1]
    assert curve["n"].to_list() == [3, 1]
    assert curve["acc"].to_list() == pytest.approx([1 / 3, 1.0])


def test_tied_confidences_share_one_bin():
    # 40 identical confidences 0.5: every edge is 0.5, so all 40 fall in bin 0 whatever their order:
    # one bin, acc 20/40 = 0.5 = conf → ACE 0. (The old equal-count split cut the run of ties into
    # input-order pairs: 0.5 for the blocks, 0 for the alternating order.)
    c = np.full(40, 0.5)
    blocks = np.array([True] * 20 + [False] * 20)
    alternating = np.arange(40) % 2 == 0
    assert ace(c, blocks) == 0.0
    assert ace(c, alternating) == 0.0
    curve = calibration_curve(c, blocks)
    assert curve["bin"].to_list() == [0] and curve["n"].to_list() == [40]


def tie_heavy():
    """20 confidences in three runs of ties: 0.2 ×6 (1 right), 0.5 ×8 (4 right), 0.9 ×6 (all right).

    Edges sit at positions 0.95·b of the sorted values: e_0..e_5 = 0.2, e_6 = 0.2 + 0.7·0.3 = 0.41,
    e_7..e_13 = 0.5, e_14 = 0.5 + 0.3·0.4 = 0.62, e_15..e_20 = 0.9. With side "left" the first inner
    edge ≥ 0.2 is e_1 → bin 0, ≥ 0.5 is e_7 → bin 6, ≥ 0.9 is e_15 → bin 14: three non-empty bins.
    """
    c = np.array([0.2] * 6 + [0.5] * 8 + [0.9] * 6)
    y = np.array([True] + [False] * 5 + [True, False] * 4 + [True] * 6)
    return c, y


def test_ace_on_a_tie_heavy_example_by_hand_and_as_sklearn_bins_it():
    from sklearn.calibration import calibration_curve as sklearn_curve

    c, y = tie_heavy()
    curve = calibration_curve(c, y)
    assert curve["bin"].to_list() == [0, 6, 14]
    assert curve["n"].to_list() == [6, 8, 6]
    # ACE = (|1/6 − 0.2| + |4/8 − 0.5| + |6/6 − 0.9|) / 3 = (1/30 + 0 + 0.1) / 3 = 2/45 ≈ 0.0444.
    # (The old equal-count split put each point in its own bin: mean |y − c| = (0.8 + 5·0.2 + 8·0.5
    # + 6·0.1) / 20 = 6.4 / 20 = 0.32.)
    assert ace(c, y) == pytest.approx(2 / 45)
    prob_true, prob_pred = sklearn_curve(y, c, n_bins=20, strategy="quantile")
    np.testing.assert_array_equal(curve["acc"].to_numpy(), prob_true)
    np.testing.assert_array_equal(curve["conf"].to_numpy(), prob_pred)


TIE_PRONE = st.lists(
    st.tuples(st.sampled_from([0.0, 0.1, 0.25, 1 / 3, 0.5, 0.5, 0.75, 0.9, 1.0]), st.booleans()),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(TIE_PRONE, st.integers(1, 25))
def test_bins_equal_sklearn_calibration_curve(points, bins):
    from sklearn.calibration import calibration_curve as sklearn_curve

    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    curve = calibration_curve(c, y, bins=bins)
    prob_true, prob_pred = sklearn_curve(y.astype(int), c, n_bins=bins, strategy="quantile", pos_label=1)
    np.testing.assert_array_equal(curve["acc"].to_numpy(), prob_true)
    np.testing.assert_array_equal(curve["conf"].to_numpy(), prob_pred)


@settings(max_examples=150, deadline=None)
@given(TIE_PRONE, st.randoms(use_true_random=False))
def test_ace_does_not_depend_on_input_order(points, rnd):
    # Quantile edges depend on the values only, so any order gives the same bins (the old
    # equal-count split let a run of ties straddle a boundary in input order).
    shuffled = list(points)
    rnd.shuffle(shuffled)
    a = ace(np.array([p for p, _ in points]), np.array([r for _, r in points]))
    b = ace(np.array([p for p, _ in shuffled]), np.array([r for _, r in shuffled]))
    assert a == pytest.approx(b, abs=1e-12)


def test_ace_ties_mixed_with_distinct_values_by_hand():
    # 19 distinct wrong points d_k = 0.02·(k+1), k = 0..18, and 21 ties at 0.5 (11 right, 10 wrong),
    # interleaved. Sorted: d_0..d_18 at positions 0..18, the ties at 19..39. Edge e_b at position
    # 1.95·b: e_b = 0.02·(1 + 1.95 b) for b ≤ 9 (e_9 = 0.371), e_10..e_20 = 0.5.
    #   bins 0..8: (d_2b, d_2b+1), acc 0, conf 0.04b + 0.03 → Σ_b (0.04b + 0.03) = 1.44 + 0.27 = 1.71
    #   bin 9 = (0.371, 0.5]: d_18 = 0.38 ✗ and all 21 ties: conf (0.38 + 10.5)/22, acc 11/22
    #         → gap (11 − 10.88)/22 = 0.12/22
    #   bins 10..19: empty (their edges all equal 0.5), dropped
    # ACE = (1.71 + 0.12/22) / 10 = 0.1715454… (the old split: 0.3385, ties cut into input-order pairs)
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
    assert ace(c, y) == pytest.approx((1.71 + 0.12 / 22) / 10)
    curve = calibration_curve(c, y)
    assert curve["bin"].to_list() == list(range(10))
    assert curve["n"].to_list() == [2] * 9 + [22]
    assert curve["conf"][9] == pytest.approx(10.88 / 22) and curve["acc"][9] == 0.5


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
        "model_id", "estimator", "reduction", "split", "answer_space_k", "answer_space_draw",
        "scope", "scope_value", "metric",
        "value", "n", "higher_is_better",
    ]  # fmt: skip
    # 2 estimators × (all + 2 relations) × every metric (all apply: the confidences are probabilities)
    # (decision metrics over statements and template bias need inputs this frame lacks: not computed)
    computed = [m for m in METRICS.values() if m.input in ("confidence", "threshold")]
    assert out.height == 2 * 3 * len(computed)
    for (e, rel), g in est.sort("relation_id", "instance_id").group_by("estimator", "relation_id"):
        for name, fn in ((m.name, m) for m in METRICS.values() if m.input == "confidence"):
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
        "model_id", "estimator", "reduction", "split", "answer_space_k", "answer_space_draw",
        "scope", "scope_value", "curve",
        "x", "y", "n", "bin", "threshold", "y_low", "y_high",
    ]  # fmt: skip
    assert curves["curve"].unique(maintain_order=True).to_list() == [
        "calibration", "rejection", "risk_coverage", "roc"
    ]  # fmt: skip
    g = est.filter(estimator="margin").sort("relation_id", "instance_id")
    c, y = g["confidence"].to_numpy(), g["correct"].to_numpy()
    overall = curves.filter(estimator="margin", scope="all", curve="calibration")
    assert overall["n"].sum() == 55
    # ACE recomputed from the drawn points equals the reported ACE
    assert (overall["y"] - overall["x"]).abs().mean() == pytest.approx(ace(c, y))
    expected = calibration_curve(c, y)
    assert overall["x"].to_list() == pytest.approx(expected["conf"].to_list())


def test_curve_and_ace_on_unequal_bins_by_hand():
    # 22 points, sorted 0.1, 0.2, 0.3, 0.4, then 18 × 0.9. Edge e_b at position 1.05·b:
    #   e_0 = 0.1, e_1 = 0.2 + 0.05·0.1 = 0.205, e_2 = 0.3 + 0.1·0.1 = 0.31, e_3 = 0.4 + 0.15·0.5 = 0.475,
    #   e_4..e_20 = 0.9 → bins 0 = [0.1, 0.205], 1 = (0.205, 0.31], 2 = (0.31, 0.475], 3 = (0.475, 0.9].
    #   bin 0: 0.1 ✓, 0.2 ✗ → conf 0.15, acc 0.5 → gap 0.35
    #   bin 1: 0.3 ✗ → gap 0.3;  bin 2: 0.4 ✗ → gap 0.4
    #   bin 3: the 18 ties at 0.9, 9 right → acc 0.5 → gap 0.4
    # ACE = (0.35 + 0.3 + 0.4 + 0.4) / 4 = 0.3625 (the old equal-count split: 0.485)
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
    curve = compute_curves(est).filter(scope="all", curve="calibration")
    assert curve["bin"].to_list() == [0, 1, 2, 3]
    assert curve["n"].to_list() == [2, 1, 1, 18]
    assert curve["x"].to_list() == pytest.approx([0.15, 0.3, 0.4, 0.9])
    assert curve["y"].to_list() == [0.5, 0.0, 0.0, 0.5]
    reported = compute_metrics(est, ["ace"]).filter(scope="all")["value"].item()
    assert reported == pytest.approx(0.3625)


def split_frame():
    """P36 on the headline template: i0 test ✓ 0.9, i1 test ✗ 0.4, i2 dev ✓ 0.8, i3 dev ✓ 0.7, and
    i0's answer space cut to 2 options (i0#k2: test, answer_space_k 2) ✗ 0.6."""
    return pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": "P36",
            "instance_id": ["i0", "i1", "i2", "i3", "i0#k2"],
            "split": ["test", "test", "dev", "dev", "test"],
            "answer_space_k": pl.Series([0, 0, 0, 0, 2], dtype=pl.Int32),
            "template_id": "t0",
            "estimator": "base",
            "confidence": [0.9, 0.4, 0.8, 0.7, 0.6],
            "correct": [True, False, True, True, False],
        }
    )


def test_metrics_are_per_split_and_answer_space_never_pooled():
    # test, k 0: accuracy 1/2; Brier (0.1² + 0.4²)/2 = 0.085      (n 2)
    # dev,  k 0: accuracy 1;   Brier (0.2² + 0.3²)/2 = 0.065      (n 2)
    # test, k 2: accuracy 0;   Brier 0.6² = 0.36                  (n 1)
    # Pooled, as before, accuracy would be 3/5 over n = 5.
    out = compute_metrics(split_frame(), ["accuracy", "brier"]).filter(scope="all")
    got = {
        (r["split"], r["answer_space_k"], r["metric"]): (r["value"], r["n"])
        for r in out.iter_rows(named=True)
    }
    assert got == {
        ("dev", 0, "accuracy"): (1.0, 2),
        ("dev", 0, "brier"): (pytest.approx(0.065), 2),
        ("test", 0, "accuracy"): (0.5, 2),
        ("test", 0, "brier"): (pytest.approx(0.085), 2),
        ("test", 2, "accuracy"): (0.0, 1),
        ("test", 2, "brier"): (pytest.approx(0.36), 1),
    }
    curves = compute_curves(split_frame()).filter(scope="all", curve="calibration")
    assert curves.group_by("split", "answer_space_k").agg(pl.col("n").sum()).sort(
        "split", "answer_space_k"
    ).rows() == [
        ("dev", 0, 2),
        ("test", 0, 2),
        ("test", 2, 1),
    ]


def template_frame():
    """Curated templates, test split: P36 has c0 and c1 over i0, i1; P17 has c0 only over j0..j2;
    a dev instance of P36 (wrong on both) and an instance-grain row (no template) come along."""
    rows = [
        ("P36", "i0", "test", "P36:c0", 0.9, True),
        ("P36", "i1", "test", "P36:c0", 0.6, False),
        ("P36", "i0", "test", "P36:c1", 0.8, True),
        ("P36", "i1", "test", "P36:c1", 0.7, True),
        ("P17", "j0", "test", "P17:c0", 0.5, True),
        ("P17", "j1", "test", "P17:c0", 0.4, False),
        ("P17", "j2", "test", "P17:c0", 0.2, False),
        ("P36", "i9", "dev", "P36:c0", 0.3, False),
        ("P36", "i9", "dev", "P36:c1", 0.3, False),
        ("P36", "i0", "test", None, 0.5, True),
    ]
    frame = pl.DataFrame(
        rows,
        orient="row",
        schema=["relation_id", "instance_id", "split", "template_id", "confidence", "correct"],
    )
    return frame.with_columns(model_id=pl.lit("m"), estimator=pl.lit("base"))


def test_template_metrics_and_their_mean_over_templates_by_hand():
    # accuracy per template (test): P36:c0 1/2, P36:c1 2/2, P17:c0 1/3
    #   P36 mean over its templates (1/2 + 1)/2 = 0.75 (n 2); P17 1/3 (n 3)
    #   all: weighted by instances (2·0.75 + 3·1/3)/5 = 0.5 (n 5)
    # Brier per template: P36:c0 (0.01 + 0.36)/2 = 0.185, P36:c1 (0.04 + 0.09)/2 = 0.065 → mean 0.125;
    #   P17:c0 (0.25 + 0.16 + 0.04)/3 = 0.15; all (2·0.125 + 3·0.15)/5 = 0.14
    # dev is its own group: P36 mean accuracy 0. The instance-grain row is not a template: ignored.
    out = compute_template_metrics(template_frame(), ["accuracy", "brier"])
    assert out.columns == list(OUTPUT_SCHEMA)
    got = {
        (r["split"], r["scope"], r["scope_value"], r["metric"]): (r["value"], r["n"])
        for r in out.iter_rows(named=True)
    }
    approx = pytest.approx
    assert got == {
        ("test", "template", "P17:c0", "accuracy"): (approx(1 / 3), 3),
        ("test", "template", "P17:c0", "brier"): (approx(0.15), 3),
        ("test", "template", "P36:c0", "accuracy"): (0.5, 2),
        ("test", "template", "P36:c0", "brier"): (approx(0.185), 2),
        ("test", "template", "P36:c1", "accuracy"): (1.0, 2),
        ("test", "template", "P36:c1", "brier"): (approx(0.065), 2),
        ("test", "relation_template_mean", "P17", "accuracy"): (approx(1 / 3), 3),
        ("test", "relation_template_mean", "P17", "brier"): (approx(0.15), 3),
        ("test", "relation_template_mean", "P36", "accuracy"): (0.75, 2),
        ("test", "relation_template_mean", "P36", "brier"): (approx(0.125), 2),
        ("test", "all_template_mean", "all", "accuracy"): (approx(0.5), 5),
        ("test", "all_template_mean", "all", "brier"): (approx(0.14), 5),
        ("dev", "template", "P36:c0", "accuracy"): (0.0, 1),
        ("dev", "template", "P36:c0", "brier"): (approx(0.09), 1),
        ("dev", "template", "P36:c1", "accuracy"): (0.0, 1),
        ("dev", "template", "P36:c1", "brier"): (approx(0.09), 1),
        ("dev", "relation_template_mean", "P36", "accuracy"): (0.0, 1),
        ("dev", "relation_template_mean", "P36", "brier"): (approx(0.09), 1),
        ("dev", "all_template_mean", "all", "accuracy"): (0.0, 1),
        ("dev", "all_template_mean", "all", "brier"): (approx(0.09), 1),
    }
    assert out["answer_space_k"].unique().to_list() == [0]
    with pytest.raises(ValueError, match=r"several rows for instance 'i0'.*one per template"):
        compute_template_metrics(pl.concat([template_frame(), template_frame().head(1)]))
    assert compute_template_metrics(template_frame().filter(pl.col("template_id").is_null())).is_empty()


# The metric contract: what each metric needs, and which direction is better.


def test_every_metric_declares_needs_and_direction():
    # (c, y) metrics here; threshold and prediction metrics in test_decisions.py and test_bias.py
    declared = {m.name: (m.needs, m.higher_is_better) for m in METRICS.values() if m.input == "confidence"}
    assert declared == {
        "accuracy": ("any", True),
        "ace": ("probability", False),
        "ece": ("probability", False),
        "brier": ("probability", False),
        "smooth_ece": ("probability", False),
        "h_score": ("probability", True),
        "mean_confidence": ("probability", None),
        "confidence_gap": ("probability", None),
        **{f"{m}_b{b}": ("probability", False) for m in ("ace", "ece") for b in (5, 10, 15, 30, 40, 50)},
        "auroc": ("any", True),
        "aurc": ("any", False),
        **{f"selective_accuracy_c{c}": ("any", True) for c in (50, 80, 90)},
        **{f"coverage_at_risk_r{r}": ("any", True) for r in ("05", "10", "20")},
        "prr": ("any", True),
        "aupc": ("any", True),
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
    readable = ("confidence", "threshold")  # statements and template bias need other inputs
    assert set(got) == {m.name for m in METRICS.values() if m.needs == "any" and m.input in readable}
    assert {m: got[m] for m in ("accuracy", "auroc", "aurc")} == {
        "accuracy": (pytest.approx(2 / 3), True),
        "auroc": (1.0, True),
        "aurc": (pytest.approx(1 / 9), False),
    }
    # no reliability or rejection curve (they read probabilities); risk–coverage and ROC only
    assert compute_curves(est)["curve"].unique(maintain_order=True).to_list() == ["risk_coverage", "roc"]
    with pytest.raises(ValueError, match="no probability-valued estimator"):
        compute_curves(est, curves=["calibration"])


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


def test_accuracy_macro_averages_relations_where_accuracy_pools_instances():
    # P1: a ✓ (Q1 ∈ {Q1}), b ✓ (Q2 ∈ {Q9, Q2}), c ✗ → 2/3; P2: d ✓ → 1
    # micro (accuracy, scope all) = 3/4; macro = (2/3 + 1)/2 = 5/6; per relation both agree
    est = pl.DataFrame(
        {
            "model_id": "m", "estimator": "base", "relation_id": ["P1", "P1", "P1", "P2"],
            "instance_id": list("abcd"), "confidence": [0.9, 0.8, 0.7, 0.6],
            "correct": [True, True, False, True], "predicted_id": ["Q1", "Q2", "Q3", "Q4"],
            "gold_ids": [["Q1"], ["Q9", "Q2"], ["Q5"], ["Q4"]],
        }
    )  # fmt: skip
    out = compute_metrics(est, ["accuracy", "accuracy_macro"])
    value = {(r["scope_value"], r["metric"]): r["value"] for r in out.iter_rows(named=True)}
    assert value[("all", "accuracy")] == pytest.approx(3 / 4)
    assert value[("all", "accuracy_macro")] == pytest.approx(5 / 6)
    for rel, acc in (("P1", 2 / 3), ("P2", 1.0)):
        assert value[(rel, "accuracy")] == pytest.approx(acc) == value[(rel, "accuracy_macro")]


def test_register_returns_the_function_unchanged_as_the_estimator_registry_does():
    def fn(c, y):
        return 0.0

    try:
        added = register(
            "tmp_metric", label="x", family="x", needs="any", higher_is_better=True, batched=lambda seg: None
        )(fn)
        assert added is fn and METRICS["tmp_metric"].fn is fn
    finally:
        METRICS.pop("tmp_metric", None)
