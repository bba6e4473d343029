"""What each figure of the per-model page shows: tidy frames selected from the evaluation tables
(headline selection: reporting/selection.py) that reporting/plots.py draws."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl

from kcal_pipeline.estimation.markers import estimator_name
from kcal_pipeline.estimation.registry import (
    BASELINE,
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    family_rank,
)
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting import plots
from kcal_pipeline.reporting.selection import (
    ACCURACY,
    CALIBRATION,
    CONFIDENCE_LEVEL,
    INTERVAL_METRICS,
    accuracy_n,
    at_headline_reduction,
    headline,
    label,
    main_estimators,
)

MARKER_KINDS = ("marker_verbal", "marker_numeric")
RECALIBRATION = "recalibration"


def reliability_panels(metrics: pl.DataFrame, curves: pl.DataFrame) -> list[plots.ReliabilityPanel]:
    """One panel per main estimator with a reliability curve (all relations): its bins with the
    bootstrap band, and its ACE with the 95 % interval from the metrics table in the legend."""
    calibration = headline(curves).filter((pl.col("curve") == "calibration") & (pl.col("scope") == "all"))
    for column in ("y_low", "y_high"):  # a curves table written before the band had none
        if column not in calibration.columns:
            calibration = calibration.with_columns(pl.lit(None, pl.Float64).alias(column))
    ace = headline(metrics).filter((pl.col("scope") == "all") & (pl.col("metric") == CALIBRATION))
    panels = []
    for estimator in main_estimators(calibration["estimator"].unique().to_list()):
        bins = calibration.filter(pl.col("estimator") == estimator).sort("bin")
        row = ace.filter(pl.col("estimator") == estimator)
        if row.is_empty():
            legend = f"n = {bins['n'].sum()}"
        else:
            r = row.row(0, named=True)
            interval = plots.interval_text(r["value"], r.get("ci_low"), r.get("ci_high"))
            legend = f"{METRICS[CALIBRATION].label} {interval}, n = {r['n']}"
        panels.append(
            plots.ReliabilityPanel(label(estimator), bins.select("x", "y", "y_low", "y_high", "n"), legend)
        )
    return panels


def selective_curves(curves: pl.DataFrame, estimators: Iterable[str] | None = None) -> pl.DataFrame:
    """Accuracy–rejection and risk–coverage points (all relations) of every estimator (or those
    given), grouped by family (FAMILY_ORDER), registry order within one: family, label, curve, x,
    y. A τ that keeps no answer has no accuracy (NaN): that point is left out."""
    rows = headline(curves).filter(
        (pl.col("scope") == "all")
        & pl.col("curve").is_in(list(plots.SELECTIVE_CURVES))
        & pl.col("x").is_finite()
        & pl.col("y").is_finite()
    )
    present = set(rows["estimator"].unique().to_list())
    wanted = [e for e in ESTIMATORS if e in present and (estimators is None or e in set(estimators))]
    ordered = sorted(wanted, key=lambda e: family_rank(ESTIMATORS[e].family))
    frames = [
        rows.filter(pl.col("estimator") == e)
        .sort("curve", "x")
        .select(
            pl.lit(ESTIMATORS[e].family).alias("family"),
            pl.lit(label(e)).alias("label"),
            "curve",
            "x",
            "y",
        )
        for e in ordered
    ]
    schema = {"family": pl.String, "label": pl.String, "curve": pl.String, "x": pl.Float64, "y": pl.Float64}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def marker_deltas(metrics: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Δ = marked − unmarked of accuracy and ACE, per relation and marker: each marker estimator
    (Base on the marked variant, stored on its parent's row) against Base on the same parent
    template (the `template` scope rows; templates.parent_id and variant name the pairs), averaged
    over the relation's templates that have the marker; then 'all', the relations weighted by their
    instances (as sql/queries/marker_deltas.sql). Columns: relation_id, estimator, metric, delta, n."""
    schema = {
        "relation_id": pl.String,
        "estimator": pl.String,
        "metric": pl.String,
        "delta": pl.Float64,
        "n": pl.Int64,
    }
    if "parent_id" not in templates.columns:
        return pl.DataFrame(schema=schema)
    marks = (
        templates.filter(pl.col("kind").is_in(MARKER_KINDS) & pl.col("parent_id").is_not_null())
        .select("relation_id", "parent_id", "variant")
        .with_columns(
            pl.col("variant").map_elements(estimator_name, return_dtype=pl.String).alias("estimator")
        )
        .drop("variant")
        .unique()
    )
    per_template = headline(metrics).filter(
        (pl.col("scope") == "template") & pl.col("metric").is_in([ACCURACY, CALIBRATION])
    )
    base = per_template.filter(pl.col("estimator") == BASELINE).select(
        "reduction", "scope_value", "metric", pl.col("value").alias("unmarked")
    )
    marked = per_template.join(
        marks, left_on=["scope_value", "estimator"], right_on=["parent_id", "estimator"]
    ).join(base, on=["reduction", "scope_value", "metric"], nulls_equal=True)
    if marked.is_empty():
        return pl.DataFrame(schema=schema)
    per_relation = marked.group_by("relation_id", "estimator", "metric").agg(
        (pl.col("value") - pl.col("unmarked")).mean().alias("delta"), pl.col("n").max()
    )
    overall = per_relation.group_by("estimator", "metric").agg(
        ((pl.col("delta") * pl.col("n")).sum() / pl.col("n").sum()).alias("delta"), pl.col("n").sum()
    )
    both = pl.concat(
        [per_relation, overall.with_columns(relation_id=pl.lit("all")).select(per_relation.columns)]
    ).filter(pl.col("delta").is_finite())  # an undefined ACE has no Δ
    return (
        both.select(list(schema))
        .cast(schema)
        .sort(pl.col("relation_id") == "all", "relation_id", "estimator")
    )


def _matrix(rows: list[str], columns: list[str], values: dict[tuple[str, str], float]) -> np.ndarray:
    return np.array([[values.get((r, c), np.nan) for c in columns] for r in rows], dtype=np.float64)


def marker_panels(deltas: pl.DataFrame) -> list[plots.HeatmapPanel]:
    """Δaccuracy and ΔACE heatmaps, relations × markers (blue = the marker helps)."""
    relations = deltas["relation_id"].unique(maintain_order=True).to_list()
    markers = [e for e in ESTIMATORS if e in set(deltas["estimator"].to_list())]
    panels = []
    for metric, cmap in ((ACCURACY, "RdBu"), (CALIBRATION, "RdBu_r")):
        title = f"Δ{METRICS[metric].label} (marked − unmarked)"
        rows = deltas.filter(pl.col("metric") == metric)
        if rows.is_empty():  # e.g. no finite ΔACE: that panel is left out, never drawn empty
            continue
        values = {(r, e): v for r, e, v in rows.select("relation_id", "estimator", "delta").iter_rows()}
        panels.append(
            plots.HeatmapPanel(
                title,
                _matrix(relations, markers, values),
                relations,
                [label(m) for m in markers],
                colorbar=f"Δ{METRICS[metric].label} (blue: the marker helps)",
                diverging=True,
                cmap=cmap,
            )
        )
    return panels


def consistency_matrix(consistency: pl.DataFrame) -> pl.DataFrame:
    """IoU_cons of each main estimator on its headline prompt against every other setup (kind
    intra, all relations; a setup drawn under several seeds: the mean over them): estimator,
    setup, iou_cons, n_seeds."""
    rows = consistency.filter(
        (pl.col("kind") == "intra")
        & pl.col("relation_id").is_null()
        & pl.col("seed").is_null()
        & (pl.col("statistic") != "std")
    )
    rows = at_headline_reduction(rows, "estimator_a")
    main = main_estimators(rows["estimator_a"].unique().to_list())
    return (
        rows.filter(pl.col("estimator_a").is_in(main))
        .select(
            pl.col("estimator_a").alias("estimator"), pl.col("setup_b").alias("setup"), "iou_cons", "n_seeds"
        )
        .sort("estimator", "setup")
    )


def consistency_panel(matrix: pl.DataFrame) -> plots.HeatmapPanel:
    estimators = main_estimators(matrix["estimator"].unique().to_list())
    setups = sorted(matrix["setup"].unique().to_list())
    values = {(e, s): v for e, s, v in matrix.select("estimator", "setup", "iou_cons").iter_rows()}
    return plots.HeatmapPanel(
        "IoU_cons: headline prompt vs setup",
        _matrix(estimators, setups, values),
        [label(e) for e in estimators],
        setups,
        colorbar="IoU_cons (1 = the same decisions)",
    )


def gold_count_points(metrics: pl.DataFrame) -> pl.DataFrame:
    """Accuracy and mean confidence per gold count (scope n_gold) of the main estimators but the
    recalibrated ones (their lines would double the figure's): label, n_gold, accuracy,
    mean_confidence, n."""
    rows = headline(metrics).filter(
        (pl.col("scope") == "n_gold") & pl.col("metric").is_in([ACCURACY, CONFIDENCE_LEVEL])
    )
    main = [
        e
        for e in main_estimators(rows["estimator"].unique().to_list())
        if ESTIMATORS[e].family != RECALIBRATION
    ]
    rows = rows.filter(pl.col("estimator").is_in(main))
    schema = {
        "label": pl.String,
        "n_gold": pl.Int64,
        ACCURACY: pl.Float64,
        CONFIDENCE_LEVEL: pl.Float64,
        "n": pl.Int64,
    }
    if rows.is_empty():
        return pl.DataFrame(schema=schema)
    wide = rows.pivot("metric", index=["estimator", "scope_value", "n"], values="value")
    for column in (ACCURACY, CONFIDENCE_LEVEL):
        if column not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(column))
    order = {e: k for k, e in enumerate(main)}
    return (
        wide.with_columns(
            pl.col("estimator").replace_strict(order, return_dtype=pl.Int64).alias("order"),
            pl.col("estimator")
            .replace_strict({e: label(e) for e in main}, return_dtype=pl.String)
            .alias("label"),
            pl.col("scope_value").cast(pl.Int64).alias("n_gold"),
        )
        .sort("order", "n_gold")
        .select(list(schema))
        .cast(schema)
    )


def intervals_table(metrics: pl.DataFrame) -> pl.DataFrame:
    """The main estimators on all relations (headline selection) with their 95 % bootstrap
    intervals, as `kcal sql --query intervals` gives them: estimator, reduction, instances, then
    'value [low, high]' per metric."""
    overall = headline(metrics).filter(pl.col("scope") == "all")
    rows = []
    for estimator in main_estimators(overall["estimator"].unique().to_list()):
        own = overall.filter(pl.col("estimator") == estimator)
        cells = {}
        for metric, _ in INTERVAL_METRICS:
            hit = own.filter(pl.col("metric") == metric)
            cells[metric] = (
                "—"
                if hit.is_empty()
                else plots.interval_text(*hit.select("value", "ci_low", "ci_high").row(0))
            )
        rows.append(
            {
                "estimator": label(estimator),
                "reduction": own["reduction"][0],
                "instances": accuracy_n(own),
                **{title: cells[m] for m, title in INTERVAL_METRICS},
            }
        )
    schema = {"estimator": pl.String, "reduction": pl.String, "instances": pl.Int64}
    schema |= {title: pl.String for _, title in INTERVAL_METRICS}
    return pl.DataFrame(rows, schema=schema)


def sweep_points(metrics: pl.DataFrame) -> pl.DataFrame:
    """The option-count sweep figure's points: per estimator family with sweep rows, one estimator
    (the one flagged `family_line`, else the family's first probability-valued one in registry order) under
    its headline reduction, all relations, test split: per k (0 = the full answer spaces) and metric
    of plots.SWEEP_METRICS, the mean and sample standard deviation over the draws (null with one),
    their count and n (instances per draw). Columns: label, k, metric, mean, sd, draws, n; empty
    without sweep rows."""
    schema = {
        "label": pl.String, "k": pl.Int64, "metric": pl.String, "mean": pl.Float64, "sd": pl.Float64,
        "draws": pl.Int64, "n": pl.Int64,
    }  # fmt: skip
    if "answer_space_draw" not in metrics.columns:
        return pl.DataFrame(schema=schema)
    rows = at_headline_reduction(
        metrics.filter(
            (pl.col("split") == HEADLINE_SPLIT)
            & (pl.col("scope") == "all")
            & pl.col("metric").is_in([m for m, _ in plots.SWEEP_METRICS])
        )
    )
    swept = set(rows.filter(pl.col("answer_space_k") != FULL_ANSWER_SPACE)["estimator"].unique().to_list())
    order = [*(name for name, spec in ESTIMATORS.items() if spec.family_line), *ESTIMATORS]
    chosen: dict[str, str] = {}
    for name in order:
        spec = ESTIMATORS.get(name)
        if spec and name in swept and spec.output_kind == "probability":
            chosen.setdefault(spec.family, name)
    if not chosen:
        return pl.DataFrame(schema=schema)
    families = sorted(chosen, key=family_rank)
    labels = {chosen[f]: f"{f.replace('_', ' ')}: {label(chosen[f])}" for f in families}
    return (
        rows.filter(pl.col("estimator").is_in(list(labels)) & pl.col("value").is_finite())
        .group_by("estimator", "answer_space_k", "metric")
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().alias("sd"),
            pl.col("answer_space_draw").n_unique().alias("draws"),
            pl.col("n").max(),
        )
        .with_columns(
            pl.col("estimator").replace_strict(labels, return_dtype=pl.String).alias("label"),
            pl.col("estimator")
            .replace_strict({e: i for i, e in enumerate(labels)}, return_dtype=pl.Int64)
            .alias("order"),
            pl.col("answer_space_k").cast(pl.Int64).alias("k"),
        )
        .sort("order", "k", "metric")
        .select(list(schema))
        .cast(schema)
    )
