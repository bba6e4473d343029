"""The recipes for a new estimator and a new metric (docs/architecture.md, linked from the README) run as
written and do what they say."""

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation import ESTIMATORS, build_cube, compute_estimates
from kcal_pipeline.estimation.probabilities import option_probabilities
from kcal_pipeline.estimation.registry import Estimate, OptionScoreCube
from kcal_pipeline.estimation.registry import register as register_estimator
from kcal_pipeline.evaluation import METRICS, compute_metrics
from kcal_pipeline.evaluation.registry import register as register_metric
from kcal_pipeline.evaluation.segments import Segments

RECIPES = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text("utf-8")


def recipe(title: str) -> str:
    """The first python block after the bold recipe title."""
    after = RECIPES[RECIPES.index(f"**{title}**") :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


@pytest.fixture
def registered():
    """Run a recipe's code against the real registries, then take its names out again."""
    before_e, before_m = set(ESTIMATORS), set(METRICS)
    yield
    for name in set(ESTIMATORS) - before_e:
        del ESTIMATORS[name]
    for name in set(METRICS) - before_m:
        del METRICS[name]


def test_the_estimator_recipe(registered):
    namespace = {"np": np, "Estimate": Estimate, "OptionScoreCube": OptionScoreCube}
    namespace |= {"option_probabilities": option_probabilities, "register": register_estimator}
    exec(recipe("Add an estimator"), namespace)
    # one template; a: p = [0.5, 0.5] → C = 1 − 0.5/0.5 = 0; b: p = [0.25, 0.75] → option 1,
    # C = 1 − 0.25/0.75 = 2/3; c: p = [1 − ε, ε] (ll −inf is not allowed; ε = e^−60) → C ≈ 1;
    # d: one option, no runner-up → C = 1 − 0/1 = 1
    scores = pl.DataFrame(
        {
            "model_id": "m", "relation_id": "P1", "instance_id": ["a", "a", "b", "b", "c", "c", "d"],
            "template_id": "t", "option_index": [0, 1, 0, 1, 0, 1, 0],
            "object_id": ["x", "y", "x", "y", "x", "y", "x"], "is_gold": [True, False] * 3 + [True],
            "ll_sum": [-1.0, -1.0, np.log(0.25), np.log(0.75), 0.0, -60.0, -3.0],
        }
    ).with_columns(ll_mean=pl.col("ll_sum"))  # fmt: skip
    out = compute_estimates(build_cube(scores), ["top2_ratio"], log=lambda _: None)
    assert out["reduction"].to_list() == ["mean", "sum"] * 4
    assert out["predicted_index"].to_list() == [0, 0, 1, 1, 0, 0, 0, 0]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0, 0, 2 / 3, 2 / 3, 1, 1, 1, 1], atol=1e-12)


def test_the_metric_recipe(registered):
    namespace = {"np": np, "register": register_metric, "Segments": Segments}
    exec(recipe("Add a metric"), namespace)
    # 5 predictions: mean confidence (0.9 + 0.8 + 0.7 + 0.6 + 0.1)/5 = 0.62, accuracy 3/5 = 0.6 → 0.02;
    # P2 alone: mean 0.35 below its accuracy 0.5 → 0
    est = pl.DataFrame(
        {
            "model_id": "m", "estimator": "base", "relation_id": ["P1"] * 3 + ["P2"] * 2,
            "instance_id": list("abcde"),
            "confidence": [0.9, 0.8, 0.7, 0.6, 0.1], "correct": [True, True, False, True, False],
        }
    )  # fmt: skip
    out = compute_metrics(est, ["overconfidence"])
    row = out.filter(scope="all").row(0, named=True)
    assert row["value"] == pytest.approx(0.02) and row["higher_is_better"] is False
    assert out.filter(scope_value="P2")["value"].to_list() == [0.0]
