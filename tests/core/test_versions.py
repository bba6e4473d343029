"""Code versions that follow the registries: a registry change changes the version of the assets
that read it, with no constant to bump; nothing else does, and the version is the same in every
process (no memory address in it)."""

import dataclasses
import subprocess
import sys

import pytest

from kcal_pipeline.core.versions import code_version
from kcal_pipeline.estimation.registry import ESTIMATORS, register
from kcal_pipeline.evaluation.registry import METRICS


def _new_estimator(cube, reduction):
    return None


def _other_estimator(cube, reduction):
    return 1


@pytest.fixture
def estimators(monkeypatch):
    """A copy of the estimator registry that `register` adds to, for this test only."""
    copy = dict(ESTIMATORS)
    monkeypatch.setattr("kcal_pipeline.estimation.registry.ESTIMATORS", copy)
    return copy


def test_registering_an_estimator_changes_the_version(estimators):
    before = code_version("7", estimators)
    register("test_new", label="New", family="test")(_new_estimator)
    assert code_version("7", estimators) != before


def test_a_changed_entry_changes_the_version(estimators):
    before = code_version("7", estimators)
    name = next(iter(estimators))
    estimators[name] = dataclasses.replace(estimators[name], reductions=("sum", "mean"))
    changed = code_version("7", estimators)
    estimators[name] = dataclasses.replace(estimators[name], fn=_other_estimator)
    assert len({before, changed, code_version("7", estimators)}) == 3


def test_a_changed_function_source_changes_the_version():
    registry = {"x": _new_estimator}
    before = code_version("1", registry)
    assert code_version("1", {"x": _other_estimator}) != before  # same name and fields, other code
    assert code_version("1", dict(registry)) == before


def test_the_hand_version_counts_and_a_change_elsewhere_does_not(estimators):
    before = code_version("7", estimators)
    assert code_version("8", estimators) != before
    metrics = dict(METRICS)
    metrics.pop(next(iter(metrics)))  # another registry changed: a version that follows it changes
    assert code_version("7", metrics) != code_version("7", METRICS)
    assert code_version("7", estimators) == before  # one that does not, does not


def test_the_version_is_the_same_in_another_process():
    script = (
        "from kcal_pipeline.core.versions import code_version\n"
        "from kcal_pipeline.estimation.registry import ESTIMATORS\n"
        "from kcal_pipeline.evaluation.registry import METRICS\n"
        "print(code_version('6', ESTIMATORS, METRICS))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == code_version("6", ESTIMATORS, METRICS)
