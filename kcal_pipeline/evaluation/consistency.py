"""Consistency of knowledge-gap decisions (METHODS §4; Zhao et al. 2025, "Do We Know What LLMs
Don't Know? A Study of Consistency in Knowledge Probing", arXiv 2505.21701).

A probe turns confidence into a decision per instance: accept (the model knows, C ≥ τ) or reject
(a knowledge gap). A probe worth trusting decides alike when the prompt changes in ways that leave
the fact alone (intra-method: the same estimator on a perturbed prompt) and agrees with other probes
on the same prompt (cross-method). compute_consistency compares the test decisions of setups
(consistency_setups.py: which estimates make a setup, its dev-tuned threshold) pair by pair by the
five measures of consistency_measures.py (IoU_acc, IoU_rej, IoU_cons, DecCons, Agreement), computed
from counts of aligned items, so relations pool by adding counts.

Intra-method rows pair "original" with each other setup of the same estimator; cross-method rows
pair two estimators on "original" (template-grain ones on the same template, instance-grain ones
together; the marker estimators, which read a marked variant on their parent's row, are left out:
their prompt is not the row's). Rows are pooled over relations (relation_id null) and per relation.

Random setups and seeds (Zhao et al. draw each random perturbation with seeds 4, 44 and 99 and
report the mean and spread): the extra-space and typo variants exist once per perturbation seed
(templates.perturbation_seed; ids `<parent>:typo-s44`), and each draw is its own setup with its
own threshold; its rows have statistic "value" and that seed. The context demonstrations (1-shot,
3-shot, wrong) are drawn with the probe seed: their rows carry it; the fixed one is not drawn. The
answer-space subsamples are drawn answer_space_draws times (with the probe seed): each draw is a
setup's draw like a perturbation seed's, its rows carry the draw number (1, 2, …) as their seed and
its own threshold. Per pair and relation, every seeded setup also gets two summary rows over its
seeds, seed null and statistic "mean" or
"std" (sample standard deviation; NaN with one seed): the measures and thresholds are that
statistic over the seeds (NaN values left out, NaN if none is left), fallback_a/b is true if any
seed's is, n is null and n_seeds counts the seeds. Every other row has statistic "value", seed
null. One number per pair: `seed is null and statistic <> 'std'`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.evaluation.consistency_measures import COUNTS, MEASURES, measures_from_counts
from kcal_pipeline.evaluation.consistency_setups import (
    ORIGINAL,
    RANDOM_VARIANTS,
    decide,
    decision_thresholds,
    setup_rows,
)

CONSISTENCY_SCHEMA = {
    "model_id": pl.String,
    "kind": pl.String,
    "setup_a": pl.String,
    "setup_b": pl.String,
    "estimator_a": pl.String,
    "estimator_b": pl.String,
    "reduction": pl.String,
    "relation_id": pl.String,
    "seed": pl.Int64,
    "statistic": pl.String,
    "n_seeds": pl.Int64,
    "threshold_a": pl.Float64,
    "threshold_b": pl.Float64,
    "fallback_a": pl.Boolean,
    "fallback_b": pl.Boolean,
    "n": pl.Int64,
    "iou_acc": pl.Float64,
    "iou_rej": pl.Float64,
    "iou_cons": pl.Float64,
    "dec_cons": pl.Float64,
    "agreement": pl.Float64,
}
# `statistic` of a per-setup (per-seed) row, and of the summary rows over a setup's seeds.
VALUE, SEED_STATISTICS = "value", ("mean", "std")
_ITEM = ("model_id", "relation_id", "instance", "reduction", "anchor")


# --- pairs -------------------------------------------------------------------------------------


def _count_exprs(accept_a: pl.Expr, accept_b: pl.Expr, same: pl.Expr) -> list[pl.Expr]:
    return [
        (accept_a & accept_b).sum().alias("n_aa"),
        (~accept_a & ~accept_b).sum().alias("n_rr"),
        (accept_a & ~accept_b).sum().alias("n_ar"),
        (~accept_a & accept_b).sum().alias("n_ra"),
        (accept_a & accept_b & same).sum().alias("n_agree"),
    ]


_INTRA_KEYS = ("model_id", "relation_id", "reduction", "estimator_a", "estimator_b", "setup_a", "setup_b",
               "seed", "threshold_a", "threshold_b", "fallback_a", "fallback_b")  # fmt: skip


def _intra_counts(decided: pl.DataFrame) -> pl.DataFrame:
    """Per (model, estimator, reduction, setup_b, seed of setup_b, relation): counts of the items
    the estimator has in "original" and in setup_b."""
    a = decided.filter(pl.col("setup") == ORIGINAL)
    b = decided.filter(pl.col("setup") != ORIGINAL)
    on = [*_ITEM, "estimator"]
    pairs = a.join(b, on=on, how="inner", nulls_equal=True, suffix="_b")
    same = pl.col("predicted_id").is_not_null() & (pl.col("predicted_id") == pl.col("predicted_id_b"))
    return (
        pairs.with_columns(
            estimator_a=pl.col("estimator"),
            estimator_b=pl.col("estimator"),
            setup_a=pl.col("setup"),
            seed=pl.col("seed_b"),
            threshold_a=pl.col("tau"),
            threshold_b=pl.col("tau_b"),
            fallback_a=pl.col("fallback"),
            n_agree_item=same.fill_null(False),
        )
        .group_by(*_INTRA_KEYS)
        .agg(*_count_exprs(pl.col("accept"), pl.col("accept_b"), pl.col("n_agree_item")))
    )


def _cross_estimators(names: list[str]) -> list[str]:
    """Estimators that read the row's own prompt: not those that need other template kinds (the
    marker estimators read a marked variant on their parent's row)."""
    return sorted(n for n in names if not (n in ESTIMATORS and ESTIMATORS[n].template_kinds))


def _cross_counts(decided: pl.DataFrame) -> pl.DataFrame | None:
    """Per (model, relation, reduction) and pair of estimators a < b of one grain on "original":
    the counts over the items both have, from [item, estimator] decision matrices (n_aa = AᵀA,
    n_rr = RᵀR, n_ar = AᵀR) rather than a self-join, which would make E² rows per item."""
    original = decided.filter(pl.col("setup") == ORIGINAL)
    original = original.filter(
        pl.col("estimator").is_in(_cross_estimators(original["estimator"].unique().to_list()))
    )
    groups = original.group_by(
        "model_id", "relation_id", "reduction", pl.col("anchor").is_null().alias("grain")
    )
    frames = [_cross_group(g) for _, g in groups]
    frames = [f for f in frames if f is not None]
    return pl.concat(frames) if frames else None


def _cross_group(g: pl.DataFrame) -> pl.DataFrame | None:
    names = sorted(g["estimator"].unique().to_list())
    if len(names) < 2:
        return None
    g = g.join(pl.DataFrame({"estimator": names}).with_row_index("e"), on="estimator").with_columns(
        i=pl.struct("instance", "anchor").rank("dense").cast(pl.Int64) - 1,
        option=pl.col("predicted_id").rank("dense").cast(pl.Int64).fill_null(0),  # 0 = no answer
    )
    shape = (int(g["i"].max()) + 1, len(names))
    i, e = g["i"].to_numpy(), g["e"].to_numpy().astype(np.int64)
    accepted, rejected = np.zeros(shape), np.zeros(shape)  # absent (item, estimator) cells: neither
    option = np.zeros(shape, dtype=np.int64)
    accept = g["accept"].to_numpy()
    accepted[i, e], rejected[i, e], option[i, e] = accept, ~accept, g["option"].to_numpy()
    n_aa, n_rr, n_ar = accepted.T @ accepted, rejected.T @ rejected, accepted.T @ rejected
    answered_alike = [
        (accepted * accepted[:, [k]] * ((option == option[:, [k]]) & (option[:, [k]] > 0))).sum(axis=0)
        for k in range(len(names))
    ]
    n_agree = np.stack(answered_alike)
    ia, ib = np.triu_indices(len(names), k=1)
    per = dict(g.group_by("estimator").agg(pl.struct("tau", "fallback").first()).iter_rows())
    first = g.row(0, named=True)
    return pl.DataFrame(
        {
            "model_id": first["model_id"],
            "relation_id": first["relation_id"],
            "reduction": first["reduction"],
            "estimator_a": [names[k] for k in ia],
            "estimator_b": [names[k] for k in ib],
            "setup_a": ORIGINAL,
            "setup_b": ORIGINAL,
            "seed": pl.Series([None] * len(ia), dtype=pl.Int64),
            "threshold_a": [per[names[k]]["tau"] for k in ia],
            "threshold_b": [per[names[k]]["tau"] for k in ib],
            "fallback_a": [per[names[k]]["fallback"] for k in ia],
            "fallback_b": [per[names[k]]["fallback"] for k in ib],
            "n_aa": n_aa[ia, ib],
            "n_rr": n_rr[ia, ib],
            "n_ar": n_ar[ia, ib],
            "n_ra": n_ar[ib, ia],
            "n_agree": n_agree[ia, ib],
        },
        schema_overrides=dict.fromkeys(COUNTS, pl.Int64),
    )


# --- the table ---------------------------------------------------------------------------------

_PAIR = ("model_id", "kind", "setup_a", "setup_b", "estimator_a", "estimator_b", "reduction")
_THRESHOLDS = ("threshold_a", "threshold_b", "fallback_a", "fallback_b")
_ORDER = (*_PAIR[:2], *_PAIR[3:], "relation_id", "statistic", "seed")  # setup_a is always "original"


def compute_consistency(
    estimates: pl.DataFrame, templates: pl.DataFrame, seed: int | None = None
) -> pl.DataFrame:
    """The `consistency` table (CONSISTENCY_SCHEMA): per pair of setups (intra: an estimator on
    "original" vs each other setup; cross: two estimators on "original"), per relation and pooled
    over relations (relation_id null), the thresholds with their fallback flags, the aligned test
    items n and the five measures. Pairs with no aligned test item are left out.

    A seeded perturbation's rows carry its templates.perturbation_seed, one row per seed, and an
    answer-space subsample's its draw, one row per draw; `seed` is the probe seed, carried by the
    other random setups (RANDOM_VARIANTS without a perturbation seed). Every seeded pair also gets
    its "mean" and "std" rows over the seeds (module docstring).
    """
    rows = setup_rows(estimates, templates)
    decided = decide(rows, decision_thresholds(rows))
    parts = [_intra_counts(decided).with_columns(kind=pl.lit("intra"))]
    cross = _cross_counts(decided)
    if cross is not None:
        parts.append(cross.with_columns(kind=pl.lit("cross")))
    counts = pl.concat(
        [p.select(*_PAIR, "relation_id", "seed", *_THRESHOLDS, pl.col(COUNTS).cast(pl.Int64)) for p in parts]
    )
    pooled = (
        counts.group_by(*_PAIR, "seed", *_THRESHOLDS)
        .agg(pl.col(COUNTS).sum())
        .with_columns(relation_id=pl.lit(None, pl.String))
    )
    table = (
        pl.concat([pooled.select(counts.columns), counts])
        .with_columns(n=pl.sum_horizontal("n_aa", "n_rr", "n_ar", "n_ra").cast(pl.Int64))
        .filter(pl.col("n") > 0)
    )
    values = measures_from_counts(*(table[c].to_numpy() for c in COUNTS))
    random = pl.col("setup_b").is_in(RANDOM_VARIANTS)
    probe_seed = pl.when((pl.col("kind") == "intra") & random).then(pl.lit(seed, pl.Int64))
    table = table.with_columns(
        **{m: pl.Series(values[m], dtype=pl.Float64) for m in MEASURES},
        seed=pl.coalesce(pl.col("seed"), probe_seed),
        statistic=pl.lit(VALUE),
        n_seeds=pl.lit(None, pl.Int64),
    ).select(list(CONSISTENCY_SCHEMA))
    return pl.concat([table, _over_seeds(table)]).cast(CONSISTENCY_SCHEMA).sort(_ORDER, nulls_last=False)


def _over_seeds(table: pl.DataFrame) -> pl.DataFrame:
    """The "mean" and "std" rows of every seeded pair and relation (module docstring)."""
    floats = [*MEASURES, "threshold_a", "threshold_b"]
    seeded = table.filter(pl.col("seed").is_not_null())
    keys = [*_PAIR, "relation_id"]
    summaries = []
    for statistic in SEED_STATISTICS:
        of = {"mean": pl.Expr.mean, "std": pl.Expr.std}[statistic]
        summaries.append(
            seeded.group_by(keys)
            .agg(
                *(of(pl.col(c).fill_nan(None)).fill_null(float("nan")).alias(c) for c in floats),
                pl.col("fallback_a", "fallback_b").any(),
                pl.col("seed").n_unique().cast(pl.Int64).alias("n_seeds"),
            )
            .with_columns(seed=pl.lit(None, pl.Int64), statistic=pl.lit(statistic), n=pl.lit(None, pl.Int64))
            .select(table.columns)
        )
    return pl.concat(summaries).cast(CONSISTENCY_SCHEMA)


def seed_spread(tables: pl.DataFrame) -> pl.DataFrame:
    """Mean and spread over seeds, side by side: per pair and relation of the seeded "value" rows
    (one table, whose perturbation seeds are rows already, or stacked tables of runs with other
    probe seeds), `n_seeds` and `<measure>_mean`, `<measure>_std` (sample standard deviation,
    null with one seed), NaN values left out. Rows without a seed are not summarised."""
    keys = [*_PAIR, "relation_id"]
    values = tables.filter(pl.col("statistic") == VALUE) if "statistic" in tables.columns else tables
    return (
        values.filter(pl.col("seed").is_not_null())
        .group_by(keys)
        .agg(
            pl.col("seed").n_unique().alias("n_seeds"),
            *(pl.col(m).fill_nan(None).mean().alias(f"{m}_mean") for m in MEASURES),
            *(pl.col(m).fill_nan(None).std().alias(f"{m}_std") for m in MEASURES),
        )
        .sort(keys, nulls_last=False)
    )
