"""Summary table, terminal text, HTML page and atomic write."""

import os
import re

import polars as pl
import pytest

from kcal_pipeline.evaluation import compute_curves, compute_metrics
from kcal_pipeline.reporting.html import format_summary, render_html, summary_table, write_report

EVIL = "<script>alert('x')</script>"


def estimates(model_id="m1"):
    """P17: 3 instances, P36: 2; Base and Margin share predictions (hence correctness)."""
    conf = {"base": [0.9, 0.6, 0.3, 0.8, 0.4], "margin": [0.8, 0.2, 0.1, 0.6, 0.0]}
    correct = [True, False, False, True, True]
    rel = ["P17", "P17", "P17", "P36", "P36"]
    return pl.concat(
        pl.DataFrame(
            {
                "model_id": model_id,
                "relation_id": rel,
                "instance_id": [f"Q{i}" for i in range(5)],
                "template_id": "t0",
                "estimator": est,
                "confidence": c,
                "correct": correct,
            }
        )
        for est, c in conf.items()
    )


@pytest.fixture
def tables():
    est = estimates()
    m = compute_metrics(est)
    return summary_table(m), m, compute_curves(est)


def test_summary_table_by_hand(tables):
    summary, _, _ = tables
    assert summary.columns == [
        "relation",
        "instances",
        "accuracy",
        "ace_base",
        "brier_base",
        "ace_margin",
        "brier_margin",
    ]
    assert summary["relation"].to_list() == ["P17", "P36", "all"]
    assert summary["instances"].to_list() == [3, 2, 5]
    # P17: correct 1,0,0 → accuracy 1/3; base Brier (0.01 + 0.36 + 0.09)/3 = 0.46/3;
    #      base ACE (3 points, own bins) = (0.1 + 0.6 + 0.3)/3 = 1/3
    # P36: correct 1,1 → accuracy 1; margin Brier ((0.6−1)² + (0−1)²)/2 = (0.16 + 1)/2 = 0.58
    # all: accuracy 3/5
    p17, p36, everything = summary.rows(named=True)
    assert p17["accuracy"] == pytest.approx(1 / 3)
    assert p17["brier_base"] == pytest.approx(0.46 / 3)
    assert p17["ace_base"] == pytest.approx(1 / 3)
    assert p36["accuracy"] == pytest.approx(1.0)
    assert p36["brier_margin"] == pytest.approx(0.58)
    assert everything["accuracy"] == pytest.approx(0.6)


def test_summary_values_match_the_metrics_table(tables):
    summary, metrics, _ = tables
    for row in summary.iter_rows(named=True):
        scope = "all" if row["relation"] == "all" else "relation"
        for col, value in row.items():
            if col in ("relation", "instances"):
                continue
            metric, est = ("accuracy", "base") if col == "accuracy" else col.split("_")
            ref = metrics.filter(estimator=est, scope=scope, scope_value=row["relation"], metric=metric)
            assert value == ref["value"].item()
            assert row["instances"] == ref["n"].item()


def test_summary_reads_the_registries_and_splits_a_metric_estimators_disagree_on():
    from kcal_pipeline.reporting.html import summary_title

    assert summary_title("m1") == "Model m1 — headline template, Base and Margin (ACE: 20 quantile bins)"
    # Margin made to predict differently on Q0 (correct → wrong): accuracy is no longer shared, so
    # it becomes one column per estimator. P17 margin accuracy: 0/3; base keeps 1/3.
    est = estimates()
    est = est.with_columns(
        correct=pl.when((pl.col("estimator") == "margin") & (pl.col("instance_id") == "Q0"))
        .then(False)
        .otherwise(pl.col("correct"))
    )
    summary = summary_table(compute_metrics(est))
    assert summary.columns == [
        "relation", "instances", "accuracy_base", "ace_base", "brier_base",
        "accuracy_margin", "ace_margin", "brier_margin",
    ]  # fmt: skip
    p17 = summary.row(0, named=True)
    assert (p17["accuracy_base"], p17["accuracy_margin"]) == (pytest.approx(1 / 3), 0.0)


def test_summary_errors_name_the_problem(tables):
    _, metrics, _ = tables
    with pytest.raises(ValueError, match="estimator 'vote2', metric 'accuracy'"):
        summary_table(metrics, ("base", "vote2"))
    two = pl.concat([metrics, metrics.with_columns(model_id=pl.lit("m2"))])
    with pytest.raises(ValueError, match=r"exactly one model, got \['m1', 'm2'\]"):
        summary_table(two)


def test_format_summary_is_aligned_with_three_decimals(tables):
    text = format_summary(tables[0])
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert lines[0].split() == [
        "relation",
        "instances",
        "accuracy",
        "ace_base",
        "brier_base",
        "ace_margin",
        "brier_margin",
    ]
    assert lines[2].split()[:5] == ["P17", "3", "0.333", "0.333", "0.153"]
    # the text column is left-aligned, the numeric ones right-aligned: each numeric column ends
    # at the same offset in every line (header and rule included)
    ends = {tuple(m.end() for m in re.finditer(r"\S+", line))[1:] for line in lines}
    assert len(ends) == 1


def test_html_is_self_contained_escaped_and_has_diagrams():
    est = estimates(EVIL)
    m = compute_metrics(est)
    page = render_html(
        summary_table(m),
        m,
        compute_curves(est),
        {"model_id": EVIL, "revision": "abc123", "KCAL_HOME": "/data/kcal & co", "instances": 5},
    )
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "/data/kcal &amp; co" in page and "abc123" in page
    assert page.count("<svg") == 2  # one reliability diagram per estimator
    assert "ACE: 20 quantile bins; ECE: 20 equal-width bins" in page
    assert '<td class="txt">20 equal-width bins</td>' in page  # the metrics table says which binning ECE uses
    assert not re.search(r"<link|src=|@import|url\(", page)  # no external assets
    # the summary numbers appear as shown in the table
    assert '<td class="num">0.153</td>' in page


def test_write_report_is_atomic(tmp_path):
    target = tmp_path / "reports" / "index.html"
    assert write_report(target, "<p>one</p>") == target
    write_report(target, "<p>two</p>")
    assert target.read_text(encoding="utf-8") == "<p>two</p>"
    with pytest.raises(TypeError, match=r"write\(\) argument must be str, not None"):
        write_report(target, None)  # fails mid-write: the old page survives, no temp file is left
    assert target.read_text(encoding="utf-8") == "<p>two</p>"
    assert os.listdir(target.parent) == ["index.html"]
