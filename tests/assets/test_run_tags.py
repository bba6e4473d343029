"""kcal's bookkeeping run tags (assets/run_tags.py) are hidden from the UI yet still select runs:
Dagster accepts them on a run, RunsFilter finds runs by them (what fail_abandoned_runs does), and
the webserver's GraphQL API leaves them out of a run's tags."""

from dagster import DagsterInstance, RunsFilter, job, op
from dagster._core.storage.tags import TagType, get_tag_type
from dagster_graphql.schema.pipelines.pipeline import GrapheneRun

from assets.run_tags import RUNNER_HOST_TAG, RUNNER_PID_TAG, STAGE_TAG


@op
def nothing() -> None:
    pass


@job(tags={STAGE_TAG: "scoring"})
def tagged() -> None:
    nothing()


def test_hidden_tags_select_runs_but_the_ui_never_gets_them():
    instance = DagsterInstance.ephemeral()
    tags = {RUNNER_HOST_TAG: "host-a", RUNNER_PID_TAG: "4242", "kcal/source": "kcal (CLI)"}
    run_id = tagged.execute_in_process(instance=instance, tags=tags).run_id
    tagged.execute_in_process(instance=instance, tags={**tags, RUNNER_HOST_TAG: "host-b"})

    found = instance.get_runs(filters=RunsFilter(tags={RUNNER_HOST_TAG: "host-a"}))
    assert [run.run_id for run in found] == [run_id]
    assert found[0].tags[RUNNER_PID_TAG] == "4242" and found[0].tags[STAGE_TAG] == "scoring"

    for key in (RUNNER_HOST_TAG, RUNNER_PID_TAG, STAGE_TAG):
        assert get_tag_type(key) == TagType.HIDDEN, key
    shown = {tag.key for tag in GrapheneRun(instance.get_run_record_by_id(run_id)).resolve_tags(None)}
    assert "kcal/source" in shown and not shown & {RUNNER_HOST_TAG, RUNNER_PID_TAG, STAGE_TAG}
