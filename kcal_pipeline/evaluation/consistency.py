"""Consistency of knowledge-gap decisions (METHODS §4; Zhao et al. 2025, "Do We Know What LLMs
Don't Know? A Study of Consistency in Knowledge Probing", arXiv 2505.21701).

A probe turns confidence into a decision per instance: accept (the model knows, C ≥ τ) or reject
(a knowledge gap). A probe worth trusting decides alike when the prompt changes in ways that leave
the fact alone (intra-method: the same estimator on a perturbed prompt) and agrees with other probes
on the same prompt (cross-method). With A and R the accepted and rejected test instances of two
setups 1 and 2, aligned on the same instances:

    IoU_acc  = |A1 ∩ A2| / |A1 ∪ A2|        IoU_rej = |R1 ∩ R2| / |R1 ∪ R2|
    IoU_cons = harmonic mean of IoU_acc and IoU_rej
    DecCons  = |(A1 ∩ A2) ∪ (R1 ∩ R2)| / |A1 ∪ A2 ∪ R1 ∪ R2|
    Agreement = share of A1 ∩ A2 where both setups predict the same option

An empty denominator gives NaN (IoU_acc when neither setup accepts anything, IoU_rej when neither
rejects anything, Agreement when no instance is accepted by both), and IoU_cons is NaN when either
IoU is; it is 0 when both are 0.

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

from dataclasses import dataclass

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.dataset.instances.variants import SUBSAMPLE_SUFFIX
from kcal_pipeline.estimation.cube import PARAPHRASE_KINDS
from kcal_pipeline.estimation.registry import ESTIMATORS, FULL_ANSWER_SPACE, HEADLINE_SPLIT
from kcal_pipeline.evaluation.decisions import DEGENERATE_SHARE, FIXED_THRESHOLD

TUNE_SPLIT = "dev"
EVAL_SPLIT = HEADLINE_SPLIT
# A tuned threshold is degenerate when, on the dev split, it accepts DEGENERATE_SHARE of the
# instances or more, or rejects that share or more (decisions.py's tuned τ uses the same rule):
# such a probe does not separate known from unknown, so FALLBACK_THRESHOLD is used instead and
# `fallback_*` says so (as it does when a setup has no dev rows). The fallback is the same number
# for score-valued estimators, where it is arbitrary: read their fallback rows with that in mind.
FALLBACK_THRESHOLD = FIXED_THRESHOLD
ORIGINAL = "original"
PARAPHRASE = "paraphrase"
# Setups drawn with the probe seed (dataset/instances/context.py: the demonstrations of the context
# variants; the doubled space and the typo too in a templates table without perturbation_seed):
# their rows carry it. A template's perturbation_seed, or a subsample copy's draw, wins over it.
# context-fixed (the same demonstration everywhere) is not drawn.
RANDOM_VARIANTS = ("extra-space", "typo", "context-1shot", "context-3shot", "context-wrong")
ANSWER_SPACE_SETUP = "answer_space_k="

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
MEASURES = ("iou_acc", "iou_rej", "iou_cons", "dec_cons", "agreement")
# `statistic` of a per-setup (per-seed) row, and of the summary rows over a setup's seeds.
VALUE, SEED_STATISTICS = "value", ("mean", "std")
# Counts of aligned items: accepted in both, rejected in both, accepted by a only, by b only, and
# accepted by both with the same predicted option. Every measure is a function of them, so
# relations pool by adding counts.
COUNTS = ("n_aa", "n_rr", "n_ar", "n_ra", "n_agree")
_THRESHOLD_KEYS = ("model_id", "estimator", "reduction", "setup", "seed")
_ITEM = ("model_id", "relation_id", "instance", "reduction", "anchor")


# --- the threshold -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A tuned decision threshold: accept when C ≥ tau. `accepted_share` and `dev_accuracy` are
    those of the best dev threshold (before any fallback; NaN without dev rows)."""

    tau: float
    fallback: bool
    n_dev: int
    accepted_share: float
    dev_accuracy: float


def _tune(dev: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per group of `keys`: tau, fallback, n_dev, accepted_share, dev_accuracy.

    Candidates are the distinct dev confidences u_0 < … < u_m-1 and the midpoints between
    neighbours; "accept C ≥ u_j" and "accept C ≥ (u_j-1 + u_j)/2" split the dev rows alike, so
    each split is tried once, at the midpoint (at u_0 for j = 0, accept everything). Decision
    accuracy = (accepted and correct + rejected and wrong) / n_dev; the best split wins, ties to
    the lowest threshold. Degenerate (DEGENERATE_SHARE) → FALLBACK_THRESHOLD, fallback True.
    """
    per_value = (
        dev.group_by(*keys, "confidence")
        .agg(pl.len().alias("count"), pl.col("correct").sum().alias("right"))
        .sort(*keys, "confidence")
    )
    over = keys  # every running sum restarts per group
    wrong = pl.col("count") - pl.col("right")
    scored = per_value.with_columns(
        n_dev=pl.col("count").sum().over(over),
        accepted=pl.col("count").cum_sum(reverse=True).over(over),
        right_accepted=pl.col("right").cum_sum(reverse=True).over(over),
        wrong_rejected=(wrong.cum_sum() - wrong).over(over),
        below=pl.col("confidence").shift(1).over(over),
    ).with_columns(
        dev_accuracy=(pl.col("right_accepted") + pl.col("wrong_rejected")) / pl.col("n_dev"),
        tau=pl.when(pl.col("below").is_null())
        .then(pl.col("confidence"))
        .otherwise((pl.col("below") + pl.col("confidence")) / 2),
    )
    best = (
        scored.filter(pl.col("dev_accuracy") == pl.col("dev_accuracy").max().over(over))
        .group_by(keys, maintain_order=True)
        .first()
    )
    share = pl.col("accepted") / pl.col("n_dev")
    degenerate = (share >= DEGENERATE_SHARE) | (1 - share >= DEGENERATE_SHARE)
    return best.select(
        *keys,
        tau=pl.when(degenerate).then(pl.lit(FALLBACK_THRESHOLD)).otherwise(pl.col("tau")),
        fallback=degenerate,
        n_dev=pl.col("n_dev").cast(pl.Int64),
        accepted_share=share,
        dev_accuracy=pl.col("dev_accuracy"),
    )


def tune_threshold(confidence, correct) -> Threshold:
    """The dev-tuned decision threshold of one setup (the rule: see `_tune`); no dev rows →
    FALLBACK_THRESHOLD with fallback True."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    if c.shape != y.shape or c.ndim != 1:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"confidence {c[~np.isfinite(c)][0].item()!r} is not a finite number")
    if c.size == 0:
        return Threshold(FALLBACK_THRESHOLD, True, 0, float("nan"), float("nan"))
    row = _tune(pl.DataFrame({"g": 0, "confidence": c, "correct": y}), ["g"]).row(0, named=True)
    return Threshold(row["tau"], row["fallback"], row["n_dev"], row["accepted_share"], row["dev_accuracy"])


# --- the measures ------------------------------------------------------------------------------


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def measures_from_counts(n_aa, n_rr, n_ar, n_ra, n_agree) -> dict[str, np.ndarray]:
    """IoU_acc, IoU_rej, IoU_cons, DecCons and Agreement from the counts of aligned items (arrays
    of equal shape, one entry per pair of setups): the one definition every caller uses."""
    n_aa, n_rr, n_ar, n_ra, n_agree = (
        np.asarray(x, dtype=np.float64) for x in (n_aa, n_rr, n_ar, n_ra, n_agree)
    )
    iou_acc = _ratio(n_aa, n_aa + n_ar + n_ra)
    iou_rej = _ratio(n_rr, n_rr + n_ar + n_ra)
    total = iou_acc + iou_rej  # NaN if either is NaN, and so is their harmonic mean
    iou_cons = np.where(total == 0, 0.0, _ratio(2 * iou_acc * iou_rej, total))
    return {
        "iou_acc": iou_acc,
        "iou_rej": iou_rej,
        "iou_cons": iou_cons,
        "dec_cons": _ratio(n_aa + n_rr, n_aa + n_rr + n_ar + n_ra),
        "agreement": _ratio(n_agree, n_aa),
    }


def consistency_measures(accept_a, accept_b, predicted_a=None, predicted_b=None) -> dict[str, float]:
    """The five measures for two setups' decisions on the same items (position i = one instance in
    both). Predictions (option ids; None = no answer, which never agrees) give Agreement, NaN
    without them."""
    a, b = np.asarray(accept_a, dtype=bool), np.asarray(accept_b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"accept_a and accept_b must be 1-D of equal length, got {a.shape} and {b.shape}")
    both = a & b
    if predicted_a is None or predicted_b is None:
        agree = np.nan
    else:
        pa, pb = np.asarray(predicted_a, dtype=object), np.asarray(predicted_b, dtype=object)
        if pa.shape != a.shape or pb.shape != a.shape:
            raise ValueError(
                f"predictions must have the decisions' shape {a.shape}, got {pa.shape} and {pb.shape}"
            )
        same = np.array([x is not None and x == y for x, y in zip(pa, pb, strict=True)], dtype=bool)
        agree = (both & same).sum()
    counts = (both.sum(), (~a & ~b).sum(), (a & ~b).sum(), (~a & b).sum(), agree)
    return {k: float(v) for k, v in measures_from_counts(*counts).items()}


# --- setups ------------------------------------------------------------------------------------

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
    tuned = _tune(rows.filter(pl.col("split") == TUNE_SPLIT), keys)
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


# --- pairs -------------------------------------------------------------------------------------


def _decisions(rows: pl.DataFrame, thresholds: pl.DataFrame) -> pl.DataFrame:
    """Test rows with their threshold, fallback flag and decision (accept = C ≥ tau)."""
    keys = list(_THRESHOLD_KEYS)
    return (
        rows.filter(pl.col("split") == EVAL_SPLIT)
        .join(thresholds.select(*keys, "tau", "fallback"), on=keys, how="left", nulls_equal=True)
        .with_columns(accept=pl.col("confidence") >= pl.col("tau"))
    )


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
    decided = _decisions(rows, decision_thresholds(rows))
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
