"""The reliability band: each bin's 95 % bootstrap interval of the accuracy, on the metrics' resample
plan, by hand on a fixed plan and against a slow per-resample reference on every scope."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation import compute_curves
from kcal_pipeline.evaluation.binning import _bin_ids
from kcal_pipeline.evaluation.curves import bin_accuracy_band
from kcal_pipeline.evaluation.resamples import PAD, Resamples, resample_plan
from kcal_pipeline.evaluation.tables import curves_table
from tests.evaluation.test_bootstrap import slow_bc


def test_band_by_hand_on_a_fixed_plan():
    # rows 0, 1 in bin 0 (✓, ✗), rows 2, 3 in bin 1 (✓, ✓); bin 2 holds no row. The points (bin
    # accuracies on all four rows, 1/2 and 1) sit at the middle of their resamples' values (share
    # below ½, z0 = 0), where the bias-corrected interval is the percentile interval.
    bins, correct = np.array([0, 0, 1, 1]), np.array([True, False, True, True])
    plan = Resamples(
        np.array([[0, 0, 2, 3], [1, 2, 2, 1], [0, 1, PAD, PAD]], dtype=np.int32), np.array([4, 4, 2])
    )
    # bin 0: resample 0 rows 0, 0 → 1; resample 1 rows 1, 1 → 0; resample 2 rows 0, 1 → 1/2
    #   sorted 0, 1/2, 1: 2.5th percentile at index 2·0.025 = 0.05 → 0.05·(1/2) = 0.025;
    #   97.5th at 1.95 → 1/2 + 0.95·(1/2) = 0.975
    # bin 1: resamples 0 and 1 → 1, 1; resample 2 (two rows, padding ignored) has no bin-1 row:
    #   left out → [1, 1]
    # bin 2: no resample touches it → NaN
    low, high = bin_accuracy_band(bins, correct, plan, bins=3)
    assert low[:2].tolist() == pytest.approx([0.025, 1.0])
    assert high[:2].tolist() == pytest.approx([0.975, 1.0])
    assert np.isnan(low[2]) and np.isnan(high[2])
    # level 0.5: 25th/75th percentiles of 0, 1/2, 1 → 1/4, 3/4
    low, high = bin_accuracy_band(bins, correct, plan, bins=3, level=0.5)
    assert (low[0], high[0]) == pytest.approx((0.25, 0.75))


def estimates(seed=3):
    """Two estimators, dev and test, three relations of different sizes, ties and one-class bins."""
    rng = np.random.default_rng(seed)
    rows = []
    for r, n in (("P1", 23), ("P2", 9), ("P3", 31)):
        for i in range(n):
            split = "dev" if i % 5 == 0 else "test"
            c = float(rng.choice([0.2, 0.5, 0.9])) if r == "P2" else float(rng.random())
            for est in ("base", "margin"):
                conf = c if est == "base" else c / 2
                rows.append((r, f"{r}-{i:02d}", split, est, conf, bool(rng.random() < conf)))
    frame = pl.DataFrame(
        rows,
        schema=["relation_id", "instance_id", "split", "estimator", "confidence", "correct"],
        orient="row",
    )
    return frame.with_columns(model_id=pl.lit("m"))


def reference_band(c, y, scope_rows, resamples, bins=20):
    """Per-resample loop: each resampled row keeps the bin of the scope's point sample; the
    bias-corrected interval around the bin's accuracy on the point sample (written out in
    test_bootstrap.slow_bc)."""
    bin_of = np.zeros(len(c), dtype=np.int64)
    bin_of[scope_rows] = _bin_ids(c[scope_rows], bins, "quantile")
    acc = np.full((resamples.n_resamples, bins), np.nan)
    for b in range(resamples.n_resamples):
        rows = resamples.rows(b)
        for k in range(bins):
            hit = rows[bin_of[rows] == k]
            if hit.size:
                acc[b, k] = y[hit].mean()
    point = [y[scope_rows][bin_of[scope_rows] == k].mean() if (bin_of[scope_rows] == k).any() else np.nan
             for k in range(bins)]  # fmt: skip
    return np.array([slow_bc(acc[:, k], point[k]) for k in range(bins)]).T


def test_the_curves_table_band_equals_a_per_resample_reference_on_every_scope():
    est = estimates()
    out = compute_curves(est, n_resamples=40, seed=7)
    calibration = out.filter(pl.col("curve") == "calibration")
    assert calibration["y_low"].null_count() == 0
    # every band contains its curve's point (the bin's accuracy)
    assert ((calibration["y_low"] <= calibration["y"]) & (calibration["y"] <= calibration["y_high"])).all()
    other = out.filter(pl.col("curve") != "calibration")
    assert other["y_low"].null_count() == other["y_high"].null_count() == other.height
    checked = 0
    for (estimator, split), g in est.sort("estimator", "split", "relation_id", "instance_id").group_by(
        "estimator", "split", maintain_order=True
    ):
        c, y = g["confidence"].to_numpy(), g["correct"].to_numpy()
        for scope in resample_plan(g["relation_id"].to_numpy(), 40, 7):
            low, high = reference_band(c, y, np.arange(len(c))[scope.rows], scope.resamples)
            got = calibration.filter(
                (pl.col("estimator") == estimator)
                & (pl.col("split") == split)
                & (pl.col("scope") == scope.scope)
                & (pl.col("scope_value") == scope.scope_value)
            )
            k = got["bin"].to_numpy()
            np.testing.assert_allclose(got["y_low"].to_numpy(), low[k], rtol=0, atol=1e-12)
            np.testing.assert_allclose(got["y_high"].to_numpy(), high[k], rtol=0, atol=1e-12)
            checked += got.height
    assert checked == calibration.height


def test_the_asset_band_uses_the_metrics_plan():
    # curves_table draws B = 1,000 resamples with seed 0, as metrics_table's intervals do
    est = estimates().with_columns(template_id=pl.lit("t0"))
    templates = pl.DataFrame(
        {
            "relation_id": ["P1", "P2", "P3"],
            "template_id": ["t0"] * 3,
            "rank": [0] * 3,
            "kind": ["curated"] * 3,
        }
    )
    table = curves_table(est, templates)
    assert table.equals(compute_curves(est, n_resamples=1000, seed=0))
