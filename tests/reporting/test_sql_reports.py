"""The report queries of sql/queries (issue 15): each runs by name through the real `kcal sql
--query` on a store the whole pipeline made (tests/reporting/conftest.py), has the columns listed
here and rows where the store has the data, and gives the numbers the Parquet files give; the same
files run on the DuckDB file from a fresh connection with no kcal code; `kcal sql --list` shows
every query with its description line; docs/sql.md names every query."""

import csv
import io
import re

import duckdb
import polars as pl
import pytest

from assets.cli import main
from kcal_pipeline.core.paths import duckdb_path, repo_sql_dir
from kcal_pipeline.core.warehouse import (
    check_reading,
    named_queries,
    named_query,
    query,
    query_description,
    query_descriptions,
)
from kcal_pipeline.estimation.registry import ESTIMATORS
from tests.conftest import REPO, run_kcal

# Every report query's columns, in order: a new query file needs its entry here (and a docs/sql.md line).
COLUMNS = {
    "calibration_by_gold_count": [
        "model_id", "estimator", "reduction", "n_gold", "instances", "accuracy", "mean_confidence",
        "ace", "brier",
    ],
    "calibration_by_mixture": [
        "model_id", "estimator", "reduction", "mixture", "domain", "instances", "accuracy", "ace", "brier",
    ],
    "consistency_matrix": [
        "model_id", "kind", "reduction", "estimator", "versus", "n_seeds", "n", "iou_acc", "iou_rej",
        "iou_cons", "iou_cons_std", "dec_cons", "dec_cons_std", "agreement", "agreement_std", "fallback",
    ],
    "data_quality": [
        "relation_id", "label", "domain", "facts", "subjects", "objects", "dropped_facts", "drop_reasons",
        "instances", "options_mean", "options_min", "options_max", "instances_lt2_options",
        "duplicate_option_labels", "instances_with_duplicate_labels", "id_like_fact_labels",
        "id_like_option_labels", "questions_by_n_gold", "dropped_questions",
    ],
    "differences": [
        "model_id", "reduction", "estimator", "minus", "metric", "n", "difference", "ci_low", "ci_high",
        "supported",
    ],
    "estimator_comparison": [
        "estimator", "family", "output_kind", "model_id", "reduction", "instances",
        "accuracy", "accuracy_ci_low", "accuracy_ci_high", "ace", "ace_ci_low", "ace_ci_high",
        "brier", "brier_ci_low", "brier_ci_high", "auroc", "auroc_ci_low", "auroc_ci_high",
        "aurc", "aurc_ci_low", "aurc_ci_high",
    ],
    "estimators": [
        "model_id", "family", "estimator", "reduction", "output_kind", "instances", "accuracy", "ace",
        "brier", "auroc",
    ],
    "families": [
        "causal_model_id", "masked_model_id", "accuracy_gap", "estimator", "reduction", "metric",
        "higher_is_better", "causal", "masked", "masked_minus_causal", "causal_ci", "masked_ci",
    ],
    "intervals": ["model_id", "estimator", "reduction", "instances", "accuracy", "ace", "brier", "auroc"],
    "leaderboard": [
        "model_id", "instances", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "best_calibrated",
        "ace", "ace_ci_low", "ace_ci_high", "brier", "auroc", "base_ace",
    ],
    "marker_deltas": [
        "model_id", "relation_id", "marker_kind", "marker", "reduction", "templates", "instances",
        "accuracy_unmarked", "accuracy_marked", "delta_accuracy", "ace_unmarked", "ace_marked", "delta_ace",
    ],
    "options_count": [
        "model_id", "estimator", "reduction", "answer_space", "answer_space_k", "answer_space_draw",
        "options", "chance", "instances", "accuracy", "ace",
    ],
    "options_sweep": [
        "model_id", "family", "estimator", "reduction", "answer_space", "k", "draws", "instances", "ace",
        "ace_sd", "accuracy", "accuracy_sd", "mean_confidence", "mean_confidence_sd",
    ],
    "summary": [
        "model_id", "relation_id", "split", "estimator", "reduction", "instances", "accuracy",
        "acc_mean_t", "brier",
    ],
}  # fmt: skip
# The store has one model, so no causal–masked pair: families is the one report without rows.
EMPTY_HERE = {"families"}


def sql_rows(home, name: str, capsys) -> tuple[list[str], list[list[str]]]:
    """`kcal sql --query NAME --csv` on the store, in this process (the command's own code, without
    a process start per query): (header, rows as strings)."""
    code = main(["--home", str(home), "sql", "--query", name, "--csv"])
    out = capsys.readouterr()
    assert code == 0, out.err
    header, *rows = list(csv.reader(io.StringIO(out.out)))
    return header, rows


def records(home, name: str) -> list[dict]:
    cols, rows = query(home, named_query(name))
    return [dict(zip(cols, row, strict=True)) for row in rows]


def metrics(home) -> pl.DataFrame:
    return pl.read_parquet(home / "metrics" / "**" / "*.parquet", hive_partitioning=False)


def test_every_report_query_has_its_columns_listed_and_is_one_select():
    assert sorted(COLUMNS) == named_queries()
    for name in named_queries():
        check_reading(named_query(name))  # read-only: one SELECT, as the DuckDB CLI runs it too


def test_list_prints_every_report_query_with_its_description_line(tmp_path):
    out = run_kcal(tmp_path, "sql", "--list", timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    width = max(map(len, named_queries()))
    expected = []
    for name in named_queries():
        first = (repo_sql_dir() / "queries" / f"{name}.sql").read_text("utf-8").splitlines()[0]
        assert first.startswith("-- ") and len(first) > 10, name
        expected.append(f"{name.ljust(width)}  {first[3:]}")
    assert lines == expected  # one line each, descriptions aligned in one column


def test_a_query_file_without_its_description_line_is_an_error(tmp_path):
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "good.sql").write_text("-- What it answers.\n--\n-- More.\nSELECT 1;\n")
    assert query_descriptions(tmp_path) == {"good": "What it answers."}
    for bad in (
        "SELECT 1;\n",
        "--\n-- What it answers, one line late.\nSELECT 1;\n",
        "\n-- Late.\nSELECT 1;",
    ):
        (queries / "bad.sql").write_text(bad)
        with pytest.raises(ValueError, match=r"bad\.sql: a report query's first line must be '-- <what"):
            query_descriptions(tmp_path)
        with pytest.raises(ValueError, match=r"bad\.sql"):
            named_query("bad", tmp_path)
    assert query_description(queries / "good.sql") == "What it answers."
    with pytest.raises(ValueError, match=r"no query named 'nope'; known: bad, good"):
        named_query("nope", tmp_path)


def test_unknown_or_missing_query_names_the_known_ones(tmp_path):
    out = run_kcal(tmp_path, "sql", "--query", "leaderbord", timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no query named 'leaderbord'; known: " in out.stderr and "leaderboard" in out.stderr
    out = run_kcal(tmp_path, "sql", "--list", "--query", "leaderboard", timeout=120)
    assert out.returncode == 2 and "got --query and --list" in out.stderr
    out = run_kcal(tmp_path, "sql", timeout=120)
    assert out.returncode == 2 and "got none" in out.stderr and "marker_deltas" in out.stderr


def test_the_docs_name_every_report_query_and_no_other():
    sql_page = (REPO / "docs" / "sql.md").read_text("utf-8")
    for name in named_queries():
        assert f"`{name}`" in sql_page, f"docs/sql.md does not list the report query {name!r}"
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    taught = "\n".join(page.read_text("utf-8") for page in pages)
    run_by_name = set(re.findall(r"--(?:query|named)[ =]([a-z_]+)", taught))
    assert run_by_name <= set(named_queries()), run_by_name - set(named_queries())
    assert "--named" not in taught  # the hidden old spelling is not taught


@pytest.mark.integration
def test_every_report_query_runs_by_name_with_its_columns_and_rows(report_store, capsys, monkeypatch):
    monkeypatch.setenv("KCAL_HOME", str(report_store))  # main() sets it from --home
    for name in named_queries():
        header, rows = sql_rows(report_store, name, capsys)
        assert header == COLUMNS[name], name
        assert bool(rows) == (name not in EMPTY_HERE), name


@pytest.mark.integration
def test_the_same_files_run_from_a_fresh_duckdb_connection_without_kcal(report_store):
    # As `duckdb -readonly KCAL_HOME/kcal.duckdb < sql/queries/NAME.sql` runs them: the views kcal
    # wrote hold the store's absolute path, so no kcal code is needed to read them.
    con = duckdb.connect(str(duckdb_path(report_store)), read_only=True)
    try:
        for name in named_queries():
            text = (repo_sql_dir() / "queries" / f"{name}.sql").read_text("utf-8")
            cur = con.execute(text)
            assert [d[0] for d in cur.description] == COLUMNS[name], name
            assert bool(cur.fetchall()) == (name not in EMPTY_HERE), name
        views = {
            r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()
        }
    finally:
        con.close()
    assert {"headline_estimates", "headline_reductions", "headline_metrics", "metrics", "templates"} <= views


@pytest.mark.integration
def test_headline_reduction_is_each_estimators_first_reduction(report_store):
    _, rows = query(report_store, "select estimator, reduction from headline_reductions")
    assert rows and all(ESTIMATORS[e].reductions[0] == r for e, r in rows), rows
    assert ("sca_tau0", "answer_sum") in rows and ("base", "sum") in rows


@pytest.mark.integration
def test_leaderboard_best_estimator_is_the_argmin_of_ace_in_the_parquet_files(report_store):
    (row,) = records(report_store, "leaderboard")
    m = metrics(report_store).filter(
        (pl.col("split") == "test") & (pl.col("answer_space_k") == 0) & (pl.col("scope") == "all")
    )
    headline = m.filter(
        pl.col("reduction")
        == pl.col("estimator").replace_strict({e: s.reductions[0] for e, s in ESTIMATORS.items()})
    )
    base = headline.filter((pl.col("estimator") == "base") & (pl.col("metric") == "accuracy")).row(
        0, named=True
    )
    assert (row["instances"], row["accuracy"]) == (base["n"], round(base["value"], 4))
    assert (row["accuracy_ci_low"], row["accuracy_ci_high"]) == (
        round(base["ci_low"], 4),
        round(base["ci_high"], 4),
    )
    ace = headline.filter(
        (pl.col("metric") == "ace") & (pl.col("n") == base["n"]) & pl.col("value").is_not_nan()
    ).sort("value", "estimator")
    best = ace.row(0, named=True)
    assert row["best_calibrated"] == best["estimator"]
    assert (row["ace"], row["ace_ci_low"], row["ace_ci_high"]) == tuple(
        round(best[c], 4) for c in ("value", "ci_low", "ci_high")
    )
    assert row["base_ace"] == round(ace.filter(pl.col("estimator") == "base")["value"].item(), 4)


@pytest.mark.integration
def test_a_marker_delta_is_the_difference_of_the_two_template_rows(report_store):
    rows = records(report_store, "marker_deltas")
    row = next(r for r in rows if r["relation_id"] == "P36" and r["marker"] == "marker_certainly")
    probed = pl.read_parquet(report_store / "statements" / "**" / "*.parquet")["template_id"].unique()
    templates = pl.read_parquet(report_store / "templates" / "**" / "*.parquet")
    certainly = templates.filter(
        (pl.col("relation_id") == "P36")
        & (pl.col("variant") == "certainly")
        & pl.col("template_id").is_in(probed.to_list())
    )
    parents = certainly["parent_id"].sort().to_list()
    m = metrics(report_store).filter(
        (pl.col("split") == "test") & (pl.col("answer_space_k") == 0) & (pl.col("scope") == "template")
        & (pl.col("reduction") == "sum") & pl.col("scope_value").is_in(parents)
    )  # fmt: skip

    def value(estimator, template, metric):
        return m.filter(
            (pl.col("estimator") == estimator)
            & (pl.col("scope_value") == template)
            & (pl.col("metric") == metric)
        )["value"].item()

    assert row["templates"] == len(parents) == 2  # max_templates 2, each with a 'certainly' form
    for metric in ("accuracy", "ace"):
        deltas = [value("marker_certainly", t, metric) - value("base", t, metric) for t in parents]
        assert row[f"delta_{metric}"] == pytest.approx(round(sum(deltas) / len(deltas), 4), abs=1e-4)
    overall = [r for r in rows if r["relation_id"] == "all" and r["marker"] == "marker_certainly"]
    assert len(overall) == 1 and overall[0]["templates"] >= 2


@pytest.mark.integration
def test_options_count_and_gold_count_rows_equal_the_metrics_table(report_store):
    m = metrics(report_store).filter(
        (pl.col("split") == "test") & (pl.col("estimator") == "base") & (pl.col("reduction") == "sum")
    )
    rows = records(report_store, "options_count")
    for draw in (1, 2):  # the sweep's draws are rows of their own
        sub = next(
            r
            for r in rows
            if (r["estimator"], r["answer_space_k"], r["answer_space_draw"], r["options"])
            == ("base", 3, draw, None)
        )
        pooled = m.filter(
            (pl.col("answer_space_k") == 3)
            & (pl.col("answer_space_draw") == draw)
            & (pl.col("scope") == "all")
        )
        accuracy = pooled.filter(pl.col("metric") == "accuracy").row(0, named=True)
        assert (sub["answer_space"], sub["instances"]) == ("subsample", accuracy["n"])
        assert sub["accuracy"] == round(accuracy["value"], 4)
    three = next(
        r for r in rows if r["estimator"] == "base" and r["answer_space_k"] == 3 and r["options"] == 3
    )
    assert three["chance"] == round(1 / 3, 4)
    gold = records(report_store, "calibration_by_gold_count")
    assert {r["n_gold"] for r in gold if r["estimator"] == "base"} == {1, 2, 4, 6}
    # mean confidence of Base on the test questions with 6 golds, from the estimates and instances
    instances = pl.read_parquet(report_store / "probe_instances" / "**" / "*.parquet").select(
        "relation_id", "instance_id", "n_gold"
    )
    templates = pl.read_parquet(report_store / "templates" / "**" / "*.parquet")
    headline = templates.filter((pl.col("rank") == 0) & (pl.col("kind") == "curated"))
    estimates = (
        pl.read_parquet(report_store / "estimates" / "**" / "*.parquet", hive_partitioning=False)
        .filter(
            (pl.col("estimator") == "base") & (pl.col("reduction") == "sum") & (pl.col("split") == "test")
        )
        .filter(pl.col("answer_space_k") == 0)
        .join(headline.select("relation_id", "template_id"), on=["relation_id", "template_id"])
        .join(instances, on=["relation_id", "instance_id"])
        .filter(pl.col("n_gold") == 6)
    )
    six = next(r for r in gold if r["estimator"] == "base" and r["n_gold"] == 6)
    assert six["instances"] == estimates.height > 0
    assert six["mean_confidence"] == round(estimates["confidence"].mean(), 4)
    assert six["accuracy"] == round(estimates["correct"].mean(), 4)


@pytest.mark.integration
def test_options_sweep_is_the_mean_and_spread_over_the_draws_of_the_metrics_table(report_store):
    # The store's sweep: k 3, two draws (tests/reporting/conftest.py)
    rows = records(report_store, "options_sweep")
    base = [r for r in rows if r["estimator"] == "base"]
    assert [(r["answer_space"], r["k"], r["draws"]) for r in base] == [("3", 3, 2), ("full", None, 1)]
    assert {r["family"] for r in base} == {"single_template"} and all(r["reduction"] == "sum" for r in base)
    m = metrics(report_store).filter(
        (pl.col("split") == "test") & (pl.col("scope") == "all") & (pl.col("estimator") == "base")
        & (pl.col("reduction") == "sum")
    )  # fmt: skip
    for row in base:
        k = row["k"] or 0
        for metric in ("ace", "accuracy", "mean_confidence"):
            values = m.filter((pl.col("answer_space_k") == k) & (pl.col("metric") == metric))
            assert values.height == row["draws"]
            assert row[metric] == pytest.approx(round(values["value"].mean(), 4), abs=1e-9)
            sd = values["value"].std()
            assert row[f"{metric}_sd"] == (None if sd is None else pytest.approx(round(sd, 4), abs=1e-9))
        assert (
            row["instances"]
            == m.filter((pl.col("answer_space_k") == k) & (pl.col("metric") == "accuracy"))["n"].max()
        )
    # every row's estimator has sweep rows; score-valued estimators (no ACE) have none
    assert all(r["ace"] is not None for r in rows)
