"""Open answers through the real graph (issue 33): `kcal demo --generate` on mace-award with the
embedded SmolLM2, a real Dagster instance, Parquet and DuckDB — the generation tables, their checks,
the report's section, no work on a rerun, and a changed generation setting rerunning exactly the
generation partitions and what reads them."""

import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.warehouse import query
from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS
from tests.conftest import copy_facts_store

pytestmark = pytest.mark.integration
KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"
# 8 questions (2 per gold count), one curated template: the closed-set stages stay small; two
# samples of at most 4 tokens keep the open answers to seconds.
SETTINGS = {"max_instances": 8, "max_templates": 1, "n_negatives": 3, "n_samples": 2, "max_new_tokens": 4}
GENERATION_TABLES = {
    "generations", "generation_estimates", "generation_status", "generation_matches", "generation_metrics",
}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory, facts_store):
    from assets.runner import run_missing

    home = copy_facts_store(facts_store, tmp_path_factory.mktemp("kcal"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster")))
        relations = ["mace-award", "P36"]  # P36 asks no questions: no generation partition of its own
        first = run_missing(home, relations=relations, settings=SETTINGS, log=lambda m: None, generate=True)
        again = run_missing(home, relations=relations, settings=SETTINGS, log=lambda m: None, generate=True)
        changed = run_missing(
            home,
            relations=relations,
            settings={**SETTINGS, "n_samples": 3},
            log=lambda m: None,
            generate=True,
        )
        yield home, first, again, changed


def test_generation_tables_are_materialized_for_relations_that_ask(run):
    _, first, _, _ = run
    assert not first.failed, first.failed
    made = {(a, p) for a, p in first.materialized}
    for table in GENERATION_TABLES - {"generation_metrics"}:
        assert (table, f"{KEY}|mace-award") in made
        assert (table, f"{KEY}|P36") not in made
    assert ("generation_metrics", KEY) in made


def test_generations_and_matches_are_complete(run):
    home, _, _, _ = run
    dims = {"model": KEY, "relation": "mace-award"}
    generations = pl.read_parquet(partition_path(home, "generations", dims))
    instances = pl.read_parquet(partition_path(home, "probe_instances", {"relation": "mace-award"}))
    answers = generations.filter(pl.col("prompt") == "answer")
    assert answers.height == instances.height * 4  # greedy + 3 sampled (the last run's setting)
    assert set(generations["prompt"]) == {
        "answer",
        "verb",
        "verb_topk",
        "self_ask",
        "self_ask_cand",
        "p_true",
        "p_true_cand",
    }
    assert generations["logprob_sum"].is_finite().all() and (generations["logprob_sum"] <= 1e-4).all()
    matches = pl.read_parquet(partition_path(home, "generation_matches", dims))
    assert matches.height == answers.height
    assert set(matches["status"]) <= {"correct", "wrong_known_entity", "unmatched"}
    # the final file stored, the chunk checkpoints are gone (they were the only copy until then)
    assert not list((home / ".checkpoints" / "generations").rglob("*.parquet"))


def test_every_method_ran_or_says_why_per_instance(run):
    home, _, _, _ = run
    dims = {"model": KEY, "relation": "mace-award"}
    status = pl.read_parquet(partition_path(home, "generation_status", dims))
    estimates = pl.read_parquet(partition_path(home, "generation_estimates", dims))
    assert set(status["estimator"]) == set(GENERATION_ESTIMATORS)
    ran = status.filter(pl.col("status") == "ran")
    assert ran.height >= 17  # MACE's 15 methods (at least 14) and SCA, SNCA, SFCA
    counts = estimates.group_by("estimator").agg(rows=pl.len(), refused=pl.col("confidence").is_null().sum())
    joined = ran.join(counts, on="estimator", suffix="_estimates")
    assert (joined["rows"] == joined["rows_estimates"]).all()
    assert (joined["refused"] == joined["refused_estimates"]).all()
    refused = estimates.filter(pl.col("confidence").is_null())
    assert refused["refusal"].null_count() == 0
    assert estimates["split"].null_count() == 0


def test_metrics_per_gold_count_reach_duckdb_and_the_report(run):
    home, _, _, _ = run
    _, rows = query(
        home,
        "select scope_value, count(*) from generation_metrics where scope = 'n_gold' "
        "and metric = 'mean_confidence' group by scope_value order by scope_value",
    )
    assert [r[0] for r in rows] == ["1", "2", "4", "6"]
    html = (home / "reports" / f"model={KEY}" / "report.html").read_text()
    assert 'id="generation"' in html and "6a" in html


def test_a_rerun_does_nothing_and_a_new_setting_reruns_exactly_the_generation(run):
    _, _, again, changed = run
    assert again.materialized == [] and not again.failed
    rerun = {a for a, _ in changed.materialized}
    assert rerun == GENERATION_TABLES | {"report"}, rerun
    assert {p for a, p in changed.materialized if a == "generations"} == {f"{KEY}|mace-award"}


def test_the_summary_and_the_lm_judge_commands(run, tmp_path):
    from tests.conftest import run_kcal

    home, _, _, _ = run
    summary = run_kcal(home, "generation", "summary")
    assert summary.returncode == 0, summary.stderr
    assert "MACE Table 3" in summary.stdout and "6a" in summary.stdout and "Perplexity" in summary.stdout
    verdicts = tmp_path / "verdicts.csv"
    judged = run_kcal(home, "generation", "judge", "--sample", "5", "--out", str(verdicts))
    assert judged.returncode == 0, judged.stderr
    assert "n = 5 responses" in judged.stdout and "cohen_kappa" in judged.stdout
    rows = pl.read_csv(verdicts)
    assert rows.height == 5 and rows["judge_p"].is_between(0, 1).all()
    missing = run_kcal(home, "generation", "judge", "--relation", "P36")
    assert missing.returncode != 0 and "no generation_matches" in missing.stderr


def test_generate_refuses_a_run_without_a_relation_that_asks(run):
    from tests.conftest import run_kcal

    home, _, _, _ = run
    refused = run_kcal(home, "demo", "--generate", "--relation", "P36", "--no-progress")
    assert refused.returncode != 0 and "none of the relations P36 asks questions" in refused.stderr
    inert = run_kcal(home, "demo", "--n-samples", "3", "--relation", "P36", "--no-progress")
    assert inert.returncode != 0 and "--n-samples: generation settings need --generate" in inert.stderr
