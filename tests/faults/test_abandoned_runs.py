"""A `kcal demo` killed with SIGKILL leaves its Dagster run "started" for ever; with the scoring
pool counted per run, such a run would hold the pool and keep the UI's scoring runs queued. The
next kcal run marks it failed, and only it: a live process's run and another host's are kept."""

import socket
import subprocess

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

from assets.runner import fail_abandoned_runs


def started_run(instance, run_id: str, pid: int, host: str | None = None) -> None:
    tags = {"kcal/host": host or socket.gethostname(), "kcal/pid": str(pid)}
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
