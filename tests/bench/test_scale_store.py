"""bench/_scale_store.py writes a store the library reads: the estimation and evaluation stages run
on its files, every table has the configured rows, and the runner and the automation sensor find
nothing to do (its materializations are reported to the Dagster instance)."""

import polars as pl
import pytest

from bench._scale_store import (
    CROSS_MODEL_TABLES,
    MODEL_RELATION_TABLES,
    MODEL_TABLES,
    RELATION_TABLES,
    ScaleStore,
    StoreShape,
    estimate,
    model_inputs,
)
from kcal_pipeline.core.storage import partition_path

SHAPE = StoreShape(relations=2, instances=10, templates=2, options=4, seed=3, resamples=10)
MODELS = 5  # four causal, one masked (bench/_scale_store.py model_kind)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    home = tmp_path_factory.mktemp("scale")
    with pytest.MonkeyPatch.context() as patch:  # the instance's DAGSTER_HOME, for this module only
        patch.setenv("DAGSTER_HOME", str(home / ".dagster"))
        store = ScaleStore(home, SHAPE, record_events=True)
        store.write_dataset()
        store.add_models(MODELS)
        yield store


def test_the_store_has_the_configured_rows(store):
    assert len(store.relations) == SHAPE.relations and len(store.models) == MODELS
    for relation in store.relations:
        instances = pl.read_parquet(partition_path(store.home, "probe_instances", {"relation": relation}))
        assert instances.height == SHAPE.instances
        assert (instances["n_options"] == SHAPE.options).all()
        statements = pl.read_parquet(partition_path(store.home, "statements", {"relation": relation}))
        assert statements["template_id"].n_unique() == SHAPE.templates
        assert statements.height == SHAPE.instances * SHAPE.templates * SHAPE.options
        for model in store.models:
            dims = {"model": model, "relation": relation}
            scores = pl.read_parquet(partition_path(store.home, "statement_scores", dims))
            assert scores.height == statements.height
            assert scores["model_id"].n_unique() == 1
            # each statement's token log-probs sum to its ll_sum, as scoring writes them
            sums = scores["token_logprobs"].list.sum().cast(pl.Float64)
            assert ((sums - scores["ll_sum"]).abs() < 1e-3).all()
            assert (scores["n_tokens"] == scores["token_logprobs"].list.len()).all()


def test_the_estimation_and_evaluation_stages_run_on_the_store(store):
    from kcal_pipeline.evaluation.tables import metrics_and_differences

    relation, model = store.relations[0], store.models[1]
    dims = {"model": model, "relation": relation}
    tables = estimate(
        pl.read_parquet(partition_path(store.home, "statement_scores", dims)),
        pl.read_parquet(partition_path(store.home, "probe_instances", {"relation": relation})),
        pl.read_parquet(partition_path(store.home, "templates")),
    )
    assert tables["estimates"]["instance_id"].n_unique() == SHAPE.instances
    inputs = model_inputs(store.home, model)
    assert inputs["estimates"]["relation_id"].n_unique() == SHAPE.relations
    metrics, differences = metrics_and_differences(
        inputs["estimates"], inputs["templates"], inputs["relations"], inputs["probe_instances"],
        inputs["option_estimates"], n_resamples=SHAPE.resamples,
    )  # fmt: skip
    assert metrics.height > 0 and differences.height > 0
    # the copied (perturbed) metrics keep every interval around its point, as the stage writes them
    stored = pl.read_parquet(partition_path(store.home, "metrics", {"model": model}))
    with_interval = stored.drop_nulls(["ci_low", "ci_high", "value"])
    assert with_interval.height > 0
    assert ((with_interval["ci_low"] <= with_interval["value"] + 1e-12)
            & (with_interval["value"] <= with_interval["ci_high"] + 1e-12)).all()  # fmt: skip


def test_the_runner_finds_nothing_to_do(store):
    from assets.runner import is_up_to_date

    partitions = (
        [(t, {"relation": r}) for t in RELATION_TABLES for r in store.relations]
        + [
            (t, {"model": m, "relation": r})
            for t in MODEL_RELATION_TABLES
            for m in store.models
            for r in store.relations
        ]
        + [(t, {"model": m}) for t in MODEL_TABLES for m in store.models]
        + [(t, {}) for t in CROSS_MODEL_TABLES]
    )
    stale = [(t, d) for t, d in partitions if not is_up_to_date(store.home, t, d, store.resources)]
    assert stale == []


def test_the_automation_finds_nothing_to_do(store):
    import warnings

    from dagster import evaluate_automation_conditions

    from assets.automation import AUTOMATED
    from assets.definitions import defs

    assert sorted(store.instance.get_dynamic_partitions("model")) == sorted(store.models)
    cursor = None
    for _ in range(2):  # the first tick (no cursor) and the next
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = evaluate_automation_conditions(defs, store.instance, cursor=cursor)
        cursor = result.cursor
        assert {k.to_user_string(): result.get_requested_partitions(k) for k in AUTOMATED if
                result.get_requested_partitions(k)} == {}  # fmt: skip


def test_the_cross_model_tables_pair_the_masked_model_with_a_causal_one(store):
    from bench._scale_store import model_kind
    from kcal_pipeline.evaluation.families import family_comparison

    kinds = {m: model_kind(i) for i, m in enumerate(f"scale/model-{i:03d}" for i in range(MODELS))}
    assert list(kinds.values()) == ["clm", "clm", "clm", "clm", "mlm"]
    table = pl.read_parquet(partition_path(store.home, "family_comparison"))
    pairs = table.select("causal_model_id", "masked_model_id").unique().rows()
    assert len(pairs) == 1 and pairs[0][1] == "scale/model-004"
    # the asset's file-by-file path (what the store wrote) equals the stacked reference
    metrics = pl.concat(
        [pl.read_parquet(partition_path(store.home, "metrics", {"model": m})) for m in store.models]
    )
    assert table.equals(family_comparison(metrics, kinds).table)
    board = pl.read_parquet(partition_path(store.home, "cross_model_report"))
    assert sorted(board["model_id"]) == sorted(kinds)
