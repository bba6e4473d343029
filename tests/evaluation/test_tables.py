"""The evaluation tables as the assets build them (evaluation/tables.py): the template-kind
breakdown, intervals joined onto the point values, and the Base-relative differences."""

import polars as pl
import pytest

from kcal_pipeline.evaluation.tables import (
    _containing,
    differences_table,
    metrics_and_differences,
    metrics_table,
    template_kind_metrics,
)

TEMPLATES = pl.DataFrame(
    {
        "relation_id": "P1",
        "template_id": ["c0", "c1", "m0"],
        "kind": ["curated", "curated", "marker_verbal"],
        "rank": [0, 1, 0],
    }
)


def estimates(rows):
    """rows: (instance, template, estimator, split, confidence, correct)."""
    return pl.DataFrame(
        rows,
        schema=["instance_id", "template_id", "estimator", "split", "confidence", "correct"],
        orient="row",
    ).with_columns(
        model_id=pl.lit("m"),
        relation_id=pl.lit("P1"),
        reduction=pl.lit("sum"),
        grain=pl.lit("template"),
        output_kind=pl.lit("probability"),
        answer_space_k=pl.lit(0, pl.Int32),
        predicted_id=pl.lit("Q1"),
    )


def test_template_kind_pools_instance_template_pairs_and_skips_unlisted_templates():
    # curated: (a, c0) ✓, (b, c0) ✗, (a, c1) ✓, (b, c1) ✓ → 3/4 over 4 pairs; marker: (a, m0) ✗,
    # (b, m0) ✓ → 1/2 over 2; g9 (a generated template, not in this table) is left out
    rows = [
        ("a", "c0", "base", "test", 0.9, True), ("b", "c0", "base", "test", 0.8, False),
        ("a", "c1", "base", "test", 0.7, True), ("b", "c1", "base", "test", 0.6, True),
        ("a", "m0", "base", "test", 0.5, False), ("b", "m0", "base", "test", 0.4, True),
        ("a", "g9", "base", "test", 0.3, False),
    ]  # fmt: skip
    out = template_kind_metrics(estimates(rows), TEMPLATES).filter(pl.col("metric") == "accuracy")
    assert set(out["scope"]) == {"template_kind"}
    got = dict(zip(out["scope_value"], zip(out["value"], out["n"], strict=True), strict=True))
    assert got == {"curated": (pytest.approx(0.75), 4), "marker": (pytest.approx(0.5), 2)}


def test_metrics_table_joins_intervals_onto_test_rows_only():
    # 12 test and 4 dev instances on the headline template c0: intervals on test scope all/relation
    rows = [(f"i{i}", "c0", "base", "test" if i < 12 else "dev", 0.5 + i / 40, i % 3 != 0) for i in range(16)]
    out = metrics_table(estimates(rows), TEMPLATES, n_resamples=200, seed=1)
    acc = out.filter((pl.col("metric") == "accuracy") & (pl.col("scope") == "all"))
    test, dev = (acc.filter(pl.col("split") == s).row(0, named=True) for s in ("test", "dev"))
    assert test["value"] == pytest.approx(8 / 12)  # i = 0, 3, 6, 9 wrong
    assert test["ci_low"] <= test["value"] <= test["ci_high"]
    assert dev["ci_low"] is None and dev["ci_high"] is None
    assert out.filter(pl.col("scope") == "template")["ci_low"].null_count() > 0


def test_metrics_table_intervals_contain_every_value():
    # every row with an interval contains its value (bias-corrected intervals, and the table's
    # batched value and the interval's registered one may differ by a last bit: moved to it)
    rows = [(f"i{i}", "c0", "base", "test", 0.5 + i / 40, i % 3 != 0) for i in range(16)]
    out = metrics_table(estimates(rows), TEMPLATES, n_resamples=200, seed=1).filter(
        pl.col("ci_low").is_not_null() & pl.col("ci_low").is_not_nan() & pl.col("value").is_not_nan()
    )
    assert set(out["metric"]) >= {"accuracy", "ace", "brier", "auroc", "aurc", "confidence_gap"}
    assert ((out["ci_low"] <= out["value"]) & (out["value"] <= out["ci_high"])).all()
    # the last-bit guard: an interval 1 ulp below its value is moved to it; NaN and null stay
    frame = pl.DataFrame(
        {
            "value": [0.3, float("nan"), 0.2],
            "ci_low": [0.1, 0.1, None],
            "ci_high": [0.29999999999999993, 0.2, None],
        }
    )
    moved = frame.with_columns(_containing("value"))
    assert moved["ci_high"].to_list()[:2] == [0.3, 0.2] and moved["ci_low"].to_list()[:2] == [0.1, 0.1]
    assert moved.row(2) == (0.2, None, None)


def test_metrics_table_without_test_instances_has_null_intervals():
    # every instance on dev (a relation too small for a test split): point values, no intervals
    rows = [(f"i{i}", "c0", "base", "dev", 0.5 + i / 40, i % 3 != 0) for i in range(6)]
    out = metrics_table(estimates(rows), TEMPLATES, n_resamples=50, seed=1)
    assert out.height > 0 and set(out["split"]) == {"dev"}
    assert out["ci_low"].null_count() == out.height == out["ci_high"].null_count()


def test_differences_are_against_base_and_zero_for_an_identical_estimator():
    rows = [
        (f"i{i}", "c0", est, "test", 0.5 + i / 40, i % 3 != 0)
        for i in range(12)
        for est in ("base", "margin")
    ]
    out = differences_table(estimates(rows), TEMPLATES, n_resamples=100, seed=2)
    assert set(out["estimator_a"]) == {"margin"} and set(out["estimator_b"]) == {"base"}
    assert (out["difference"] == 0).all() and (out["ci_low"] == 0).all() and (out["ci_high"] == 0).all()
    # no Base in the data: an empty table, not an error
    assert differences_table(estimates([r for r in rows if r[2] == "margin"]), TEMPLATES).is_empty()


def test_each_template_kind_tunes_its_own_threshold_and_the_table_lists_it():
    # dev pairs, curated: 0.9 ✓, 0.8 ✓, 0.7 ✗, 0.6 ✗ (c0, c1 × a, b); marker: 0.5 ✓, 0.4 ✗ (m0).
    # curated: F1 at τ=0.8 (accept 0.9, 0.8) = 2·2/(2+2) = 1 → τ 0.8, accepts 2 of 4 (not degenerate);
    # marker: τ=0.5 accepts 1 of 2 → F1 1 → τ 0.5. The test pairs: curated 0.85 ✓, 0.75 ✗ → at 0.8
    # accept {0.85}: precision 1; marker 0.45 ✓ → rejected at 0.5: recall 0.
    rows = [
        ("a", "c0", "base", "dev", 0.9, True), ("b", "c0", "base", "dev", 0.7, False),
        ("a", "c1", "base", "dev", 0.8, True), ("b", "c1", "base", "dev", 0.6, False),
        ("a", "m0", "base", "dev", 0.5, True), ("b", "m0", "base", "dev", 0.4, False),
        ("t", "c0", "base", "test", 0.85, True), ("t", "c1", "base", "test", 0.75, False),
        ("t", "m0", "base", "test", 0.45, True),
    ]  # fmt: skip
    from kcal_pipeline.evaluation.tables import thresholds_table

    table = thresholds_table(estimates(rows), TEMPLATES).filter(unit="pairs")
    assert dict(zip(table["template_kind"], table["threshold"], strict=True)) == {
        "curated": 0.8,
        "marker": 0.5,
    }
    assert table["fallback"].to_list() == [False, False] and table["n_dev"].to_list() == [4, 2]
    out = template_kind_metrics(estimates(rows), TEMPLATES).filter(split="test")
    got = {(r["scope_value"], r["metric"]): r["value"] for r in out.iter_rows(named=True)}
    assert got[("curated", "precision_tuned")] == 1.0 and got[("curated", "recall_tuned")] == 1.0
    assert got[("marker", "recall_tuned")] == 0.0


def test_metrics_and_differences_equal_each_table_alone():
    # three estimators on 20 instances, one of them missing two: shared resample values change no number
    rows = [
        (f"i{i}", "c0", est, "test" if i < 16 else "dev", (0.3 + ((i * k) % 7) / 10), (i * k) % 3 != 0)
        for k, est in ((1, "base"), (2, "margin"), (3, "gap"))
        for i in range(20)
        if not (est == "gap" and i in (4, 5))
    ]
    frame = estimates(rows)
    metrics, differences = metrics_and_differences(frame, TEMPLATES, n_resamples=150, seed=3)
    assert metrics.equals(metrics_table(frame, TEMPLATES, n_resamples=150, seed=3))
    assert differences.equals(differences_table(frame, TEMPLATES, n_resamples=150, seed=3))
    assert set(differences["estimator_a"]) == {"margin", "gap"}
