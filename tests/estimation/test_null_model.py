"""The answer-prior null model: Base on the subject-masked scores."""

import dataclasses

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimates
from tests.estimation.test_selective_lama import logs, quiet, random_partition, scores

COLUMNS = ["ll_sum", "ll_answer_sum", "ll_sum_masked", "ll_answer_sum_masked"]


def test_answer_prior_by_hand():
    rows = [
        # i1, golds Q0 and Q2. The plain scores (log [.7, .2, .1]) would pick Q0; the prior reads the
        # masked ones only: sum masked p = [.2, .3, .5] → Q2 (a gold: correct), 0.5;
        # answer_sum masked [.4, .4, .2] → a tie → Q0 (gold), 0.4
        *[
            ("i1", "t0", o, f"Q{o}", o in (0, 2), s, s, sm, am)
            for o, s, sm, am in zip(
                range(3), logs(0.7, 0.2, 0.1), logs(0.2, 0.3, 0.5), logs(0.4, 0.4, 0.2), strict=True
            )
        ],
        # i2, gold Q4: masked p = [.9, .1] under both → Q3, wrong, 0.9
        *[
            ("i2", "t0", o, f"Q{o + 3}", o == 1, -1.0, -1.0, m, m)
            for o, m in zip(range(2), logs(0.9, 0.1), strict=True)
        ],
        # i3, one option: 1.0
        ("i3", "t0", 0, "Q9", True, -5.0, -2.0, -7.0, -3.0),
    ]
    out = compute_estimates(build_cube(scores(rows, COLUMNS)), ["answer_prior"], log=quiet)
    got = out.select("instance_id", "reduction", "predicted_id", "correct").rows()
    assert got == [
        ("i1", "answer_sum", "Q0", True),
        ("i1", "sum", "Q2", True),
        ("i2", "answer_sum", "Q3", False),
        ("i2", "sum", "Q3", False),
        ("i3", "answer_sum", "Q9", True),
        ("i3", "sum", "Q9", True),
    ]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.4, 0.5, 0.9, 0.9, 1.0, 1.0], rtol=1e-12)
    assert set(out.select("grain", "output_kind").rows()) == {("template", "probability")}


@pytest.mark.parametrize("seed", range(6))
def test_with_the_subject_unmasked_the_prior_is_base(seed, monkeypatch):
    # If the masked statements scored exactly like the plain ones, the null model would be Base.
    monkeypatch.setitem(
        ESTIMATORS, "base", dataclasses.replace(ESTIMATORS["base"], reductions=("sum", "answer_sum"))
    )
    frame, probe, templates = random_partition(seed)
    unmasked = frame.with_columns(
        ll_sum_masked=pl.col("ll_sum"), ll_answer_sum_masked=pl.col("ll_answer_sum")
    )
    out = compute_estimates(build_cube(unmasked, probe, templates), ["base", "answer_prior"], log=quiet)
    prior = out.filter(pl.col("estimator") == "answer_prior").drop("estimator")
    base = out.filter(pl.col("estimator") == "base").drop("estimator")
    assert prior.height > 0
    assert_frame_equal(prior, base)


def test_without_masked_scores_it_is_skipped():
    rows = [("i1", "t0", o, f"Q{o}", o == 0, -1.0 - o, -1.0 - o) for o in range(2)]
    lines = []
    out = compute_estimates(
        build_cube(scores(rows, ["ll_sum", "ll_answer_sum"])), ["answer_prior"], log=lines.append
    )
    assert lines == [
        "skipped, no ll_sum_masked scores (P36): answer_prior (sum)",
        "skipped, no ll_answer_sum_masked scores (P36): answer_prior (answer_sum)",
    ]
    assert out.is_empty()
