"""The setups a consistency table (consistency.py) compares: which estimates make each setup, the
item an estimate stands for in every setup, each setup's dev-tuned threshold and its test decisions.

Setups (every one on the test split, thresholds tuned on the dev split of the same setup):
  - "original": each relation's headline template (curated, rank 0, as the headline metrics use)
    for template-grain estimators, and every instance-grain estimator, on the full answer space;
  - a variant name of the headline template (templates.variant of a row whose parent_id is the
    headline: "certainly", "numeric-50", "extra-space", "typo", "context-1shot", "context-fixed", …;
    the context variants put demonstrations before the same statement, conditioned on, not scored);
  - "paraphrase": every other curated or generated template of the relation, against the
    headline (pass generated_templates concatenated to `templates` to include those);
  - "answer_space_k=<k>": the `#k<k>d<draw>` subsample copies of each instance (the option-count
    sweep) against the instance itself (headline template or instance grain), one draw at a time.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.dataset.instances.variants import SUBSAMPLE_SUFFIX
from kcal_pipeline.estimation.cube import PARAPHRASE_KINDS
from kcal_pipeline.estimation.registry import FULL_ANSWER_SPACE, HEADLINE_SPLIT
from kcal_pipeline.evaluation.consistency_measures import FALLBACK_THRESHOLD, tune_groups

TUNE_SPLIT = "dev"
EVAL_SPLIT = HEADLINE_SPLIT
ORIGINAL = "original"
PARAPHRASE = "paraphrase"
# Setups drawn with the probe seed (dataset/instances/context.py: the demonstrations of the context
# variants; the doubled space and the typo too in a templates table without perturbation_seed):
# their rows carry it. A template's perturbation_seed, or a subsample copy's draw, wins over it.
# context-fixed (the same demonstration everywhere) is not drawn.
RANDOM_VARIANTS = ("extra-space", "typo", "context-1shot", "context-3shot", "context-wrong")
ANSWER_SPACE_SETUP = "answer_space_k="
_THRESHOLD_KEYS = ("model_id", "estimator", "reduction", "setup", "seed")

_EST_COLUMNS = ("model_id", "relation_id", "instance_id", "estimator", "confidence")
_EST_OPTIONAL = ("template_id", "reduction", "split", "answer_space_k", "predicted_id", "correct")
# A copy's instance id is its parent's plus this suffix (variants.SUBSAMPLE_SUFFIX: `#k<k>d<draw>`).
_COPY_SUFFIX = SUBSAMPLE_SUFFIX


def _check_estimates(estimates: pl.DataFrame) -> None:
    require_columns(estimates, _EST_COLUMNS, "estimates")
    missing = [c for c in _EST_OPTIONAL if c not in estimates.columns]
    if missing:
        raise ValueError(f"estimates: missing column(s) {missing} (have {estimates.columns})")
    bad = estimates.filter(~pl.col("confidence").cast(pl.Float64).is_finite())
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(
            f"estimates: confidence {row['confidence']!r} is not a finite number (estimator "
            f"{row['estimator']!r}, instance {row['instance_id']!r})"
        )


def _template_roles(templates: pl.DataFrame) -> pl.DataFrame:
    """Per (relation, template): its kind, parent, variant, perturbation seed and the relation's
    headline template."""
    require_columns(templates, ["relation_id", "template_id", "kind", "rank"], "templates")
    extra = {c: pl.lit(None, pl.String) for c in ("parent_id", "variant") if c not in templates.columns}
    if "perturbation_seed" not in templates.columns:
        extra["perturbation_seed"] = pl.lit(None, pl.Int64)
    t = templates.with_columns(**extra).select(
        "relation_id",
        "template_id",
        "kind",
        "rank",
        "parent_id",
        "variant",
        pl.col("perturbation_seed").cast(pl.Int64),
    )
    heads = t.filter((pl.col("rank") == 0) & (pl.col("kind") == "curated")).select(
        "relation_id", head_id=pl.col("template_id")
    )
    return t.join(heads, on="relation_id", how="left").drop("rank")


def setup_rows(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """The estimates that take part in a comparison, each with its `setup`, its `seed` (the
    perturbation seed of a seeded variant's draw, the draw of a subsample copy, else null), its
    `instance` (the instance id without a `#k<k>d<draw>` subsample suffix) and its `anchor` (the
    relation's headline template for template-grain rows, null for instance-grain ones): two rows
    of one estimator with the same (model, relation, instance, reduction, anchor) are the same
    item in two setups.
    Template-grain rows on a template the templates table does not list, on a variant of a
    non-headline template, or on a non-headline template of a subsample copy take no part."""
    _check_estimates(estimates)
    k = pl.col("answer_space_k").fill_null(FULL_ANSWER_SPACE).cast(pl.Int32)
    draw = (
        pl.col("answer_space_draw").cast(pl.Int64)
        if "answer_space_draw" in estimates.columns
        else pl.when(k == FULL_ANSWER_SPACE).then(None).otherwise(1).cast(pl.Int64)
    )
    rows = estimates.select(
        "model_id",
        "relation_id",
        "instance_id",
        pl.col("template_id").cast(pl.String),
        "estimator",
        pl.col("reduction").cast(pl.String),
        pl.col("split").cast(pl.String),
        k.alias("k"),
        draw.alias("draw"),
        pl.col("confidence").cast(pl.Float64),
        pl.col("predicted_id").cast(pl.String),
        pl.col("correct").cast(pl.Boolean),
    ).join(_template_roles(templates), on=["relation_id", "template_id"], how="left")
    full = pl.col("k") == FULL_ANSWER_SPACE
    instance_grain = pl.col("template_id").is_null()
    headline = pl.col("template_id") == pl.col("head_id")
    subsample = pl.lit(ANSWER_SPACE_SETUP) + pl.col("k").cast(pl.String)
    setup = (
        pl.when(instance_grain | headline)
        .then(pl.when(full).then(pl.lit(ORIGINAL)).otherwise(subsample))
        .when(~full)
        .then(pl.lit(None, pl.String))
        .when(pl.col("parent_id") == pl.col("head_id"))
        .then(pl.col("variant"))
        .when(
            pl.col("parent_id").is_null()
            & pl.col("kind").is_in(PARAPHRASE_KINDS)
            & pl.col("head_id").is_not_null()
        )
        .then(pl.lit(PARAPHRASE))
    )
    instance = (
        pl.when(full)
        .then(pl.col("instance_id"))
        .otherwise(pl.col("instance_id").str.replace(_COPY_SUFFIX, ""))
    )
    variant_of_headline = full & ~instance_grain & ~headline & (pl.col("parent_id") == pl.col("head_id"))
    return (
        rows.with_columns(
            setup=setup,
            seed=pl.when(variant_of_headline)
            .then(pl.col("perturbation_seed"))
            .when(~full)
            .then(pl.col("draw"))
            .otherwise(pl.lit(None, pl.Int64)),
            instance=instance,
            anchor=pl.when(instance_grain).then(pl.lit(None, pl.String)).otherwise(pl.col("head_id")),
        )
        .filter(pl.col("setup").is_not_null())
        .drop("kind", "parent_id", "variant", "perturbation_seed", "head_id", "k", "draw")
    )


def decision_thresholds(rows: pl.DataFrame) -> pl.DataFrame:
    """Per (model, estimator, reduction, setup, seed) of `setup_rows`: its dev-tuned threshold
    (tau, fallback, n_dev, accepted_share, dev_accuracy), pooled over relations; a setup without
    dev rows gets the fallback. Each seed's draw of a perturbation is tuned on its own dev rows."""
    keys = list(_THRESHOLD_KEYS)
    tuned = tune_groups(rows.filter(pl.col("split") == TUNE_SPLIT), keys)
    every = rows.select(keys).unique()
    return (
        every.join(tuned, on=keys, how="left", nulls_equal=True)
        .with_columns(
            tau=pl.col("tau").fill_null(FALLBACK_THRESHOLD),
            fallback=pl.col("fallback").fill_null(True),
            n_dev=pl.col("n_dev").fill_null(0),
        )
        .sort(keys, nulls_last=True)
    )


def decide(rows: pl.DataFrame, thresholds: pl.DataFrame) -> pl.DataFrame:
    """Test rows with their threshold, fallback flag and decision (accept = C ≥ tau)."""
    keys = list(_THRESHOLD_KEYS)
    return (
        rows.filter(pl.col("split") == EVAL_SPLIT)
        .join(thresholds.select(*keys, "tau", "fallback"), on=keys, how="left", nulls_equal=True)
        .with_columns(accept=pl.col("confidence") >= pl.col("tau"))
    )
