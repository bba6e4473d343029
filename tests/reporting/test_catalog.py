"""The estimator and metric registries exported as the store's estimator_catalog and
metric_catalog tables (issue 32): every registered entry once with its spec's label, family and
report flags; the flags select what the hand-kept lists selected; reports and pages name no
estimator or metric (they select by those flags); the Dagster assets write both tables, and the
store serves them as views."""

import ast
import re
from pathlib import Path

import polars as pl
import pytest
from dagster import materialize

from assets.catalog import estimator_catalog as estimator_catalog_asset
from assets.catalog import metric_catalog as metric_catalog_asset
from assets.catalog import table_version
from kcal_pipeline.core.paths import repo_sql_dir
from kcal_pipeline.core.warehouse import query
from kcal_pipeline.estimation.catalog import ESTIMATOR_CATALOG_SCHEMA, estimator_catalog
from kcal_pipeline.estimation.registry import BASELINE, ESTIMATORS, FAMILY_ORDER, register
from kcal_pipeline.evaluation import tables
from kcal_pipeline.evaluation.catalog import METRIC_CATALOG_SCHEMA, metric_catalog
from kcal_pipeline.evaluation.registry import METRICS, REPORT_ROLES, metric_for
from kcal_pipeline.evaluation.registry import register as register_metric
from resources import default_resources

REPORTING = Path(__file__).parents[2] / "kcal_pipeline" / "reporting"
# The modules that build the report pages (pages.py and what it was split into): no name literals.
PAGE_MODULES = ["pages.py", "figure_data.py", "cross_model.py", "sections.py", "selection.py"]
# What pages.py's MAIN_FAMILIES listed before the `main` flag replaced it.
OLD_MAIN_FAMILIES = ("single_template", "template_marginal", "recalibration", "multi_answer")
NAMES = set(ESTIMATORS) | set(METRICS)


def test_every_registered_estimator_is_one_row_in_registry_order_with_its_spec():
    table = estimator_catalog()
    assert table.schema == pl.Schema(ESTIMATOR_CATALOG_SCHEMA)
    assert table["name"].to_list() == list(ESTIMATORS)
    base = table.filter(pl.col("name") == BASELINE).row(0, named=True)
    spec = ESTIMATORS[BASELINE]
    assert (base["label"], base["family"], base["grain"], base["output_kind"]) == (
        spec.label, spec.family, spec.grain, spec.output_kind,
    )  # fmt: skip
    assert base["reductions"] == list(spec.reductions) and base["headline_reduction"] == spec.reductions[0]
    assert base["main"] and base["baseline"] and base["family_line"] and base["in_summary"]
    assert base["family_order"] == FAMILY_ORDER.index(spec.family)


def test_main_flags_select_what_main_families_selected():
    table = estimator_catalog().filter(pl.col("output_kind") == "probability")
    by_flag = table.filter("main")["name"].to_list()
    by_family = table.filter(pl.col("family").is_in(OLD_MAIN_FAMILIES))["name"].to_list()
    assert by_flag == by_family and len(by_flag) > 10


def test_baseline_is_defined_once_and_flagged_on_one_estimator():
    table = estimator_catalog()
    assert table.filter("baseline")["name"].to_list() == [BASELINE]
    assert tables.BASELINE is BASELINE
    with pytest.raises(ValueError, match="baseline=True goes with the name"):
        register("not_the_baseline", label="x", family="single_template", baseline=True)(lambda c, r: None)
    assert "not_the_baseline" not in ESTIMATORS


def test_every_registered_metric_is_one_row_with_its_role_and_report_order():
    table = metric_catalog()
    assert table.schema == pl.Schema(METRIC_CATALOG_SCHEMA)
    assert table["name"].to_list() == list(METRICS)
    roles = table.filter(pl.col("role").is_not_null()).sort("report_order")
    assert roles["role"].to_list() == list(REPORT_ROLES)  # each role held by exactly one metric
    assert roles["report_order"].to_list() == list(range(1, len(REPORT_ROLES) + 1))
    calibration = table.filter(pl.col("name") == metric_for("calibration")).row(0, named=True)
    spec = METRICS[calibration["name"]]
    assert (calibration["label"], calibration["family"], calibration["needs"]) == (
        spec.label, spec.family, spec.needs,
    )  # fmt: skip
    assert calibration["headline"] and calibration["higher_is_better"] is False
    assert table.filter("headline")["role"].to_list() == list(REPORT_ROLES[:5])


def test_a_report_role_is_held_by_one_metric():
    with pytest.raises(ValueError, match="is already"):
        register_metric(
            "second_calibration", label="x", family="calibration", needs="probability",
            higher_is_better=False, batched=lambda s: s, role="calibration",
        )(lambda c, y: 0.0)  # fmt: skip
    assert "second_calibration" not in METRICS
    with pytest.raises(ValueError, match="no metric has the report role"):
        metric_for("no_such_role")


def test_the_code_version_follows_the_table():
    table = estimator_catalog()
    changed = table.with_columns(main=(pl.col("name") != BASELINE) & pl.col("main"))
    assert table_version(table) == table_version(estimator_catalog())
    assert table_version(changed) != table_version(table)
    assert estimator_catalog_asset.code_versions_by_key[estimator_catalog_asset.key] == table_version(table)


# --- no name literals in the report queries and pages ---------------------------------------------


def sql_name_literals(sql: str) -> list[str]:
    """The registered names a SQL text spells as a string literal: the literal itself, or a LIKE
    pattern that matches one (comments are not code)."""
    code = re.sub(r"--[^\n]*", "", sql)
    found = []
    for literal in re.findall(r"'((?:[^']|'')*)'", code):
        if literal in NAMES:
            found.append(literal)
        elif "%" in literal:
            pattern = re.escape(literal).replace("%", ".*").replace(r"\\_", "_").replace("_", ".")
            found += sorted(n for n in NAMES if re.fullmatch(pattern, n))
    return found


def python_name_literals(source: str) -> list[str]:
    """The registered names a Python module spells as a string constant."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
    ]


def test_the_name_finders_find_literals_and_patterns_and_skip_comments():
    assert sql_name_literals("-- 'base'\nWHERE estimator = 'base' AND x LIKE '%\\_platt' ESCAPE '\\'") == [
        "base", "base_platt", "margin_platt", "template_marginal_platt",
    ]  # fmt: skip
    assert sql_name_literals("WHERE scope = 'all' AND role = 'calibration'") == []
    assert python_name_literals('"""ace"""\nX = ("ace", f"{y}_ci_low")\n') == ["ace", "ace"]


@pytest.mark.parametrize("path", sorted(Path(repo_sql_dir(), "queries").glob("*.sql")), ids=lambda p: p.stem)
def test_a_report_query_names_no_estimator_or_metric(path):
    assert sql_name_literals(path.read_text()) == [], f"{path.name}: select by the catalogs' flags"


@pytest.mark.parametrize("module", PAGE_MODULES)
def test_a_page_module_names_no_estimator_or_metric(module):
    found = python_name_literals((REPORTING / module).read_text())
    assert found == [], f"{module}: select by the specs' flags"


# --- the Dagster assets ---------------------------------------------------------------------------


def test_the_assets_write_both_catalogs_and_the_store_serves_them_as_views(tmp_path):
    home = tmp_path / "kcal"
    result = materialize(
        [estimator_catalog_asset, metric_catalog_asset], resources=default_resources(home=str(home))
    )
    assert result.success
    _, rows = query(home, "SELECT name FROM estimator_catalog WHERE baseline")
    assert rows == [(BASELINE,)]
    _, rows = query(home, "SELECT name FROM metric_catalog ORDER BY registry_order")
    assert [r[0] for r in rows] == list(METRICS)
    _, rows = query(home, "SELECT count(*) FROM estimator_catalog WHERE main")
    assert rows == [(estimator_catalog()["main"].sum(),)]
