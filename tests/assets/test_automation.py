"""Declarative automation on the real Definitions and a real (ephemeral) Dagster instance.

Runs are simulated: an upstream change is a runless materialization event, and a requested
partition "runs" by recording its materialization, so the conditions are exercised without
scoring anything.
"""

import warnings

import pytest
from dagster import (
    AssetMaterialization,
    DagsterInstance,
    Definitions,
    MultiPartitionKey,
    evaluate_automation_conditions,
    map_asset_specs,
)
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from assets.automation import AUTOMATED
from assets.definitions import all_assets, defs

ESTIMATION = ("estimates", "option_estimates", "estimator_fits", "estimator_status")  # one multi-asset
SCORING = ("statement_scores", *ESTIMATION)
PER_MODEL = ("metrics", "metric_differences", "curves", "decision_thresholds", "consistency", "report")
# family_comparison and cross_model_report read every model's metrics: requested the tick after they change
CROSS_MODEL = {"family_comparison": {None}, "cross_model_report": {None}}


def mr(model: str, relation: str) -> str:
    return str(MultiPartitionKey({"model": model, "relation": relation}))


class Automation:
    """An instance plus the automation cursor, evaluated tick by tick like the sensor does."""

    def __init__(self, definitions=defs):
        self.instance = DagsterInstance.ephemeral()
        self.defs = definitions
        self.cursor = None
        self.versions = 0

    def add_models(self, *keys: str) -> None:
        self.instance.add_dynamic_partitions("model", list(keys))

    def materialize(self, asset: str, *partitions, version: str | None = None) -> None:
        """A simulated run: by default each materialization has new content (a new data version,
        as kcal's IO manager records it); `version` repeats a given one (a rerun that changed nothing)."""
        if asset == "probe_instances":  # a probe joins the relation partitions, as the runner does
            known = set(self.instance.get_dynamic_partitions("relation"))
            self.instance.add_dynamic_partitions("relation", [p for p in partitions if p not in known])
        for partition in partitions or [None]:
            self.versions += 1
            tags = {DATA_VERSION_TAG: version or f"v{self.versions}"}
            self.instance.report_runless_asset_event(
                AssetMaterialization(asset, partition=partition, tags=tags)
            )

    def tick(self, run: bool = True) -> dict[str, set]:
        """One evaluation: the requested partitions by asset; with run, they then materialize."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = evaluate_automation_conditions(self.defs, self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        requested = {key.to_user_string(): set(result.get_requested_partitions(key)) for key in AUTOMATED}
        requested = {asset: parts for asset, parts in requested.items() if parts}
        if run:
            for asset in [k.to_user_string() for k in AUTOMATED]:  # dependency order
                if asset in requested:  # (an unrequested unpartitioned asset must not "run")
                    self.materialize(asset, *sorted(requested[asset], key=str))
        return requested


def scoring(*partitions: str) -> dict[str, set]:
    return {asset: set(partitions) for asset in SCORING}


def per_model(*models: str) -> dict[str, set]:
    return {asset: set(models) for asset in PER_MODEL}


@pytest.fixture
def up_to_date():
    """Model A scored on P36 and P30 (statements exist for those two relations only)."""
    auto = Automation()
    auto.add_models("A")
    auto.materialize("relations")
    auto.materialize("templates")
    auto.materialize("probe_instances", "P36", "P30")
    auto.materialize("statements", "P36", "P30")
    assert auto.tick() == scoring(mr("A", "P36"), mr("A", "P30"))  # the backlog, on the first tick
    assert auto.tick() == per_model("A")  # after the scores exist, in a run of their own
    assert auto.tick() == CROSS_MODEL  # after the metrics exist
    assert auto.tick() == {}
    return auto


def test_only_assets_downstream_of_the_model_are_automated():
    graph = defs.resolve_asset_graph()
    automated = {k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).automation_condition}
    assert automated == set(SCORING + PER_MODEL) | set(CROSS_MODEL)


def test_nothing_is_requested_when_everything_is_up_to_date(up_to_date):
    assert up_to_date.tick() == {}
    assert up_to_date.tick() == {}


def test_a_first_tick_on_an_up_to_date_instance_requests_nothing():
    auto = Automation()
    auto.add_models("A")
    auto.materialize("relations")
    auto.materialize("templates")
    auto.materialize("probe_instances", "P36")
    auto.materialize("statements", "P36")
    for asset in SCORING:
        auto.materialize(asset, mr("A", "P36"))
    for asset in PER_MODEL:
        auto.materialize(asset, "A")
    for asset in CROSS_MODEL:
        auto.materialize(asset)
    assert auto.tick() == {}


def test_a_new_model_gets_exactly_its_missing_partitions_removed_ones_nothing(up_to_date):
    up_to_date.add_models("B", "C")
    up_to_date.instance.delete_dynamic_partition("model", "C")  # registered, then removed again
    assert up_to_date.tick() == scoring(mr("B", "P36"), mr("B", "P30"))
    assert up_to_date.tick() == per_model("B")
    assert up_to_date.tick() == CROSS_MODEL
    assert up_to_date.tick() == {}


def test_rebuilt_statements_rescore_that_relation_for_every_model(up_to_date):
    up_to_date.add_models("B")
    up_to_date.tick(), up_to_date.tick(), up_to_date.tick()
    up_to_date.materialize("statements", "P36")  # e.g. new templates
    assert up_to_date.tick() == scoring(mr("A", "P36"), mr("B", "P36"))
    assert up_to_date.tick() == per_model("A", "B")
    assert up_to_date.tick() == CROSS_MODEL  # once, for both models' new metrics
    assert up_to_date.tick() == {}


def test_a_rerun_that_changed_nothing_triggers_nothing_downstream(up_to_date):
    """Estimates re-materialized with the data version they had (`file_changed` false) leave the
    model's metrics, curves and report alone; a new data version re-runs them."""
    for asset in ESTIMATION:
        up_to_date.materialize(asset, mr("A", "P36"), version="same")
    up_to_date.tick(), up_to_date.tick(), up_to_date.tick()  # the first "same" is new content
    assert up_to_date.tick() == {}
    for asset in ESTIMATION:
        up_to_date.materialize(asset, mr("A", "P36"), version="same")
    assert up_to_date.tick() == {}
    assert up_to_date.tick() == {}
    up_to_date.materialize("estimates", mr("A", "P36"), version="changed")
    assert up_to_date.tick() == per_model("A")


def test_new_statements_get_scored_relations_without_statements_never(up_to_date):
    up_to_date.materialize("probe_instances", "P37")
    up_to_date.materialize("statements", "P37")
    assert up_to_date.tick() == scoring(mr("A", "P37"))
    assert up_to_date.tick() == per_model("A")
    assert up_to_date.tick() == CROSS_MODEL
    assert up_to_date.tick() == {}


def test_requests_wait_for_inputs_and_are_not_repeated_while_unhandled():
    auto = Automation()
    auto.add_models("A")
    auto.materialize("probe_instances", "P36")
    auto.materialize("statements", "P36")  # templates are missing: estimates cannot run yet
    assert auto.tick(run=False) == {"statement_scores": {mr("A", "P36")}}
    assert auto.tick(run=False) == {}  # requested once; a failed run is not retried in a loop
    auto.materialize("statement_scores", mr("A", "P36"))
    assert auto.tick() == {}  # estimates read the templates' kinds; metrics, curves, report follow
    auto.materialize("relations")
    auto.materialize("templates")
    assert auto.tick() == {key: {mr("A", "P36")} for key in ESTIMATION}
    assert auto.tick() == per_model("A")
    assert auto.tick() == CROSS_MODEL
    assert auto.tick() == {}


def bumped(*assets: str) -> Definitions:
    """The same code location with a new code_version of some assets."""

    def bump(spec):
        return spec.replace_attributes(code_version="bumped") if spec.key.to_user_string() in assets else spec

    return Definitions(
        assets=map_asset_specs(bump, all_assets), sensors=defs.sensors, resources=defs.resources
    )


def test_a_code_version_change_refreshes_the_materialized_partitions_and_what_follows(up_to_date):
    up_to_date.defs = bumped("statement_scores")
    assert up_to_date.tick() == scoring(mr("A", "P36"), mr("A", "P30"))
    assert up_to_date.tick() == per_model("A")
    assert up_to_date.tick() == CROSS_MODEL
    assert up_to_date.tick() == {}
    up_to_date.defs = bumped("statement_scores", "report")
    assert up_to_date.tick() == {"report": {"A"}}
    assert up_to_date.tick() == {}
    up_to_date.defs = bumped("statement_scores", "report", "family_comparison", "cross_model_report")
    assert up_to_date.tick() == CROSS_MODEL
    assert up_to_date.tick() == {}


def test_the_nightly_evaluation_is_off_and_asks_only_for_models_with_new_estimates(up_to_date):
    from dagster import DefaultScheduleStatus

    from assets.schedules import models_with_new_estimates, nightly_evaluation

    assert nightly_evaluation.default_status == DefaultScheduleStatus.STOPPED
    assert (nightly_evaluation.job_name, nightly_evaluation.cron_schedule) == ("evaluation", "0 3 * * *")
    up_to_date.add_models("B")  # registered, never scored: nothing to evaluate
    assert models_with_new_estimates(up_to_date.instance) == []  # A is current
    up_to_date.materialize("estimates", mr("A", "P30"))  # new scores of A on P30
    assert models_with_new_estimates(up_to_date.instance) == ["A"]
    up_to_date.materialize("metrics", "A")
    assert models_with_new_estimates(up_to_date.instance) == []
