"""Per-template confidence estimators (METHODS §2): option log-likelihoods → (answer, confidence).

Each estimator is one small function over the log-likelihood vector of one (instance, template),
in option_index order, registered by name. `compute_estimates` does the grouping, validation and
bookkeeping once, so a new estimator is just another `@register` function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns

Estimator = Callable[[np.ndarray], tuple[int, float]]
ESTIMATORS: dict[str, Estimator] = {}

GROUP_KEYS = ("model_id", "relation_id", "instance_id", "template_id")
OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "template_id": pl.String,
    "estimator": pl.String,
    "predicted_index": pl.Int32,
    "predicted_id": pl.String,
    "confidence": pl.Float64,
    "correct": pl.Boolean,
}


def register(name: str) -> Callable[[Estimator], Estimator]:
    """Add an estimator to ESTIMATORS; a second function under the same name is a bug, not an override."""

    def add(fn: Estimator) -> Estimator:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = fn
        return fn

    return add


def softmax(ll: np.ndarray) -> np.ndarray:
    """Option distribution of one template; shifting by the max keeps exp() from overflowing."""
    z = np.exp(ll - ll.max())
    return z / z.sum()


def _top(ll: np.ndarray) -> int:
    """Predicted position; np.argmax returns the first maximum, i.e. ties go to the lowest index."""
    return int(np.argmax(ll))


@register("base")
def base(ll: np.ndarray) -> tuple[int, float]:
    """C = max_o p(o)."""
    i = _top(ll)
    return i, float(softmax(ll)[i])


@register("margin")
def margin(ll: np.ndarray) -> tuple[int, float]:
    """C = p_[1] − p_[2]; with one option there is no runner-up, so Margin = Base (= 1)."""
    p = softmax(ll)
    i = _top(ll)
    if p.size == 1:
        return i, float(p[0])
    second, first = np.partition(p, -2)[-2:]
    return i, float(first - second)


def _resolve(estimators: Sequence[str] | None) -> list[str]:
    names = list(ESTIMATORS) if estimators is None else list(estimators)
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown estimator(s) {unknown}; known: {sorted(ESTIMATORS)}")
    if not names:
        raise ValueError("no estimators requested")
    return names


def _validate(scores: pl.DataFrame, reduction: str) -> None:
    """Fail loudly on input that would otherwise yield plausible-looking but wrong confidences."""
    require_columns(scores, [*GROUP_KEYS, "option_index", "object_id", "is_gold", reduction], "scores")
    ll = scores[reduction].cast(pl.Float64).to_numpy()
    if not np.isfinite(ll).all():
        bad = scores.filter(~pl.col(reduction).cast(pl.Float64).is_finite()).row(0, named=True)
        raise ValueError(
            f"scores: column {reduction!r} has a non-finite value {bad[reduction]!r} "
            f"(instance {bad['instance_id']!r}, template {bad['template_id']!r})"
        )
    dup = scores.filter(pl.struct([*GROUP_KEYS, "option_index"]).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"scores: duplicate rows for instance {row['instance_id']!r}, template "
            f"{row['template_id']!r}, option_index {row['option_index']!r}"
        )


def compute_estimates(
    scores: pl.DataFrame, estimators: Sequence[str] | None = None, reduction: str = "ll_sum"
) -> pl.DataFrame:
    """One row per (instance, template, estimator): the predicted option, its confidence and correctness.

    `reduction` names the log-likelihood column (Sum, Mean, Sum(A), …) so the same estimators run
    on every reduction. Output is sorted by (model_id, relation_id, instance_id, template_id,
    estimator) so that downstream metrics see a deterministic order.
    """
    names = _resolve(estimators)
    _validate(scores, reduction)
    groups = (
        scores.sort([*GROUP_KEYS, "option_index"])
        .group_by(GROUP_KEYS, maintain_order=True)
        .agg(pl.col(reduction).cast(pl.Float64), "option_index", "object_id", "is_gold")
    )
    keys = groups.select(pl.col(k).cast(pl.String) for k in GROUP_KEYS)
    lls = [np.asarray(v, dtype=np.float64) for v in groups[reduction].to_list()]
    options, objects, golds = (groups[c].to_list() for c in ("option_index", "object_id", "is_gold"))
    frames = []
    for name in names:
        fn = ESTIMATORS[name]
        picks = [fn(ll) for ll in lls]
        pos = [p for p, _ in picks]
        frames.append(
            keys.with_columns(
                estimator=pl.lit(name, pl.String),
                predicted_index=pl.Series([o[i] for o, i in zip(options, pos)], dtype=pl.Int32),
                predicted_id=pl.Series([str(o[i]) for o, i in zip(objects, pos)], dtype=pl.String),
                confidence=pl.Series([c for _, c in picks], dtype=pl.Float64),
                correct=pl.Series([g[i] for g, i in zip(golds, pos)], dtype=pl.Boolean),
            )
        )
    return (
        pl.concat(frames)
        .sort([*GROUP_KEYS, "estimator"])
        .select(pl.col(c).cast(t) for c, t in OUTPUT_SCHEMA.items())
    )
