"""The paraphrase asset on the real embedded instruct model, in a real (ephemeral) Dagster instance."""

import polars as pl
import pytest
from dagster import DagsterInstance, materialize

from assets.dataset import generated_templates
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.instances.probe import templates_frame
from kcal_pipeline.dataset.instances.relation_probe import curated_and_variants, run_templates
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.dataset.templates import check_template
from resources import default_resources

pytestmark = pytest.mark.integration


def test_generated_templates_are_well_formed_and_usable(tmp_path):
    resources = default_resources(home=str(tmp_path), paraphrase_relations=["P30"])
    result = materialize([generated_templates], resources=resources, instance=DagsterInstance.ephemeral())
    assert result.success
    meta = result.asset_materializations_for_node("generated_templates")[0].metadata
    per_relation = meta["per_relation"].value
    assert set(per_relation) == {"P30"} and per_relation["P30"]["candidates"] >= per_relation["P30"]["kept"]
    frame = pl.read_parquet(partition_path(tmp_path, "generated_templates"))
    assert frame.height == per_relation["P30"]["kept"]
    curated = set(load_catalog()["P30"].templates)
    for row in frame.iter_rows(named=True):
        check_template(row["text"])
        assert row["kind"] == "generated" and row["text"] not in curated
        assert row["generator"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct@") and row["prompt"]
    if frame.height:
        templates = curated_and_variants(templates_frame({"P30": load_catalog()["P30"]}), 13)
        chosen = run_templates(templates, frame, ["curated", "generated"], 2, seed=13)
        assert set(chosen["kind"]) == {"curated", "generated"}
