"""Normalised entropy by hand, and Base, Margin and entropy under all four reductions.
(Base and Margin by hand, and all three against the per-row reference: test_estimators.py.)"""

import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimates
from tests.estimation.test_estimators import random_partition, statements

ALL_FOUR = ("sum", "mean", "answer_sum", "answer_mean")


def rows_of(instance, template, probs, gold=0):
    return [
        (instance, template, o, f"Q{o}", o == gold, math.log(p)) for o, p in enumerate(probs) if p is not None
    ]


def test_entropy_by_hand():
    # C = 1 − H/log|O_it|, |O_it| = the options scored in that (instance, template):
    # i1 t0 p = [.5, .5]: uniform, H = log 2 → C = 0 (prediction: the tie goes to option 0)
    # i2 t0 p = [.5, .25, .25]: H = .5 log 2 + 2 · .25 log 4 = 1.5 log 2 = 1.039721;
    #       C = 1 − 1.039721/log 3 = 1 − 0.946395 = 0.053605
    # i2 t1 p = [.5, .5] with option 2 not scored there: |O| = 2, not 3 → C = 0
    #       (dividing by log 3 would give 1 − log 2/log 3 = 0.369070)
    # i3 t0 one option: C = 1 by definition (H = 0 and log 1 = 0)
    # i4 t0 p = [.25, .75] in a cube padded to three options: |O| = 2 → H = 0.562335,
    #       C = 1 − 0.562335/log 2 = 1 − 0.811278 = 0.188722; prediction option 1
    rows = rows_of("i1", "t0", [0.5, 0.5]) + rows_of("i2", "t0", [0.5, 0.25, 0.25])
    rows += rows_of("i2", "t1", [0.5, 0.5]) + rows_of("i3", "t0", [1.0]) + rows_of("i4", "t0", [0.25, 0.75])
    cube = build_cube(statements(rows))
    out = ESTIMATORS["entropy"].fn(cube, "sum")
    assert out.predicted[:, 0].tolist() == [0, 0, 0, 1]
    assert out.predicted[1, 1] == 0
    np.testing.assert_allclose(out.confidence[:, 0], [0.0, 0.053605, 1.0, 0.188722], atol=5e-7)
    assert out.confidence[1, 1] == pytest.approx(0.0, abs=1e-12)
    assert out.confidence[1, 0] == pytest.approx(1 - 1.5 * math.log(2) / math.log(3), rel=1e-12)
    assert out.confidence[3, 0] == pytest.approx(
        1 + (0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / math.log(2), rel=1e-12
    )
    # nearly all mass on one option: lls [0, −60] → p ≈ [1, e^−60], C = 1 − 60 e^−60/log 2 ≈ 1
    sure = statements([("i1", "t0", 0, "Q0", True, 0.0), ("i1", "t0", 1, "Q1", False, -60.0)])
    near = ESTIMATORS["entropy"].fn(build_cube(sure), "sum")
    assert near.confidence[0, 0] == pytest.approx(1.0, abs=1e-20)


def test_entropy_never_leaves_the_unit_interval_and_predicts_as_base():
    # a uniform distribution over 7 options: rounding can put H a hair above log 7; C is clipped to 0
    cube = build_cube(statements(rows_of("i1", "t0", [1 / 7] * 7)))
    out = ESTIMATORS["entropy"].fn(cube, "sum")
    assert out.confidence[0, 0] == pytest.approx(0.0, abs=1e-15) and out.confidence[0, 0] >= 0
    for seed in range(8):
        cube = build_cube(random_partition(seed))
        for reduction in ("sum", "mean"):
            entropy, base = ESTIMATORS["entropy"].fn(cube, reduction), ESTIMATORS["base"].fn(cube, reduction)
            present = cube.present
            assert (entropy.predicted[present] == base.predicted[present]).all()
            assert ((entropy.confidence >= 0) & (entropy.confidence <= 1)).all()


def test_base_margin_and_entropy_run_under_all_four_reductions():
    # One instance, one template, options 0 (gold) and 1; each reduction's column its own p:
    #   sum          p = [.6, .4] → option 0: Base .6, Margin .2, entropy 1 − 0.970951 = 0.029049
    #   mean         p = [.3, .7] → option 1: Base .7, Margin .4, entropy 1 − 0.881291 = 0.118709
    #   answer_sum   p = [.9, .1] → option 0: Base .9, Margin .8, entropy 1 − 0.468996 = 0.531004
    #   answer_mean  p = [.5, .5] → option 0 (tie): Base .5, Margin 0, entropy 0
    # (before issue 13 Base and Margin ran under 'sum' only, and there was no entropy)
    probs = {
        "ll_sum": [0.6, 0.4],
        "ll_mean": [0.3, 0.7],
        "ll_answer_sum": [0.9, 0.1],
        "ll_answer_mean": [0.5, 0.5],
    }
    scores = statements([("i1", "t0", o, f"Q{o}", o == 0, math.log(probs["ll_sum"][o])) for o in (0, 1)])
    scores = scores.with_columns(
        **{c: pl.Series([math.log(p) for p in ps]) for c, ps in probs.items() if c != "ll_sum"}
    )
    out = compute_estimates(build_cube(scores), ["base", "margin", "entropy"])
    for name in ("base", "margin", "entropy"):
        assert ESTIMATORS[name].reductions == ALL_FOUR  # 'sum' first: the report's summary reads it
    got = {
        (e, r): (p, c, ok)
        for e, r, p, c, ok in out.select(
            "estimator", "reduction", "predicted_index", "confidence", "correct"
        ).iter_rows()
    }
    expected = {
        ("base", "sum"): (0, 0.6, True),
        ("base", "mean"): (1, 0.7, False),
        ("base", "answer_sum"): (0, 0.9, True),
        ("base", "answer_mean"): (0, 0.5, True),
        ("margin", "sum"): (0, 0.2, True),
        ("margin", "mean"): (1, 0.4, False),
        ("margin", "answer_sum"): (0, 0.8, True),
        ("margin", "answer_mean"): (0, 0.0, True),
        ("entropy", "sum"): (0, 0.029049, True),
        ("entropy", "mean"): (1, 0.118709, False),
        ("entropy", "answer_sum"): (0, 0.531004, True),
        ("entropy", "answer_mean"): (0, 0.0, True),
    }
    assert set(got) == set(expected)
    for key, (p, c, ok) in expected.items():
        assert got[key] == (p, pytest.approx(c, abs=5e-7), ok), key
