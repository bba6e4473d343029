"""One list of stages: the asset groups. The runner's steps and the jobs are derived from the asset
graph, so they cover every asset once, in dependency order, and a job never mixes partitions."""

from pathlib import Path

import pytest
from dagster import AssetKey, asset
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph

import assets.runner as runner
from assets.definitions import STAGE_ASSETS, all_assets, defs
from assets.jobs import ON_DEMAND, stage_jobs, stage_partitions
from assets.partitions import model_partitions, relation_partitions
from assets.run_tags import STAGE_TAG
from assets.runner import CROSS_MODEL, STAGE_OF, STAGES, RunContext, Step, derive_steps


def test_the_steps_cover_every_asset_once_each_after_its_upstream_assets():
    graph = defs.resolve_asset_graph()
    order = [a for step in STAGES for a in step.assets]
    on_demand = {a for stage in ON_DEMAND for a in STAGE_ASSETS[stage]}
    every = [k.to_user_string() for k in graph.toposorted_asset_keys]
    assert sorted(order) == sorted(a for a in every if a not in on_demand) and on_demand
    position = {a: i for i, a in enumerate(order)}
    for name in order:
        for parent in graph.get(AssetKey(name)).parent_keys:
            assert position[parent.to_user_string()] < position[name], (parent, name)


def test_each_step_is_one_stage_of_one_partition_kind_and_cross_model_runs_last():
    pdefs = stage_partitions(all_assets)
    for step in STAGES:
        (stage,) = {STAGE_OF[a] for a in step.assets}
        assert runner.partition_kind(pdefs[stage]) == step.kind, step
    assert STAGES[-2:] == [Step("none", ("family_comparison",)), Step("none", ("cross_model_report",))]
    assert {"family_comparison", "cross_model_report"} == CROSS_MODEL
    assert [kind for kind, _ in STAGES[:3]] == ["none", "all_relations", "none"]  # tests/conftest.py


def test_the_jobs_are_the_groups_the_ui_lists_each_of_one_partitions_definition():
    jobs = {job.name: job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")}
    groups = {spec.group_name for spec in defs.resolve_all_asset_specs()}
    assert set(jobs) == groups | {"kcal_scoring_celery"}
    for name in groups:
        selected = jobs[name].asset_layer.selected_asset_keys
        assert {k.to_user_string() for k in selected} == set(STAGE_ASSETS[name])
        specs = [s for s in defs.resolve_all_asset_specs() if s.key in selected]
        assert len({s.partitions_def for s in specs}) == 1, name
        assert jobs[name].tags[STAGE_TAG] == name


def test_what_runs_only_on_demand_says_so_and_names_a_command_the_cli_accepts():
    """Issue 34 #14: a never-run optional job or asset must not look like a broken pipeline."""
    import re
    import shlex

    from assets.cli import build_parser

    jobs = {job.name: job for job in defs.resolve_all_job_defs()}
    spec = next(s for s in defs.resolve_all_asset_specs() if s.key == AssetKey("generated_templates"))
    descriptions = {name: jobs[name].description for name in [*ON_DEMAND, "kcal_scoring_celery"]}
    descriptions["generated_templates"] = spec.description
    for name, text in descriptions.items():
        assert "Optional" in text, name
        if name == "kcal_scoring_celery":
            assert "deploy/celery/" in text
            continue
        commands = re.findall(r"`(kcal [^`]+)`", text)
        assert commands, name
        for command in commands:
            build_parser().parse_args(shlex.split(command)[1:])  # exits (SystemExit) if not a command


def test_a_group_that_mixes_partitions_definitions_is_refused():
    @asset(group_name="mixed", partitions_def=relation_partitions)
    def per_relation(): ...

    @asset(group_name="mixed", partitions_def=model_partitions)
    def per_model(): ...

    with pytest.raises(ValueError, match="'mixed' mixes partitions definitions"):
        stage_jobs([per_relation, per_model])


def test_a_new_asset_joins_its_stage_and_the_run_order_without_a_list_edit():
    @asset(group_name="dataset", deps=["templates"])
    def template_lengths(): ...

    @asset(group_name="cross_model", deps=["report"])
    def every_report(): ...

    graph = AssetGraph.from_assets([*all_assets, template_lengths, every_report])
    declared = [*runner.source_order(all_assets), "template_lengths", "every_report"]
    steps, cross_model = derive_steps(graph, declared)
    first = ("estimator_catalog", "metric_catalog", "relations", "templates", "template_lengths")
    assert steps[0] == Step("none", first)
    assert [step.assets for step in steps[-3:]] == [
        ("family_comparison",),
        ("cross_model_report",),
        ("every_report",),
    ]
    assert cross_model == CROSS_MODEL | {"every_report"}


class FakeRuns:
    """run_stage and is_up_to_date replaced: nothing is up to date, and the runs of the assets in
    `failing` (for that partition) raise."""

    def __init__(self, failing: dict[str, str]):
        self.failing, self.runs = failing, []

    def run_stage(self, instance, resources, assets, partition_key=None):
        self.runs.append((STAGE_OF[assets[0]], str(partition_key)))
        if str(partition_key) in self.failing.get(assets[0], ()):
            raise RuntimeError(f"{assets[0]} broke")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    def install(failing):
        runs = FakeRuns(failing)
        monkeypatch.setattr(runner, "run_stage", runs.run_stage)
        monkeypatch.setattr(runner, "is_up_to_date", lambda *a: False)
        monkeypatch.setattr(runner, "_upstream_files", lambda *a: [Path("exists")])
        monkeypatch.setattr(runner, "refresh_views", lambda home: None)
        monkeypatch.setattr(runner, "relation_ids", lambda: ["P36", "P30"])
        context = RunContext(tmp_path, ("a", "b"), ("P36",), {}, instance=None, log=lambda m: None)
        return runs.runs, runner._run_stages(context)

    return install


def test_a_failed_scoring_blocks_its_estimation_and_model_and_the_other_model_goes_on(fake):
    runs, summary = fake({"statement_scores": {"a|P36"}})
    assert [str(f) for f in summary.failed] == [
        "statement_scores, estimates, option_estimates, estimator_fits, estimator_status "
        "[model a, relation P36]: RuntimeError: statement_scores broke",
        "metrics, metric_differences, curves, decision_thresholds, consistency, report [model a]: "
        "not run: 1 partition(s) of this model failed",
    ]
    assert ("estimation", "a|P36") not in runs and ("evaluation", "a") not in runs
    assert runs[-4:] == [
        ("estimation", "b|P36"),
        ("evaluation", "b"),
        ("cross_model", "None"),
        ("cross_model", "None"),
    ]
    assert [stage for stage, _ in runs[:6]] == ["dataset", "facts", "facts", "dataset", "probe", "dataset"]


@pytest.mark.parametrize(
    ("stale", "todo"),
    [
        ({"curves"}, ["curves", "report"]),  # report reads curves; its siblings are left alone
        ({"metric_differences"}, ["metric_differences"]),  # the multi-asset materializes a part
        ({"dropped_facts"}, ["wikidata_facts", "dropped_facts"]),  # this one cannot
        (set(), []),
    ],
)
def test_a_step_recomputes_what_is_stale_and_what_reads_it(monkeypatch, tmp_path, stale, todo):
    monkeypatch.setattr(runner, "is_up_to_date", lambda home, asset, dims, resources: asset not in stale)
    context = RunContext(tmp_path, ("a",), ("P36",), {}, instance=None)
    step = next(s for s in STAGES if stale & set(s.assets)) if stale else STAGES[0]
    assert runner._todo(context, step, {}) == todo
    assert runner._todo(RunContext(tmp_path, (), (), {}, None, refresh=True), step, {}) == list(step.assets)


def test_a_model_that_fails_to_load_is_one_line_per_stage_kind_and_not_retried(monkeypatch):
    from kcal_pipeline.scoring.models import ModelLoadError

    class Broken(FakeRuns):
        def run_stage(self, instance, resources, assets, partition_key=None):
            self.runs.append((STAGE_OF[assets[0]], str(partition_key)))
            if str(partition_key).startswith("a|"):
                raise ModelLoadError("no config")

    runs = Broken({})
    monkeypatch.setattr(runner, "run_stage", runs.run_stage)
    monkeypatch.setattr(runner, "is_up_to_date", lambda *a: False)
    monkeypatch.setattr(runner, "_upstream_files", lambda *a: [Path("exists")])
    monkeypatch.setattr(runner, "refresh_views", lambda home: None)
    context = RunContext(Path("."), ("a", "b"), ("P36", "P30"), {}, instance=None, log=lambda m: None)
    summary = runner._run_stages(context)
    assert [(f.assets[0], f.model, f.relation, f.error.split(":")[0]) for f in summary.failed] == [
        ("statement_scores", "a", "P36", "ModelLoadError"),
        ("statement_scores", "a", "P30", "not run"),  # the model is not loaded again
        ("metrics", "a", None, "not run"),
    ]
    assert [r for r in runs.runs if r[1].startswith("a")] == [("scoring", "a|P36")]
