"""Freshness follows the settings and the upstream data, not a file's existence (issue 11, point 1).

A partition is up to date when its Parquet file records the data version the current code,
settings and inputs would give it. Before data versions, any existing file counted as done, so a
changed setting kept the old data and an interrupted run could leave stale scores that the next
run called "done".
"""

import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.versions import DATA_VERSION_KEY, stored_version
from kcal_pipeline.reporting.html import summary_table
from tests.conftest import copy_facts_store

pytestmark = pytest.mark.integration
KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"
# P36 is one-to-one: 8 options per instance instead of BEAR's 60 (each of the runs here rescored 240)
BASE = {"max_instances": 4, "max_templates": 1, "n_negatives": 2, "answer_space_size_one_to_one": 8}
MR = {"model": KEY, "relation": "P36"}


@pytest.fixture(scope="module")
def base_store(tmp_path_factory, facts_store):
    """The probe run once with BASE: its KCAL_HOME and its Dagster instance (read only; `store`
    hands each test a copy)."""
    from assets.runner import run_missing

    home = copy_facts_store(facts_store, tmp_path_factory.mktemp("store") / "kcal")
    instance = tmp_path_factory.mktemp("dagster")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(instance))
        assert not run_missing(home, relations=["P36"], settings=BASE, log=lambda m: None).failed
    return home, instance


@pytest.fixture
def store(base_store, tmp_path, monkeypatch):
    """A copy of the base store (files and Dagster instance) for one test, and `run(**settings)`:
    the tests change settings and interrupt runs, so each starts from BASE, whatever ran before."""
    from assets.runner import run_missing

    home, instance = tmp_path / "kcal", tmp_path / "dagster"
    shutil.copytree(base_store[0], home)
    shutil.copytree(base_store[1], instance)
    monkeypatch.setenv("DAGSTER_HOME", str(instance))

    def run(**settings):
        return run_missing(home, relations=["P36"], settings={**BASE, **settings}, log=lambda m: None)

    return home, run


def materialized(summary) -> set[tuple[str, str]]:
    return {(asset, label) for asset, label in summary.materialized}


def test_every_partition_records_its_data_version(store):
    home, _ = store
    version = stored_version(partition_path(home, "statement_scores", MR))
    assert version and len(version) == 20
    import pyarrow.parquet as pq

    meta = pq.read_metadata(partition_path(home, "estimates", MR)).metadata
    assert DATA_VERSION_KEY.encode() in meta


def test_a_changed_probe_setting_reruns_exactly_what_it_affects(store):
    # the setting: an option-count sweep (k 3 and 5, two draws each; P36 has 8 options here) over
    # the same instances, which must leave every full-answer-space (headline) number as it was
    home, run = store
    assert run().materialized == []  # nothing changed: nothing to do
    before = pl.read_parquet(partition_path(home, "metrics", {"model": KEY}))
    sweep = {"answer_space_k": [3, 5], "answer_space_draws": 2}
    summary = run(**sweep)
    relation, model = "P36", KEY
    assert materialized(summary) == {
        ("probe_instances", relation), ("statements", relation), ("data_quality", "-"),
        ("statement_scores", f"{model}|{relation}"), ("estimates", f"{model}|{relation}"),
        ("option_estimates", f"{model}|{relation}"), ("estimator_fits", f"{model}|{relation}"),
        ("estimator_status", f"{model}|{relation}"), ("metrics", model), ("metric_differences", model),
        ("curves", model), ("decision_thresholds", model), ("consistency", model), ("report", model),
        ("family_comparison", "-"), ("cross_model_report", "-"),
    }  # fmt: skip
    inst = pl.read_parquet(partition_path(home, "probe_instances", {"relation": "P36"}))
    statements = pl.read_parquet(partition_path(home, "statements", {"relation": "P36"}))
    scores = pl.read_parquet(partition_path(home, "statement_scores", MR))
    # the new data, not the old: each instance cut to 3 and to 5 options, once per draw
    for k, draw in ((3, 1), (3, 2), (5, 1), (5, 2)):
        copies = inst.filter(pl.col("instance_id").str.ends_with(f"#k{k}d{draw}"))
        assert copies.height == 4 and set(copies["n_options"]) == {k}, (k, draw)
    assert scores.height == statements.height == int(inst["n_options"].sum())
    after = pl.read_parquet(partition_path(home, "metrics", {"model": KEY}))
    spaces = after.filter(pl.col("scope") == "all").select("answer_space_k", "answer_space_draw").unique()
    assert sorted(spaces.iter_rows()) == [(0, 0), (3, 1), (3, 2), (5, 1), (5, 2)]
    # the headline is unchanged: the summary table, and every full-answer-space row of metrics (to
    # the last bits: a batched metric such as smooth ECE sums in another order beside more groups)
    assert summary_table(after).equals(summary_table(before))
    keys = ["estimator", "reduction", "split", "scope", "scope_value", "metric"]
    full = after.filter(pl.col("answer_space_k") == 0).sort(keys, nulls_last=True)
    assert_frame_equal(full, before.sort(keys, nulls_last=True), check_exact=False, rel_tol=1e-12, abs_tol=0)
    assert run(**sweep).materialized == []


def test_a_changed_template_kind_keeps_the_instances_and_a_scoring_setting_keeps_the_statements(store):
    home, run = store
    summary = run(template_kinds=["curated", "marker_verbal"])
    assert ("probe_instances", "P36") not in materialized(summary)
    assert ("statements", "P36") in materialized(summary)
    statements = pl.read_parquet(partition_path(home, "statements", {"relation": "P36"}))
    assert statements["template_id"].n_unique() == 3  # the curated template and its two verbal markers
    summary = run(template_kinds=["curated", "marker_verbal"], subject_mask=True)
    assert {a for a, _ in summary.materialized} == {
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
    }
    scores = pl.read_parquet(partition_path(home, "statement_scores", MR))
    assert scores["ll_sum_masked"].null_count() == 0


def test_an_interrupted_run_never_leaves_stale_partitions_called_done(store, monkeypatch):
    # A run with other settings dies while scoring: statements are new, the scores file is still
    # the old one. The next run must rescore, not say "Nothing to do".
    from kcal_pipeline.scoring import engine

    home, run = store
    real = engine.score_statements

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed while scoring")

    monkeypatch.setattr(engine, "score_statements", dies)
    with pytest.raises(BaseException):  # noqa: B017 (whatever Dagster wraps the interrupt in)
        run(max_instances=8)
    monkeypatch.setattr(engine, "score_statements", real)
    statements = pl.read_parquet(partition_path(home, "statements", {"relation": "P36"}))
    old_scores = pl.read_parquet(partition_path(home, "statement_scores", MR))
    # the stale state the old runner called done: scores of other statements than the current ones
    assert old_scores["statement_id"].to_list() != statements["statement_id"].to_list()
    summary = run(max_instances=8)
    assert ("statement_scores", f"{KEY}|P36") in materialized(summary)
    scores = pl.read_parquet(partition_path(home, "statement_scores", MR))
    assert scores["statement_id"].to_list() == statements["statement_id"].to_list()
    assert scores["statement_id"].is_unique().all()
