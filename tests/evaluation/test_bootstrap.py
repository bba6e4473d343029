"""Bootstrap intervals: the index matrices, the batched metrics against the registered ones
resample by resample, and intervals worked by hand or recomputed by a plain loop."""

import math
from statistics import NormalDist

import numpy as np
import polars as pl
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from kcal_pipeline.evaluation import METRICS, bootstrap
from kcal_pipeline.evaluation.bootstrap import (
    DEFAULT_METRICS,
    ResampledValues,
    bootstrap_intervals,
    paired_differences,
)
from kcal_pipeline.evaluation.intervals import bias_corrected_interval, percentile_interval
from kcal_pipeline.evaluation.resampled_metrics import BATCHED, batched_metrics
from kcal_pipeline.evaluation.resamples import PAD, clustered_resamples, instance_resamples, resample_plan
from kcal_pipeline.evaluation.segments import row_percentiles


def estimates(relations: dict[str, list[tuple[float, bool]]], estimator="e", **extra) -> pl.DataFrame:
    """One row per (confidence, correct) pair, instance ids i0, i1, … within each relation."""
    rows = [
        {"model_id": "m", "estimator": estimator, "relation_id": rel, "instance_id": f"i{k}",
         "confidence": float(c), "correct": bool(y), "split": "test", **extra}
        for rel, points in relations.items()
        for k, (c, y) in enumerate(points)
    ]  # fmt: skip
    return pl.DataFrame(rows)


def tie_prone(rng, n):
    """Confidences on a 0.1 grid (many ties, many values equal to a quantile edge), correctness
    drawn with that probability."""
    c = np.round(rng.random(n), 1)
    return c, rng.random(n) < c


# --- the index matrices ----------------------------------------------------------------------


def test_clustered_resamples_keep_relations_whole():
    sizes = [3, 1, 4, 2]  # relation r owns rows starts[r] … starts[r] + sizes[r] − 1
    starts = [0, 3, 4, 8]
    relation_of = np.repeat(np.arange(4), sizes)
    res = clustered_resamples(sizes, n_resamples=200, seed=7)
    assert res.indices.dtype == np.int32
    for b in range(res.n_resamples):
        rows = res.rows(b)
        assert (res.indices[b, res.sizes[b] :] == PAD).all() and (rows >= 0).all()
        # the resample is R = 4 consecutive blocks, each a drawn relation's size of its own rows
        pos, blocks = 0, 0
        while pos < rows.size:
            r = relation_of[rows[pos]]
            block = rows[pos : pos + sizes[r]]
            assert block.size == sizes[r] and (relation_of[block] == r).all()
            assert ((block >= starts[r]) & (block < starts[r] + sizes[r])).all()
            pos, blocks = pos + sizes[r], blocks + 1
        assert blocks == 4
    assert res.indices.shape[1] == res.sizes.max()
    assert len(set(res.sizes.tolist())) > 1  # drawn relations bring their own sizes


def test_clustered_resamples_follow_the_documented_stream():
    # The plain-loop reading of the docstring: the [B, R] relation draws first, then one row
    # offset per slot row, all in one call (resample by resample, drawn relation by relation).
    sizes = np.array([2, 3, 1])
    starts = np.array([0, 2, 5])
    rng = np.random.default_rng(11)
    drawn = rng.integers(0, 3, size=(5, 3))
    offsets = rng.integers(0, np.repeat(sizes[drawn.ravel()], sizes[drawn].ravel()))
    k = 0
    res = clustered_resamples(sizes, n_resamples=5, seed=11)
    for b in range(5):
        expected_rows = []
        for r in drawn[b]:
            for _ in range(sizes[r]):
                expected_rows.append(starts[r] + offsets[k])
                k += 1
        assert res.rows(b).tolist() == expected_rows
    assert k == offsets.size
    again = clustered_resamples(sizes, n_resamples=5, seed=11)
    assert np.array_equal(again.indices, res.indices)  # seeded: reproducible
    assert not np.array_equal(clustered_resamples(sizes, n_resamples=5, seed=12).indices, res.indices)


def test_instance_resamples_stay_in_their_rows():
    res = instance_resamples(4, n_resamples=50, seed=3, start=10)
    assert res.indices.shape == (50, 4) and (res.sizes == 4).all()
    assert res.indices.min() >= 10 and res.indices.max() <= 13


def test_resample_plan_scopes_and_relation_streams():
    plan = resample_plan(np.array(["P1", "P1", "P2", "P2", "P2"]), n_resamples=20, seed=0)
    assert [(p.scope, p.scope_value, p.rows) for p in plan] == [
        ("all", "all", slice(0, 5)),
        ("relation", "P1", slice(0, 2)),
        ("relation", "P2", slice(2, 5)),
    ]
    assert plan[2].resamples.indices.min() >= 2 and plan[2].resamples.indices.max() <= 4
    # a relation's resamples depend on its name and size, not on the other relations present
    alone = resample_plan(np.array(["P2", "P2", "P2"]), n_resamples=20, seed=0)[1].resamples
    assert np.array_equal(alone.indices + 2, plan[2].resamples.indices)
    with pytest.raises(ValueError, match="consecutive"):
        resample_plan(np.array(["P1", "P2", "P1"]))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: clustered_resamples([2, 0]), "relation_sizes must be positive"),
        (lambda: clustered_resamples([2], n_resamples=0), "n_resamples must be a positive integer"),
        (lambda: instance_resamples(0), "n must be positive"),
    ],
)
def test_bad_resampling_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- batched metrics == the registered metric, resample by resample ------------------------


def per_resample(metric, c, y, res):
    return np.array([METRICS[metric].fn(c[res.rows(b)], y[res.rows(b)]) for b in range(res.n_resamples)])


def assert_same(batched, looped):
    assert np.array_equal(np.isnan(batched), np.isnan(looped))
    finite = ~np.isnan(looped)
    np.testing.assert_allclose(batched[finite], looped[finite], rtol=0, atol=1e-12)


@pytest.mark.parametrize("metric", list(BATCHED))
def test_batched_equals_registered_metric_per_resample(metric):
    rng = np.random.default_rng(2)
    sizes = np.array([1, 2, 5, 13, 40, 3, 60])  # small relations: some resamples have one class
    c, y = tie_prone(rng, sizes.sum())
    c[:3], y[:3] = 1.0, True
    for res in (clustered_resamples(sizes, 400, seed=1), instance_resamples(sizes.sum(), 200, seed=4)):
        assert_same(batched_metrics([metric], c, y, res)[metric], per_resample(metric, c, y, res))


def test_batched_metrics_on_distinct_scores_and_small_chunks(monkeypatch):
    # unbounded scores (AUROC/AURC/accuracy accept them) and a chunk of a few resamples at a time
    monkeypatch.setattr("kcal_pipeline.evaluation.resampled_metrics._CHUNK_CELLS", 300)
    rng = np.random.default_rng(5)
    c = rng.normal(size=90) * 10
    y = rng.random(90) < 0.5
    res = clustered_resamples([30, 20, 40], 64, seed=0)
    out = batched_metrics(["accuracy", "auroc", "aurc"], c, y, res)
    for m in out:
        assert_same(out[m], per_resample(m, c, y, res))


def test_batched_ace_with_points_on_the_quantile_edges():
    # 41 points k/40: every edge is a data point, and a point equal to an inner edge goes to the
    # lower bin; duplicated points in a resample move the edges onto repeated values.
    c = np.linspace(0, 1, 41)
    y = c > 0.5
    res = instance_resamples(41, 300, seed=9)
    assert_same(batched_metrics(["ace"], c, y, res)["ace"], per_resample("ace", c, y, res))
    identity = instance_resamples(41, 1, seed=0)
    identity.indices[0] = np.arange(41)
    assert batched_metrics(["ace"], c, y, identity)["ace"][0] == pytest.approx(
        METRICS["ace"].fn(c, y), abs=1e-15
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=6),
    st.integers(0, 2**16),
    st.sampled_from([1, 2, 10]),
)
def test_batched_equals_registered_metric_property(sizes, seed, grid):
    # confidences on a grid of 1/grid steps: from all-tied (grid 1: 0 or 1) to few ties
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    c = np.round(rng.random(n) * grid) / grid
    y = rng.random(n) < 0.5
    res = clustered_resamples(sizes, 30, seed=seed)
    out = batched_metrics(list(BATCHED), c, y, res)
    for m in BATCHED:
        assert_same(out[m], per_resample(m, c, y, res))


def test_quantile_edges_equal_numpys_to_the_last_bit():
    # ACE's bins hinge on a confidence equal to an edge, so the edges must be np.percentile's
    # own numbers, not merely close (its lerp is two-sided: b − (b − a)(1 − γ) for γ ≥ ½).
    rng = np.random.default_rng(0)
    n = rng.integers(1, 60, size=500)
    rows = np.sort(rng.random((500, 60)), axis=1)
    rows[np.arange(60) >= n[:, None]] = np.inf
    rows = np.sort(rows, axis=1)
    percent = np.linspace(0, 1, 21)[1:-1] * 100
    ours = row_percentiles(lambda pos: np.take_along_axis(rows, pos, axis=1), n, percent)
    numpys = np.array([np.percentile(r[:k], percent) for r, k in zip(rows, n, strict=True)])
    assert np.array_equal(ours, numpys)


def test_unknown_metric_is_named():
    res = instance_resamples(3, 2)
    with pytest.raises(ValueError, match=r"\['ece'\]: bootstrap intervals exist for"):
        batched_metrics(["ece"], [0.1, 0.2, 0.3], [True, False, True], res)


# --- intervals ---------------------------------------------------------------------------------


def test_percentile_interval_is_numpys_ignoring_undefined_resamples():
    rng = np.random.default_rng(0)
    values = rng.random((4, 101))
    values[1, ::3] = np.nan
    values[2] = 0.3
    values[3] = np.nan
    low, high, used = percentile_interval(values, 0.9)
    expected = np.nanpercentile(values[:3], [5, 95], axis=1)
    assert np.array_equal(low[:3], expected[0]) and np.array_equal(high[:3], expected[1])
    assert used.tolist() == [101, 67, 101, 0]
    assert np.isnan(low[3]) and np.isnan(high[3])
    with pytest.raises(ValueError, match="level must be in"):
        percentile_interval(values, 1.0)


def test_bias_corrected_interval_by_hand():
    # resamples 0, 1, 2, 3, 4 around the point 1: one below, one tie, so the share below is
    # (1 + ½)/5 = 0.3 and z0 = Φ⁻¹(0.3) = −0.5244005; at level 0.5, z = Φ⁻¹(0.25) = −0.6744898, so
    # the bounds are the percentiles 100·Φ(2·z0 ∓ 0.6744898) = 4.2417978 and 35.408637, i.e. on 5
    # values (virtual index 4·q) 0.16967191 and 1.4163455: shifted down, below the percentile
    # interval [1, 3].
    low, high, used = bias_corrected_interval(np.array([[3.0, 0.0, 4.0, 1.0, 2.0]]), [1.0], level=0.5)
    assert low[0] == pytest.approx(0.16967191, abs=1e-8) and high[0] == pytest.approx(1.4163455, abs=1e-7)
    assert used.tolist() == [5]


def test_bias_corrected_interval_is_scipys_bca_when_the_acceleration_is_zero():
    # The mean of a symmetric sample has jackknife acceleration 0, where BCa is BC: on scipy's own
    # resamples, our interval is scipy's.
    x = np.array([-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0])
    for confidence in (0.9, 0.95):
        res = scipy.stats.bootstrap(
            (x,), np.mean, confidence_level=confidence, method="BCa", n_resamples=999, rng=7
        )
        low, high, _ = bias_corrected_interval(res.bootstrap_distribution[None, :], [x.mean()], confidence)
        assert low[0] == pytest.approx(res.confidence_interval.low, abs=1e-12)
        assert high[0] == pytest.approx(res.confidence_interval.high, abs=1e-12)


def test_bias_corrected_interval_always_contains_its_point():
    values = np.array(
        [
            [0.2, 0.3, 0.4, 0.5],  # all above the point: z0 = −∞, the BC bounds both the minimum
            [0.1, 0.2, 0.3, np.nan],  # all below (NaN left out): the bounds both the maximum
            [0.5, 0.5, 0.5, 0.5],  # every resample the point: a point interval
            [0.1, 0.2, 0.3, 0.4],  # a NaN point: the percentile interval
            [np.nan] * 4,  # no resample defined: no interval
        ]
    )
    point = np.array([0.1, 0.4, 0.5 + 1e-16, np.nan, 0.3])
    low, high, used = bias_corrected_interval(values, point)
    # widened to the point: [point, min], [max, point], and a tie (1 ulp off) widened by that ulp
    assert low[:3].tolist() == [0.1, 0.3, 0.5] and high[:3].tolist() == [0.2, 0.4, point[2]]
    assert (low[3], high[3]) == tuple(np.percentile(values[3], [2.5, 97.5]))
    assert np.isnan(low[4]) and np.isnan(high[4]) and used.tolist() == [4, 3, 4, 4, 0]
    with pytest.raises(ValueError, match="point: one per row of values"):
        bias_corrected_interval(values, point[:2])


def test_two_relations_by_hand():
    # Relation A: two right answers at confidence 1.0; relation B: one wrong answer at 0.5.
    # Both relations are homogeneous, so a clustered resample is fixed by how many times (k) A is
    # among the 2 drawn relations: rows 2k (right, c = 1) + (2 − k) (wrong, c = 0.5):
    #   k = 2: accuracy 4/4 = 1,  Brier 0
    #   k = 1: accuracy 2/3,      Brier 0.25/3   (one wrong at 0.5: (0.5 − 0)² = 0.25)
    #   k = 0: accuracy 0/2 = 0,  Brier 0.25
    # with probabilities 1/4, 1/2, 1/4; 2.5 % and 97.5 % of 1,000 draws fall in the extreme
    # outcomes, so the 95 % intervals are accuracy [0, 1] and Brier [0, 0.25].
    frame = estimates({"A": [(1.0, True), (1.0, True)], "B": [(0.5, False)]})
    out = bootstrap_intervals(frame, metrics=("accuracy", "brier"))
    got = {
        (r["scope"], r["scope_value"], r["metric"]): (r["ci_low"], r["ci_high"])
        for r in out.iter_rows(named=True)
    }
    assert got[("all", "all", "accuracy")] == (0.0, 1.0)
    assert got[("all", "all", "brier")] == (0.0, 0.25)
    # within one relation every resample is the relation itself: a point
    assert got[("relation", "A", "accuracy")] == (1.0, 1.0) and got[("relation", "B", "brier")] == (
        0.25,
        0.25,
    )
    assert set(out["n_resamples"]) == {1000}
    # each resample's value is the k-formula above
    res = resample_plan(np.array(["A", "A", "B"]), 1000, 0)[0].resamples
    k = ((res.indices >= 0) & (res.indices < 2)).sum(axis=1) // 2  # A's rows come in blocks of 2
    values = batched_metrics(["accuracy"], np.array([1.0, 1.0, 0.5]), np.array([True, True, False]), res)
    assert np.array_equal(values["accuracy"], 2 * k / (2 * k + 2 - k))


def test_constant_metric_gives_a_point_interval():
    # all right at confidence 1: accuracy 1, ACE 0, Brier 0, AURC 0 on every resample; AUROC is
    # undefined (one class) on every resample, so no interval and no usable resample.
    frame = estimates({"A": [(1.0, True)] * 3, "B": [(1.0, True)] * 5})
    out = bootstrap_intervals(frame).filter(scope="all")
    by = {r["metric"]: r for r in out.iter_rows(named=True)}
    for metric, value in [("accuracy", 1.0), ("ace", 0.0), ("brier", 0.0), ("aurc", 0.0)]:
        assert by[metric]["ci_low"] == by[metric]["ci_high"] == value
    assert np.isnan(by["auroc"]["ci_low"]) and by["auroc"]["n_resamples"] == 0


def slow_bc(values, point, level=0.95):
    """The bias-corrected interval of one row, written out: z0 = Φ⁻¹(share below the point, ties
    half, equal within 1e-12), bounds at the percentiles 100·Φ(2·z0 ± z), then widened to the point."""
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return math.nan, math.nan
    tie = np.abs(finite - point) <= 1e-12 * max(1.0, abs(point))  # equal but for summation order
    share = (np.sum((finite < point) & ~tie) + 0.5 * np.sum(tie)) / finite.size
    z0 = (
        0.0
        if math.isnan(point)
        else {0.0: -math.inf, 1.0: math.inf}.get(share) or NormalDist().inv_cdf(share)
    )
    z = NormalDist().inv_cdf((1 - level) / 2)
    low, high = np.percentile(
        finite, [100 * NormalDist().cdf(2 * z0 + z), 100 * NormalDist().cdf(2 * z0 - z)]
    )
    return (low, high) if math.isnan(point) else (min(low, point), max(high, point))


def loop_intervals(frame, metric, seed, n_resamples, level):
    """The intervals by a plain loop: the same plan, the registered metric per resample and on the
    scope's rows (the point)."""
    f = frame.sort("relation_id", "instance_id")
    c, y = f["confidence"].to_numpy(), f["correct"].to_numpy()
    out = {}
    for sc in resample_plan(f["relation_id"].to_numpy(), n_resamples, seed):
        values = per_resample(metric, c, y, sc.resamples)
        point = METRICS[metric].fn(c[sc.rows], y[sc.rows])
        out[(sc.scope, sc.scope_value)] = slow_bc(values, point, level)
    return out


def random_frame(seed, estimator="e", relations=("P1", "P2", "P3", "P4"), n=(6, 9, 4, 12)):
    rng = np.random.default_rng(seed)
    return estimates(
        {rel: list(zip(*tie_prone(rng, k), strict=True)) for rel, k in zip(relations, n, strict=True)},
        estimator,
    )


@pytest.mark.parametrize("metric", DEFAULT_METRICS)
def test_intervals_equal_a_plain_loop(metric):
    frame = random_frame(1)
    out = bootstrap_intervals(
        frame.sample(fraction=1.0, shuffle=True, seed=3), [metric], 200, seed=5, level=0.9
    )
    expected = loop_intervals(frame, metric, 5, 200, 0.9)
    assert out.height == len(expected)
    for r in out.iter_rows(named=True):
        low, high = expected[(r["scope"], r["scope_value"])]
        assert r["ci_low"] == pytest.approx(low, abs=1e-12) and r["ci_high"] == pytest.approx(high, abs=1e-12)


def test_intervals_keys_and_score_estimators():
    frame = pl.concat(
        [
            random_frame(1).with_columns(output_kind=pl.lit("probability")),
            random_frame(2, "gap").with_columns(pl.col("confidence") * 7 - 3, output_kind=pl.lit("score")),
        ]
    )
    out = bootstrap_intervals(frame, n_resamples=50)
    assert list(out.columns) == [
        "model_id", "estimator", "reduction", "split", "answer_space_k", "answer_space_draw",
        "scope", "scope_value", "metric",
        "ci_low", "ci_high", "n_resamples",
    ]  # fmt: skip
    assert sorted(out.filter(estimator="gap")["metric"].unique()) == ["accuracy", "aurc", "auroc"]
    assert out.filter(estimator="e").height == 5 * 5  # 5 metrics × (all + 4 relations)
    assert (out["ci_low"] <= out["ci_high"]).all()
    with pytest.raises(ValueError, match="several rows for instance"):
        bootstrap_intervals(pl.concat([frame, frame]))


# --- paired differences ------------------------------------------------------------------------


def test_paired_difference_of_an_estimator_with_itself_is_exactly_zero():
    frame = random_frame(4)
    out = paired_differences(frame, [("e", "e")], n_resamples=100)
    assert out.height == 5 * 5
    defined = out.filter(pl.col("ci_low").is_not_nan())
    assert (
        (defined["difference"] == 0).all()
        and (defined["ci_low"] == 0).all()
        and (defined["ci_high"] == 0).all()
    )


def test_paired_differences_use_the_same_resamples():
    a, b = random_frame(1, "margin"), random_frame(2, "base")
    b = pl.concat([b, estimates({"P9": [(0.5, True)]}, "base")])  # an instance margin lacks: not paired
    out = paired_differences(pl.concat([a, b]), [("margin", "base")], n_resamples=150, seed=2)
    assert set(out["scope_value"]) == {"all", "P1", "P2", "P3", "P4"}
    joined = a.join(b, on=["model_id", "relation_id", "instance_id"], suffix="_b").sort(
        "relation_id", "instance_id"
    )
    ca, ya = joined["confidence"].to_numpy(), joined["correct"].to_numpy()
    cb, yb = joined["confidence_b"].to_numpy(), joined["correct_b"].to_numpy()
    for sc in resample_plan(joined["relation_id"].to_numpy(), 150, 2):
        for metric in DEFAULT_METRICS:
            diffs = per_resample(metric, ca, ya, sc.resamples) - per_resample(metric, cb, yb, sc.resamples)
            r = sc.rows
            low, high = slow_bc(diffs, METRICS[metric].fn(ca[r], ya[r]) - METRICS[metric].fn(cb[r], yb[r]))
            row = out.filter(scope=sc.scope, scope_value=sc.scope_value, metric=metric).row(0, named=True)
            r = sc.rows
            assert row["difference"] == pytest.approx(
                METRICS[metric].fn(ca[r], ya[r]) - METRICS[metric].fn(cb[r], yb[r]), abs=1e-15, nan_ok=True
            )
            assert row["ci_low"] == pytest.approx(low, abs=1e-12, nan_ok=True)
            assert row["ci_high"] == pytest.approx(high, abs=1e-12, nan_ok=True)
            assert math.isnan(row["ci_low"]) or row["ci_low"] <= row["difference"] <= row["ci_high"]
            assert row["n"] == r.stop - r.start and row["n_resamples"] == np.isfinite(diffs).sum()


def test_paired_differences_errors_and_score_pairs():
    frame = pl.concat(
        [
            random_frame(1).with_columns(output_kind=pl.lit("probability")),
            random_frame(2, "gap").with_columns(output_kind=pl.lit("score")),
        ]
    )
    out = paired_differences(frame, [("e", "gap")], n_resamples=20)
    assert sorted(out["metric"].unique()) == ["accuracy", "aurc", "auroc"]  # gap gives scores
    with pytest.raises(ValueError, match=r"estimator\(s\) \['nope'\] not in the estimates"):
        paired_differences(frame, [("e", "nope")])
    other = random_frame(3, "x").with_columns(model_id=pl.lit("other"))
    with pytest.raises(ValueError, match="share no"):
        paired_differences(pl.concat([random_frame(1), other]), [("e", "x")])


def test_shared_resample_values_change_nothing_and_compute_each_once(monkeypatch):
    """Intervals then paired differences through one ResampledValues equal each computed alone, and
    batched_metrics runs once per (estimator, rows, scope): margin's paired values are its interval
    values, Base's on the same instances too; x lacks an instance, so Base on x's rows is new."""
    base, margin = random_frame(2, "base"), random_frame(1, "margin")
    x = random_frame(3, "x").filter((pl.col("relation_id") != "P1") | (pl.col("instance_id") != "i0"))
    frame = pl.concat([margin, base, x])
    pairs = [("margin", "base"), ("x", "base")]
    calls = []
    counted = bootstrap.batched_metrics
    monkeypatch.setattr(bootstrap, "batched_metrics", lambda *a: calls.append(1) or counted(*a))

    alone = (
        bootstrap_intervals(frame, n_resamples=120, seed=4),
        paired_differences(frame, pairs, n_resamples=120, seed=4),
    )
    calls_alone = len(calls)
    values = ResampledValues(120, 4)
    shared = (
        bootstrap_intervals(frame, n_resamples=120, seed=4, values=values),
        paired_differences(frame, pairs, n_resamples=120, seed=4, values=values),
    )
    scopes = 5  # all + P1 … P4
    assert calls_alone == 3 * scopes + 4 * scopes  # intervals: 3 estimators; pairs: A and B each
    assert len(calls) - calls_alone == 3 * scopes + scopes  # only Base on x's rows is new
    for one, other in zip(alone, shared, strict=True):
        assert one.equals(other)


def test_shared_values_refuse_other_resamples():
    values = ResampledValues(100, 0)
    with pytest.raises(
        ValueError, match=r"memoised for \(n_resamples, seed\) = \(100, 0\), asked for \(200, 0\)"
    ):
        bootstrap_intervals(random_frame(1), n_resamples=200, values=values)


# --- every interval contains its point ------------------------------------------------------------


def _with_points(frame: pl.DataFrame, intervals: pl.DataFrame) -> pl.DataFrame:
    from kcal_pipeline.evaluation.engine import compute_metrics
    from kcal_pipeline.evaluation.tables import INTERVAL_KEYS

    point = compute_metrics(frame, scopes=["all", "relation"])
    return point.join(intervals, on=list(INTERVAL_KEYS), nulls_equal=True)


def test_every_metrics_row_lies_in_its_interval_where_percentile_intervals_miss(monkeypatch):
    # ACE is biased upwards under resampling: a resample's bin accuracies scatter around the
    # sample's, and |confidence − accuracy| only grows with the scatter. Two relations calibrated
    # to the last instance (at each confidence k/10, ten answers, k of them right) have ACE 0,
    # every resample ACE > 0, so the percentile intervals miss their point; the bias-corrected
    # ones contain every point as compute_metrics writes it, and so do the other metrics'.
    calibrated = [(k / 10, j < k) for k in range(1, 11) for j in range(10)]
    frame = pl.concat(
        [estimates({"A": calibrated, "B": calibrated}), random_frame(11, relations=("C", "D"), n=(5, 7))]
    )
    metrics = ("accuracy", "ace", "brier", "auroc", "aurc", "confidence_gap")
    bc = _with_points(frame, bootstrap_intervals(frame, metrics, n_resamples=200))
    assert bc.height == 6 * 5  # 6 metrics × (all + 4 relations)
    defined = bc.filter(pl.col("ci_low").is_not_nan() & pl.col("value").is_not_nan())
    assert defined.filter(pl.col("metric") == "ace").height == 5
    assert ((defined["ci_low"] <= defined["value"]) & (defined["value"] <= defined["ci_high"])).all()
    monkeypatch.setattr(
        bootstrap, "bias_corrected_interval", lambda v, _p, level: percentile_interval(v, level)
    )
    pct = _with_points(frame, bootstrap_intervals(frame, metrics, n_resamples=200)).filter(metric="ace")
    assert ((pct["value"] < pct["ci_low"]) | (pct["value"] > pct["ci_high"])).any()


def test_every_paired_difference_lies_in_its_interval():
    a, b = random_frame(12, "margin", n=(5, 7, 4, 6)), random_frame(13, "base", n=(5, 7, 4, 6))
    out = paired_differences(pl.concat([a, b]), [("margin", "base")], n_resamples=200)
    defined = out.filter(pl.col("ci_low").is_not_nan() & pl.col("difference").is_not_nan())
    assert defined.height >= 20
    assert (
        (defined["ci_low"] <= defined["difference"]) & (defined["difference"] <= defined["ci_high"])
    ).all()
