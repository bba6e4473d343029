"""Selective-prediction metrics on examples computed by hand (arithmetic in the comments), their
properties, and cross-checks with sklearn and with LM-Polygraph's PRR procedure."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcal_pipeline.evaluation import METRICS
from kcal_pipeline.evaluation.selective import top_k

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
aupc, aurc, auroc, prr = METRICS["aupc"], METRICS["aurc"], METRICS["auroc"], METRICS["prr"]

# Five predictions, most confident first: 0.9 ✓, 0.8 ✓, 0.7 ✗, 0.6 ✓, 0.1 ✗ (given shuffled).
C5 = np.array([0.6, 0.9, 0.1, 0.8, 0.7])
Y5 = np.array([True, True, False, True, False])


def metric(name):
    return METRICS[name]


def test_selective_accuracy_by_hand():
    # k = ⌈c·5⌉: c50 → ⌈2.5⌉ = 3: ✓✓✗ → 2/3;  c80 → 4: ✓✓✗✓ → 3/4;  c90 → ⌈4.5⌉ = 5: 3/5
    assert metric("selective_accuracy_c50")(C5, Y5) == pytest.approx(2 / 3)
    assert metric("selective_accuracy_c80")(C5, Y5) == pytest.approx(3 / 4)
    assert metric("selective_accuracy_c90")(C5, Y5) == pytest.approx(3 / 5)


def test_selective_accuracy_ties_keep_input_order():
    # four ties: the first ⌈0.5·4⌉ = 2 in input order are taken → ✓✓ = 1, or ✗✗ = 0 reversed
    y = np.array([True, True, False, False])
    assert metric("selective_accuracy_c50")(np.full(4, 0.5), y) == 1.0
    assert metric("selective_accuracy_c50")(np.full(4, 0.5), y[::-1]) == 0.0


def test_top_k_is_an_exact_ceiling():
    # 0.07·100 is 7.000000000000001 in floats (⌈⌉ would give 8); the integer form does not drift
    assert top_k(100, 7) == 7
    for n in range(1, 400):
        for percent in (7, 50, 57, 80, 90):
            assert top_k(n, percent) == -(-Fraction(percent * n, 100) // 1)


def test_coverage_at_risk_by_hand():
    # C5 sorted: errors E_k = 0, 0, 1, 1, 2 for k = 1..5 → risk 0, 0, 1/3, 1/4, 2/5
    #   r = 5 %, 10 %, 20 %: the largest k with E_k/k ≤ r is 2 → coverage 2/5
    for r in ("05", "10", "20"):
        assert metric(f"coverage_at_risk_r{r}")(C5, Y5) == pytest.approx(0.4)
    # Ten, most confident first ✓ ✗ ✓ ✓ ✓ ✓ ✓ ✓ ✓ ✓: E_k = 0, 1, 1, …, 1 → risk 0, 1/2, 1/3, …, 1/10.
    #   r 5 %: only k = 1 → 0.1;  r 10 %: k = 10 has risk exactly 1/10 ≤ 0.1 → 1.0 (the risk rose
    #   above r at k = 2 and came back: the LARGEST k counts, not the first);  r 20 %: 1/5 at k = 5 … → 1.0
    c = np.linspace(1.0, 0.1, 10)
    y = np.array([True, False] + [True] * 8)
    assert metric("coverage_at_risk_r05")(c, y) == pytest.approx(0.1)
    assert metric("coverage_at_risk_r10")(c, y) == 1.0
    assert metric("coverage_at_risk_r20")(c, y) == 1.0
    # the most confident is wrong, then ✓: risk 1, 1/2 — never ≤ 20 % → 0
    assert metric("coverage_at_risk_r20")(np.array([0.9, 0.1]), np.array([False, True])) == 0.0


def test_prr_by_hand():
    # accuracy of the top k (C5): 1, 1, 2/3, 3/4, 3/5 → PRA = (60 + 60 + 40 + 45 + 36)/60/5 = 241/300
    # oracle (the 3 correct first): 1, 1, 1, 3/4, 3/5 → (180 + 45 + 36)/300 = 261/300
    # random: the base accuracy 3/5 = 180/300
    # PRR = (241 − 180)/(261 − 180) = 61/81 = 0.753086…
    assert prr(C5, Y5) == pytest.approx(61 / 81)
    assert aupc(C5, Y5) == pytest.approx(241 / 300)


def test_prr_of_the_oracle_is_one_and_of_the_reverse_is_negative():
    rng = np.random.default_rng(4)
    y = rng.random(50) < 0.6
    assert prr(y.astype(float), y) == pytest.approx(1.0)  # correct ranked above wrong
    assert prr((~y).astype(float), y) < 0.0  # wrong ranked above correct


def test_prr_of_a_constant_score_is_zero_on_average_over_tie_orders():
    # Ties keep input order, so one constant-score PRR is the PRR of the input order; over all the
    # distinct orders of 2 ✓ and 3 ✗ (10 of them) the mean top-k accuracy is the base rate 2/5 for
    # every k, so the mean PRR is exactly 0.
    values = [
        prr(np.full(5, 0.5), np.array(order))
        for order in set(itertools.permutations([True, True, False, False, False]))
    ]
    assert len(values) == 10
    assert np.mean(values) == pytest.approx(0.0, abs=1e-12)
    assert prr(np.full(5, 0.5), np.array([True, True, False, False, False])) == pytest.approx(1.0)


def test_prr_is_nan_with_one_class():
    assert np.isnan(prr(np.array([0.2, 0.9]), np.array([True, True])))
    assert np.isnan(prr(np.array([0.2, 0.9]), np.array([False, False])))


def lm_polygraph_prr(c, y, shuffles=2000, seed=42):
    """LM-Polygraph's procedure written out (ue_metrics/pred_rej_area.py with max_rejection = 1, and
    the normalisation in utils/manager.py): uncertainty = −confidence sorted ascending, quality
    1[correct]; scores = (cumsum / 1..N) reversed; PRA = their mean. Oracle: uncertainty = −quality;
    random: the mean PRA over seeded shuffles."""

    def pra(uncertainty, quality):
        order = np.argsort(uncertainty, kind="stable")
        cum = np.cumsum(quality[order])
        return (cum / np.arange(1, len(quality) + 1))[::-1].sum() / len(quality)

    q = y.astype(float)
    rng = np.random.default_rng(seed)
    random = np.mean([pra(rng.permutation(len(q)), q) for _ in range(shuffles)])
    return pra(-c, q), pra(-q, q), random


@pytest.mark.parametrize("seed", range(3))
def test_prr_follows_lm_polygraph(seed):
    rng = np.random.default_rng(seed)
    c = rng.random(40)
    y = rng.random(40) < c
    pra, oracle, random = lm_polygraph_prr(c, y)
    assert aupc(c, y) == pytest.approx(pra, abs=1e-12)
    # their random PRA is a Monte-Carlo estimate of ours (the base accuracy, exactly)
    assert random == pytest.approx(y.mean(), abs=0.01)
    assert prr(c, y) == pytest.approx((pra - y.mean()) / (oracle - y.mean()), abs=1e-12)


POINTS = st.lists(
    st.tuples(st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.5, 0.7, 0.9, 1.0]), st.booleans()),
    min_size=1,
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(POINTS)
def test_aupc_is_one_minus_aurc(points):
    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    assert aupc(c, y) == pytest.approx(1.0 - aurc(c, y), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(POINTS, st.randoms(use_true_random=False))
def test_aurc_of_the_oracle_order_is_minimal(points, rnd):
    # Any ranking has AURC ≥ the oracle's (all correct first); PRR ≤ 1 likewise.
    y = np.array([r for _, r in points])
    oracle = aurc(y.astype(float), y)
    scores = np.array([rnd.random() for _ in points])
    assert aurc(scores, y) >= oracle - 1e-12
    if 0 < y.sum() < y.size:
        assert prr(scores, y) <= 1.0 + 1e-12


def test_auroc_of_a_constant_score_is_one_half():
    rng = np.random.default_rng(2)
    y = rng.random(30) < 0.4
    assert auroc(np.full(30, 0.7), y) == 0.5


@settings(max_examples=100, deadline=None)
@given(POINTS)
def test_auroc_equals_sklearn_roc_auc_score(points):
    from sklearn.metrics import roc_auc_score

    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    if 0 < y.sum() < y.size:
        assert auroc(c, y) == pytest.approx(roc_auc_score(y, c), abs=1e-12)


def test_the_new_selective_metrics_take_any_score():
    # scores outside [0, 1]: only the order counts (9.0 ✓ > 2.0 ✗ > −3.0 ✓)
    s, y = [2.0, 9.0, -3.0], [0, 1, 1]
    assert METRICS["selective_accuracy_c50"](s, y, "score") == pytest.approx(1 / 2)  # k 2: ✓✗
    assert METRICS["coverage_at_risk_r20"](s, y, "score") == pytest.approx(1 / 3)  # k 1 only
    # top-k accuracy 1, 1/2, 2/3 → PRA 13/18; oracle 1, 1, 2/3 → 16/18; random 2/3 = 12/18 → 1/4
    assert METRICS["prr"](s, y, "score") == pytest.approx(1 / 4)
    assert METRICS["aupc"](s, y, "score") == pytest.approx(13 / 18)
