"""Checks of the probe tables, run as blocking asset checks before anything is scored."""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.checks import CheckOutcome, outcome


def gold_among_options(instances: pl.DataFrame) -> CheckOutcome:
    """Every gold object of every instance is one of its options (else the gold can never be
    predicted and accuracy is silently capped), and every instance has at least one gold."""
    rows = instances.select("instance_id", "gold_ids", "option_ids").explode("gold_ids")
    missing = rows.filter(
        pl.col("gold_ids").is_not_null() & ~pl.col("option_ids").list.contains(pl.col("gold_ids"))
    )
    no_gold = instances.filter(pl.col("gold_ids").list.len() == 0).select("instance_id")
    return outcome(
        {
            "gold objects not among the options": missing.select("instance_id", gold_id="gold_ids"),
            "instances without a gold object": no_gold,
        },
        f"every gold object is among its instance's options ({instances.height} instances)",
        {"instances": instances.height},
    )


def statements_cover_the_probe(statements: pl.DataFrame, instances: pl.DataFrame) -> CheckOutcome:
    """statements = instances × templates × options: every instance under every template the
    relation's statements use, with exactly its options, each once, and its gold ones marked.

    A context template (statements with context_end > 0) covers only the instances that have a
    valid demonstration (dataset/instances/context.py logs the others), so it is not required of
    every instance; its prompts must still be exactly their options."""
    context = (
        statements.filter(pl.col("context_end") > 0)["template_id"].unique()
        if "context_end" in statements.columns
        else pl.Series([], dtype=pl.String)
    )
    templates = statements["template_id"].n_unique()
    plain = templates - context.len()
    per_prompt = statements.group_by("instance_id", "template_id").agg(
        pl.len().alias("statements"),
        pl.col("option_index").n_unique().alias("distinct_options"),
        pl.col("is_gold").sum().alias("gold"),
    )
    joined = instances.select("instance_id", "n_options", "n_gold").join(
        per_prompt, on="instance_id", how="left"
    )
    in_context = pl.col("template_id").is_in(context.implode())
    expected = plain * int(instances["n_options"].sum()) + int(joined.filter(in_context)["n_options"].sum())
    unscored = joined.filter(pl.col("template_id").is_null() & pl.lit(plain > 0)).select("instance_id")
    prompts = joined.filter(pl.col("template_id").is_not_null())
    wrong_options = prompts.filter(
        (pl.col("statements") != pl.col("n_options")) | (pl.col("distinct_options") != pl.col("n_options"))
    ).select("instance_id", "template_id", "n_options", "statements")
    wrong_gold = prompts.filter(pl.col("gold") != pl.col("n_gold")).select(
        "instance_id", "template_id", "n_gold", "gold"
    )
    missing_templates = (
        prompts.filter(~in_context)
        .group_by("instance_id")
        .agg(pl.len().alias("templates"))
        .filter(pl.col("templates") != plain)
    )
    strangers = statements.join(instances, on="instance_id", how="anti").select("statement_id", "instance_id")
    counts = {"statements": statements.height, "expected": expected, "templates": templates}
    if context.len():
        counts["context_templates"] = context.len()
    return outcome(
        {
            "instances without statements": unscored,
            "prompts whose statements are not exactly their options": wrong_options,
            "prompts with a wrong number of gold statements": wrong_gold,
            "instances missing some templates": missing_templates,
            "statements of no instance": strangers,
        },
        f"{statements.height} statements = {instances.height} instances × {templates} templates"
        " × their options",
        counts,
    )
