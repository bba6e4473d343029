"""`kcal backfill` run by a real Dagster daemon, and the scoring pool: two backfills of one model
at once, on a store with a small probe (P36, 4 instances, 1 template), a temporary instance and
the embedded SmolLM2. Their scoring runs take turns (the pool's limit is 1) and both succeed."""

import os
import signal
import subprocess
import sys
import time

import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from tests.conftest import REPO, copy_facts_store, run_kcal

pytestmark = pytest.mark.integration
KEY = DEFAULT_MODEL.key
# The run queue's default 5 s poll, shortened as a user may in their own instance config.
QUEUE_EVERY_SECOND = """\
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""


@pytest.fixture
def store(tmp_path, monkeypatch, facts_store):
    """The probe scored once in-process (the stages up to scoring: the backfills then evaluate it)."""
    import assets.runner as runner

    home = copy_facts_store(facts_store, tmp_path / "kcal")
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    scoring = next(i for i, (_, assets) in enumerate(runner.STAGES) if "statement_scores" in assets)
    settings = {"max_instances": 4, "max_templates": 1, "answer_space_size_one_to_one": 8}
    with pytest.MonkeyPatch.context() as stages:
        stages.setattr(runner, "STAGES", runner.STAGES[: scoring + 1])
        assert not runner.run_missing(home, relations=["P36"], settings=settings, log=lambda m: None).failed
    return home


@pytest.fixture
def daemon(store):
    """`dagster-daemon run` on the store's instance, in its own process group; stopped after. Its
    backfill loop runs every 2 s and the run queue every second (tests/assets/daemon.py)."""
    from assets.instance import INSTANCE_CONFIG

    config = store / "dagster" / "dagster.yaml"
    config.write_text(f"{INSTANCE_CONFIG}{QUEUE_EVERY_SECOND}")
    env = {**os.environ, "DAGSTER_HOME": str(store / "dagster"), "KCAL_HOME": str(store)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.assets.daemon", "run", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    yield proc
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_two_backfills_of_one_model_take_turns_on_the_scoring_pool_and_both_succeed(store, daemon):
    from dagster import DagsterEventType, DagsterRunStatus

    from assets.runner import get_instance

    scores = partition_path(store, "statement_scores", {"model": KEY, "relation": "P36"})
    before = pl.read_parquet(scores)
    ids = []
    for _ in range(2):
        out = run_kcal(store, "backfill", "--model", KEY)
        assert out.returncode == 0, out.stderr
        assert f"{KEY} on P36, then its evaluation" in out.stdout
        ids.append(out.stdout.split()[1].rstrip(":"))
    instance = get_instance(store)
    active = {DagsterRunStatus.STARTING, DagsterRunStatus.STARTED}
    peak, deadline = 0, time.monotonic() + 900
    while time.monotonic() < deadline:
        runs = instance.get_runs()
        peak = max(peak, sum(1 for r in runs if r.run_op_concurrency and r.status in active))
        if all(instance.get_backfill(i).status.value.startswith("COMPLETED") for i in ids):
            break
        time.sleep(1)
    assert [instance.get_backfill(i).status.value for i in ids] == ["COMPLETED_SUCCESS"] * 2
    scoring_runs = [
        r for r in instance.get_runs() if r.run_op_concurrency and r.tags.get("dagster/backfill") in ids
    ]
    assert len(scoring_runs) == 2 and peak == 1  # one scoring run at a time
    # Each backfill ran each of its assets once (the daemon may split the evaluation over several
    # runs when a loop sees the scoring run's outputs stored one by one), scoring and evaluation.
    backfill_runs = [r for r in instance.get_runs() if r.tags.get("dagster/backfill") in ids]
    for backfill_id in ids:
        own = [r for r in backfill_runs if r.tags["dagster/backfill"] == backfill_id]
        ran = [key for r in own for key in r.asset_selection]
        assert len(ran) == len(set(ran)), ran
        assert set(ran) == set(instance.get_backfill(backfill_id).asset_selection)
        assert {"statement_scores", "metrics", "report"} <= {k.to_user_string() for k in ran}
    # Each run's steps ran in its own process (the code location's in-process executor), none in
    # a process of its own per step.
    per_step = DagsterEventType.STEP_WORKER_STARTING
    assert not [r.run_id for r in backfill_runs if instance.all_logs(r.run_id, of_type=per_step)]
    assert pl.read_parquet(scores).equals(before)  # rescored: the same rows, none twice


def test_a_models_backfill_leaves_the_on_demand_stages_out():
    """A backfill scores, estimates and evaluates; open answers (minutes of sampling, MACE relations
    only) run only when asked, so none of their assets is in it."""
    from assets.backfill import backfill_partitions

    assets = {pair.asset_key.to_user_string() for pair in backfill_partitions("m", ["P36", "mace-award"])}
    assert {"statement_scores", "estimates", "metrics", "report"} <= assets
    assert not assets & {"generations", "generation_estimates", "generation_metrics", "generated_templates"}
