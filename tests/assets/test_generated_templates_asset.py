"""The paraphrase asset in a real (ephemeral) Dagster instance: on the real embedded instruct model,
and with a scripted generator whose output is known, so that the kept rows are certain to exist."""

import polars as pl
import pytest
from dagster import DagsterInstance, materialize

import assets.dataset
from assets.dataset import generated_templates
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.instances.paraphrases import REASONS, Candidate, build_prompt
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
    assert per_relation["P30"]["candidates"] > 0  # the model wrote something (kept or not)
    frame = pl.read_parquet(partition_path(tmp_path, "generated_templates"))
    assert frame.height == per_relation["P30"]["kept"]
    curated = set(load_catalog()["P30"].templates)
    for row in frame.iter_rows(named=True):
        check_template(row["text"])
        assert row["kind"] == "generated" and row["text"] not in curated
        assert row["generator"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct@") and row["prompt"]


SCRIPT = [
    "[X] sits within [Y].",  # kept
    "[X] belongs to [Y]",  # not_a_sentence
    "[X] lies on the continent of [Y].",  # duplicate_of_curated
    "[X] sits  within [Y].",  # duplicate (spacing does not count)
    " [Y] is home to [X]. ",  # kept, stripped
]


def test_the_asset_keeps_filters_and_records_a_scripted_generation(tmp_path, monkeypatch):
    """A deterministic generator in place of sampling: every kept row, reason and count is known."""
    calls = []

    def scripted(loaded, relation_id, relation_label, curated, *, model_id, seed, **_):
        calls.append((relation_id, seed))
        prompt = build_prompt(relation_label, curated, 8, loaded.tokenizer)
        return [Candidate(relation_id, t, model_id, f"{model_id}@{loaded.revision}", prompt) for t in SCRIPT]

    monkeypatch.setattr(assets.dataset, "generate_paraphrases", scripted)
    resources = default_resources(home=str(tmp_path), paraphrase_relations=["P30"])
    result = materialize([generated_templates], resources=resources, instance=DagsterInstance.ephemeral())
    assert result.success and len(calls) == 1 and calls[0][0] == "P30"
    meta = result.asset_materializations_for_node("generated_templates")[0].metadata
    assert meta["kept"].value == 2
    assert meta["per_relation"].value == {"P30": {"candidates": 5, "kept": 2}}
    assert meta["rejected"].value == dict.fromkeys(REASONS, 0) | {
        "not_a_sentence": 1, "duplicate_of_curated": 1, "duplicate": 1
    }  # fmt: skip
    frame = pl.read_parquet(partition_path(tmp_path, "generated_templates"))
    assert frame["template_id"].to_list() == ["P30:g0", "P30:g1"]
    assert frame["text"].to_list() == ["[X] sits within [Y].", "[Y] is home to [X]."]
    assert set(frame["kind"]) == {"generated"} and frame["rank"].to_list() == [0, 1]
    assert set(frame["source"]) == {"generated:HuggingFaceTB/SmolLM2-135M-Instruct"}
    curated = load_catalog()["P30"]
    for row in frame.iter_rows(named=True):
        check_template(row["text"])
        assert row["generator"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct@")
        assert "<|im_start|>" in row["prompt"] and curated.templates[0] in row["prompt"]
    templates = curated_and_variants(templates_frame({"P30": curated}), [13])
    chosen = run_templates(templates, frame, ["curated", "generated"], 2, [13])
    assert set(chosen["kind"]) == {"curated", "generated"}
