"""What Selective-LAMA's claims share (seed 002): the paper's confidence functions, the dev and test
rows they are read on side by side, AURC on a common instance set, and relation-block resamples
(correlations and group contrasts over relations, resampled as the bootstrap resamples them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import DEV_SPLIT, FULL_ANSWER_SPACE, headline_template_estimates
from kcal_pipeline.evaluation.resampled_metrics import batched_metrics
from kcal_pipeline.evaluation.resamples import PAD, Resamples
from kcal_pipeline.reporting.findings.core import (
    REDUCTION,
    StoreTables,
)
from kcal_pipeline.reporting.findings.selections import (
    estimators_in,
    relation_resamples,
)

# The paper's confidence functions (§3.2) in its order; kcal's Base is not one of them.
PAPER_FUNCTIONS = ("token", "sent", "gap", "reranking", "dropout_mean", "dropout_var", "template_diff")
TOP_PREDICTIONS = 5  # W^freq(r): a relation's five most frequent predictions (§4.2, eq. 11)
MIN_RELATIONS = 3  # a correlation over relations needs three of them
KEYS = ["relation_id", "instance_id"]

# --- what the claims share -----------------------------------------------------------------------


def dev_headline_rows(t: StoreTables) -> pl.DataFrame:
    """headline_rows on the dev split (t.dev_estimates): where a claim picks a comparator or splits
    relations, so that the test rows it then judges played no part in the choice."""
    if t.dev_estimates.is_empty() or t.templates.is_empty():
        return pl.DataFrame()
    dev = t.dev_estimates.filter(
        (pl.col("split") == DEV_SPLIT)
        & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
        & (pl.col("reduction") == REDUCTION)
    )
    return headline_template_estimates(dev, t.templates)


def paper_functions_in(frame: pl.DataFrame) -> list[str]:
    present = estimators_in(frame)
    return [e for e in PAPER_FUNCTIONS if e in present]


def side_by_side(frame: pl.DataFrame, estimators: list[str]) -> pl.DataFrame:
    """One row per (relation, instance) that every estimator answered, sorted (the resample plans'
    order): c_<e> its confidence, y_<e> its correctness, and the predicted option index (the same
    for every function: they keep Base's prediction)."""
    wide = None
    for e in estimators:
        own = frame.filter(pl.col("estimator") == e).select(
            *KEYS,
            pl.col("confidence").alias(f"c_{e}"),
            pl.col("correct").alias(f"y_{e}"),
            *([pl.col("predicted_index")] if wide is None else []),
        )
        wide = own if wide is None else wide.join(own, on=KEYS)
    return wide.sort(KEYS)


def aurc_of(frame: pl.DataFrame, estimator: str, on: pl.DataFrame | None = None) -> tuple[float, int]:
    """AURC of one estimator (its rows sorted by relation and instance: AURC's tie order), on the
    instances of `on` where given; and on how many."""
    rows = frame.filter(pl.col("estimator") == estimator)
    if on is not None:
        rows = rows.join(on.select(KEYS), on=KEYS, how="semi")
    if rows.is_empty():
        return math.nan, 0
    rows = rows.sort(KEYS)
    one = Resamples(np.arange(rows.height, dtype=np.int32)[None, :], np.array([rows.height]))
    value = batched_metrics(["aurc"], rows["confidence"].to_numpy(), rows["correct"].to_numpy(), one)["aurc"]
    return float(value[0]), rows.height


def relation_blocks(res: Resamples, relation: np.ndarray, sizes: np.ndarray) -> tuple[Resamples, np.ndarray]:
    """Each two-stage resample of resample_plan's scope "all" cut into its drawn relations: one
    block of rows per drawn relation (as clustered_resamples lays them out: the drawn relations in
    turn, each with as many rows as it has), as Resamples [blocks, width], and each block's resample
    number. A relation drawn twice gives two blocks, each with its own resampled instances.
    `relation` is every row's relation code, `sizes` each code's row count."""
    blocks, owner = [], []
    for b in range(res.n_resamples):
        rows, pos = res.rows(b), 0
        while pos < rows.size:
            block = rows[pos : pos + sizes[relation[rows[pos]]]]
            if (relation[block] != relation[block[0]]).any() or block.size != sizes[relation[block[0]]]:
                raise ValueError(f"resample {b}: rows at {pos} are not one drawn relation's block")
            blocks.append(block)
            owner.append(b)
            pos += block.size
    lengths = np.array([blk.size for blk in blocks], dtype=np.int64)
    indices = np.full((len(blocks), int(lengths.max())), PAD, dtype=np.int32)
    indices[np.arange(indices.shape[1]) < lengths[:, None]] = np.concatenate(blocks)
    return Resamples(indices, lengths), np.array(owner)


@dataclass(frozen=True)
class RelationBlocks:
    """A sorted side_by_side frame cut into per-relation blocks twice: `sample`, every relation once
    with its own rows (the point estimate: block k is relation k); `boot`, the relation_resamples
    plan (relations, then instances within each drawn relation) cut by relation_blocks, with each
    block's resample (`owner`) and relation code (`relation`). `names` are the relation ids by code."""

    names: np.ndarray
    sample: Resamples
    boot: Resamples
    owner: np.ndarray
    relation: np.ndarray

    @classmethod
    def of(cls, wide: pl.DataFrame) -> RelationBlocks:
        names, relation = np.unique(wide["relation_id"].to_numpy(), return_inverse=True)
        sizes = np.bincount(relation)
        starts = np.cumsum(sizes) - sizes
        columns = np.arange(int(sizes.max()))
        whole = np.where(columns < sizes[:, None], starts[:, None] + columns, PAD).astype(np.int32)
        boot, owner = relation_blocks(relation_resamples(wide["relation_id"].to_numpy()), relation, sizes)
        return cls(names, Resamples(whole, sizes), boot, owner, relation[boot.indices[:, 0]])


def block_metrics(wide: pl.DataFrame, estimator: str, blocks: Resamples) -> dict[str, np.ndarray]:
    """Accuracy and AURC of one estimator on every block: {metric: [blocks]}."""
    return batched_metrics(
        ["accuracy", "aurc"], wide[f"c_{estimator}"].to_numpy(), wide[f"y_{estimator}"].to_numpy(), blocks
    )


def prediction_coverage(predicted: np.ndarray, blocks: Resamples) -> np.ndarray:
    """Cov^P (eq. 11) on every block: the share of its rows whose predicted option is one of the
    block's TOP_PREDICTIONS most frequent predictions. `predicted` is each row's option index, which
    names an answer only where a relation's instances share one option list in one order."""
    idx = blocks.indices
    valid = idx != PAD
    codes = predicted[np.where(valid, idx, 0)]
    counts = np.zeros((idx.shape[0], int(predicted.max()) + 1))
    block = np.broadcast_to(np.arange(idx.shape[0])[:, None], idx.shape)
    np.add.at(counts, (block[valid], codes[valid]), 1.0)
    top = -np.sort(-counts, axis=1)[:, :TOP_PREDICTIONS]
    return top.sum(axis=1) / blocks.sizes


def pearson_by(x: np.ndarray, y: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Pearson's r of x and y within each group 0 … n − 1: [n], NaN where x or y is constant."""
    count = np.bincount(group, minlength=n).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = x - (np.bincount(group, x, n) / count)[group]
        dy = y - (np.bincount(group, y, n) / count)[group]
        sxx, syy = np.bincount(group, dx * dx, n), np.bincount(group, dy * dy, n)
        r = np.bincount(group, dx * dy, n) / np.sqrt(sxx * syy)
    flat = (sxx <= 1e-12 * count) | (syy <= 1e-12 * count)
    return np.where(flat, np.nan, r)


def group_contrast(values: np.ndarray, first: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0 … n − 1: the mean of values over its `first` blocks − the mean over its other
    blocks ([n]; NaN where either side has none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.bincount(group, np.where(first, values, 0.0), n) / np.bincount(group, first.astype(float), n)
        b = np.bincount(group, np.where(first, 0.0, values), n) / np.bincount(
            group, (~first).astype(float), n
        )
    return a - b
