"""The option-count sweep in the evaluation tables (issue 29, part 2): every (k, draw) of the
`#k<k>d<draw>` copies is its own metrics group, and the headline table reads the full answer
spaces only, so a sweep changes no headline number."""

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.evaluation.engine import compute_metrics
from kcal_pipeline.evaluation.tables import metrics_table, thresholds_table
from kcal_pipeline.reporting.html import subsample_tables, summary_table

TEMPLATES = pl.DataFrame(
    {"relation_id": "P1", "template_id": ["c0", "c1"], "kind": ["curated", "curated"], "rank": [0, 1]}
)
# Test instances t0..t3 (and dev d0, d1) on the headline template c0, per answer space (k, draw):
# Base's confidences (Margin's: half of them) and correctness; Base's accuracy and mean confidence
# over the four test instances.
SPACES = {
    (0, 0): ([0.9, 0.8, 0.6, 0.4], [1, 1, 0, 0]),  # accuracy 1/2, mean confidence 0.675
    (2, 1): ([0.8, 0.8, 0.8, 0.8], [1, 1, 1, 0]),  # 3/4, 0.8
    (2, 2): ([0.7, 0.7, 0.7, 0.7], [1, 0, 1, 0]),  # 1/2, 0.7
    (3, 1): ([0.6, 0.6, 0.6, 0.6], [1, 0, 0, 0]),  # 1/4, 0.6
    (3, 2): ([0.5, 0.5, 0.5, 0.5], [0, 0, 0, 0]),  # 0, 0.5
}


def estimates(spaces=SPACES) -> pl.DataFrame:
    rows = []
    for (k, draw), (confidence, correct) in spaces.items():
        suffix = f"#k{k}d{draw}" if k else ""
        for i, (c, y) in enumerate(zip([*confidence, 0.7, 0.3], [*correct, 1, 0], strict=True)):
            instance = f"P1/t{i}" if i < 4 else f"P1/d{i - 4}"
            for template in ("c0", "c1"):
                for estimator, confidence in (("base", c), ("margin", c / 2)):  # the summary's two
                    split = "test" if i < 4 else "dev"
                    rows.append((instance + suffix, template, split, k, draw, estimator, confidence, bool(y)))
    return pl.DataFrame(
        rows,
        schema=["instance_id", "template_id", "split", "answer_space_k", "answer_space_draw", "estimator",
                "confidence", "correct"],
        orient="row",
    ).with_columns(
        pl.col("answer_space_k", "answer_space_draw").cast(pl.Int32),
        model_id=pl.lit("m"),
        relation_id=pl.lit("P1"),
        reduction=pl.lit("sum"),
        grain=pl.lit("template"),
        output_kind=pl.lit("probability"),
        predicted_id=pl.lit("Q1"),
    )  # fmt: skip


def test_every_k_and_draw_has_its_own_metrics_rows():
    head = estimates().filter((pl.col("template_id") == "c0") & (pl.col("estimator") == "base"))
    out = compute_metrics(head, ["accuracy", "mean_confidence"]).filter(
        (pl.col("split") == "test") & (pl.col("scope") == "all")
    )
    got = {
        (r["answer_space_k"], r["answer_space_draw"], r["metric"]): (r["value"], r["n"])
        for r in out.iter_rows(named=True)
    }
    assert got == {
        (0, 0, "accuracy"): (0.5, 4), (0, 0, "mean_confidence"): (pytest.approx(0.675), 4),
        (2, 1, "accuracy"): (0.75, 4), (2, 1, "mean_confidence"): (pytest.approx(0.8), 4),
        (2, 2, "accuracy"): (0.5, 4), (2, 2, "mean_confidence"): (pytest.approx(0.7), 4),
        (3, 1, "accuracy"): (0.25, 4), (3, 1, "mean_confidence"): (pytest.approx(0.6), 4),
        (3, 2, "accuracy"): (0.0, 4), (3, 2, "mean_confidence"): (pytest.approx(0.5), 4),
    }  # fmt: skip
    # the tuned thresholds too: one τ per (k, draw), each tuned on its own dev rows
    taus = thresholds_table(estimates(), TEMPLATES).filter(pl.col("unit") == "instances")
    assert sorted(set(taus.select("answer_space_k", "answer_space_draw").iter_rows())) == list(SPACES)


def test_the_headline_table_is_the_same_with_and_without_the_sweep():
    full = estimates({(0, 0): SPACES[(0, 0)]})
    without = metrics_table(full, TEMPLATES, n_resamples=50, seed=3)
    with_sweep = metrics_table(estimates(), TEMPLATES, n_resamples=50, seed=3)
    key = [c for c in without.columns if c not in ("value", "n", "ci_low", "ci_high", "higher_is_better")]
    on_full = with_sweep.filter(pl.col("answer_space_k") == 0)
    assert_frame_equal(  # to the last bits: batched metrics may sum in another order beside more groups
        on_full.sort(key, nulls_last=True),
        without.sort(key, nulls_last=True),
        check_exact=False,
        rel_tol=1e-12,
    )
    assert set(with_sweep.filter(pl.col("answer_space_draw") == 0)["answer_space_k"]) == {0}  # draw 0 ⟺ k 0
    # the sweep's spread is over its draws: no bootstrap interval is resampled per (k, draw)
    swept = with_sweep.filter(pl.col("answer_space_k") > 0)
    assert (
        swept["ci_low"].null_count() == swept.height > 0 and on_full["ci_low"].null_count() < on_full.height
    )
    assert summary_table(with_sweep).equals(summary_table(without))  # the demo's and the page's table
    # the cut spaces: one table per k, each value the mean of its draws (accuracy (3/4 + 1/2)/2)
    (two, two_table), (three, three_table) = subsample_tables(with_sweep)
    assert (two, three) == (
        "answer spaces cut to 2, mean of 2 draws",
        "answer spaces cut to 3, mean of 2 draws",
    )
    assert two_table.filter(pl.col("relation") == "all")["accuracy"].item() == pytest.approx(0.625)
    assert three_table.filter(pl.col("relation") == "all")["accuracy"].item() == pytest.approx(0.125)


def test_the_sweep_figure_shows_the_mean_and_spread_over_draws_per_family():
    from kcal_pipeline.reporting import figure_data, plots

    metrics = compute_metrics(
        estimates().filter(pl.col("template_id") == "c0"), ["accuracy", "ace", "mean_confidence"]
    )
    points = figure_data.sweep_points(metrics)
    # one line per family: Base for single_template (Margin is of the same family)
    assert points["label"].unique().to_list() == ["single template: Base"]
    accuracy = {r["k"]: r for r in points.filter(pl.col("metric") == "accuracy").iter_rows(named=True)}
    assert {k: (r["mean"], r["draws"], r["n"]) for k, r in accuracy.items()} == {
        0: (0.5, 1, 4),
        2: (pytest.approx(0.625), 2, 4),
        3: (pytest.approx(0.125), 2, 4),
    }
    assert accuracy[0]["sd"] is None  # one "draw": no spread
    assert accuracy[2]["sd"] == pytest.approx(0.125 * 2**0.5) == accuracy[3]["sd"]  # sd of (3/4, 1/2)
    figure = plots.assert_not_empty(plots.sweep_figure(points), "sweep")
    assert [ax.get_title() for ax in figure.axes[:3]] == [
        "ACE by answer-space size", "accuracy by answer-space size", "mean confidence by answer-space size"
    ]  # fmt: skip
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["2", "3", "full"]
    assert figure_data.sweep_points(metrics.filter(pl.col("answer_space_k") == 0)).is_empty()
