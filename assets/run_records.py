"""The records a CLI run leaves for others: which process ran it (so the next run can fail the runs
a killed kcal left "started") and which code location it belongs to (so the UI's timeline places
it as it places the runs it launched itself). Bookkeeping, kept apart from what the runner runs."""

import functools
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from assets.dagster_internals import repository_origin, runs_created_with_origin
from assets.jobs import CODE_LOCATION, DEFINITIONS_MODULE, REPOSITORY
from assets.run_tags import LEGACY_RUNNER_TAGS, RUNNER_HOST_TAG, RUNNER_PID_TAG
from assets.ui import WORKSPACE


def runner_tags() -> dict[str, str]:
    """This process's host and pid, as hidden tags (assets/run_tags.py): bookkeeping for
    fail_abandoned_runs, not something the runs list needs to show."""
    return {RUNNER_HOST_TAG: socket.gethostname(), RUNNER_PID_TAG: str(os.getpid())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def fail_abandoned_runs(instance: DagsterInstance) -> list[str]:
    """Mark failed the runs a killed kcal process left 'started' on this host (a SIGKILL gives it
    no chance to), so they neither show as running forever nor hold the scoring pool's slot that
    the UI's queued runs wait for. Returns their run ids. Runs of an older kcal carry the tags
    under their former visible names (LEGACY_RUNNER_TAGS): found the same way."""
    abandoned = []
    for host_tag, pid_tag in ((RUNNER_HOST_TAG, RUNNER_PID_TAG), *LEGACY_RUNNER_TAGS):
        stuck = instance.get_runs(
            filters=RunsFilter(
                statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING],
                tags={host_tag: socket.gethostname()},
            )
        )
        for run in stuck:
            pid = run.tags.get(pid_tag, "")
            if pid.isdigit() and not _alive(int(pid)):
                instance.report_run_failed(run, f"the kcal process (pid {pid}) that ran it is gone")
                abandoned.append(run)
    return [run.run_id for run in abandoned]


@functools.cache
def code_location_origin(workspace: Path = WORKSPACE):
    """The repository of kcal's code location as the UI knows it: the origin Dagster derives from
    workspace.yaml (the file `kcal ui` has `dagster dev` load), or, where kcal is installed without
    the repository's workspace.yaml, the same location made from its module."""
    return repository_origin(workspace, DEFINITIONS_MODULE, CODE_LOCATION, REPOSITORY)


@contextmanager
def runs_from_code_location(instance: DagsterInstance, job_name: str) -> Iterator[None]:
    """While it lasts, a run `instance` creates names `job_name` of kcal's code location as its
    origin, as a run the UI launched does.

    The UI's Overview timeline places a run by that origin (`Run.repositoryOrigin`, from the run's
    remote_job_origin) and leaves out runs without one, which `execute_in_process` creates: it has
    no workspace, takes no origin, and Dagster has no public way to give one: the private use that
    gives it is assets/dagster_internals.py runs_created_with_origin (tests/assets/test_run_origin.py
    notices a Dagster that creates the run otherwise)."""
    with runs_created_with_origin(instance, code_location_origin(), job_name):
        yield
