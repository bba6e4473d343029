"""Fixtures shared by the estimation tests."""

import pytest

from kcal_pipeline.estimation.registry import ESTIMATORS, register


@pytest.fixture
def temp_estimators():
    """Register test estimators with `register(...)`; they are removed from ESTIMATORS afterwards."""
    added = []

    def add(name, fn, **spec):
        register(name, label=name, family="test", **spec)(fn)
        added.append(name)

    yield add
    for name in added:
        ESTIMATORS.pop(name, None)
