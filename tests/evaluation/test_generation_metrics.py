"""Metrics of generation estimates and knowledge coverage on a hand-built two-relation frame, every
expected value computed by hand in the comments."""

import math

import polars as pl
import pytest

from kcal_pipeline.evaluation.generation import (
    ANSWERED_SHARE,
    COVERAGE_ESTIMATOR,
    GENERATED,
    GOLD_DOMAIN,
    GOLD_MACRO,
    MEAN_SCORE,
    coverage_metric,
    coverage_metrics,
    generation_metrics,
)
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA

RELATIONS = pl.DataFrame({"relation_id": ["mace-award", "mace-river"], "domain": ["mace", "mace"]})
# (relation, instance, n_gold, split)
INSTANCES = pl.DataFrame(
    [
        ("mace-award", "a1", 1, "test"),
        ("mace-award", "a2", 1, "test"),
        ("mace-award", "a3", 2, "test"),
        ("mace-award", "a4", 2, "test"),
        ("mace-award", "a5", 1, "dev"),
        ("mace-river", "r1", 1, "test"),
        ("mace-river", "r2", 2, "test"),
        ("mace-river", "r3", 2, "test"),
    ],
    schema=["relation_id", "instance_id", "n_gold", "split"],
    orient="row",
)
SPLIT = dict(zip(INSTANCES["instance_id"], INSTANCES["split"], strict=True))

# verb (probability): a4 is refused (no number parsed). Test split, answered rows:
#   a1 0.9 T | a2 0.4 F | a3 0.8 T | r1 0.6 F | r2 0.5 T | r3 0.2 F
VERB = {
    "a1": (0.9, True),
    "a2": (0.4, False),
    "a3": (0.8, True),
    "a4": (None, False),
    "a5": (0.3, True),
    "r1": (0.6, False),
    "r2": (0.5, True),
    "r3": (0.2, False),
}
# prob_entropy (score: mean log-probability), never refused
ENTROPY = {
    "a1": (-1.0, True),
    "a2": (-3.0, False),
    "a3": (-2.0, True),
    "a4": (-4.0, False),
    "a5": (-0.2, True),
    "r1": (-0.5, False),
    "r2": (-1.5, True),
    "r3": (-2.5, False),
}


def estimates_of(estimator: str, output_kind: str, values: dict) -> pl.DataFrame:
    rows = [
        (
            "m",
            "mace-award" if i.startswith("a") else "mace-river",
            i,
            SPLIT[i],
            estimator,
            output_kind,
            None if c is None else "Q1",
            y,
            c,
            "no_number" if c is None else None,
        )
        for i, (c, y) in values.items()
    ]
    columns = [
        "model_id",
        "relation_id",
        "instance_id",
        "split",
        "estimator",
        "output_kind",
        "predicted_id",
        "correct",
        "confidence",
        "refusal",
    ]
    schema = dict.fromkeys(columns, pl.String) | {"correct": pl.Boolean, "confidence": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


@pytest.fixture(scope="module")
def metrics() -> pl.DataFrame:
    estimates = pl.concat(
        [estimates_of("verb", "probability", VERB), estimates_of("prob_entropy", "score", ENTROPY)]
    )
    return generation_metrics(estimates, INSTANCES, RELATIONS)


def value(
    metrics: pl.DataFrame, estimator: str, scope: str, scope_value: str, metric: str, split: str = "test"
):
    rows = metrics.filter(
        (pl.col("estimator") == estimator)
        & (pl.col("split") == split)
        & (pl.col("scope") == scope)
        & (pl.col("scope_value") == scope_value)
        & (pl.col("metric") == metric)
    )
    assert rows.height == 1, (estimator, scope, scope_value, metric, rows)
    return rows["value"][0], rows["n"][0]


@pytest.mark.parametrize(
    ("scope", "scope_value", "metric", "expected", "n"),
    [
        # all: 3 of 6 answered correct; mean (0.9+0.4+0.8+0.6+0.5+0.2)/6 = 3.4/6
        ("all", "all", "accuracy", 0.5, 6),
        ("all", "all", "mean_confidence", 3.4 / 6, 6),
        # positives 0.9, 0.8, 0.5 against negatives 0.4, 0.6, 0.2: 3 + 3 + 2 (0.5 < 0.6) of 9 pairs
        ("all", "all", "auroc", 8 / 9, 6),
        # (0.1² + 0.4² + 0.2² + 0.6² + 0.5² + 0.2²) / 6 = 0.86 / 6
        ("all", "all", "brier", 0.86 / 6, 6),
        # gold count 1, pooled: a1 0.9 T, a2 0.4 F, r1 0.6 F
        ("n_gold", "1", "accuracy", 1 / 3, 3),
        ("n_gold", "1", "mean_confidence", 1.9 / 3, 3),
        ("n_gold", "1", "auroc", 1.0, 3),
        ("n_gold", "1", "brier", (0.01 + 0.16 + 0.36) / 3, 3),
        # gold count 2, pooled: a3 0.8 T, r2 0.5 T, r3 0.2 F (a4 refused)
        ("n_gold", "2", "accuracy", 2 / 3, 3),
        ("n_gold", "2", "mean_confidence", 1.5 / 3, 3),
        ("n_gold", "2", "auroc", 1.0, 3),
        ("n_gold", "2", "brier", (0.04 + 0.25 + 0.04) / 3, 3),
        # gold count per relation, then macro: 1a = mean(award {a1, a2}: 0.5, river {r1}: 0.0)
        (GOLD_DOMAIN, "1|mace-award", "accuracy", 0.5, 2),
        (GOLD_DOMAIN, "1|mace-river", "mean_confidence", 0.6, 1),
        (GOLD_MACRO, "1", "accuracy", (0.5 + 0.0) / 2, 3),
        (GOLD_MACRO, "1", "mean_confidence", (0.65 + 0.6) / 2, 3),
        # 2a: award {a3}: acc 1, conf 0.8; river {r2, r3}: acc 0.5, conf 0.35
        (GOLD_MACRO, "2", "accuracy", (1.0 + 0.5) / 2, 3),
        (GOLD_MACRO, "2", "mean_confidence", (0.8 + 0.35) / 2, 3),
        # Brier 2a: award 0.2² = 0.04, river (0.5² + 0.2²)/2 = 0.145
        (GOLD_MACRO, "2", "brier", (0.04 + 0.145) / 2, 3),
        # the {1, 2} mixture, macro over domains: award {a1, a2, a3} acc 2/3, conf 2.1/3, AUROC 1
        # (0.9, 0.8 vs 0.4); river {r1, r2, r3} acc 1/3, conf 1.3/3, AUROC 1/2 (0.5 vs 0.6, 0.2)
        ("mixture", "1,2", "accuracy", (2 / 3 + 1 / 3) / 2, 6),
        ("mixture", "1,2", "mean_confidence", (2.1 / 3 + 1.3 / 3) / 2, 6),
        ("mixture", "1,2", "auroc", (1.0 + 0.5) / 2, 6),
        ("mixture", "1,2,4,6", "auroc", 0.75, 6),
        # answered / all instances: a4 is the one refusal
        ("all", "all", ANSWERED_SHARE, 6 / 7, 7),
        ("relation", "mace-award", ANSWERED_SHARE, 3 / 4, 4),
        ("n_gold", "2", ANSWERED_SHARE, 3 / 4, 4),
        (GOLD_DOMAIN, "2|mace-award", ANSWERED_SHARE, 1 / 2, 2),
        (GOLD_MACRO, "2", ANSWERED_SHARE, (1 / 2 + 1) / 2, 4),
        ("mixture", "1,2", ANSWERED_SHARE, (3 / 4 + 3 / 3) / 2, 7),
    ],
)
def test_probability_estimator_by_hand(metrics, scope, scope_value, metric, expected, n):
    got, got_n = value(metrics, "verb", scope, scope_value, metric)
    assert got == pytest.approx(expected)
    assert got_n == n


def test_refused_rows_are_left_out_of_the_metrics_and_counted(metrics):
    # award's 2-gold questions: a3 (0.8, correct) answered, a4 refused. Counted as a wrong answer at
    # confidence 0 it would give accuracy 1/2 and AUROC 1; left out, it is one correct answer.
    assert value(metrics, "verb", GOLD_DOMAIN, "2|mace-award", "accuracy") == (1.0, 1)
    assert math.isnan(value(metrics, "verb", GOLD_DOMAIN, "2|mace-award", "auroc")[0])  # one class
    assert value(metrics, "verb", GOLD_DOMAIN, "2|mace-award", ANSWERED_SHARE) == (0.5, 2)
    # the descriptive share has no better direction
    shares = metrics.filter(pl.col("metric") == ANSWERED_SHARE)
    assert shares["higher_is_better"].null_count() == shares.height


def test_a_method_that_refused_everything_has_only_its_answered_share():
    refused = estimates_of("verb_topk", "probability", dict.fromkeys(VERB, (None, False)))
    out = generation_metrics(
        pl.concat([refused, estimates_of("verb", "probability", VERB)]), INSTANCES, RELATIONS
    )
    rows = out.filter(pl.col("estimator") == "verb_topk")
    assert set(rows["metric"]) == {ANSWERED_SHARE}
    assert value(out, "verb_topk", "all", "all", ANSWERED_SHARE) == (0.0, 7)


def test_a_score_valued_estimator_gets_ranking_metrics_and_its_mean_score_but_no_calibration(metrics):
    rows = metrics.filter(pl.col("estimator") == "prob_entropy")
    assert set(rows["metric"]) == {"accuracy", "auroc", ANSWERED_SHARE, MEAN_SCORE}
    # positives −1, −2, −1.5 against negatives −3, −4, −0.5, −2.5: each beats three of four
    assert value(metrics, "prob_entropy", "all", "all", "auroc") == (pytest.approx(9 / 12), 7)
    # (−1 −3 −2 −4 −0.5 −1.5 −2.5) / 7
    assert value(metrics, "prob_entropy", "all", "all", MEAN_SCORE)[0] == pytest.approx(-14.5 / 7)
    # 1a: award (−1 −3)/2 = −2, river −0.5; 2a: award (−2 −4)/2 = −3, river (−1.5 −2.5)/2 = −2
    assert value(metrics, "prob_entropy", GOLD_MACRO, "1", MEAN_SCORE)[0] == pytest.approx(-1.25)
    assert value(metrics, "prob_entropy", GOLD_MACRO, "2", MEAN_SCORE)[0] == pytest.approx(-2.5)
    assert value(metrics, "prob_entropy", "all", "all", ANSWERED_SHARE) == (1.0, 7)


def test_rows_are_in_the_metrics_schema_split_by_split(metrics):
    assert metrics.schema == pl.Schema(OUTPUT_SCHEMA)
    assert set(metrics["reduction"]) == {GENERATED}
    assert set(metrics["answer_space_k"]) == set(metrics["answer_space_draw"]) == {0}
    # dev holds a5 alone (0.3, correct): never pooled with test
    assert value(metrics, "verb", "all", "all", "accuracy", split="dev") == (1.0, 1)
    assert value(metrics, "verb", "all", "all", "mean_confidence", split="dev") == (pytest.approx(0.3), 1)
    assert not metrics.filter(pl.col("scope") == "mixture_domain").is_empty()
    assert generation_metrics(estimates_of("verb", "probability", {}), INSTANCES, RELATIONS).is_empty()


def test_a_relation_outside_mace_has_no_gold_count_macro():
    relations = RELATIONS.with_columns(domain=pl.Series(["mace", "closed_set"]))
    out = generation_metrics(estimates_of("verb", "probability", VERB), INSTANCES, relations)
    assert value(out, "verb", GOLD_MACRO, "1", "accuracy") == (0.5, 2)  # award alone
    assert out.filter(
        pl.col("scope_value").str.contains("mace-river") & (pl.col("scope") != "relation")
    ).is_empty()


# knowledge coverage per instance (estimation.generation.knowledge_coverage)
COVERAGE = {"a1": 1.0, "a2": 0.0, "a3": 0.5, "a4": 1.0, "r1": 1.0, "r2": 0.5, "r3": 0.0}


@pytest.mark.parametrize("with_relation", [True, False])
def test_coverage_is_averaged_per_scope_by_hand(with_relation):
    coverage = pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": ["mace-award" if i.startswith("a") else "mace-river" for i in COVERAGE],
            "instance_id": list(COVERAGE),
            "n_gold": [1, 1, 2, 2, 1, 2, 2],
            "coverage": list(COVERAGE.values()),
        }
    )
    if not with_relation:
        coverage = coverage.drop("relation_id")
    out = coverage_metrics(coverage, INSTANCES, RELATIONS)
    assert set(out["estimator"]) == {COVERAGE_ESTIMATOR}
    assert set(out["metric"]) == {coverage_metric(0.1)} == {"coverage_tau0.1"}
    assert out.schema == pl.Schema(OUTPUT_SCHEMA)

    def v(scope, scope_value):
        return value(out, COVERAGE_ESTIMATOR, scope, scope_value, "coverage_tau0.1")

    assert v("all", "all") == (pytest.approx(4 / 7), 7)
    assert v("relation", "mace-award") == (pytest.approx(2.5 / 4), 4)
    # 1a: award (1 + 0)/2, river 1 → 0.75; 2a: award (0.5 + 1)/2, river (0.5 + 0)/2 → 0.5
    assert v(GOLD_MACRO, "1") == (pytest.approx(0.75), 3)
    assert v(GOLD_MACRO, "2") == (pytest.approx(0.5), 4)
    # {1, 2}: award (1 + 0 + 0.5 + 1)/4, river (1 + 0.5 + 0)/3
    assert v("mixture", "1,2")[0] == pytest.approx((2.5 / 4 + 1.5 / 3) / 2)
