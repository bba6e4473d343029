"""A check is evaluated after the materialization it checks, in a real run (the embedded SmolLM2
scoring a few statements, a real Dagster instance), and its description says why the UI's check
page nonetheless shows an earlier "Timestamp"."""

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, MultiPartitionKey

from assets.checks import ASSET_CHECKS, TIMESTAMP_NOTE
from assets.runner import run_stage
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from resources import default_resources
from tests.scoring.test_scoring_engine import STATEMENTS

pytestmark = pytest.mark.integration
DIMS = {"model": DEFAULT_MODEL.key, "relation": "P36"}


def test_each_check_is_evaluated_after_the_materialization_it_checks(tmp_path):
    write_parquet_atomic(STATEMENTS, partition_path(tmp_path, "statements", {"relation": "P36"}))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [DIMS["model"]])
    instance.add_dynamic_partitions("relation", ["P36"])
    result = run_stage(
        instance, default_resources(home=str(tmp_path)), ["statement_scores"], MultiPartitionKey(DIMS)
    )
    assert result.success

    (materialized,) = instance.fetch_materializations(AssetKey("statement_scores"), limit=10).records
    logs = instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = {log.dagster_event.event_specific_data.check_name: log for log in logs}
    assert set(evaluations) == {"log_likelihoods_are_finite", "one_score_per_statement"}
    for name, evaluation in evaluations.items():
        data = evaluation.dagster_event.event_specific_data
        assert data.passed, name
        assert evaluation.timestamp >= materialized.timestamp, name
        assert data.target_materialization_data.storage_id == materialized.storage_id, name
        # the time the UI's check page shows: the check's record, made when the run was created
        (record,) = instance.event_log_storage.get_asset_check_execution_history(
            data.asset_check_key, limit=5
        )
        assert record.create_timestamp <= materialized.timestamp


def test_every_check_description_explains_the_timestamp_the_ui_shows():
    specs = [spec for checks in ASSET_CHECKS for spec in checks.check_specs]
    assert len(specs) == 10
    for spec in specs:
        first, note = spec.description.split("\n\n")
        assert first and note == TIMESTAMP_NOTE, spec.name
