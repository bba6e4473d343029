"""A failing check blocks what reads the bad partition: a real scoring run (the embedded SmolLM2,
a real Dagster instance) whose scores carry one NaN, as a half-precision overflow would give.

The model cannot be made to overflow on demand, so the scorer's output is altered after it ran;
everything else is the stage job `kcal demo` runs (statement_scores, its checks, then estimates).
"""

import math

import pytest
from dagster import DagsterInstance, MultiPartitionKey

from assets.definitions import STAGE_ASSETS
from assets.runner import run_stage
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.scoring import engine as engine_mod
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from resources import default_resources
from tests.scoring.test_scoring_engine import STATEMENTS

pytestmark = pytest.mark.integration
DIMS = {"model": DEFAULT_MODEL.key, "relation": "P36"}


def test_a_nan_score_fails_its_check_and_estimates_never_run(tmp_path, monkeypatch):
    original = engine_mod.score_statements

    def overflowing(loaded, chunk, options, progress=None):
        scored = original(loaded, chunk, options, progress=progress)
        return scored.with_columns(scored["ll_sum"].scatter(0, math.nan))

    monkeypatch.setattr(engine_mod, "score_statements", overflowing)
    write_parquet_atomic(STATEMENTS, partition_path(tmp_path, "statements", {"relation": "P36"}))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [DIMS["model"]])
    instance.add_dynamic_partitions("relation", ["P36"])
    resources = default_resources(home=str(tmp_path))
    with pytest.raises(Exception, match="log_likelihoods_are_finite"):
        run_stage(instance, resources, STAGE_ASSETS["scoring"], MultiPartitionKey(DIMS))
    (run,) = instance.get_runs()
    events = [e.dagster_event for e in instance.all_logs(run.run_id) if e.dagster_event]
    started = {e.step_key for e in events if e.event_type_value == "STEP_START"}
    assert "statement_scores" in started and "estimates" not in started  # blocked, not failed
    (check,) = [
        e.event_specific_data
        for e in events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
        and e.event_specific_data.check_name == "log_likelihoods_are_finite"
    ]
    assert not check.passed and check.description == "1 NaN ll_sum"
    assert partition_path(tmp_path, "statement_scores", DIMS).exists()  # kept, to be looked at
    assert not partition_path(tmp_path, "estimates", DIMS).exists()
