"""MACE's Table 3 layout, its terminal text and the model page's generation section, on metrics
computed from a hand-built estimates frame (no store, no model)."""

import polars as pl
import pytest

from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS
from kcal_pipeline.evaluation.generation import coverage_metric, coverage_metrics, generation_metrics
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA
from kcal_pipeline.reporting import pages
from kcal_pipeline.reporting.canvas import assert_not_empty
from kcal_pipeline.reporting.generation import (
    GOLD_COLUMNS,
    GREEDY_LABEL,
    INTERVAL_COLUMNS,
    GenerationReport,
    auroc_bars,
    confidence_lines,
    coverage_label,
    format_table3,
    generation_figure,
    status_rows,
    table3,
)

RELATIONS = pl.DataFrame({"relation_id": ["mace-award", "mace-river"], "domain": ["mace", "mace"]})
# Two questions per gold count and relation (award: all four counts; river: 1 and 2), test split.
QUESTIONS = [(r, f"{r}:{g}{k}", g) for r in ("mace-award", "mace-river") for g in (1, 2, 4, 6) for k in "xy"]
QUESTIONS = [q for q in QUESTIONS if q[0] == "mace-award" or q[2] <= 2]
INSTANCES = pl.DataFrame(
    QUESTIONS, schema=["relation_id", "instance_id", "n_gold"], orient="row"
).with_columns(split=pl.lit("test"))
# x questions answered correctly, y ones wrongly. perplexity: 0.8 on x, 0.3 on y (AUROC 1);
# consis: the gold count's share 1/g on every question (AUROC 1/2: ties); prob_entropy: −g (a
# score); gen_sca_tau0 refuses the award's 6-gold questions.
METHODS = ("perplexity", "consis", "prob_entropy", "gen_sca_tau0")


def confidence(method: str, instance: str, n_gold: int) -> float | None:
    right = instance.endswith("x")
    if method == "perplexity":
        return 0.8 if right else 0.3
    if method == "consis":
        return 1 / n_gold
    if method == "prob_entropy":
        return -float(n_gold)
    return None if n_gold == 6 else 0.5


def estimates() -> pl.DataFrame:
    rows = [
        (
            "m",
            r,
            i,
            "test",
            e,
            GENERATION_ESTIMATORS[e].output_kind,
            i.endswith("x"),
            confidence(e, i, g),
            "no_answer" if confidence(e, i, g) is None else None,
        )
        for e in METHODS
        for r, i, g in QUESTIONS
    ]
    return pl.DataFrame(
        rows,
        schema={
            "model_id": pl.String,
            "relation_id": pl.String,
            "instance_id": pl.String,
            "split": pl.String,
            "estimator": pl.String,
            "output_kind": pl.String,
            "correct": pl.Boolean,
            "confidence": pl.Float64,
            "refusal": pl.String,
        },
        orient="row",
    )


@pytest.fixture(scope="module")
def report() -> GenerationReport:
    metrics = generation_metrics(estimates(), INSTANCES, RELATIONS)
    coverage = INSTANCES.select(
        "relation_id", "instance_id", model_id=pl.lit("m"), coverage=1 / pl.col("n_gold").cast(pl.Float64)
    )
    # one row per relation, as the estimation side writes them: SCA refused the award's two 6-gold
    # questions; verb was skipped (no verbal prompt was generated) in both relations
    status = pl.DataFrame(
        [
            ("perplexity", "ran", 8, 0, "", ""),
            ("perplexity", "ran", 4, 0, "", ""),
            ("gen_sca_tau0", "ran", 6, 2, "no_answer: 2", ""),
            ("gen_sca_tau0", "ran", 4, 0, "", ""),
            (
                "verb",
                "skipped",
                0,
                0,
                "",
                "no 'verb' rows: the generations were made without the prompted methods",
            ),
            (
                "verb",
                "skipped",
                0,
                0,
                "",
                "no 'verb' rows: the generations were made without the prompted methods",
            ),
        ],
        schema=["estimator", "status", "answered", "refused", "refusals", "reason"],
        orient="row",
    )
    return GenerationReport(metrics, coverage_metrics(coverage, INSTANCES, RELATIONS), status)


COVERAGE_LABEL = coverage_label(coverage_metric())


def registry_labels(names=METHODS) -> list[str]:
    return [s.label for name, s in GENERATION_ESTIMATORS.items() if name in names]


def test_table3_has_the_greedy_accuracy_then_each_method_in_registry_order_then_coverage(report):
    table = table3(pl.concat([report.metrics, report.coverage]))
    assert table.columns == [
        "method",
        "shows",
        *GOLD_COLUMNS,
        "AUROC",
        "answered",
        *INTERVAL_COLUMNS,
        "split",
    ]
    assert list(GOLD_COLUMNS) == ["1a", "2a", "4a", "6a"]
    assert table["method"].to_list() == [GREEDY_LABEL, *registry_labels(), COVERAGE_LABEL]
    rows = {r["method"]: r for r in table.iter_rows(named=True)}
    # half of every gold count's questions are right, in every relation
    assert [rows[GREEDY_LABEL][c] for c in GOLD_COLUMNS] == [0.5] * 4
    # consis: 1/g, the same in both relations, so the macro is 1/g
    consis = rows[GENERATION_ESTIMATORS["consis"].label]
    assert [consis[c] for c in GOLD_COLUMNS] == pytest.approx([1, 1 / 2, 1 / 4, 1 / 6])
    assert consis["shows"] == "mean confidence"
    assert consis["AUROC"] == pytest.approx(0.5)
    perplexity = rows[GENERATION_ESTIMATORS["perplexity"].label]
    assert [perplexity[c] for c in GOLD_COLUMNS] == pytest.approx([0.55] * 4)
    assert perplexity["AUROC"] == pytest.approx(1.0)
    assert perplexity["answered"] is None  # answered everything: not shown
    entropy = rows[GENERATION_ESTIMATORS["prob_entropy"].label]
    assert entropy["shows"] == "mean score"
    assert [entropy[c] for c in GOLD_COLUMNS] == pytest.approx([-1, -2, -4, -6])
    # SCA refused the 2 six-gold questions of 12: no 6a value, answered 10/12
    sca = rows[GENERATION_ESTIMATORS["gen_sca_tau0"].label]
    assert sca["6a"] is None
    assert sca["answered"] == pytest.approx(10 / 12)
    assert [rows[COVERAGE_LABEL][c] for c in GOLD_COLUMNS] == pytest.approx([1, 1 / 2, 1 / 4, 1 / 6])
    assert set(table["split"]) == {"test"}


def test_table3_carries_each_cells_interval_around_its_value(report):
    table = table3(pl.concat([report.metrics, report.coverage]))
    rows = {r["method"]: r for r in table.iter_rows(named=True)}
    for row in rows.values():
        for col in GOLD_COLUMNS:
            if row[f"{col}_low"] is not None:
                assert row[f"{col}_low"] <= row[col] <= row[f"{col}_high"], (row["method"], col)
    # perplexity: 0.8 on the right, 0.3 on the wrong question of every cell: the resampled means
    # lie in [0.3, 0.8] and vary; consis is constant within a cell: a zero-width interval
    perplexity = rows[GENERATION_ESTIMATORS["perplexity"].label]
    assert all(
        0.3 <= perplexity[f"{c}_low"] < perplexity[c] < perplexity[f"{c}_high"] <= 0.8 for c in GOLD_COLUMNS
    )
    consis = rows[GENERATION_ESTIMATORS["consis"].label]
    assert [consis[f"{c}_low"] for c in GOLD_COLUMNS] == [consis[f"{c}_high"] for c in GOLD_COLUMNS]
    # SCA's 6a has no value, so no interval
    sca = rows[GENERATION_ESTIMATORS["gen_sca_tau0"].label]
    assert sca["6a_low"] is None and sca["6a_high"] is None


def test_table3_of_metrics_without_intervals_has_null_bounds(report):
    table = table3(report.metrics.drop("ci_low", "ci_high"))
    assert table.select(INTERVAL_COLUMNS).null_count().row(0) == (table.height,) * len(INTERVAL_COLUMNS)
    text = format_table3(table, "t")
    assert "[" not in text and "interval" not in text
    assert "0.500" in text.splitlines()[4]  # the greedy accuracy, 3 decimals as before intervals


def test_format_table3_prints_the_title_the_split_and_the_aligned_table(report):
    table = table3(report.metrics)
    text = format_table3(table, "Model m — 12 questions, instruction-tuned")
    lines = text.splitlines()
    assert lines[0] == "Model m — 12 questions, instruction-tuned"
    assert lines[1].startswith("test split;")
    assert lines[2].split() == ["method", "shows", *GOLD_COLUMNS, "AUROC", "answered"]
    greedy = table.row(0, named=True)
    cell = f"{greedy['1a']:.2f} [{greedy['1a_low']:.2f}, {greedy['1a_high']:.2f}]"
    assert cell == "0.50 [0.00, 1.00]"  # a right and a wrong answer per domain: 0, ½ or 1 per resample
    assert any(line.startswith(GREEDY_LABEL) and cell in line for line in lines)
    assert max(len(line) for line in lines[2:]) <= 150
    # the cells and their headers are right-aligned: each header ends where its column's cells end
    header, rule = lines[2], lines[3]
    ends = [k for k in range(len(rule)) if rule[k] == "-" and (k + 1 == len(rule) or rule[k + 1] == " ")]
    for col in GOLD_COLUMNS:
        end = header.index(f" {col}") + len(col) + 1
        assert end - 1 in ends, col


def test_table3_falls_back_to_the_split_with_rows_and_says_which(report):
    dev = report.metrics.with_columns(split=pl.lit("dev"))
    table = table3(dev)
    assert set(table["split"]) == {"dev"}
    assert table.height == 1 + len(METHODS)
    assert "dev split (the test split has no generation rows)" in format_table3(table, "t")
    assert table3(report.metrics.clear()).is_empty()


def test_the_figure_has_the_confidence_lines_and_the_auroc_bars(report):
    metrics = report.metrics
    lines, bars = confidence_lines(metrics, "test"), auroc_bars(metrics, "test")
    families = {
        GENERATION_ESTIMATORS[e].family
        for e in METHODS
        if GENERATION_ESTIMATORS[e].output_kind == "probability"
    }
    assert lines["label"].n_unique() == len(families) + 1  # one per family, and the greedy accuracy
    assert bars["label"].to_list() == registry_labels()
    assert bars["n"].to_list() == [10 if "SCA" in lab else 12 for lab in bars["label"]]
    fig = assert_not_empty(generation_figure(lines, bars), "generation")
    assert len(fig.axes) == 2
    assert "gold count" in fig.axes[0].get_title() and "AUROC" in fig.axes[1].get_title()
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert "1.000 (n = 12)" in texts


@pytest.fixture
def page_of(monkeypatch):
    """model_page on empty tables, its closed-set figures replaced by sentences (they are tested
    on a real store in test_pages.py): what remains is the page around the generation section."""
    sentences = dict.fromkeys(
        ("reliability", "selective", "markers", "consistency", "gold-count", "sweep"), "none"
    )
    monkeypatch.setattr(pages, "model_figures", lambda *a: sentences)
    metrics = pl.DataFrame(schema=OUTPUT_SCHEMA | {"ci_low": pl.Float64, "ci_high": pl.Float64})
    empty = pl.DataFrame()

    def render(**kwargs) -> str:
        return pages.model_page(
            pl.DataFrame({"relation": ["all"]}), metrics, empty, empty, empty, {"model_id": "m"}, **kwargs
        )

    return render


def test_status_rows_name_the_methods_that_were_skipped_or_refused_summed_over_relations(report):
    rows = status_rows(report.status)
    assert rows.columns == ["method", "status", "answered", "refused", "refusals", "reason"]
    sca, verb = GENERATION_ESTIMATORS["gen_sca_tau0"].label, GENERATION_ESTIMATORS["verb"].label
    by_method = {r["method"]: r for r in rows.iter_rows(named=True)}
    assert set(by_method) == {sca, verb}  # perplexity ran and answered everything
    assert rows["method"].to_list() == registry_labels(["gen_sca_tau0", "verb"])
    assert (by_method[sca]["answered"], by_method[sca]["refused"], by_method[sca]["refusals"]) == (
        10,
        2,
        "no_answer: 2",
    )
    assert by_method[verb]["status"] == "skipped"
    assert by_method[verb]["reason"].startswith("no 'verb' rows")
    partly = report.status.with_columns(
        status=pl.when(pl.col("answered") == 4).then(pl.lit("skipped")).otherwise("status")
    )
    assert status_rows(partly).filter(pl.col("method") == sca)["status"].to_list() == ["partly skipped"]
    assert status_rows(None) is None


def test_the_generation_section_follows_the_gold_count_section(page_of, report):
    html = page_of(generation=report)
    ids = [part.split('"', 1)[0] for part in html.split('<section id="')[1:]]
    assert ids[ids.index("gold-count") + 1] == "generation"
    section = html.split('<section id="generation"')[1].split("</section>")[0]
    for text in [GREEDY_LABEL, *registry_labels(), COVERAGE_LABEL, *(f"<th>{c}</th>" for c in GOLD_COLUMNS)]:
        assert text in section, text
    assert section.count("the generations were made without the prompted methods") == 1  # the skip's reason
    assert "no_answer: 2" in section  # the refusals, counted
    assert section.count("<svg") == 1
    perplexity = table3(report.metrics).filter(pl.col("method") == GENERATION_ESTIMATORS["perplexity"].label)
    low, value, high = perplexity.select("1a_low", "1a", "1a_high").row(0)
    assert f"{value:.3f} [{low:.3f}, {high:.3f}]" in section  # the page's cell with its interval


def test_without_generation_data_the_page_is_unchanged(page_of, report):
    plain = page_of()
    assert plain == page_of(generation=None)
    assert 'id="generation"' not in plain and "#generation" not in plain
    # the page with the section is the page without it plus the section and its link, nothing else
    html = page_of(generation=report)
    section = (
        '<section id="generation"'
        + html.split('<section id="generation"')[1].split("</section>")[0]
        + "</section>"
    )
    link = '<a href="#generation">' + html.split('<a href="#generation">')[1].split("</a>")[0] + "</a>"
    assert html.replace(section, "").replace(link, "") == plain


def test_a_report_without_rows_says_so_in_a_sentence(page_of, report):
    html = page_of(generation=GenerationReport(report.metrics.clear()))
    section = html.split('<section id="generation"')[1].split("</section>")[0]
    assert "<svg" not in section and 'class="nodata"' in section
