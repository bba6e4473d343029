"""The open-answer checks (issue 33): each passes on a sound table and fails, naming the problem
and its count, on the one fault injected by hand."""

import math

import polars as pl
import pytest

from kcal_pipeline.estimation.checks import every_answer_matched, generation_confidences_valid
from kcal_pipeline.scoring.checks import generations_are_complete

ASKED = pl.DataFrame({"instance_id": ["a", "b"]})


def generations(rows=None) -> pl.DataFrame:
    """a and b: a greedy answer and two samples each, and one p_true judgement row of a."""
    rows = rows or [
        ("a", "answer", 0, -1.0),
        ("a", "answer", 1, -2.0),
        ("a", "answer", 2, -0.5),
        ("b", "answer", 0, -3.0),
        ("b", "answer", 1, -1.5),
        ("b", "answer", 2, 0.0),
        ("a", "p_true", 0, -0.7),
    ]
    return pl.DataFrame(rows, schema=["instance_id", "prompt", "sample", "logprob_sum"], orient="row")


def test_complete_generations_pass():
    result = generations_are_complete(generations(), ASKED, n_samples=2)
    assert result.passed, result.summary
    assert result.details["questions"] == 2 and result.details["responses"] == 7


def answers(instance: str, samples=(0, 1, 2), logprob: float = -1.0) -> list[tuple]:
    return [(instance, "answer", s, logprob) for s in samples]


BROKEN_LOG_PROBS = [("b", "answer", 0, math.nan), ("b", "answer", 1, 0.5), ("b", "answer", 2, -math.inf)]


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        (answers("a"), "1 questions without answers"),
        (answers("a", (0, 1)) + answers("b"), "1 questions without exactly 1 greedy and 2 sampled answers"),
        (answers("a") + answers("b") + answers("c"), "1 answers to no question of the probe"),
        (answers("a") + BROKEN_LOG_PROBS, "3 responses with a NaN, infinite or positive log-probability"),
    ],
)
def test_each_fault_is_named_and_counted(rows, problem):
    result = generations_are_complete(generations(rows), ASKED, n_samples=2)
    assert not result.passed
    assert problem in result.summary


MATCHES = pl.DataFrame(
    {
        "instance_id": ["a", "a", "a", "b", "b", "b"],
        "sample": [0, 1, 2, 0, 1, 2],
        "status": ["correct", "unmatched", "wrong_known_entity", "correct", "correct", "unmatched"],
        "cluster": ["Q1", "text:x", "Q2", "Q3", "Q3", "text:y"],
    }
)


def test_every_answer_matched_counts_the_outcomes():
    result = every_answer_matched(MATCHES, generations())
    assert result.passed, result.summary
    assert result.summary == "6 responses: 3 correct, 1 wrong_known_entity, 2 unmatched"


def test_a_lost_a_doubled_and_an_unclassified_match_fail():
    broken = pl.concat([MATCHES.slice(1), MATCHES.slice(1, 1)]).with_columns(
        status=pl.when(pl.col("cluster") == "Q3").then(pl.lit("maybe")).otherwise(pl.col("status"))
    )
    result = every_answer_matched(broken, generations())
    assert not result.passed
    assert "1 responses without a match" in result.summary
    assert "1 responses matched twice" in result.summary
    assert "2 responses neither correct" in result.summary


def estimates(confidence, refusal, kind="probability") -> pl.DataFrame:
    columns = {"estimator": "verb", "instance_id": "a", "output_kind": kind}
    return pl.DataFrame(
        {**{k: [v] for k, v in columns.items()}, "confidence": [confidence], "refusal": [refusal]},
        schema_overrides={"confidence": pl.Float64, "refusal": pl.String},
    )


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (estimates(1.2, None), "1 probabilities outside [0, 1]"),
        (estimates(math.nan, None), "1 NaN confidences"),
        (estimates(None, None), "1 missing confidences without a refusal reason"),
    ],
)
def test_generation_confidences(frame, problem):
    assert generation_confidences_valid(estimates(0.4, None)).passed
    assert generation_confidences_valid(estimates(None, "no_number")).passed
    assert generation_confidences_valid(estimates(-3.0, None, kind="score")).passed
    result = generation_confidences_valid(frame)
    assert not result.passed and problem in result.summary
