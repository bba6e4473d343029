"""Issue 34 #8: the declared reads (resources/settings.py READS_KEY) are kcal's bookkeeping. The code
location keeps them out of the metadata the UI lists, and data versions stay the same bits."""

import polars as pl
import pytest
from dagster import AssetKey, load_assets_from_modules

from assets import catalog, dataset, estimation, evaluation, generation, reporting, scoring
from assets.definitions import all_assets, defs
from assets.runner import _upstream_files, expected_version
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.versions import data_version, input_versions
from resources import ProbeSettings, ScoringSettings
from resources.settings import READS_KEY, declared_reads, resolve_reads

# The definitions as the asset modules declare them, READS_KEY still in their metadata.
AS_DECLARED = load_assets_from_modules(
    [catalog, dataset, scoring, estimation, generation, evaluation, reporting]
)
DECLARING = {
    key.to_user_string(): spec.metadata[READS_KEY]
    for a in AS_DECLARED
    for key, spec in a.specs_by_key.items()
    if READS_KEY in spec.metadata
}


def test_no_asset_of_the_code_location_lists_its_declared_reads_as_metadata():
    assert {"statements", "statement_scores", "report", "generated_templates"} <= set(DECLARING)
    for spec in defs.resolve_all_asset_specs():
        assert not any(str(k).startswith("kcal/reads") for k in spec.metadata), spec.key
    for assets_def in all_assets:
        for output in assets_def.node_def.output_defs:
            assert READS_KEY not in (output.metadata or {}), assets_def.keys


@pytest.mark.parametrize("asset", sorted(DECLARING))
def test_each_asset_still_declares_the_same_reads_in_the_same_order(asset):
    declared = [part.strip() for part in DECLARING[asset].split(",") if part.strip()]
    assert declared and declared_reads(asset) == declared
    # an asset definition used directly (as some tests do) still reads its own declaration
    raw = next(a for a in AS_DECLARED if AssetKey(asset) in a.keys).specs_by_key[AssetKey(asset)].metadata
    assert declared_reads("not-an-asset", raw) == declared


@pytest.mark.parametrize(("asset", "dims"), [("statements", {"relation": "P36"}), ("templates", {})])
def test_a_partitions_data_version_is_the_same_bits_as_with_the_reads_in_its_metadata(tmp_path, asset, dims):
    """The version the runner expects (and the IO manager records) equals the one computed, as
    before, from the reads in the asset's own metadata, over the same settings and input files."""
    resources = {"probe_settings": ProbeSettings(home=str(tmp_path)), "scoring_settings": ScoringSettings()}
    write_parquet_atomic(pl.DataFrame({"x": [1]}), partition_path(tmp_path, "generated_templates"),
                         metadata={"kcal.data_version": "g1"})  # fmt: skip
    declared = next(a for a in AS_DECLARED if AssetKey(asset) in a.keys)
    spec = declared.specs_by_key[AssetKey(asset)]
    values, extra = resolve_reads(
        [part for part in str(spec.metadata[READS_KEY]).split(",") if part],
        dims,
        resources["probe_settings"],
        resources["scoring_settings"],
        tmp_path,
    )
    files = [f for dep in spec.deps for f in _upstream_files(tmp_path, dep.asset_key.to_user_string(), dims)]
    before = data_version(
        asset,
        declared.code_versions_by_key[AssetKey(asset)],
        values,
        input_versions(tmp_path, [*files, *extra]),
    )
    assert expected_version(tmp_path, asset, dims, resources) == before
