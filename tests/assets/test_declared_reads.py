"""Issue 34 #8, issue 53: the declared reads (resources/settings.py DECLARED_READS) are kcal's
bookkeeping. `@reads(...)` records them by asset name and leaves the definition as it is: the
metadata the UI lists never carries them, no asset is rebuilt, and data versions are computed from
the registry by both the runner and the IO manager."""

import polars as pl
import pytest
from dagster import AssetKey, AssetOut, asset, load_assets_from_modules, multi_asset

from assets import catalog, dataset, estimation, evaluation, generation, reporting, scoring
from assets.definitions import all_assets, defs
from assets.runner import _upstream_files, expected_version
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import data_version, input_versions
from resources import ProbeSettings, ScoringSettings
from resources.settings import DECLARED_READS, declared_reads, reads, resolve_reads

# The definitions as the asset modules hold them (before the code location adds its attributes).
AS_DECLARED = load_assets_from_modules(
    [catalog, dataset, scoring, estimation, generation, evaluation, reporting]
)


def test_no_asset_of_the_code_location_lists_its_declared_reads_as_metadata():
    assert {"statements", "statement_scores", "report", "generated_templates"} <= set(DECLARED_READS)
    for spec in defs.resolve_all_asset_specs():
        assert not any(str(k).startswith("kcal/reads") for k in spec.metadata), spec.key
    for assets_def in all_assets:
        for output in assets_def.node_def.output_defs:
            assert not any(str(k).startswith("kcal/reads") for k in output.metadata or {}), assets_def.keys


def test_the_registry_holds_exactly_the_assets_of_the_code_location_that_declare():
    names = {key.to_user_string() for a in AS_DECLARED for key in a.keys}
    assert set(DECLARED_READS) <= names
    # a multi-asset's declaration is each of its assets' (both facts tables read the same)
    assert declared_reads("wikidata_facts") == declared_reads("dropped_facts") == [
        "relation", "probe.page_size", "probe.min_sitelinks",
    ]  # fmt: skip
    assert "metric_catalog" in names and declared_reads("metric_catalog") == []  # reads only its inputs


def test_reads_records_the_names_in_order_and_returns_the_definition_unchanged(monkeypatch):
    monkeypatch.setattr("resources.settings.DECLARED_READS", registry := {})

    @asset
    def plain() -> int:
        return 1

    @multi_asset(outs={"left": AssetOut(), "right": AssetOut()})
    def both():
        return 1, 2

    assert reads("probe.seed", "catalog")(plain) is plain
    assert reads("relation")(both) is both
    assert registry == {"plain": ("probe.seed", "catalog"), "left": ("relation",), "right": ("relation",)}
    assert declared_reads("plain") == ["probe.seed", "catalog"]
    assert reads("probe.seed", "catalog")(plain) is plain  # the same declaration again (a re-import)
    with pytest.raises(ValueError, match="'plain' declares its reads twice"):
        reads("catalog")(plain)
    with pytest.raises(TypeError, match="above @asset"):
        reads("catalog")(lambda: 1)


@pytest.mark.parametrize(("asset", "dims"), [("statements", {"relation": "P36"}), ("templates", {})])
def test_a_partitions_data_version_is_computed_from_its_declared_reads(tmp_path, asset, dims):
    """The version the runner expects (and the IO manager records) is the one computed from the
    asset's declared reads over the same settings and input files."""
    resources = {"probe_settings": ProbeSettings(home=str(tmp_path)), "scoring_settings": ScoringSettings()}
    write_parquet_atomic(pl.DataFrame({"x": [1]}), partition_path(tmp_path, "generated_templates"),
                         metadata={"kcal.data_version": "g1"})  # fmt: skip
    declared = next(a for a in AS_DECLARED if AssetKey(asset) in a.keys)
    spec = declared.specs_by_key[AssetKey(asset)]
    values, extra = resolve_reads(
        declared_reads(asset), dims, resources["probe_settings"], resources["scoring_settings"], tmp_path
    )
    files = [f for dep in spec.deps for f in _upstream_files(tmp_path, dep.asset_key.to_user_string(), dims)]
    before = data_version(
        asset,
        declared.code_versions_by_key[AssetKey(asset)],
        values,
        input_versions(tmp_path, [*files, *extra]),
    )
    assert extra or asset != "statements"  # statements reads the generated templates' file
    assert expected_version(tmp_path, asset, dims, resources) == before
