"""Checks of an estimated partition, run as blocking asset checks before any metric reads it."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.checks import CheckOutcome, outcome
from kcal_pipeline.estimation.registry import ESTIMATORS


def probabilities_in_unit_interval(estimates: pl.DataFrame) -> CheckOutcome:
    """Every probability-kind confidence is a number in [0, 1]; score-kind ones (raw margins,
    log-likelihoods) only need to be numbers. (NaN is counted once, as NaN: polars orders it
    above every number.)"""
    confidence = pl.col("confidence")
    probability = pl.col("output_kind") == "probability"
    keys = ("estimator", "reduction", "instance_id", "template_id", "confidence")
    return outcome(
        {
            "probabilities outside [0, 1]": estimates.filter(
                probability & ~confidence.is_nan() & ((confidence < 0) | (confidence > 1))
            ).select(keys),
            "confidences that are NaN or missing": estimates.filter(
                confidence.is_null() | confidence.is_nan()
            ).select(keys),
        },
        f"{estimates.height} confidences: every probability in [0, 1], none NaN",
        {"rows": estimates.height, "probability rows": int(estimates.select(probability.sum()).item())},
    )


def estimator_coverage(status: pl.DataFrame, estimates: pl.DataFrame) -> CheckOutcome:
    """Every registered estimator under each of its reductions either ran, with exactly the rows
    the status table records (possibly none), or was skipped with a reason (its inputs are absent)."""
    registered = pl.DataFrame(
        [(spec.name, reduction) for spec in ESTIMATORS.values() for reduction in spec.reductions],
        schema={"estimator": pl.String, "reduction": pl.String},
        orient="row",
    )
    rows = estimates.group_by("estimator", "reduction").len()
    joined = status.join(rows, on=["estimator", "reduction"], how="left").with_columns(
        pl.col("len").fill_null(0)
    )
    ran = joined.filter(pl.col("status") == "ran")
    skipped = joined.filter(pl.col("status") == "skipped")
    return outcome(
        {
            "registered estimators with no status": registered.join(
                status, on=["estimator", "reduction"], how="anti"
            ),
            # a run that gave no rows is recorded as skipped, with why (registry._why_no_rows)
            "estimators that ran without their rows": ran.filter(pl.col("len") != pl.col("rows")).select(
                "estimator", "reduction", "rows", estimated="len"
            ),
            "estimators skipped without a reason": skipped.filter(
                pl.col("reason").is_null() | (pl.col("reason") == "")
            ).select("estimator", "reduction"),
            "estimators skipped that have rows": skipped.filter(pl.col("len") > 0).select(
                "estimator", "reduction"
            ),
        },
        f"{ran.height} estimator runs with their rows, {skipped.height} skipped with a reason",
        {"ran": ran.height, "skipped": skipped.height, "registered": registered.height},
    )


MATCH_STATUSES = ("correct", "wrong_known_entity", "unmatched")


def every_answer_matched(matches: pl.DataFrame, generations: pl.DataFrame) -> CheckOutcome:
    """Each answer-prompt response once in the matches, as correct, wrong_known_entity or unmatched,
    with a cluster: none lost, none twice, none left unclassified."""
    keys = ["instance_id", "sample"]
    answers = generations.filter(pl.col("prompt") == "answer").select(keys)
    lost = answers.join(matches.select(keys), on=keys, how="anti")
    twice = matches.group_by(keys).len().filter(pl.col("len") > 1)
    unclassified = matches.filter(~pl.col("status").is_in(MATCH_STATUSES) | pl.col("cluster").is_null())
    counts = dict(matches.group_by("status").len().iter_rows())
    return outcome(
        {
            "responses without a match": lost,
            "responses matched twice": twice,
            "responses neither correct, a wrong known entity nor unmatched": unclassified.select(
                *keys, "status", "cluster"
            ),
        },
        f"{answers.height} responses: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in MATCH_STATUSES),
        {"responses": answers.height, **{s: counts.get(s, 0) for s in MATCH_STATUSES}},
    )


def generation_confidences_valid(estimates: pl.DataFrame) -> CheckOutcome:
    """A probability-kind confidence in [0, 1], no NaN, and an instance without a confidence says
    why (its refusal)."""
    value = pl.col("confidence")
    probability = pl.col("output_kind") == "probability"
    columns = ["estimator", "instance_id", "confidence", "refusal"]
    return outcome(
        {
            "NaN confidences": estimates.filter(value.is_nan()).select(columns),
            "probabilities outside [0, 1]": estimates.filter(
                probability & ((value < 0) | (value > 1))
            ).select(columns),
            "missing confidences without a refusal reason": estimates.filter(
                value.is_null() & pl.col("refusal").is_null()
            ).select(columns),
        },
        f"{estimates.height} estimates: probabilities in [0, 1], every missing one with its reason",
        {"estimates": estimates.height, "refused": int(estimates["confidence"].is_null().sum())},
    )
