"""Checks of a scored partition, run as blocking asset checks before its estimates are computed."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.checks import CheckOutcome, outcome

# Sentence and answer log-likelihoods (sum and mean): what every estimator reads.
LL_COLUMNS = ("ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean")
TOLERANCE = 1e-4  # float32 log-softmax can round a log-probability of ~0 slightly above it


def finite_log_likelihoods(scores: pl.DataFrame) -> CheckOutcome:
    """No NaN, +inf or positive log-likelihood in the score columns (a log-probability is ≤ 0):
    each means a broken forward pass (an overflow in half precision, a bad mask), and one such row
    corrupts every softmax over its options. −inf (a probability that underflowed) is counted."""
    columns = [c for c in LL_COLUMNS if c in scores.columns]
    bad = {}
    for column in columns:
        value = pl.col(column)
        bad[f"NaN {column}"] = scores.filter(value.is_nan()).select("statement_id", column)
        positive = ~value.is_nan() & (value > TOLERANCE)  # polars orders NaN above every number
        bad[f"+inf or positive {column}"] = scores.filter(positive).select("statement_id", column)
    negative_infinity_counts = {c: int((scores[c] == float("-inf")).sum()) for c in columns}
    return outcome(
        bad,
        f"{scores.height} statements: every log-likelihood is finite or −inf, and ≤ 0",
        {
            "statements": scores.height,
            "columns": list(columns),
            "negative_infinity_counts": negative_infinity_counts,
        },
    )


def scores_match_statements(scores: pl.DataFrame, statements: pl.DataFrame) -> CheckOutcome:
    """One score row per statement of the relation: none lost (a chunk dropped on resume), none
    twice (a chunk written twice), none foreign (statements rebuilt since scoring)."""
    unscored = statements.join(scores, on="statement_id", how="anti").select("statement_id")
    foreign = scores.join(statements, on="statement_id", how="anti").select("statement_id")
    twice = scores.group_by("statement_id").len().filter(pl.col("len") > 1)
    return outcome(
        {
            "statements without a score": unscored,
            "scores of no statement": foreign,
            "statements scored twice": twice,
        },
        f"{scores.height} scores, one per statement",
        {"scores": scores.height, "statements": statements.height},
    )


def generations_are_complete(
    generations: pl.DataFrame, instances: pl.DataFrame, n_samples: int
) -> CheckOutcome:
    """Every question of the relation answered once greedily and `n_samples` times sampled, each
    log-probability finite and ≤ 0 (a response's probability, its stop token included), no
    question answered that the probe does not have."""
    answers = generations.filter(pl.col("prompt") == "answer")
    counts = answers.group_by("instance_id").agg(
        greedy=(pl.col("sample") == 0).sum(), sampled=(pl.col("sample") > 0).sum()
    )
    asked = instances.select("instance_id").unique()
    unanswered = asked.join(counts, on="instance_id", how="anti")
    foreign = counts.join(asked, on="instance_id", how="anti").select("instance_id")
    wrong = counts.filter((pl.col("greedy") != 1) | (pl.col("sampled") != n_samples))
    value = pl.col("logprob_sum")
    broken = generations.filter(value.is_nan() | value.is_infinite() | (value > TOLERANCE))
    return outcome(
        {
            "questions without answers": unanswered,
            "answers to no question of the probe": foreign,
            f"questions without exactly 1 greedy and {n_samples} sampled answers": wrong,
            "responses with a NaN, infinite or positive log-probability": broken.select(
                "instance_id", "prompt", "sample", "logprob_sum"
            ),
        },
        f"{asked.height} questions: each answered greedily and {n_samples} times sampled; "
        f"{generations.height} responses with finite log-probabilities ≤ 0",
        {
            "questions": asked.height,
            "responses": generations.height,
            "prompts": sorted(set(generations["prompt"])),
        },
    )
