"""The whole graph on real parts: local oxigraph endpoint, the embedded SmolLM2, Parquet, DuckDB,
and a real Dagster instance in a temporary DAGSTER_HOME."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.warehouse import named_query, query

pytestmark = pytest.mark.integration
# P36 (capital) is one-to-one: BEAR's answer space would give each of the 16 instances 60 options
# (2,880 statements, ~45 s of scoring per run); a space of 16 objects (the 16 instances' capitals)
# keeps every table's shape at about a quarter of the cost.
SETTINGS = {"max_instances": 16, "max_templates": 3, "n_negatives": 4, "answer_space_size_one_to_one": 16}
KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"
TABLES = [
    "estimator_catalog",
    "metric_catalog",
    "relations",
    "templates",
    "wikidata_facts",
    "dropped_facts",
    "object_pools",
    "probe_instances",
    "statements",
    "data_quality",
    "statement_scores",
    "estimates",
    "option_estimates",
    "estimator_fits",
    "estimator_status",
    "metrics",
    "metric_differences",
    "curves",
    "decision_thresholds",
    "consistency",
    "report",
    "family_comparison",
    "cross_model_report",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from assets.runner import run_missing

    home = tmp_path_factory.mktemp("kcal")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster")))
        first = run_missing(home, relations=["P36"], settings=SETTINGS, log=lambda m: None)
        yield home, first, mp


def files(home):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(home.rglob("*.parquet"))}


def test_every_asset_materialized_for_the_partition(run):
    _, first, _ = run
    assert {a for a, _ in first.materialized} == set(TABLES)
    assert f"{KEY}|P36" in {p for a, p in first.materialized if a == "statement_scores"}


def test_row_counts_are_consistent(run):
    home, _, _ = run
    rel = {"relation": "P36"}
    mr = {"model": KEY, "relation": "P36"}
    facts = pl.read_parquet(partition_path(home, "wikidata_facts", rel))
    inst = pl.read_parquet(partition_path(home, "probe_instances", rel))
    st = pl.read_parquet(partition_path(home, "statements", rel))
    sc = pl.read_parquet(partition_path(home, "statement_scores", mr))
    est = pl.read_parquet(partition_path(home, "estimates", mr))
    assert facts.height >= 100 and facts["endpoint"][0].startswith("embedded-snapshot:")
    assert facts["query_hash"].n_unique() == 1 and facts["retrieved_at"].null_count() == 0
    assert inst.height == 16 and inst["n_options"].min() >= 5
    assert st.height == int(inst["n_options"].sum()) * 3
    assert sc.height == st.height and sc["statement_id"].to_list() == st["statement_id"].to_list()
    assert sc["ll_sum"].is_finite().all() and (sc["ll_sum"] < 0).all()
    seed_estimators = est.filter(
        pl.col("estimator").is_in(["base", "margin"]) & (pl.col("reduction") == "sum")
    )
    assert seed_estimators.height == 16 * 3 * 2  # instances × templates × {base, margin}, under 'sum'
    assert set(est["split"]) == {"dev", "test"} and est["answer_space_k"].unique().to_list() == [0]
    m = pl.read_parquet(partition_path(home, "metrics", {"model": KEY}))
    acc = m.filter(
        (pl.col("scope") == "relation")
        & (pl.col("metric") == "accuracy")
        & pl.col("estimator").is_in(["base", "margin"])
        & (pl.col("reduction") == "sum")
    )
    # one row per estimator and split, never pooled: the test row counts the test instances
    n_test = int((inst["split"] == "test").sum())
    assert 0 < n_test < 16 and set(acc["scope_value"]) == {"P36"}
    assert sorted(acc.select("estimator", "split", "n").rows()) == [
        ("base", "dev", 16 - n_test), ("base", "test", n_test),
        ("margin", "dev", 16 - n_test), ("margin", "test", n_test),
    ]  # fmt: skip
    assert (home / "reports" / f"model={KEY}" / "report.html").read_text().count("<svg") >= 2


def test_estimation_side_tables_explain_and_complete_the_estimates(run):
    home, _, _ = run
    mr = {"model": KEY, "relation": "P36"}
    est = pl.read_parquet(partition_path(home, "estimates", mr))
    status = pl.read_parquet(partition_path(home, "estimator_status", mr))
    # every (estimator, reduction) of the registry has one status row; "ran" ones carry their rows
    ran = status.filter(pl.col("status") == "ran")
    counted = est.group_by("estimator", "reduction").len()
    assert sorted(ran.select("estimator", "reduction", "rows").rows()) == sorted(counted.rows())
    skipped = dict(status.filter(pl.col("status") == "skipped").select("estimator", "reason").iter_rows())
    # this run scored neither dropout passes nor masked subjects, nor marker templates
    assert skipped["dropout_mean"].startswith("no ll_") and "dropout" in skipped["dropout_mean"]
    assert "masked" in skipped["answer_prior"] and "marker" in skipped["marker_certainly"]
    assert "vote4_average" in skipped and "vote3_average" not in skipped  # T = 3 templates
    # the template marginal per option: a distribution over each instance's options
    options = pl.read_parquet(partition_path(home, "option_estimates", mr))
    inst = pl.read_parquet(partition_path(home, "probe_instances", {"relation": "P36"}))
    sums = options.group_by("instance_id", "reduction").agg(pl.col("probability").sum(), pl.len())
    assert sums.height == 16 * 4 and (sums["probability"] - 1).abs().max() < 1e-12
    assert sums.join(inst, on="instance_id").filter(pl.col("len") != pl.col("n_options")).is_empty()
    # recalibration fitted on the dev split: one temperature per (template, reduction) for Base
    fits = pl.read_parquet(partition_path(home, "estimator_fits", mr))
    temperature = fits.filter(pl.col("estimator") == "base_temperature")
    assert temperature.height == 3 * 4 and (temperature["value"] > 0).all()
    assert (temperature["n_dev"] == int((inst["split"] == "dev").sum())).all()


def test_estimates_equal_the_per_row_reference_on_the_real_scores(run):
    # The cube path against the per-row functions (Base, Margin, entropy under all four
    # reductions), on SmolLM2's scores of this run.
    from tests.estimation.reference import REFERENCE_ESTIMATORS, SORT_KEYS, reference_estimates

    home, _, _ = run
    mr = {"model": KEY, "relation": "P36"}
    scores = pl.read_parquet(partition_path(home, "statement_scores", mr))
    stored = pl.read_parquet(partition_path(home, "estimates", mr))
    stored = stored.filter(pl.col("estimator").is_in(list(REFERENCE_ESTIMATORS)))
    instances = pl.read_parquet(partition_path(home, "probe_instances", {"relation": "P36"}))
    columns = ("ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean")
    expected = pl.concat([reference_estimates(scores, c, instances=instances) for c in columns])
    expected = expected.sort(SORT_KEYS, nulls_last=True)
    assert stored.columns == expected.columns and stored.height == expected.height == 16 * 3 * 3 * 4
    exact = [c for c in stored.columns if c != "confidence"]
    assert stored.select(exact).equals(expected.select(exact))
    assert (stored["confidence"] - expected["confidence"]).abs().max() <= 1e-12


def test_evaluation_tables_hold_intervals_breakdowns_differences_and_consistency(run):
    home, _, _ = run
    model = {"model": KEY}
    m = pl.read_parquet(partition_path(home, "metrics", model))
    head = m.filter(
        (pl.col("estimator") == "base") & (pl.col("reduction") == "sum") & (pl.col("split") == "test")
    )
    overall = head.filter((pl.col("scope") == "all") & (pl.col("metric") == "accuracy")).row(0, named=True)
    # a real interval around the point value (16 instances, 1,000 resamples)
    assert overall["ci_low"] <= overall["value"] <= overall["ci_high"]
    assert overall["ci_low"] < overall["ci_high"]
    # breakdowns by domain, gold count and option count are there (P36: closed set, one gold)
    assert {"all", "relation", "domain", "n_gold", "n_options"} <= set(head["scope"])
    assert head.filter(pl.col("scope") == "n_gold")["scope_value"].unique().to_list() == ["1"]
    assert (
        head.filter(pl.col("scope") == "template")["ci_low"].null_count()
        == head.filter(pl.col("scope") == "template").height
    )  # per-template rows carry no interval
    d = pl.read_parquet(partition_path(home, "metric_differences", model))
    margin = d.filter(
        (pl.col("estimator_a") == "margin") & (pl.col("estimator_b") == "base") & (pl.col("metric") == "ace")
    )
    assert margin.height > 0 and (margin["ci_low"] <= margin["ci_high"]).all()
    c = pl.read_parquet(partition_path(home, "consistency", model))
    assert set(c["kind"]) == {"intra", "cross"}
    assert c["iou_cons"].drop_nans().is_between(0, 1).all()
    t = pl.read_parquet(partition_path(home, "decision_thresholds", model))
    assert t.height > 0 and set(t["unit"]) <= {"instances", "statements", "pairs"}
    assert (t["unit"] == "pairs").to_list() == t["template_kind"].is_not_null().to_list()


def test_duckdb_views_equal_parquet(run):
    home, _, _ = run
    for table in TABLES:
        n_parquet = sum(pl.read_parquet(p).height for p in (home / table).rglob("*.parquet"))
        _, rows = query(home, f"select count(*) from {table}")
        assert rows[0][0] == n_parquet, table
    # The summary query (headline_estimates view: test split, full answer spaces) equals the metrics
    # table's headline rows, and its acc_mean_t the mean over the curated templates.
    cols, rows = query(home, named_query("summary"))
    assert {r[cols.index("split")] for r in rows} == {"test"}
    by_sql = {}
    for row in rows:
        named = dict(zip(cols, row, strict=True))
        for column, scope, metric in (
            ("accuracy", "relation", "accuracy"),
            ("brier", "relation", "brier"),
            ("acc_mean_t", "relation_template_mean", "accuracy"),
            ("instances", "relation", "n"),
        ):
            by_sql[(named["estimator"], named["reduction"], scope, metric)] = named[column]
    m = pl.read_parquet(partition_path(home, "metrics", {"model": KEY})).filter(
        (pl.col("split") == "test")
        & (pl.col("answer_space_k") == 0)
        & pl.col("scope").is_in(["relation", "relation_template_mean"])
        & pl.col("metric").is_in(["accuracy", "brier"])
        & pl.col("estimator").is_in(["base", "margin"])
        & (pl.col("reduction") == "sum")
    )
    assert len(m) == 2 * 2 * 2  # {base, margin} × {headline, template mean} × {accuracy, brier}
    rows = m.select("estimator", "reduction", "scope", "metric", "value", "n").iter_rows()
    for est, reduction, scope, metric, value, n in rows:
        if (est, reduction, scope, metric) in by_sql:
            assert by_sql[(est, reduction, scope, metric)] == pytest.approx(value, abs=1e-12)
        if scope == "relation":
            assert by_sql[(est, reduction, scope, "n")] == n
    # the view holds what kcal_pipeline's headline_estimates selects, row for row
    from kcal_pipeline.estimation.registry import headline_estimates

    estimates = pl.read_parquet(partition_path(home, "estimates", {"model": KEY, "relation": "P36"}))
    templates = pl.read_parquet(partition_path(home, "templates")).filter(pl.col("relation_id") == "P36")
    expected = headline_estimates(estimates, templates)
    cols, rows = query(home, "select instance_id, estimator from headline_estimates order by 1, 2")
    assert rows == sorted(expected.select("instance_id", "estimator").rows())


def test_every_report_query_runs_on_a_store_without_markers_mace_or_subsamples(run):
    # P36 alone, curated and question templates, full answer spaces, one model: the reports on
    # markers, MACE mixtures, model families and the option-count sweep have nothing to show, so
    # columns and no rows.
    from kcal_pipeline.core.warehouse import named_queries
    from tests.reporting.test_sql_reports import COLUMNS

    home, _, _ = run
    for name in named_queries():
        cols, rows = query(home, named_query(name))
        assert cols == COLUMNS[name], name
        empty = ("marker_deltas", "calibration_by_mixture", "families", "options_sweep")
        assert (rows == []) == (name in empty), name
        if name == "options_count":  # no `#k` subsamples: the full answer spaces only
            assert {row[cols.index("answer_space")] for row in rows} == {"full"}


def test_second_run_recomputes_nothing_and_refresh_changes_no_file(run):
    from assets.runner import run_missing

    home, first, _ = run
    before = files(home)
    again = run_missing(home, relations=["P36"], settings=SETTINGS, log=lambda m: None)
    assert again.materialized == [] and len(again.skipped) == len(first.materialized)
    forced = run_missing(home, relations=["P36"], settings=SETTINGS, refresh=True, log=lambda m: None)
    assert len(forced.materialized) == len(first.materialized)
    assert files(home) == before  # same bytes, same mtimes: identical partitions were not rewritten


def test_the_instance_shows_named_runs_passed_checks_and_no_partition_warnings(run):
    """What the UI shows of a CLI run: each run a named stage job with its assets in a tag; the
    probe's relation partitions are the run's (P36), not the catalog's 32, so no per-model step
    warns of 31 unmaterialized upstream partitions; every blocking check passed; the Dagster data
    version of a materialization is kcal's."""
    import logging

    from dagster import AssetKey
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    from assets.checks import ASSET_CHECKS
    from assets.definitions import STAGE_ASSETS
    from assets.jobs import ON_DEMAND
    from assets.runner import get_instance
    from kcal_pipeline.core.paths import report_path
    from kcal_pipeline.core.report_server import report_url
    from tests.conftest import REPO

    home, _, _ = run
    instance = get_instance(home)
    # every run but the ones test_metrics_and_differences_materialized_alone_… adds in any order
    runs = [r for r in instance.get_runs() if ALONE_TAG not in r.tags]
    assert {r.job_name for r in runs} == set(STAGE_ASSETS) - ON_DEMAND
    assert all(r.tags["kcal/assets"] for r in runs)
    # listed under their job in the UI: the repository label of the code location workspace.yaml names
    assert {r.tags[".dagster/repository"] for r in runs} == {"__repository__@kcal"}
    assert "location_name: kcal " in (REPO / "workspace.yaml").read_text()
    assert instance.get_dynamic_partitions("relation") == ["P36"]
    warnings = [
        e.user_message for r in runs for e in instance.all_logs(r.run_id) if e.level >= logging.WARNING
    ]
    assert not [w for w in warnings if "not materialized" in w], warnings
    # the checks of the stages this run ran (the on-demand stages' checks belong to theirs)
    on_demand = {AssetKey(asset) for stage in ON_DEMAND for asset in STAGE_ASSETS[stage]}
    keys = [key for checks in ASSET_CHECKS for key in checks.check_keys if key.asset_key not in on_demand]
    statuses = {
        key.name: instance.event_log_storage.get_asset_check_execution_history(key, limit=1)[0].status
        for key in keys
    }
    assert len(statuses) == 7 and set(statuses.values()) == {AssetCheckExecutionRecordStatus.SUCCEEDED}
    event = instance.get_latest_materialization_event(AssetKey("estimates")).asset_materialization
    assert event.tags["dagster/data_version"] == event.metadata["kcal_data_version"].value
    assert event.metadata["relation"].value == "P36 (capital)"
    metrics = instance.get_latest_materialization_event(AssetKey("metrics")).asset_materialization.metadata
    summary_columns = [c.name for c in metrics["summary"].value.schema.columns]
    assert summary_columns[:3] == ["relation", "instances", "accuracy"]
    assert metrics["report"].value == report_url(home, report_path(home, KEY))  # http: kcal ui serves it
    curves = instance.get_latest_materialization_event(AssetKey("curves")).asset_materialization.metadata
    selective = report_path(home, KEY).parent / "plots" / "selective.png"  # served by kcal ui, shown in place
    assert curves["plots"].value.startswith(f"![selective]({report_url(home, selective)})")
    assert selective.read_bytes().startswith(b"\x89PNG")


# Tags the runs of the test below: they share the module's store with the test of the CLI's runs.
ALONE_TAG = "kcal-test/materialized-alone"


@pytest.mark.parametrize("alone", ["metrics", "metric_differences"])
def test_metrics_and_differences_materialized_alone_equal_the_joint_run(run, alone):
    """One multi-asset computes both (sharing resample values); selecting one still works, writes
    only that one, and gives the very bytes the joint run wrote."""
    from dagster import AssetKey, materialize

    from assets.definitions import all_assets
    from assets.runner import get_instance
    from resources import default_resources

    home, _, _ = run
    path = partition_path(home, alone, {"model": KEY})
    before = path.read_bytes()
    result = materialize(
        all_assets,
        selection=[AssetKey(alone)],
        partition_key=KEY,
        instance=get_instance(home),
        resources=default_resources(home=str(home), **SETTINGS),
        tags={ALONE_TAG: alone},
    )
    assert result.success
    assert [m.asset_key.to_user_string() for m in result.asset_materializations_for_node("metrics")] == [
        alone
    ]
    assert path.read_bytes() == before


def test_definitions_load_from_workspace():
    from tests.conftest import REPO

    exe = Path(sys.executable).with_name("dagster")  # the dagster of the venv running the tests
    out = subprocess.run(
        [str(exe), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
