"""A slow, obviously-correct reference for Base, Margin and entropy, one (instance, template) group at a time.

Why it exists: the estimators now run vectorised over a padded `[instance, template, option]` cube
(padding with −inf, argmax over a padded axis, np.partition over padded probabilities, bookkeeping
with fancy indexing). Each of those steps can be wrong in ways small hand-made examples miss: a
padded option winning, the runner-up of a one-option instance, a shifted option index, a row paired
with another instance's object. This module keeps the per-row implementation the cube replaced
(`git show db2f873:kcal_pipeline/estimators.py`): rows grouped in plain Python, each group
sorted by option_index, a softmax over exactly the scored options, so that the tests can check the
vectorised path against it on random partitions. It is for tests only; never make it fast.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

GROUP_KEYS = ("model_id", "relation_id", "instance_id", "template_id")
# Reduction name per log-likelihood column (the inverse of the cube's REDUCTIONS, written out again
# on purpose, so that a wrong mapping there is not copied here).
REDUCTION_OF_COLUMN = {
    "ll_sum": "sum",
    "ll_mean": "mean",
    "ll_answer_sum": "answer_sum",
    "ll_answer_mean": "answer_mean",
}


def answer_space(row: dict) -> tuple[int, int]:
    """(answer_space_k, answer_space_draw) of a probe_instances row: (0, 0) for the full space
    and for a row built without the columns."""
    return (row.get("answer_space_k", 0), row.get("answer_space_draw", 0))


COLUMNS = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "template_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "grain": pl.String,
    "output_kind": pl.String,
    "predicted_index": pl.Int32,
    "predicted_id": pl.String,
    "confidence": pl.Float64,
    "correct": pl.Boolean,
}
SORT_KEYS = ("model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction")


def softmax(ll: np.ndarray) -> np.ndarray:
    """Option distribution of one template; shifting by the max keeps exp() from overflowing."""
    z = np.exp(ll - ll.max())
    return z / z.sum()


def base(ll: np.ndarray) -> tuple[int, float]:
    """C = max_o p(o); np.argmax returns the first maximum, so ties go to the lowest position."""
    i = int(np.argmax(ll))
    return i, float(softmax(ll)[i])


def margin(ll: np.ndarray) -> tuple[int, float]:
    """C = p_[1] − p_[2]; with one option there is no runner-up, so Margin = Base (= 1)."""
    p = softmax(ll)
    i = int(np.argmax(ll))
    if p.size == 1:
        return i, float(p[0])
    second, first = np.sort(p)[-2:]
    return i, float(first - second)


def entropy(ll: np.ndarray) -> tuple[int, float]:
    """C = 1 − H(p)/log k over the k scored options, 0·log 0 = 0; one option: C = 1 (H = log 1 = 0).
    Clipped to [0, 1]: rounding can put a uniform distribution's H a hair above log k."""
    p = [float(q) for q in softmax(ll)]
    i = int(np.argmax(ll))
    if len(p) == 1:
        return i, 1.0
    h = -sum(q * math.log(q) for q in p if q > 0)
    return i, min(1.0, max(0.0, 1.0 - h / math.log(len(p))))


REFERENCE_ESTIMATORS = {"base": base, "margin": margin, "entropy": entropy}


def reference_estimates(
    scores: pl.DataFrame, reduction_column: str = "ll_sum", instances: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Base, Margin and entropy rows for every (instance, template) of `scores`, as
    `compute_estimates` gives them for those three estimators under the reduction that reads
    `reduction_column`. Split, answer_space_k and answer_space_draw come from `instances`
    (probe_instances: split, answer_space_k and answer_space_draw); without it the split
    is null and the answer space full (0, 0)."""
    per_instance: dict[str, tuple] = {}
    for row in instances.iter_rows(named=True) if instances is not None else ():
        per_instance[str(row["instance_id"])] = (row["split"], *answer_space(row))
    groups: dict[tuple[str, ...], list[tuple[int, str, bool, float]]] = {}
    for row in scores.iter_rows(named=True):
        key = tuple(str(row[k]) for k in GROUP_KEYS)
        statement = (int(row["option_index"]), str(row["object_id"]), bool(row["is_gold"]))
        groups.setdefault(key, []).append((*statement, float(row[reduction_column])))
    rows = []
    for key, statements in groups.items():
        statements.sort()  # by option_index
        ll = np.array([s[3] for s in statements], dtype=np.float64)
        for name, fn in REFERENCE_ESTIMATORS.items():
            position, confidence = fn(ll)
            option_index, object_id, is_gold, _ = statements[position]
            model_id, relation_id, instance_id, template_id = key
            split, answer_space_k, answer_space_draw = per_instance.get(instance_id, (None, 0, 0))
            rows.append(
                (
                    model_id,
                    relation_id,
                    instance_id,
                    split,
                    answer_space_k,
                    answer_space_draw,
                    template_id,
                    name,
                    REDUCTION_OF_COLUMN[reduction_column],
                    "template",
                    "probability",
                    option_index,
                    object_id,
                    confidence,
                    is_gold,
                )
            )
    return pl.DataFrame(rows, schema=COLUMNS, orient="row").sort(SORT_KEYS, nulls_last=True)
