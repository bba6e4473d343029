"""cross_model_report in a real (ephemeral) Dagster instance through the real IO manager, whose
`where` input filter reads only the page's rows of each model's metrics file: the leaderboard is
the one every row gives, and `kcal demo`'s runner still finds the partition up to date (a data
version counts the files read, not the rows)."""

import polars as pl
import pytest
from dagster import AssetKey, DagsterInstance, materialize

from assets.definitions import all_assets
from assets.runner import is_up_to_date
from kcal_pipeline.core.paths import registry_path
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY
from kcal_pipeline.reporting.cross_model import leaderboard
from kcal_pipeline.scoring.models import ModelEntry, Registry
from resources import default_resources
from tests.reporting.test_cross_model_rows import MODELS, model_metrics

pytestmark = pytest.mark.integration


def test_the_report_from_the_filtered_input_is_the_report_from_every_row(tmp_path):
    registry = Registry(registry_path(tmp_path))
    frames = []
    for seed, model in enumerate(MODELS):
        registry.add(ModelEntry(id=model, source="local", path=f"/models/{model}", kind="clm"))
        frames.append(model_metrics(model, seed))
        path = partition_path(tmp_path, "metrics", {"model": model})
        write_parquet_atomic(frames[-1], path, {DATA_VERSION_KEY: f"v-{model}"})
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [e.key for e in registry.entries()])
    resources = default_resources(home=str(tmp_path))
    result = materialize(
        all_assets, selection=[AssetKey("cross_model_report")], instance=instance, resources=resources
    )
    assert result.success
    board = pl.read_parquet(partition_path(tmp_path, "cross_model_report"))
    assert board.height == len(MODELS)
    assert board.equals(leaderboard(pl.concat(frames)))
    assert (tmp_path / "reports" / "index.html").exists()
    assert is_up_to_date(tmp_path, "cross_model_report", {}, resources)
    rewritten = model_metrics(MODELS[0], 99)  # new rows in one model's file: a new version
    path = partition_path(tmp_path, "metrics", {"model": MODELS[0]})
    write_parquet_atomic(rewritten, path, {DATA_VERSION_KEY: "v2"})
    assert not is_up_to_date(tmp_path, "cross_model_report", {}, resources)
