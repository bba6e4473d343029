"""Metrics of generation estimates and knowledge coverage on a hand-built two-relation frame, every
expected value computed by hand in the comments."""

import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.bootstrap import bootstrap_intervals
from kcal_pipeline.evaluation.generation import (
    ANSWERED_SHARE,
    COVERAGE_ESTIMATOR,
    GENERATED,
    GENERATION_SCHEMA,
    GOLD_DOMAIN,
    GOLD_MACRO,
    MEAN_SCORE,
    coverage_metric,
    coverage_metrics,
    generation_metrics,
)
from kcal_pipeline.evaluation.intervals import bias_corrected_interval
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, instance_resamples, relation_seed

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
    assert metrics.schema == pl.Schema(GENERATION_SCHEMA)
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
    assert out.schema == pl.Schema(GENERATION_SCHEMA)

    def v(scope, scope_value):
        return value(out, COVERAGE_ESTIMATOR, scope, scope_value, "coverage_tau0.1")

    assert v("all", "all") == (pytest.approx(4 / 7), 7)
    assert v("relation", "mace-award") == (pytest.approx(2.5 / 4), 4)
    # 1a: award (1 + 0)/2, river 1 → 0.75; 2a: award (0.5 + 1)/2, river (0.5 + 0)/2 → 0.5
    assert v(GOLD_MACRO, "1") == (pytest.approx(0.75), 3)
    assert v(GOLD_MACRO, "2") == (pytest.approx(0.5), 4)
    # {1, 2}: award (1 + 0 + 0.5 + 1)/4, river (1 + 0.5 + 0)/3
    assert v("mixture", "1,2")[0] == pytest.approx((2.5 / 4 + 1.5 / 3) / 2)


# --- bootstrap intervals -------------------------------------------------------------------------


def random_frame(seed: int = 3, per_cell: int = 5) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(estimates, instances): two MACE relations × gold counts 1, 2, 4, 6 × `per_cell` test
    questions; verb with random confidences and outcomes, flat answering 0.7 everywhere."""
    rng = np.random.default_rng(seed)
    questions = [
        (r, f"{r}:{g}:{k}", g, "test")
        for r in ("mace-award", "mace-river")
        for g in (1, 2, 4, 6)
        for k in range(per_cell)
    ]
    instances = pl.DataFrame(
        questions, schema=["relation_id", "instance_id", "n_gold", "split"], orient="row"
    )
    confidence = rng.uniform(size=len(questions))
    frames = [
        pl.DataFrame(
            {
                "model_id": "m",
                "relation_id": instances["relation_id"],
                "instance_id": instances["instance_id"],
                "estimator": name,
                "output_kind": "probability",
                "correct": rng.uniform(size=len(questions)) < 0.6,
                "confidence": c,
            }
        )
        for name, c in (("verb", confidence), ("flat", np.full(len(questions), 0.7)))
    ]
    return pl.concat(frames), instances


@pytest.fixture(scope="module")
def with_intervals() -> pl.DataFrame:
    estimates, instances = random_frame()
    return generation_metrics(estimates, instances, RELATIONS)


def interval(metrics, estimator, scope, scope_value, metric):
    row = metrics.filter(
        (pl.col("estimator") == estimator)
        & (pl.col("scope") == scope)
        & (pl.col("scope_value") == scope_value)
        & (pl.col("metric") == metric)
    )
    assert row.height == 1, row
    return row["ci_low"][0], row["value"][0], row["ci_high"][0]


CELLS = [
    ("all", "all"),
    ("relation", "mace-river"),
    ("n_gold", "4"),
    (GOLD_DOMAIN, "4|mace-award"),
    (GOLD_MACRO, "4"),
]


@pytest.mark.parametrize(("scope", "scope_value"), CELLS)
def test_the_table3_cells_and_the_overall_scopes_have_intervals(with_intervals, scope, scope_value):
    for metric in ("accuracy", "mean_confidence"):
        low, value, high = interval(with_intervals, "verb", scope, scope_value, metric)
        assert low is not None and high is not None, metric
        assert low <= value <= high and low < high, (metric, low, value, high)


def test_every_interval_contains_its_point(metrics, with_intervals):
    for table in (metrics, with_intervals):
        rows = table.filter(pl.col("ci_low").is_not_null())
        assert rows.height > 0
        assert rows.filter(
            (pl.col("ci_low") > pl.col("value")) | (pl.col("value") > pl.col("ci_high"))
        ).is_empty()
        # the calibration metrics are covered in scopes all and relation, as for the closed set
        covered = set(rows.select("scope", "metric").unique().iter_rows())
        assert {("all", m) for m in ("accuracy", "ace", "brier", "auroc", "mean_confidence")} <= covered


@pytest.mark.parametrize(("scope", "scope_value"), CELLS)
def test_a_constant_confidence_has_a_zero_width_mean_confidence_interval(with_intervals, scope, scope_value):
    low, value, high = interval(with_intervals, "flat", scope, scope_value, "mean_confidence")
    # every resample's mean is 0.7; the bounds differ from the table's mean by summation order only
    assert low <= value <= high
    assert high - low < 1e-12 and value == pytest.approx(0.7)


def test_the_same_seed_gives_the_same_bits_and_another_seed_other_intervals():
    estimates, instances = random_frame()
    first = generation_metrics(estimates, instances, RELATIONS, seed=7)
    assert first.equals(generation_metrics(estimates, instances, RELATIONS, seed=7))
    other = generation_metrics(estimates, instances, RELATIONS, seed=8)
    assert first.drop("ci_low", "ci_high").equals(other.drop("ci_low", "ci_high"))
    assert not first.equals(other)


def test_a_gold_count_with_one_instance_has_no_interval(metrics):
    # verb: river has one 1-gold question (r1), award one answered 2-gold question (a3; a4 refused)
    for scope, scope_value in [(GOLD_DOMAIN, "1|mace-river"), (GOLD_DOMAIN, "2|mace-award")]:
        low, _, high = interval(
            metrics.filter(pl.col("split") == "test"), "verb", scope, scope_value, "accuracy"
        )
        assert low is None and high is None
    # so the macro over the domains has none either (one domain's spread would be a false zero)
    for gold in ("1", "2"):
        assert (
            interval(metrics.filter(pl.col("split") == "test"), "verb", GOLD_MACRO, gold, "mean_confidence")[
                0
            ]
            is None
        )
    # two instances do get one: award's 1-gold questions a1 (0.9), a2 (0.4)
    low, _, high = interval(
        metrics.filter(pl.col("split") == "test"), "verb", GOLD_DOMAIN, "1|mace-award", "mean_confidence"
    )
    assert (low, high) == (pytest.approx(0.4), pytest.approx(0.9))
    # no interval off the test split (dev: a5 alone) nor for the descriptive share, ECE or mixtures
    off = metrics.filter(
        (pl.col("split") == "dev")
        | pl.col("metric").is_in([ANSWERED_SHARE, "ece"])
        | pl.col("scope").is_in(["mixture", "mixture_domain"])
    )
    assert off["ci_low"].null_count() == off["ci_high"].null_count() == off.height


def test_a_cells_interval_is_the_bootstrap_of_its_rows_by_hand(with_intervals):
    """The gold-count cells read bootstrap.py's own resamples: a domain's are instance_resamples
    keyed by "4|mace-award", the macro's the mean of the two domains' resampled values."""
    estimates, instances = random_frame()
    verb = estimates.filter(pl.col("estimator") == "verb").join(instances, on=["relation_id", "instance_id"])
    per_domain = {}
    for relation in ("mace-award", "mace-river"):
        rows = verb.filter((pl.col("relation_id") == relation) & (pl.col("n_gold") == 4)).sort("instance_id")
        c = rows["confidence"].to_numpy()
        res = instance_resamples(c.size, N_RESAMPLES, relation_seed(0, f"4|{relation}"))
        per_domain[relation] = (c.mean(), c[res.indices].mean(axis=1))
    point, values = per_domain["mace-award"]
    low, high, _ = bias_corrected_interval(values[None, :], np.array([point]))
    assert interval(with_intervals, "verb", GOLD_DOMAIN, "4|mace-award", "mean_confidence") == pytest.approx(
        (low[0], point, high[0])
    )
    macro_point = np.mean([p for p, _ in per_domain.values()])
    macro_values = np.mean([v for _, v in per_domain.values()], axis=0)
    low, high, _ = bias_corrected_interval(macro_values[None, :], np.array([macro_point]))
    assert interval(with_intervals, "verb", GOLD_MACRO, "4", "mean_confidence") == pytest.approx(
        (low[0], macro_point, high[0])
    )


def test_the_overall_intervals_are_the_closed_set_bootstrap(with_intervals):
    estimates, _ = random_frame()
    test = estimates.filter(pl.col("estimator") == "verb").with_columns(
        split=pl.lit("test"), reduction=pl.lit(GENERATED)
    )
    expected = bootstrap_intervals(test, ["accuracy", "brier"]).filter(pl.col("scope") == "all")
    for metric in ("accuracy", "brier"):
        want = expected.filter(pl.col("metric") == metric).select("ci_low", "ci_high").row(0)
        low, _, high = interval(with_intervals, "verb", "all", "all", metric)
        assert (low, high) == pytest.approx(want)


def test_coverage_has_mean_intervals_per_gold_count():
    coverage = pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": ["mace-award" if i.startswith("a") else "mace-river" for i in COVERAGE],
            "instance_id": list(COVERAGE),
            "coverage": list(COVERAGE.values()),
        }
    )
    out = coverage_metrics(coverage, INSTANCES, RELATIONS)
    metric = coverage_metric(0.1)
    # award's 1-gold questions: coverage 1 and 0, so every resampled mean is 0, ½ or 1
    assert interval(out, COVERAGE_ESTIMATOR, GOLD_DOMAIN, "1|mace-award", metric) == (0.0, 0.5, 1.0)
    assert interval(out, COVERAGE_ESTIMATOR, GOLD_DOMAIN, "1|mace-river", metric)[0] is None  # r1 alone
