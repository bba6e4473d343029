"""A `kcal demo` killed with SIGKILL leaves its Dagster run "started" for ever; with the scoring
pool counted per run, such a run would hold the pool and keep the UI's scoring runs queued. The
next kcal run marks it failed, and only it: a live process's run and another host's are kept."""

import socket
import subprocess

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

from assets.run_records import fail_abandoned_runs
from assets.run_tags import LEGACY_RUNNER_TAGS, RUNNER_HOST_TAG, RUNNER_PID_TAG


def started_run(instance, run_id: str, pid: int, host: str | None = None) -> None:
    tags = {RUNNER_HOST_TAG: host or socket.gethostname(), RUNNER_PID_TAG: str(pid)}
    instance.add_run(
        DagsterRun(job_name="scoring", run_id=run_id, status=DagsterRunStatus.STARTED, tags=tags)
    )


def test_only_the_runs_of_gone_kcal_processes_on_this_host_are_failed():
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names no process
    alive = subprocess.Popen(["sleep", "60"])
    try:
        instance = DagsterInstance.ephemeral()
        started_run(instance, "killed", gone.pid)
        started_run(instance, "running", alive.pid)
        started_run(instance, "elsewhere", gone.pid, host="another-host")
        assert fail_abandoned_runs(instance) == ["killed"]
        status = {run.run_id: run.status for run in instance.get_runs()}
        assert status == {
            "killed": DagsterRunStatus.FAILURE,
            "running": DagsterRunStatus.STARTED,
            "elsewhere": DagsterRunStatus.STARTED,
        }
        assert fail_abandoned_runs(instance) == []
    finally:
        alive.kill()
        alive.wait()


def test_a_run_left_by_an_older_kcal_under_the_visible_tags_is_failed_too():
    """Before the tags were hidden they were `kcal/host` and `kcal/pid`: a store upgraded with such
    a stuck run would otherwise keep it "started" for ever."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    instance = DagsterInstance.ephemeral()
    (host_tag, pid_tag), *_ = LEGACY_RUNNER_TAGS
    tags = {host_tag: socket.gethostname(), pid_tag: str(gone.pid)}
    instance.add_run(DagsterRun(job_name="scoring", run_id="old", status=DagsterRunStatus.STARTED, tags=tags))
    started_run(instance, "new", gone.pid)
    assert sorted(fail_abandoned_runs(instance)) == ["new", "old"]
    assert {run.status for run in instance.get_runs()} == {DagsterRunStatus.FAILURE}
