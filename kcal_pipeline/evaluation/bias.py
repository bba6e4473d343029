"""Template bias (METHODS §3; Yoshikawa & Okazaki 2023, Selective-LAMA): does a model answer a
relation with a few favourite objects whatever the subject?

Per relation, S = its TOP_OBJECTS most-predicted objects (ties in count broken by object id, so S
does not depend on row order; fewer if fewer distinct objects were predicted). Cov^P = the share of
the relation's predictions in S, Cov^A = the share of its gold answers in S. Cov^P well above
Cov^A means the predictions are more concentrated than the answers. Both are descriptive (no
better direction). compute_metrics reports them per relation (scope "relation") and, for scope
"all", their unweighted mean over relations (each relation has its own S).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.accuracy import per_segment
from kcal_pipeline.evaluation.registry import register

TOP_OBJECTS = 5


def top_predicted(predicted: pl.Series, k: int = TOP_OBJECTS) -> pl.Series:
    """The k most frequent predicted ids (null = no answer is never one), by count descending, then
    id ascending."""
    counts = predicted.drop_nulls().value_counts(name="count")
    return counts.sort(["count", predicted.name], descending=[True, False]).head(k)[predicted.name]


def _top_predicted_batched(frame: pl.DataFrame, k: int = TOP_OBJECTS) -> pl.DataFrame:
    """top_predicted of every segment: (segment, predicted_id, in_top = True)."""
    counts = frame.drop_nulls("predicted_id").group_by("segment", "predicted_id").len("count")
    top = counts.sort(["segment", "count", "predicted_id"], descending=[False, True, False])
    return (
        top.group_by("segment", maintain_order=True)
        .head(k)
        .select("segment", "predicted_id", in_top=pl.lit(True))
    )


def _in_top(rows: pl.DataFrame, top: pl.DataFrame, on: str) -> pl.DataFrame:
    """`rows` with in_top: whether its `on` id is among its segment's `top` predicted ids."""
    joined = rows.join(
        top.rename({"predicted_id": on}), on=["segment", on], how="left", maintain_order="left"
    )
    return joined.with_columns(pl.col("in_top").fill_null(False))


def _prediction_coverage_batched(frame: pl.DataFrame, count: int) -> np.ndarray:
    hits = _in_top(frame, _top_predicted_batched(frame), "predicted_id")
    return per_segment(hits, pl.col("in_top").mean(), count)


def _answer_coverage_batched(frame: pl.DataFrame, count: int) -> np.ndarray:
    golds = frame.with_row_index("instance").explode("gold_ids")
    hits = _in_top(golds, _top_predicted_batched(frame), "gold_ids")
    # in row order: a hash-ordered group_by would sum the per-instance means in a different order on
    # every run, and the table's bytes would change in the last bit (a spurious file_changed)
    per_instance = hits.group_by("segment", "instance", maintain_order=True).agg(pl.col("in_top").mean())
    return per_segment(per_instance, pl.col("in_top").mean(), count)


@register(
    "prediction_coverage",
    label="Cov^P (template bias)",
    family="template_bias",
    needs="any",
    higher_is_better=None,
    input="predictions",
    batched=_prediction_coverage_batched,
)
def prediction_coverage(predicted: pl.Series, gold: pl.Series) -> float:
    """Cov^P: share of the relation's instances whose prediction is one of its TOP_OBJECTS most
    predicted objects (an instance without an answer counts, as not in the set)."""
    return predicted.is_in(top_predicted(predicted).implode()).fill_null(False).mean()


@register(
    "answer_coverage",
    label="Cov^A (template bias)",
    family="template_bias",
    needs="any",
    higher_is_better=None,
    input="predictions",
    batched=_answer_coverage_batched,
)
def answer_coverage(predicted: pl.Series, gold: pl.Series) -> float:
    """Cov^A: share of the relation's gold answers in its TOP_OBJECTS most predicted objects. An
    instance with n golds gives each weight 1/n, so every instance weighs 1 as its prediction does
    in Cov^P; with one gold per instance (LAMA, as in the paper) it is the share of instances whose
    gold answer is in the set."""
    top = top_predicted(predicted).implode()
    per_instance = pl.DataFrame({"gold": gold}).select(
        pl.col("gold").list.eval(pl.element().is_in(top)).list.mean()
    )
    return per_instance["gold"].mean()


def attach_gold_ids(estimates: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """estimates with each instance's gold_ids (List[String]) from probe_instances (or its
    answer-space subsample copies, whose instance ids carry `#k`), joined on relation and instance:
    what the template bias metrics read. An instance missing from `instances` is an error."""
    for what, frame in (("estimates", estimates), ("instances", instances)):
        missing = [c for c in ("relation_id", "instance_id") if c not in frame.columns]
        if missing:
            raise ValueError(f"{what}: missing column(s) {missing} (have {frame.columns})")
    if "gold_ids" not in instances.columns:
        raise ValueError(f"instances: missing column 'gold_ids' (have {instances.columns})")
    gold = instances.select("relation_id", "instance_id", "gold_ids").unique(["relation_id", "instance_id"])
    out = estimates.drop("gold_ids", strict=False).join(
        gold, on=["relation_id", "instance_id"], how="left", maintain_order="left"
    )
    lost = out.filter(pl.col("gold_ids").is_null())
    if not lost.is_empty():
        row = lost.row(0, named=True)
        raise ValueError(
            f"instances: no gold_ids for instance {row['instance_id']!r} of relation {row['relation_id']!r}"
        )
    return out
