"""Summary table, terminal text, HTML page and atomic write."""

import os
import re

import polars as pl
import pytest

from kcal_pipeline.evaluation import compute_curves, compute_metrics, compute_template_metrics
from kcal_pipeline.evaluation.consistency import CONSISTENCY_SCHEMA
from kcal_pipeline.reporting.html import format_summary, split_table, summary_table, write_report
from kcal_pipeline.reporting.pages import model_figures, model_page

EVIL = "<script>alert('x')</script>"


def estimates(model_id="m1"):
    """Test split, headline template t0: P17 has 3 instances, P36 2; Base and Margin share
    predictions (hence correctness). A second curated template t1 (P17 ✓✓✗, P36 ✗✓) and a dev
    instance Q5 of P17 (t0 ✓, t1 ✗) come along: the template mean reads t1, the summary never Q5."""
    conf = {"base": [0.9, 0.6, 0.3, 0.8, 0.4], "margin": [0.8, 0.2, 0.1, 0.6, 0.0]}
    correct = {"t0": [True, False, False, True, True], "t1": [True, True, False, False, True]}
    rel = ["P17", "P17", "P17", "P36", "P36"]
    frames = [
        pl.DataFrame(
            {
                "model_id": model_id,
                "relation_id": [*rel, "P17"],
                "instance_id": [f"Q{i}" for i in range(6)],
                "split": ["test"] * 5 + ["dev"],
                "template_id": template,
                "estimator": est,
                "confidence": [*c, 0.7],
                "correct": [*correct[template], template == "t0"],
            }
        )
        for est, c in conf.items()
        for template in ("t0", "t1")
    ]
    return pl.concat(frames)


def evaluate(est):
    """(metrics, curves) as the assets compute them: t0 is the headline template, t0 and t1 the
    curated ones."""
    headline = est.filter(pl.col("template_id") == "t0")
    metrics = pl.concat([compute_metrics(headline), compute_template_metrics(est)])
    return metrics, compute_curves(headline)


@pytest.fixture
def tables():
    m, curves = evaluate(estimates())
    return summary_table(m), m, curves


SUMMARY_COLUMNS = [
    "relation",
    "instances",
    "accuracy",
    "acc_mean_t",
    "ace_base",
    "brier_base",
    "ace_margin",
    "brier_margin",
]


def test_summary_table_by_hand(tables):
    summary, _, _ = tables
    assert summary.columns == SUMMARY_COLUMNS
    assert summary["relation"].to_list() == ["P17", "P36", "all"]
    assert summary["instances"].to_list() == [3, 2, 5]  # the dev instance Q5 is not counted
    # P17: correct 1,0,0 → accuracy 1/3; base Brier (0.01 + 0.36 + 0.09)/3 = 0.46/3;
    #      base ACE (3 points, own bins) = (0.1 + 0.6 + 0.3)/3 = 1/3
    #      acc_mean_t: t0 1/3, t1 2/3 → 1/2
    # P36: correct 1,1 → accuracy 1; margin Brier ((0.6−1)² + (0−1)²)/2 = (0.16 + 1)/2 = 0.58
    #      acc_mean_t: t0 1, t1 1/2 → 3/4
    # all: accuracy 3/5; acc_mean_t (3·1/2 + 2·3/4)/5 = 3/5
    p17, p36, everything = summary.rows(named=True)
    assert p17["accuracy"] == pytest.approx(1 / 3)
    assert p17["acc_mean_t"] == pytest.approx(0.5)
    assert p17["brier_base"] == pytest.approx(0.46 / 3)
    assert p17["ace_base"] == pytest.approx(1 / 3)
    assert p36["accuracy"] == pytest.approx(1.0)
    assert p36["acc_mean_t"] == pytest.approx(0.75)
    assert p36["brier_margin"] == pytest.approx(0.58)
    assert everything["accuracy"] == pytest.approx(0.6)
    assert everything["acc_mean_t"] == pytest.approx(0.6)


def test_summary_values_match_the_metrics_table(tables):
    summary, metrics, _ = tables
    metrics = metrics.filter(split="test", answer_space_k=0)
    for row in summary.iter_rows(named=True):
        everything = row["relation"] == "all"
        for col, value in row.items():
            if col in ("relation", "instances"):
                continue
            if col == "acc_mean_t":
                scope = "all_template_mean" if everything else "relation_template_mean"
                metric, est = "accuracy", "base"
            else:
                scope = "all" if everything else "relation"
                metric, est = ("accuracy", "base") if col == "accuracy" else col.split("_")
            ref = metrics.filter(estimator=est, scope=scope, scope_value=row["relation"], metric=metric)
            assert value == ref["value"].item()
            assert row["instances"] == ref["n"].item()


def test_summary_reads_the_registries_and_splits_a_metric_estimators_disagree_on():
    from kcal_pipeline.reporting.html import summary_title

    assert summary_title("m1") == (
        "Model m1 — test split, headline template, Base and Margin; acc_mean_t: accuracy averaged "
        "over the curated templates\nACE: 20 quantile bins as in sklearn's calibration_curve (ties share "
        "a bin, empty bins dropped)"
    )
    assert summary_title("m1", "dev", 3).startswith("Model m1 — dev split, answer spaces cut to 3, headline")
    # Margin made to predict differently on Q0 (correct → wrong): accuracy is no longer shared, so
    # it becomes one column per estimator. P17 margin accuracy: 0/3; base keeps 1/3.
    est = estimates()
    est = est.with_columns(
        correct=pl.when((pl.col("estimator") == "margin") & (pl.col("instance_id") == "Q0"))
        .then(False)
        .otherwise(pl.col("correct"))
    )
    summary = summary_table(evaluate(est)[0])
    assert summary.columns == [
        "relation", "instances", "accuracy_base", "acc_mean_t_base", "ace_base", "brier_base",
        "accuracy_margin", "acc_mean_t_margin", "ace_margin", "brier_margin",
    ]  # fmt: skip
    p17 = summary.row(0, named=True)
    assert (p17["accuracy_base"], p17["accuracy_margin"]) == (pytest.approx(1 / 3), 0.0)
    # acc_mean_t: base (1/3 + 2/3)/2 = 1/2; margin (0/3 + 1/3)/2 = 1/6 (Q0 wrong on t0 and t1)
    assert (p17["acc_mean_t_base"], p17["acc_mean_t_margin"]) == (pytest.approx(0.5), pytest.approx(1 / 6))


def test_split_table_reports_each_split_the_way_bear_does(tables):
    # BEAR's relation accuracy is the mean over its templates, split by split, never pooled:
    #   P17 dev: Q5 t0 ✓, t1 ✗ → acc_mean_t 1/2, headline accuracy 1, 1 instance
    #   P17 test: 1/2 and 1/3 (above); P36 test: 3/4 and 1
    #   all dev = P17 dev; all test: 3/5 and 3/5
    _, metrics, _ = tables
    rows = split_table(metrics).rows()
    assert [r[:3] for r in rows] == [
        ("P17", "dev", 1),
        ("P17", "test", 3),
        ("P36", "test", 2),
        ("all", "dev", 1),
        ("all", "test", 5),
    ]
    assert [r[3:] for r in rows] == [
        (0.5, 1.0),
        (pytest.approx(0.5), pytest.approx(1 / 3)),
        (0.75, 1.0),
        (0.5, 1.0),
        (pytest.approx(0.6), pytest.approx(0.6)),
    ]
    assert split_table(metrics).columns == ["relation", "split", "instances", "acc_mean_t", "accuracy"]


def test_answer_space_subsamples_have_their_own_summary_and_never_enter_the_headline():
    # Q0's and Q3's `#k2` copies, wrong on both templates: the headline summary is unchanged, and the
    # answer_space_k=2 summary holds only them (P17: 0/1, P36: 0/1).
    est = estimates()
    copies = est.filter(pl.col("instance_id").is_in(["Q0", "Q3"])).with_columns(
        instance_id=pl.col("instance_id") + "#k2", answer_space_k=pl.lit(2, pl.Int32), correct=pl.lit(False)
    )
    metrics, curves = evaluate(pl.concat([est.with_columns(answer_space_k=pl.lit(0, pl.Int32)), copies]))
    assert summary_table(metrics).equals(summary_table(evaluate(est)[0]))
    cut = summary_table(metrics, answer_space_k=2)
    assert cut.select("relation", "instances", "accuracy", "acc_mean_t").rows() == [
        ("P17", 1, 0.0, 0.0),
        ("P36", 1, 0.0, 0.0),
        ("all", 2, 0.0, 0.0),
    ]
    page = render(summary_table(metrics), metrics, curves, {"model_id": "m1"})
    assert (
        "Answer-space subsamples (test split)" in page and "<caption>answer spaces cut to 2</caption>" in page
    )
    assert "Answer-space subsamples" not in render(*tables_of(est), {"model_id": "m1"})


# The synthetic tables' templates: one curated template per relation, no marker variants.
TEMPLATES = pl.DataFrame(
    {"relation_id": ["P17", "P36"], "template_id": ["t0", "t0"], "kind": ["curated"] * 2,
     "parent_id": [None, None], "variant": [None, None]},
    schema={"relation_id": pl.String, "template_id": pl.String, "kind": pl.String, "parent_id": pl.String,
            "variant": pl.String},
)  # fmt: skip
NO_CONSISTENCY = pl.DataFrame(schema=CONSISTENCY_SCHEMA)


def render(summary, metrics, curves, meta):
    """The per-model page of synthetic tables (no marker templates, no consistency rows)."""
    return model_page(summary, metrics, curves, TEMPLATES, NO_CONSISTENCY, meta)


def tables_of(est):
    metrics, curves = evaluate(est)
    return summary_table(metrics), metrics, curves


def test_a_split_without_rows_gives_an_empty_summary(tables):
    # a tiny probe may put every subject in dev: the test summary is empty, not an error
    _, metrics, _ = tables
    empty = summary_table(metrics.filter(split="dev"))
    assert empty.is_empty() and empty.columns == [
        "relation", "instances", "accuracy", "acc_mean_t", "ace", "brier"
    ]  # fmt: skip
    assert summary_table(metrics, split="dev")["instances"].to_list() == [1, 1]


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
    assert lines[0].split() == SUMMARY_COLUMNS
    assert lines[2].split()[:6] == ["P17", "3", "0.333", "0.500", "0.333", "0.153"]
    # the text column is left-aligned, the numeric ones right-aligned: each numeric column ends
    # at the same offset in every line (header and rule included)
    ends = {tuple(m.end() for m in re.finditer(r"\S+", line))[1:] for line in lines}
    assert len(ends) == 1


def test_html_is_self_contained_escaped_and_has_diagrams():
    m, curves = evaluate(estimates(EVIL))
    page = render(
        summary_table(m),
        m,
        curves,
        {"model_id": EVIL, "revision": "abc123", "KCAL_HOME": "/data/kcal & co", "instances": 5},
    )
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "/data/kcal &amp; co" in page and "abc123" in page
    # two figures (reliability; accuracy–rejection and risk–coverage); markers, consistency, the
    # gold-count effect and the option-count sweep have no data here and say so instead
    assert page.count("<svg") == 2 and page.count('<p class="nodata">') == 4
    assert (
        "ACE: 20 quantile bins as in sklearn&#x27;s calibration_curve (ties share a bin, empty bins "
        "dropped); ECE: 20 equal-width bins" in page
    )
    assert (
        "Summary (test split, full answer spaces)" in page and "Accuracy by split (BEAR&#x27;s way)" in page
    )
    assert not re.search(r"<link|<script|<img|@import|url\((?!#)", page)  # url(#clip) is in-page
    # the summary numbers appear as shown in the table
    assert '<td class="num">0.153</td>' in page


def test_the_reliability_diagrams_read_the_calibration_bins_and_the_metrics_ace():
    m, curves = evaluate(estimates())
    figures = model_figures(m, curves, TEMPLATES, NO_CONSISTENCY)
    base, margin = figures["reliability"].axes
    # one panel per estimator, drawn from the calibration curve only: its bins hold the 5 test
    # instances (ROC, rejection and risk–coverage points in the same table are not bins)
    assert (base.get_title(), margin.get_title()) == ("Base", "Margin")
    # compute_metrics gives no intervals (metrics_table does): the legend has ACE alone
    ace = m.filter(estimator="base", split="test", scope="all", metric="ace")["value"].item()
    assert base.get_legend().get_texts()[-1].get_text() == f"ACE {ace:.3f}, n = 5"
    bins = curves.filter(estimator="base", split="test", scope="all", curve="calibration").sort("x")
    assert base.lines[1].get_xydata().tolist() == [list(r) for r in bins.select("x", "y").rows()]


def test_write_report_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "reports" / "index.html"
    assert write_report(target, "<p>one</p>") == target
    write_report(target, "<p>two</p>")
    assert target.read_text(encoding="utf-8") == "<p>two</p>"

    def disk_error(fd):  # the disk fails after the new page's bytes went to the temp file
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", disk_error)
    with pytest.raises(OSError, match="Input/output error"):
        write_report(target, "<p>three</p>")  # fails mid-write: the old page survives, no temp file is left
    assert target.read_text(encoding="utf-8") == "<p>two</p>"
    assert os.listdir(target.parent) == ["index.html"]


def test_undefined_values_give_a_sentence_or_fewer_panels_never_a_failed_page():
    from kcal_pipeline.reporting.cross_model import cross_model_figures
    from kcal_pipeline.reporting.pages import NO_CONSISTENCY_VALUES

    m, curves = evaluate(estimates())
    # every IoU_cons undefined (a setup that accepted nothing): the section says so
    nan_pair = pl.DataFrame(
        [{"model_id": "m1", "kind": "intra", "setup_a": "original", "setup_b": "typo", "estimator_a": "base",
          "estimator_b": "base", "statistic": "mean", "iou_cons": float("nan")}],
        schema=CONSISTENCY_SCHEMA,
    )  # fmt: skip
    assert model_figures(m, curves, TEMPLATES, nan_pair)["consistency"] == NO_CONSISTENCY_VALUES
    # AUROC undefined everywhere (one class per sample): the comparison shows ACE and Brier only
    no_auroc = m.with_columns(
        value=pl.when(pl.col("metric") == "auroc").then(float("nan")).otherwise(pl.col("value"))
    )
    figure = cross_model_figures(no_auroc)["estimators"]
    assert [ax.get_title() for ax in figure.axes] == ["ACE (lower is better)", "Brier (lower is better)"]
