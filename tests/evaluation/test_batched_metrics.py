"""Every metric's batched implementation (all samples at once, evaluation/segments.py) equals its
per-sample definition applied sample by sample: ties, repeated values, bin edges, one-class and
one-row samples included."""

import numpy as np
import polars as pl
import pytest

import kcal_pipeline.evaluation  # noqa: F401  (registers every metric)
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.segments import Segments, row_percentiles

PER_ROW = [m for m in METRICS.values() if m.input in ("confidence", "threshold", "statements")]


def random_samples(seed: int, count: int = 60, largest: int = 80):
    """Samples of 1…largest rows: some with few distinct values (ties, bin edges such as 0.15 and
    0.5), some one-class, some continuous."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, largest, size=count)
    sizes[:3] = (1, 2, 3)
    cs, ys = [], []
    for i, n in enumerate(sizes):
        style = i % 4
        if style == 0:
            c = rng.choice([0.0, 0.05, 0.15, 0.5, 0.55, 1.0], size=n)
        elif style == 1:
            c = np.round(rng.random(n), 2)
        else:
            c = rng.random(n)
        y = rng.random(n) < (c if style != 3 else 0.5)
        if i % 7 == 0:
            y[:] = i % 2 == 0  # one class only
        cs.append(c)
        ys.append(y)
    return Segments(np.concatenate(cs), np.concatenate(ys), sizes), cs, ys


def same(a, b, tol):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    both_nan = np.isnan(a) & np.isnan(b)
    assert np.array_equal(np.isnan(a), np.isnan(b)), (a, b)
    np.testing.assert_allclose(a[~both_nan], b[~both_nan], rtol=0, atol=tol)


@pytest.mark.parametrize("spec", PER_ROW, ids=lambda m: m.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_equals_the_definition_sample_by_sample(spec, seed):
    seg, cs, ys = random_samples(seed)
    tol = 1e-10 if spec.name == "smooth_ece" else 1e-12
    if spec.input == "confidence":
        expected = [spec.fn(c, y) for c, y in zip(cs, ys, strict=True)]
        same(spec.batched(seg), expected, tol)
    else:
        rng = np.random.default_rng(seed + 10)
        # τ: a value of the sample itself (C = τ tests ≥ against >), a random one, NaN (no τ)
        tau = np.array([rng.choice(c) if i % 3 == 0 else rng.random() for i, c in enumerate(cs)])
        tau[5] = np.nan
        expected = [spec.fn(c, y, t) for c, y, t in zip(cs, ys, tau, strict=True)]
        same(spec.batched(seg, tau), expected, tol)


OPTIONS = [m for m in METRICS.values() if m.input == "options"]


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda m: m.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_option_metrics_equal_the_definition_sample_by_sample(spec, seed):
    # random_samples' rows as (instance, option) statements: runs of 1–4 rows are instances, each
    # row a class of a small pool (a class recurs within a sample, codes recur across samples,
    # as the "all" and "relation" samples share rows); each sample's codes as the spec gets them
    seg, cs, ys = random_samples(seed)
    rng = np.random.default_rng(seed + 20)
    instance = np.cumsum(rng.random(seg.c.size) < 0.4) % 50
    option = rng.integers(0, 9, size=seg.c.size)
    bounds = [*seg.starts.tolist(), seg.c.size]
    expected = [
        spec.fn(c, y, *(np.unique(codes[a:b], return_inverse=True)[1] for codes in (instance, option)))
        for c, y, a, b in zip(cs, ys, bounds[:-1], bounds[1:], strict=True)
    ]
    same(spec.batched(seg, instance, option), expected, 1e-12)


def test_statements_are_asserted_strictly_above_tau_and_instances_accepted_at_it():
    # three statements at exactly τ = 0.5: asserted is P > τ (none of them), accepted is C ≥ τ (all)
    c, y = np.array([0.5, 0.5, 0.5, 0.2]), np.array([True, True, False, False])
    assert np.isnan(METRICS["statement_precision_t050"](c, y))  # nothing asserted
    assert METRICS["statement_recall_t050"](c, y) == 0.0
    assert METRICS["precision_t050"](c, y) == pytest.approx(2 / 3)
    assert METRICS["recall_t050"](c, y) == 1.0


def test_tuned_threshold_for_statements_accepts_strictly_above_it():
    from kcal_pipeline.evaluation.decisions import tune_f1, tune_f1_strict

    # dev: 0.9 ✓, 0.8 ✓, 0.6 ✗, 0.3 ✗ ×17 → F1 best when accepting {0.9, 0.8}:
    # C ≥ τ gives τ = 0.8; P > τ gives τ = 0.6 (the value just below the accepted set)
    c = np.array([0.9, 0.8, 0.6, *[0.3] * 17])
    y = np.array([True, True, False, *[False] * 17])
    assert tune_f1(c, y, "probability").threshold == 0.8
    assert tune_f1_strict(c, y, "probability").threshold == 0.6
    assert METRICS["statement_f1_tuned"](c, y, tau=0.6) == 1.0


def test_batched_percentiles_are_numpys_to_the_last_bit():
    seg, cs, _ = random_samples(3)
    percent = np.linspace(0, 1, 21) * 100
    got = seg.percentiles(percent)
    for s, c in enumerate(cs):
        assert np.array_equal(got[s], np.percentile(c, percent))
    n = np.array([len(c) for c in cs])
    flat = np.sort(cs[10])
    assert np.array_equal(
        row_percentiles(lambda pos: flat[pos], n[10:11], percent)[0], np.percentile(cs[10], percent)
    )


def test_count_at_or_below_is_searchsorted_right_per_sample():
    seg, cs, _ = random_samples(4)
    rng = np.random.default_rng(0)
    queries = np.stack([np.r_[rng.choice(c, 3), rng.random(3), -1.0, 2.0] for c in cs])
    got = seg.count_at_or_below(queries)
    for s, c in enumerate(cs):
        assert np.array_equal(got[s], np.searchsorted(np.sort(c), queries[s], side="right"))


def test_take_keeps_the_chosen_samples_rows_in_order():
    seg, cs, ys = random_samples(5, count=8)
    part = seg.take(np.array([1, 4, 7]))
    assert np.array_equal(part.sizes, [len(cs[1]), len(cs[4]), len(cs[7])])
    assert np.array_equal(part.c, np.concatenate([cs[1], cs[4], cs[7]]))
    assert np.array_equal(part.y, np.concatenate([ys[1], ys[4], ys[7]]))


PREDICTIONS = [m for m in METRICS.values() if m.input == "predictions"]


@pytest.mark.parametrize("spec", PREDICTIONS, ids=lambda m: m.name)
def test_batched_prediction_metrics_equal_the_definition_per_relation(spec):
    rng = np.random.default_rng(7)
    objects = [f"Q{i}" for i in range(9)]
    rows = []
    for segment in range(12):
        for _ in range(int(rng.integers(1, 30))):
            predicted = None if rng.random() < 0.1 else str(rng.choice(objects[: 3 + segment % 6]))
            gold = list(rng.choice(objects, size=int(rng.integers(1, 4)), replace=False))
            rows.append((segment, predicted, gold))
    frame = pl.DataFrame(
        rows,
        schema={"segment": pl.Int64, "predicted_id": pl.String, "gold_ids": pl.List(pl.String)},
        orient="row",
    )
    expected = [
        spec(g["predicted_id"], g["gold_ids"]) for _, g in frame.group_by("segment", maintain_order=True)
    ]
    same(spec.batched(frame, 12), expected, 1e-12)


def test_breakdown_members_are_breakdown_scopes_of_every_group_in_order():
    from kcal_pipeline.evaluation.scopes import breakdown_members, breakdown_scopes

    rng = np.random.default_rng(11)
    n = 120
    frame = pl.DataFrame(
        {
            "group": np.repeat([0, 1], n // 2),
            "relation_id": rng.choice(["P1", "P2", "mace-a", "mace-b"], n),
            "n_gold": rng.choice([1, 2, 4, 6, 10], n),
            "n_options": rng.choice([6, 25, 100], n),
            "template_kind": pl.Series(rng.choice(["marker", "curated", "zeta", ""], n).tolist()).replace(
                "", None
            ),
        }
    ).with_columns(
        domain=pl.when(pl.col("relation_id").str.starts_with("mace"))
        .then(pl.lit("mace"))
        .otherwise(pl.lit("closed_set"))
    )
    members = breakdown_members(frame, "group")
    expected = []
    for g in (0, 1):
        rows = np.flatnonzero(frame["group"].to_numpy() == g)
        for sc in breakdown_scopes(frame[rows]):
            expected += [(g, sc.scope, sc.scope_value, int(r)) for r in rows[sc.rows]]
    assert (
        list(zip(members["group"], members["scope"], members["scope_value"], members["row"], strict=True))
        == expected
    )
    # segments number the (group, scope, value) runs 0, 1, … in that order
    runs = members.select(pl.struct("group", "scope", "scope_value").rle_id())
    assert members["segment"].to_list() == runs.to_series().cast(pl.Int64).to_list()


def test_breakdown_members_without_a_mace_relation_have_no_mixture_rows():
    from kcal_pipeline.evaluation.scopes import breakdown_members

    frame = pl.DataFrame(
        {"group": [0, 0], "relation_id": ["P1", "P2"], "n_gold": [1, 1], "domain": ["closed_set"] * 2}
    )
    members = breakdown_members(frame, "group")
    assert "mixture_domain" not in members["scope"].to_list()
    assert members.filter(scope="domain")["scope_value"].to_list() == ["closed_set", "closed_set"]


@pytest.mark.parametrize("spec", [m for m in PER_ROW if m.input == "confidence"], ids=lambda m: m.name)
def test_extreme_samples_stay_within_the_declared_range(spec):
    """Every answer wrong at confidence 1 (or right at 0) puts a calibration error exactly on its
    bound: rounding must not carry it past (smECE read 1 + 2e-16 at n = 3 and 48, which the
    metrics' blocking range check refuses)."""
    low, high = spec.value_range
    sizes = np.arange(1, 61)
    for c_value, right in ((1.0, False), (0.0, True), (1.0, True), (0.0, False)):
        c = np.full(int(sizes.sum()), c_value)
        y = np.full(c.size, right)
        batched = np.asarray(spec.batched(Segments(c, y, sizes)), dtype=float)
        single = np.array([spec.fn(np.full(n, c_value), np.full(n, right)) for n in sizes], dtype=float)
        for values in (batched, single):
            defined = values[~np.isnan(values)]
            assert ((defined >= low) & (defined <= high)).all(), (c_value, right, values)
