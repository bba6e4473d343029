"""The cross-model family_comparison asset in a real (ephemeral) Dagster instance, on real Parquet
files of three models' metrics and scores (written here; nothing is scored), read through the real
IO manager; and `kcal demo`'s runner agreeing with the IO manager on which files it read."""

import polars as pl
import pytest
from dagster import AssetKey, DagsterInstance, materialize

from assets.definitions import all_assets
from assets.runner import is_up_to_date
from kcal_pipeline.core.paths import registry_path
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY
from kcal_pipeline.core.warehouse import named_query, query
from kcal_pipeline.estimation.catalog import estimator_catalog
from kcal_pipeline.evaluation.catalog import metric_catalog
from kcal_pipeline.scoring.models import ModelEntry, Registry
from resources import default_resources
from tests.evaluation.test_families import METRICS

pytestmark = pytest.mark.integration

# model id (= its key) → kind and the relations it was scored on
MODELS = {"A": ("clm", ["P36", "P30"]), "B": ("clm", ["P36", "P30"]), "X": ("mlm", ["P36"])}


def store(home, models):
    """models.toml, the `model` partitions, and per model its metrics and statement_scores files
    (with a column the asset must not need: the IO manager reads only model_id and model_kind)."""
    registry = Registry(registry_path(home))
    for model_id, (kind, _) in models.items():
        registry.add(ModelEntry(id=model_id, source="local", path=f"/models/{model_id}", kind=kind))
    for model_id, (kind, relations) in models.items():
        version = {DATA_VERSION_KEY: f"v-{model_id}"}
        metrics = METRICS.filter(pl.col("model_id") == model_id)
        write_parquet_atomic(metrics, partition_path(home, "metrics", {"model": model_id}), version)
        for relation in relations:
            scores = pl.DataFrame(
                {"model_id": [model_id] * 2, "model_kind": [kind] * 2, "token_logprobs": [[-1.5, -0.5]] * 2}
            )
            where = {"model": model_id, "relation": relation}
            write_parquet_atomic(scores, partition_path(home, "statement_scores", where), version)
    # the report queries select estimators and metrics by the catalogs' flags
    write_parquet_atomic(estimator_catalog(), partition_path(home, "estimator_catalog"))
    write_parquet_atomic(metric_catalog(), partition_path(home, "metric_catalog"))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [e.key for e in registry.entries()])
    instance.add_dynamic_partitions("relation", sorted({r for _, rs in models.values() for r in rs}))
    return instance


def run(home, instance):
    result = materialize(
        all_assets,
        selection=[AssetKey("family_comparison")],
        instance=instance,
        resources=default_resources(home=str(home)),
    )
    assert result.success
    meta = result.asset_materializations_for_node("family_comparison")[0].metadata
    return pl.read_parquet(partition_path(home, "family_comparison")), meta


def test_the_asset_pairs_the_families_across_models(tmp_path):
    instance = store(tmp_path, MODELS)
    table, meta = run(tmp_path, instance)
    # the pair (B, X) and its four common keys, as in tests/evaluation/test_families.py
    assert table.select("causal_model_id", "masked_model_id").unique().rows() == [("B", "X")]
    assert table.select("metric", "scope_value", "masked_minus_causal").rows() == [
        ("accuracy", "all", -0.0625),
        ("ace", "all", -0.125),
        ("accuracy", "P36", -0.5),
        ("brier", "all", 0.125),
    ]
    assert meta["pairs"].value == "- B ↔ X: accuracy 0.812 vs 0.750 (gap 0.062)"
    assert meta["unpaired"].value == "- A (clm): all 1 masked model(s) paired with closer causal ones"
    # `kcal sql --query families`: Base's test-split headline metrics of the pair, through the view
    cols, rows = query(tmp_path, named_query("families"))
    named = [dict(zip(cols, r, strict=True)) for r in rows]
    assert [(r["metric"], r["causal"], r["masked"], r["masked_minus_causal"]) for r in named] == [
        ("accuracy", 0.8125, 0.75, -0.0625),
        ("ace", 0.25, 0.125, -0.125),
    ]
    assert [(r["causal_ci"], r["masked_ci"]) for r in named] == [
        ("[0.625, 0.938]", "[0.500, 0.875]"),
        ("[0.125, 0.375]", "[0.062, 0.250]"),
    ]


def test_the_runner_reads_the_files_the_io_manager_read(tmp_path):
    instance = store(tmp_path, MODELS)
    run(tmp_path, instance)
    resources = default_resources(home=str(tmp_path))
    # every model's metrics and every (model, relation) of statement_scores, as the IO manager read
    assert is_up_to_date(tmp_path, "family_comparison", {}, resources)
    rewritten = METRICS.filter(pl.col("model_id") == "X")
    write_parquet_atomic(
        rewritten, partition_path(tmp_path, "metrics", {"model": "X"}), {DATA_VERSION_KEY: "v2"}
    )
    assert not is_up_to_date(tmp_path, "family_comparison", {}, resources)


def test_with_causal_models_only_the_table_is_empty_and_says_why(tmp_path):
    instance = store(tmp_path, {"A": MODELS["A"]})
    table, meta = run(tmp_path, instance)
    assert table.is_empty() and "masked_minus_causal" in table.columns
    assert meta["pairs"].value == "none"
    assert meta["unpaired"].value == "- A (clm): no masked model (mlm) to pair with"
