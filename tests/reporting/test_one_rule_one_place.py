"""Issue 53, part 2 ("one rule, one place"): each rule the reports apply lives once.

The headline reduction: the estimator catalog's `headline_reduction` column is the one source;
sql/views/headline_reductions.sql reads the store's estimator_catalog table and the Python code
(reporting/selection.py, reporting/html.py, reporting/findings/core.py) reads the catalog, and the
two give the same reduction for every model and estimator, names the catalog does not know too.

The estimator label: one helper (reporting/selection.py `label`), which the claims use.

Names once typed beside their constants (evaluation/families.py PAIRING, findings/core.py
RECALIBRATED) are built from the registries that define them.

"0 = full answer space" is one SQL macro, full_answer_space(k) (sql/views/_macros.sql, created with
the views), that every view and query calls."""

import dataclasses
import re
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.warehouse import query, refresh_views
from kcal_pipeline.estimation import recalibration
from kcal_pipeline.estimation.catalog import (
    DEFAULT_HEADLINE_REDUCTION,
    estimator_catalog,
    headline_reduction,
    headline_reductions,
)
from kcal_pipeline.estimation.recalibration import METHODS
from kcal_pipeline.estimation.registry import BASELINE, ESTIMATORS, FULL_ANSWER_SPACE, HEADLINE_SPLIT
from kcal_pipeline.evaluation import families
from kcal_pipeline.evaluation.registry import metric_for
from kcal_pipeline.reporting import html, selection
from kcal_pipeline.reporting.findings import core

ALL = ("sum", "mean", "answer_sum", "answer_mean")
# (model, estimator, the reductions its metrics rows carry): registered estimators under all or
# some of their reductions, rows that lack the catalog's reduction, and names the catalog does not
# know (with and without 'sum').
ROWS = [
    ("m1", BASELINE, ALL),
    ("m1", "sca_tau0", ("answer_sum",)),
    ("m1", "retired_a", ("mean", "sum")),
    ("m1", "retired_b", ("answer_mean", "mean")),
    ("m2", BASELINE, ("mean", "answer_mean")),
    ("m2", "sca_tau0", ("answer_sum",)),
]


METRICS_SCHEMA = {
    "model_id": pl.String, "estimator": pl.String, "reduction": pl.String, "split": pl.String,
    "answer_space_k": pl.Int32, "scope": pl.String, "metric": pl.String, "value": pl.Float64,
}  # fmt: skip


def metrics_rows(rows=ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        [
            (model, estimator, reduction, HEADLINE_SPLIT, FULL_ANSWER_SPACE, "all", "accuracy", 0.5)
            for model, estimator, reductions in rows
            for reduction in reductions
        ],
        schema=METRICS_SCHEMA,
        orient="row",
    )


def make_store(home, catalog: pl.DataFrame, rows=ROWS):
    metrics = metrics_rows(rows)
    for model in metrics["model_id"].unique():
        write_parquet_atomic(
            metrics.filter(pl.col("model_id") == model), partition_path(home, "metrics", {"model": model})
        )
    write_parquet_atomic(catalog, partition_path(home, "estimator_catalog"))
    assert {"headline_reductions", "headline_metrics"} <= set(refresh_views(home))
    return home


def view_choice(home) -> dict[tuple[str, str], str]:
    _, rows = query(home, "SELECT model_id, estimator, reduction FROM headline_reductions")
    return {(m, e): r for m, e, r in rows}


def python_choice(rows=ROWS) -> dict[tuple[str, str], str]:
    return {(m, e): headline_reduction(e, reductions) for m, e, reductions in rows}


def test_the_catalog_column_is_each_spec_first_reduction_and_the_python_rule_reads_it():
    catalog = estimator_catalog()
    assert headline_reductions() == {s.name: s.reductions[0] for s in ESTIMATORS.values()}
    assert headline_reductions() == dict(catalog.select("name", "headline_reduction").iter_rows())
    assert DEFAULT_HEADLINE_REDUCTION == "sum"
    assert headline_reduction(BASELINE, ALL) == "sum"
    assert headline_reduction("sca_tau0", ["answer_sum"]) == "answer_sum"
    assert headline_reduction("retired_a", ["mean", "sum"]) == "sum"  # a name the catalog lacks
    assert headline_reduction("retired_b", ["mean", "answer_mean"]) == "answer_mean"
    assert headline_reduction(BASELINE, [None]) is None


def test_the_view_and_the_python_rule_choose_the_same_reduction(tmp_path):
    home = make_store(tmp_path / "kcal", estimator_catalog())
    chosen = view_choice(home)
    assert chosen == python_choice()
    assert chosen[("m1", BASELINE)] == "sum" and chosen[("m1", "sca_tau0")] == "answer_sum"
    assert chosen[("m1", "retired_b")] == "answer_mean" and chosen[("m2", BASELINE)] == "answer_mean"
    # and at_headline_reduction keeps the same (model, estimator, reduction) rows as headline_metrics
    kept = selection.at_headline_reduction(metrics_rows().filter(pl.col("model_id") == "m1"))
    assert {("m1", e): r for e, r in kept.select("estimator", "reduction").iter_rows()} == {
        k: v for k, v in chosen.items() if k[0] == "m1"
    }


def test_the_view_reads_the_store_catalog_not_a_rule_of_its_own(tmp_path):
    """A catalog whose Base headlines 'mean': the view follows the table's column."""
    catalog = estimator_catalog().with_columns(
        headline_reduction=pl.when(pl.col("name") == BASELINE)
        .then(pl.lit("mean"))
        .otherwise(pl.col("headline_reduction"))
    )
    home = make_store(tmp_path / "kcal", catalog)
    chosen = view_choice(home)
    assert chosen[("m1", BASELINE)] == "mean" and chosen[("m2", BASELINE)] == "mean"
    assert chosen[("m1", "sca_tau0")] == "answer_sum"
    _, rows = query(home, f"SELECT DISTINCT reduction FROM headline_metrics WHERE estimator = '{BASELINE}'")
    assert rows == [("mean",)]


def test_without_an_estimator_catalog_the_headline_views_wait_for_it(tmp_path):
    home = tmp_path / "kcal"
    write_parquet_atomic(metrics_rows(), partition_path(home, "metrics", {"model": "m1"}))
    views = set(refresh_views(home))
    assert "metrics" in views and not {"headline_reductions", "headline_metrics"} & views


@pytest.fixture
def mean_first(monkeypatch):
    """A registered estimator whose spec's first reduction is 'mean' (not 'sum')."""
    name = "mean_first_probe"
    spec = dataclasses.replace(ESTIMATORS[BASELINE], name=name, reductions=("mean", "sum"), baseline=False)
    monkeypatch.setitem(ESTIMATORS, name, spec)
    return name


def test_the_pages_follow_the_catalog(mean_first):
    assert headline_reductions()[mean_first] == "mean"
    rows = metrics_rows([("m1", mean_first, ALL), ("m1", BASELINE, ALL)])
    kept = selection.at_headline_reduction(rows)
    assert dict(kept.select("estimator", "reduction").iter_rows()) == {mean_first: "mean", BASELINE: "sum"}
    assert html._headline(rows, mean_first)["reduction"].to_list() == ["mean"]
    assert html._headline(rows, BASELINE)["reduction"].to_list() == ["sum"]


def test_the_claims_read_the_baselines_headline_reduction_from_the_catalog():
    assert core.REDUCTION == headline_reductions()[BASELINE] == ESTIMATORS[BASELINE].reductions[0]


# --- one label helper ----------------------------------------------------------------------------

REPORTING = Path(__file__).parents[2] / "kcal_pipeline" / "reporting"
# The body of a helper that looks an estimator's label up in the estimator registry (ESTIMATORS;
# generation.py's method_label reads another registry, GENERATION_ESTIMATORS).
LABEL_LOOKUP = re.compile(r"\bESTIMATORS\.get\((\w+)\)\s*\n\s*return spec\.label if spec else \1")


def test_one_estimator_label_helper_serves_pages_and_claims():
    assert core.estimator_label is selection.label
    assert selection.label(BASELINE) == ESTIMATORS[BASELINE].label
    assert selection.label("retired_a") == "retired_a"
    lookups = {
        str(path.relative_to(REPORTING)): len(LABEL_LOOKUP.findall(path.read_text("utf-8")))
        for path in REPORTING.rglob("*.py")
    }
    assert {p: n for p, n in lookups.items() if n} == {"selection.py": 1}


# --- names derived from their registries -----------------------------------------------------------


def test_the_family_pairing_is_built_from_the_registries():
    assert families.PAIRING == {
        "estimator": "base", "reduction": "sum", "split": "test", "answer_space_k": 0, "scope": "all",
        "metric": "accuracy",
    }  # fmt: skip
    assert families.PAIRING["estimator"] is BASELINE
    assert families.PAIRING["reduction"] == headline_reductions()[BASELINE]
    assert families.PAIRING["split"] is HEADLINE_SPLIT
    assert families.PAIRING["answer_space_k"] is FULL_ANSWER_SPACE
    assert families.PAIRING["metric"] == metric_for("correctness") == selection.ACCURACY


def test_the_recalibrated_estimators_of_the_claims_are_bases_registered_recalibrations():
    assert core.RECALIBRATED == ("base_temperature", "base_platt", "base_isotonic")
    specs = [ESTIMATORS[name] for name in core.RECALIBRATED]
    assert {s.family for s in specs} == {recalibration.FAMILY}
    base = selection.label(BASELINE)
    assert [s.label for s in specs] == [f"{base} + {label}" for label, _ in METHODS.values()]


# --- "0 = full answer space": one SQL macro ---------------------------------------------------------

SQL = Path(__file__).parents[2] / "sql"
# answer_space_k compared with a number (either side), or NULLIF(answer_space_k, …): spelling the
# full answer space by hand.
BY_HAND = re.compile(
    r"answer_space_k\s*(?:=|<>|!=|<=|>=|<|>)\s*\d|\d\s*(?:=|<>|!=|<=|>=|<|>)\s*(?:\w+\.)?answer_space_k"
    r"|NULLIF\(\s*(?:\w+\.)?answer_space_k",
    re.IGNORECASE,
)


def sql_code(path: Path) -> str:
    """A SQL file without its `--` comments."""
    return "\n".join(line.split("--", 1)[0] for line in path.read_text("utf-8").splitlines())


def test_no_sql_file_spells_the_full_answer_space_but_the_macro():
    files = sorted(SQL.glob("*/*.sql"))
    assert len(files) > 10
    by_hand = {p.name: BY_HAND.findall(sql_code(p)) for p in files if p.name != "_macros.sql"}
    assert not {name: hits for name, hits in by_hand.items() if hits}
    uses = [p.name for p in files if "full_answer_space(" in sql_code(p)]
    assert {"headline_estimates.sql", "headline_metrics.sql", "options_sweep.sql", "summary.sql"} <= set(uses)


def test_the_macro_is_the_registrys_full_answer_space(tmp_path):
    home = make_store(tmp_path / "kcal", estimator_catalog())
    _, rows = query(
        home,
        f"SELECT full_answer_space({FULL_ANSWER_SPACE}), full_answer_space(3), full_answer_space(NULL)",
    )
    assert rows == [(True, False, None)]
    # the read-only door opens the store's file: the macro lives there beside the views
    _, rows = query(home, "SELECT count(*) FROM headline_metrics WHERE NOT full_answer_space(answer_space_k)")
    assert rows == [(0,)]
