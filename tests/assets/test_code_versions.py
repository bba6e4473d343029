"""The assets whose output follows a registry carry its hash in their code version (one version per
asset, kcal_pipeline/core/versions.py: code_version), so a new or changed estimator or metric makes
them stale with no constant to bump."""

import pytest
from dagster import AssetKey

from assets.definitions import defs
from kcal_pipeline.core.versions import code_version
from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.evaluation.registry import METRICS

FOLLOWS = {
    **dict.fromkeys(("estimates", "option_estimates", "estimator_fits", "estimator_status"), (ESTIMATORS,)),
    **dict.fromkeys(("metrics", "metric_differences", "curves", "decision_thresholds"), (METRICS,)),
    **dict.fromkeys(("consistency", "family_comparison"), (METRICS,)),
    **dict.fromkeys(("report", "cross_model_report"), (ESTIMATORS, METRICS)),
}


@pytest.mark.parametrize(("asset", "registries"), FOLLOWS.items())
def test_an_asset_that_reads_a_registry_carries_its_hash(asset, registries):
    version = defs.get_assets_def(AssetKey(asset)).code_versions_by_key[AssetKey(asset)]
    own, registry_hash = version.split("+")
    assert own.isdigit() and registry_hash == code_version(own, *registries).split("+")[1]
