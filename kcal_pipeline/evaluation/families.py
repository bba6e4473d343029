"""Causal vs masked language models, compared on pairs of similar accuracy (issue 14's last breakdown).

A causal model that is better calibrated than a masked one may just be the stronger model, so the
families are compared pair by pair: each causal model with the masked model of nearest accuracy
(`pair_models_by_accuracy`), then every metric both have side by side (`family_comparison`).

A model's family is its kind as scoring resolved it ("clm" or "mlm"; a registry entry's "auto" is
decided from the checkpoint at load), recorded in statement_scores.model_kind; `model_families`
reads it back from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

import numpy as np
import polars as pl

from kcal_pipeline.estimation.catalog import headline_reductions
from kcal_pipeline.estimation.registry import BASELINE, FULL_ANSWER_SPACE, HEADLINE_SPLIT
from kcal_pipeline.evaluation.registry import SCOPE_KEY_SCHEMA, metric_for

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

# Model families, in the model registry's words (ModelEntry.kind / LoadedModel.kind).
CAUSAL, MASKED = "clm", "mlm"
FAMILY_NAMES = {CAUSAL: "causal", MASKED: "masked"}

# The accuracy models are paired on: Base (the seed's estimator) under its headline reduction (the
# estimator catalog's), on the headline split, over all relations, on full answer spaces; each from
# the registry that defines it.
PAIRING = {
    "estimator": BASELINE,
    "reduction": headline_reductions()[BASELINE],
    "split": HEADLINE_SPLIT,
    "answer_space_k": FULL_ANSWER_SPACE,
    "scope": "all",
    "metric": metric_for("correctness"),
}
# What identifies one number of one model in the metrics table.
METRIC_KEYS = (
    "estimator",
    "reduction",
    "split",
    "answer_space_k",
    "answer_space_draw",
    "scope",
    "scope_value",
    "metric",
)
METRICS_COLUMNS = ["model_id", *METRIC_KEYS, "value", "n", "higher_is_better", "ci_low", "ci_high"]

PAIR_SCHEMA = {
    "causal_model_id": pl.String,
    "masked_model_id": pl.String,
    "causal_accuracy": pl.Float64,
    "masked_accuracy": pl.Float64,
    "accuracy_gap": pl.Float64,
}
COMPARISON_SCHEMA = {
    "causal_model_id": pl.String,
    "masked_model_id": pl.String,
    "accuracy_gap": pl.Float64,
    **{k: v for k, v in SCOPE_KEY_SCHEMA.items() if k != "model_id"},
    "metric": pl.String,
    "higher_is_better": pl.Boolean,
    "causal_value": pl.Float64,
    "masked_value": pl.Float64,
    "masked_minus_causal": pl.Float64,
    "causal_ci_low": pl.Float64,
    "causal_ci_high": pl.Float64,
    "masked_ci_low": pl.Float64,
    "masked_ci_high": pl.Float64,
    "causal_n": pl.Int64,
    "masked_n": pl.Int64,
}
UNPAIRED_SCHEMA = {
    "model_id": pl.String,
    "family": pl.String,
    "pairing_accuracy": pl.Float64,
    "reason": pl.String,
}


class FamilyComparison(NamedTuple):
    """The comparison table (COMPARISON_SCHEMA), the pairs it is built from (PAIR_SCHEMA) and the
    models left out of it, one row each with the reason (UNPAIRED_SCHEMA)."""

    table: pl.DataFrame
    pairs: pl.DataFrame
    unpaired: pl.DataFrame


def pair_models_by_accuracy(accuracy: Mapping[str, float], family: Mapping[str, str]) -> pl.DataFrame:
    """Causal and masked models paired one to one by nearest overall accuracy, so a comparison of
    the two families is not a comparison of a strong model with a weak one.

    Greedy: the closest (causal, masked) pair first, then the closest among the models left, and so
    on; ties in the gap go to the lexicographically smaller (causal id, masked id). Models left over
    in the larger family are unpaired. `accuracy`: model id → overall accuracy (scope all, one
    estimator); `family`: model id → "clm" or "mlm" (the registry kind, resolved, never "auto").
    Rows in pairing order, accuracy_gap = |causal − masked|.
    """
    _check_families(family)
    for model_id, acc in accuracy.items():
        if model_id not in family:
            raise ValueError(f"model {model_id!r}: no family given (have {sorted(family)})")
        if not np.isfinite(acc):
            raise ValueError(f"model {model_id!r}: accuracy {acc!r} is not a finite number")
    causal = sorted(m for m in accuracy if family[m] == CAUSAL)
    masked = sorted(m for m in accuracy if family[m] == MASKED)
    candidates = sorted(
        (abs(accuracy[c] - accuracy[m]), c, m) for c in causal for m in masked
    )  # all |C|·|M| pairs: a handful of models, not a hot path
    used: set[str] = set()
    rows = []
    for gap, c, m in candidates:
        if c not in used and m not in used:
            used |= {c, m}
            rows.append((c, m, float(accuracy[c]), float(accuracy[m]), float(gap)))
    return pl.DataFrame(rows, schema=PAIR_SCHEMA, orient="row")


def _check_families(family: Mapping[str, str]) -> None:
    for model_id, kind in family.items():
        if kind not in (CAUSAL, MASKED):
            raise ValueError(
                f"model {model_id!r}: family {kind!r} is not {CAUSAL!r} or {MASKED!r} "
                "(resolve 'auto' to the kind detected at load)"
            )


def model_families(scores: pl.DataFrame) -> dict[str, str]:
    """model id → family, from statement_scores' model_id and model_kind (any number of rows per
    model). A model with no kind recorded (scored before kcal recorded it) or with two kinds is an
    error naming it."""
    _has_columns(scores.columns, ["model_id"], "statement_scores")
    if "model_kind" not in scores.columns:
        scores = scores.with_columns(model_kind=pl.lit(None, pl.String))
    kinds = scores.group_by("model_id").agg(pl.col("model_kind").unique().sort(nulls_last=False))
    out = {}
    for model_id, found in kinds.sort("model_id").iter_rows():
        if None in found:
            raise ValueError(
                f"statement_scores of model {model_id!r}: no model_kind recorded (scored before "
                "kcal recorded it); re-materialize statement_scores (`kcal demo` does, without rescoring)"
            )
        if len(found) > 1:
            raise ValueError(f"statement_scores of model {model_id!r}: several model kinds {found}")
        out[model_id] = found[0]
    _check_families(out)
    return out


def model_families_by_file(scores: Iterable[pl.LazyFrame]) -> dict[str, str]:
    """model_families from one scan per statement_scores file (its model_id and model_kind): each
    file's distinct pairs, so no column of every file is stacked. Collected one by one: polars'
    collect_all over thousands of small queries grows quadratically (1,600 files: 28 s, against
    5.7 s in a loop)."""
    distinct = [scan.unique().collect() for scan in scores]
    if not distinct:
        return {}
    return model_families(pl.concat(distinct, how="diagonal_relaxed"))


def family_comparison(metrics: pl.DataFrame, families: Mapping[str, str]) -> FamilyComparison:
    """Causal vs masked models, pair by pair, on every metric both models of a pair have.

    `metrics`: the metrics tables of all models stacked (the metrics asset's columns); `families`:
    model id → "clm" or "mlm" (model_families). Models are paired with pair_models_by_accuracy on
    PAIRING: Base's test-split accuracy under its headline reduction ("sum"), scope "all",
    answer_space_k 0. Then, per pair and per (estimator, reduction, split, answer_space_k,
    answer_space_draw, scope, scope_value, metric) that BOTH models have (an inner join: a relation
    only one of them was scored on is left out): causal_value, masked_value, masked_minus_causal
    (masked − causal: positive means the masked model scores higher, better or worse as
    higher_is_better says), both models' interval and n, and the pair's accuracy_gap. Rows in
    pairing order, then by key.

    A model of `families` that is in no pair is in `unpaired` with the reason: no metrics, no
    pairing accuracy, no model of the other family, or all of them paired with closer models.
    Errors: a family other than "clm"/"mlm"; a model in `metrics` without a family; two rows for
    one model and key. family_comparison_by_model gives the same from one scan per model's file,
    without stacking them (the cross_model asset's path); this is its reference.
    """
    metrics = _with_draw(metrics)
    _has_columns(metrics.columns, METRICS_COLUMNS, "metrics")
    _check_families(families)
    models = metrics["model_id"].unique().sort().to_list()
    _check_have_families(models, families)
    _refuse_duplicates(metrics)

    accuracy, unpaired = _pairing_accuracy(_pairing_rows(metrics), set(models), families)
    pairs = pair_models_by_accuracy(accuracy, {m: families[m] for m in accuracy})
    unpaired += _left_over(accuracy, families, pairs)
    unpaired_frame = pl.DataFrame(unpaired, schema=UNPAIRED_SCHEMA, orient="row").sort("model_id")
    return FamilyComparison(_side_by_side(metrics, pairs), pairs, unpaired_frame)


def family_comparison_by_model(
    metrics: Iterable[pl.LazyFrame], families: Mapping[str, str]
) -> FamilyComparison:
    """family_comparison (same result, same errors) from one lazy scan per model's metrics file,
    with time and memory linear in the number of models: the pairing reads each file's PAIRING
    row and model ids (predicates pushed into the scan); then each pair's two files are read, one
    pair at a time, for the side-by-side join, and every file's rows are checked for duplicate
    keys on their own (a model's rows live in its one file; a model found in two files is an
    error too). Never more than two models' metrics in memory."""
    scans = [_with_draw(scan) for scan in metrics]
    for scan in scans:
        _has_columns(scan.collect_schema().names(), METRICS_COLUMNS, "metrics")
    _check_families(families)
    # one small query at a time (see model_families_by_file): each file's model ids and PAIRING rows
    ids = [scan.select(pl.col("model_id").unique()).collect()["model_id"].to_list() for scan in scans]
    pairing_rows = [_pairing_rows(scan).collect() for scan in scans]
    owner: dict[str, int] = {}
    for index, models in enumerate(ids):
        for model_id in models:
            if model_id in owner:
                raise ValueError(f"metrics: model {model_id!r} is in two files (several rows for each key)")
            owner[model_id] = index
    _check_have_families(sorted(owner), families)
    pairing = (
        pl.concat(pairing_rows)
        if pairing_rows
        else pl.DataFrame(schema={"model_id": pl.String, "value": pl.Float64})
    )

    accuracy, unpaired = _pairing_accuracy(pairing, set(owner), families)
    pairs = pair_models_by_accuracy(accuracy, {m: families[m] for m in accuracy})
    unpaired += _left_over(accuracy, families, pairs)
    unpaired_frame = pl.DataFrame(unpaired, schema=UNPAIRED_SCHEMA, orient="row").sort("model_id")

    def read(index: int) -> pl.DataFrame:
        return _refuse_duplicates(scans[index].select(METRICS_COLUMNS).collect())

    tables, checked = [], set()
    for pair in pairs.iter_slices(1):
        files = [owner[pair[f"{side}_model_id"][0]] for side in ("causal", "masked")]
        frames = [read(index) for index in dict.fromkeys(files)]
        checked.update(files)
        tables.append(_side_by_side(pl.concat(frames, how="diagonal_relaxed"), pair))
    for index in sorted(set(range(len(scans))) - checked):  # the unpaired models' files: keys only
        _refuse_duplicates(scans[index].select("model_id", *METRIC_KEYS).collect())
    table = pl.concat(tables) if tables else _side_by_side(pl.DataFrame(), pairs)
    return FamilyComparison(table, pairs, unpaired_frame)


def _with_draw(metrics: FrameT) -> FrameT:
    """A metrics table from before the option-count sweep: one draw per cut answer space."""
    columns = metrics.collect_schema().names() if isinstance(metrics, pl.LazyFrame) else metrics.columns
    if "answer_space_draw" not in columns and "answer_space_k" in columns:
        draw = pl.when(pl.col("answer_space_k") == 0).then(0).otherwise(1).cast(pl.Int32)
        return metrics.with_columns(answer_space_draw=draw)
    return metrics


def _check_have_families(models: list[str], families: Mapping[str, str]) -> None:
    missing = [m for m in models if m not in families]
    if missing:
        raise ValueError(
            f"metrics: model {missing[0]!r} has no family (families given for {sorted(families)})"
        )


def _refuse_duplicates(metrics: pl.DataFrame) -> pl.DataFrame:
    """`metrics`, unless a (model_id, key) has several rows: an error naming the first. Row hashes
    first (a vectorised u64 per row, ~3× faster than hashing a struct of strings), then the exact
    check on the rows whose hash repeats."""
    keys = metrics.select("model_id", *METRIC_KEYS)
    candidates = keys.filter(keys.hash_rows().is_duplicated())
    duplicated = candidates.filter(candidates.is_duplicated())
    if not duplicated.is_empty():
        raise ValueError(f"metrics: several rows for {duplicated.row(0, named=True)}")
    return metrics


def _has_columns(columns: list[str], wanted: list[str], what: str) -> None:
    """Presence only: nulls are expected (an interval the bootstrap does not compute)."""
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise ValueError(f"{what}: missing column {missing[0]!r} (have {columns})")


def _pairing_rows(metrics: FrameT) -> FrameT:
    """model_id and value of the PAIRING rows (a few per model)."""
    return metrics.filter(pl.all_horizontal(pl.col(k) == v for k, v in PAIRING.items())).select(
        "model_id", "value"
    )


def _pairing_accuracy(
    rows: pl.DataFrame, present: set[str], families: Mapping[str, str]
) -> tuple[dict[str, float], list]:
    """(model id → pairing accuracy, unpaired rows for models without a finite one) from the
    PAIRING rows and the models that have metrics."""
    found = dict(zip(rows["model_id"].to_list(), rows["value"].to_list(), strict=True))
    accuracy, unpaired = {}, []
    where = ", ".join(f"{k} {v}" for k, v in PAIRING.items() if k != "metric")
    for model_id in sorted(families):
        value = found.get(model_id)
        if model_id not in present:
            unpaired.append((model_id, families[model_id], None, "no metrics"))
        elif value is None:
            unpaired.append((model_id, families[model_id], None, f"no accuracy at {where}"))
        elif not np.isfinite(value):
            unpaired.append((model_id, families[model_id], value, f"accuracy at {where} is {value}"))
        else:
            accuracy[model_id] = float(value)
    return accuracy, unpaired


def _left_over(accuracy: Mapping[str, float], families: Mapping[str, str], pairs: pl.DataFrame) -> list:
    paired = set(pairs["causal_model_id"].to_list()) | set(pairs["masked_model_id"].to_list())
    rows = []
    for model_id in sorted(set(accuracy) - paired):
        family = families[model_id]
        other = MASKED if family == CAUSAL else CAUSAL
        others = sum(1 for m in accuracy if families[m] == other)
        reason = (
            f"no {FAMILY_NAMES[other]} model ({other}) to pair with"
            if others == 0
            else f"all {others} {FAMILY_NAMES[other]} model(s) paired with closer {FAMILY_NAMES[family]} ones"
        )
        rows.append((model_id, family, accuracy[model_id], reason))
    return rows


def _side_by_side(metrics: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    if pairs.is_empty():
        return pl.DataFrame(schema=COMPARISON_SCHEMA)
    keys = list(METRIC_KEYS)
    values = metrics.select("model_id", *keys, "higher_is_better", "value", "ci_low", "ci_high", "n")

    def side(name: str) -> pl.DataFrame:
        renamed = {c: f"{name}_{c}" for c in ("value", "ci_low", "ci_high", "n")}
        return values.rename({"model_id": f"{name}_model_id", **renamed})

    order = pairs.select("causal_model_id", "masked_model_id", "accuracy_gap").with_row_index("pair")
    table = (
        order.join(side("causal"), on="causal_model_id", how="inner")
        .join(
            side("masked").drop("higher_is_better"),
            on=["masked_model_id", *keys],
            how="inner",
            nulls_equal=True,
        )
        .with_columns(masked_minus_causal=pl.col("masked_value") - pl.col("causal_value"))
        .sort("pair", *keys)
    )
    return table.select(list(COMPARISON_SCHEMA)).cast(COMPARISON_SCHEMA)
