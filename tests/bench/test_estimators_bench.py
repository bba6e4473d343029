"""bench/estimators.py's pandas re-implementation agrees with kcal's estimator stage, and its
comparison catches what it must (no timing: the bench itself prints those)."""

import math

import polars as pl
import pytest

from bench import estimators as bench


@pytest.fixture(scope="module")
def tiny():
    """One model, the compact layout (4 relations × 10 instances: markers, dropout, no masked scores
    on one, MACE-like), ≈ 4,000 statements; both paths run in this process."""
    data = bench.make_dataset(3_000, seed=5, models=1)
    plan = bench.comparison_plan(bench.registry())
    kcal, _ = bench.kcal_stage(data, None, log=lambda _: None)
    pandas, _ = bench.pandas_stage(data, plan.wanted)
    return data, plan, kcal, pandas


def test_the_bench_implements_every_registered_estimator(tiny):
    _, plan, _, _ = tiny
    assert plan.kcal_only == [], (
        "registered estimators the bench does not implement: add them to bench/estimators.py"
    )
    assert plan.pandas_only == [], "estimators the bench implements that the registry no longer has"
    assert plan.notes == []  # family and reductions as the spec says


def test_pandas_path_agrees_with_kcal_on_every_row(tiny):
    data, plan, kcal, pandas = tiny
    agreement = bench.compare(kcal, pandas, plan.wanted)
    assert agreement.ok, "\n".join(bench.disagreement_lines(agreement))
    assert agreement.rows == kcal.height == pandas.height > 0
    assert agreement.max_delta <= bench.TOLERANCE
    # Every estimator the data can feed produced rows: all but Vote(k) for k > T = 5 templates.
    unfed = {f"vote{k}_{a}" for k in range(6, bench.MAX_VOTE_K + 1) for a in ("average", "consistency")}
    assert set(kcal["estimator"]) == set(plan.wanted) - unfed
    assert data.scores.height >= 3_000


def _row(frame: pl.DataFrame, estimator: str, n: int = 0) -> pl.Expr:
    """A filter picking the n-th row of `estimator` in `frame` (by its keys)."""
    keys = frame.filter(pl.col("estimator") == estimator).row(n, named=True)
    return pl.all_horizontal(pl.col(k).eq_missing(keys[k]) for k in bench.KEYS)


def test_compare_flags_missing_rows_and_differences_but_not_equal_infinities(tiny):
    _, plan, kcal, pandas = tiny
    base, margin, gap = _row(pandas, "base"), _row(pandas, "margin"), _row(pandas, "gap")
    fitted_small, fitted_large = _row(pandas, "base_temperature", 0), _row(pandas, "base_temperature", 1)
    changed = pandas.filter(~_row(pandas, "sent")).with_columns(  # one row dropped: only in kcal
        confidence=pl.when(base)
        .then(pl.col("confidence") + 1e-8)  # 10 × TOLERANCE: flagged
        .when(gap)
        .then(math.inf)  # +inf on both sides: equal
        .when(fitted_small)
        .then(pl.col("confidence") + 1e-8)  # under FITTED_TOLERANCE: fine
        .when(fitted_large)
        .then(pl.col("confidence") + 1e-6)  # over it: flagged
        .otherwise(pl.col("confidence")),
        predicted_index=pl.when(margin)
        .then(pl.col("predicted_index") + 1)
        .otherwise(pl.col("predicted_index")),
    )
    with_inf = kcal.with_columns(confidence=pl.when(gap).then(math.inf).otherwise(pl.col("confidence")))
    agreement = bench.compare(with_inf, changed, plan.wanted)
    assert not agreement.ok
    assert agreement.only_kcal["estimator"].to_list() == ["sent"]
    assert agreement.only_pandas.is_empty()
    assert sorted(agreement.mismatches["estimator"].to_list()) == ["base", "base_temperature", "margin"]
    assert agreement.max_delta == pytest.approx(1e-8, rel=1e-3)
