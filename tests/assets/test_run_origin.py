"""CLI runs on the UI's Overview timeline: a run that `kcal demo` starts in-process is returned by
the GraphQL query the timeline issues, with the origin the timeline groups runs by (it drops runs
without one) naming a job of kcal's code location as the workspace loads it."""

import time

import pytest
from dagster import DagsterRunStatus
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from assets.jobs import CODE_LOCATION, IN_CODE_LOCATION, REPOSITORY
from assets.run_records import code_location_origin
from assets.runner import get_instance, run_stage
from assets.ui import WORKSPACE
from resources import default_resources

pytestmark = pytest.mark.integration
# The Overview timeline's query of finished runs, as the UI sends it (Dagster 1.13.27,
# ui-core/src/runs/useRunsForTimeline.tsx COMPLETED_RUN_TIMELINE_QUERY with its fragments).
COMPLETED_RUN_TIMELINE_QUERY = """
query CompletedRunTimelineQuery($completedFilter: RunsFilter!, $limit: Int!, $cursor: String) {
  completed: runsOrError(filter: $completedFilter, limit: $limit, cursor: $cursor) {
    ... on Runs { results { id ...RunTimelineFragment } }
  }
}
fragment RunTimelineFragment on Run {
  id
  pipelineName
  externalJobSource
  tags { key value }
  repositoryOrigin { id repositoryName repositoryLocationName }
  ...RunTimeFragment
}
fragment RunTimeFragment on Run { id status creationTime startTime endTime updateTime }
"""
# The jobs of the workspace the timeline lays its rows out by (the same hook's FUTURE_TICKS_QUERY,
# without the schedules' ticks).
WORKSPACE_JOBS_QUERY = """
query WorkspaceJobs {
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          ... on RepositoryLocation { name repositories { name pipelines { name isJob } } }
          ... on PythonError { message }
        }
      }
    }
  }
}
"""


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return get_instance(tmp_path / "kcal")


def test_a_cli_run_is_on_the_overview_timeline_under_its_job_of_the_code_location(tmp_path, instance):
    before = time.time()
    result = run_stage(instance, default_resources(home=str(tmp_path / "kcal")), ["metric_catalog"])
    run = instance.get_run_by_id(result.run_id)
    assert run.status == DagsterRunStatus.SUCCESS
    # the tags that say who started the run and what it did, the repository label, and now the
    # code location's own tag (under "View all tags" in the UI, as on runs the UI launches)
    assert run.tags["kcal/source"] == "kcal (CLI)" and run.tags["kcal/assets"] == "metric_catalog"
    assert run.tags.items() >= {**IN_CODE_LOCATION, "dagster/code_location": CODE_LOCATION}.items()
    # the instance creates runs without an origin again once the CLI run exists
    assert "create_run_for_job" not in vars(instance)

    with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(WORKSPACE)])) as process:
        context = process.create_request_context()
        filters = {"statuses": ["FAILURE", "SUCCESS", "CANCELED"]}
        filters |= {"updatedAfter": before - 1, "updatedBefore": time.time() + 1}
        variables = {"completedFilter": filters, "limit": 500, "cursor": None}
        completed = execute_dagster_graphql(context, COMPLETED_RUN_TIMELINE_QUERY, variables)
        (entry,) = completed.data["completed"]["results"]
        assert entry["id"] == run.run_id and entry["pipelineName"] == "dataset"
        origin = entry["repositoryOrigin"]
        assert (origin["repositoryLocationName"], origin["repositoryName"]) == (CODE_LOCATION, REPOSITORY)

        # the timeline's row of the run: the job of that name in that location's repository
        workspace = execute_dagster_graphql(context, WORKSPACE_JOBS_QUERY).data["workspaceOrError"]
        jobs = {
            (entry["name"], repository["name"], job["name"])
            for entry in workspace["locationEntries"]
            for repository in entry["locationOrLoadError"]["repositories"]
            for job in repository["pipelines"]
        }
        assert (CODE_LOCATION, REPOSITORY, "dataset") in jobs


def test_without_the_workspace_file_the_origin_names_the_same_code_location(tmp_path):
    """An installed kcal has no workspace.yaml: its runs still name the location the UI loads."""
    from_workspace = code_location_origin(WORKSPACE)
    from_module = code_location_origin(tmp_path / "workspace.yaml")
    for origin in (from_workspace, from_module):
        assert (origin.code_location_origin.location_name, origin.repository_name) == (
            CODE_LOCATION,
            REPOSITORY,
        )
    module = [
        o.code_location_origin.loadable_target_origin.module_name for o in (from_workspace, from_module)
    ]
    assert module == ["assets.definitions", "assets.definitions"]
