"""The page across every model (index.html): the leaderboard with a link to each model's page,
ACE against accuracy, and the main estimators compared across models."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

import polars as pl
from matplotlib.figure import Figure

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.estimation.registry import BASELINE, ESTIMATORS
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting import plots
from kcal_pipeline.reporting.html import esc, html_table
from kcal_pipeline.reporting.sections import Section, figure_section, page, run_table
from kcal_pipeline.reporting.selection import (
    ACCURACY,
    CALIBRATION,
    OVERALL_ROWS,
    PROPER_SCORE,
    RANKING,
    headline,
    label,
    main_estimators,
)


def overall_headline(metrics: pl.DataFrame) -> pl.DataFrame:
    """The headline rows over all relations (OVERALL_ROWS under each estimator's headline
    reduction): all the page uses. Idempotent, so a caller computes it once on the full table and
    passes the result to leaderboard, cross_model_figures and cross_model_page."""
    return headline(metrics.filter(pl.col("scope") == OVERALL_ROWS["scope"]))


# The columns of sql/queries/leaderboard.sql: named after the metrics of the report roles.
LEADERBOARD_SCHEMA = {
    "model_id": pl.String,
    "instances": pl.Int64,
    ACCURACY: pl.Float64,
    f"{ACCURACY}_ci_low": pl.Float64,
    f"{ACCURACY}_ci_high": pl.Float64,
    "best_calibrated": pl.String,
    CALIBRATION: pl.Float64,
    f"{CALIBRATION}_ci_low": pl.Float64,
    f"{CALIBRATION}_ci_high": pl.Float64,
    PROPER_SCORE: pl.Float64,
    RANKING: pl.Float64,
    f"{BASELINE}_{CALIBRATION}": pl.Float64,
}


def leaderboard(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per model, most accurate first (as sql/queries/leaderboard.sql): Base's accuracy
    with its interval, and the best-calibrated estimator, the probability-valued one with the
    lowest ACE among those that answer as many headline instances as Base (ties: the first name),
    with its ACE interval, Brier and AUROC, and Base's ACE to read the gain against."""
    overall = overall_headline(metrics)
    rows = []
    for (model,), own in overall.group_by("model_id", maintain_order=True):
        base = own.filter((pl.col("estimator") == BASELINE) & (pl.col("metric") == ACCURACY))
        if base.is_empty():
            continue
        b = base.row(0, named=True)

        def value(estimator: str, metric: str, own=own) -> dict | None:
            hit = own.filter((pl.col("estimator") == estimator) & (pl.col("metric") == metric))
            return hit.row(0, named=True) if hit.height else None

        candidates = own.filter(
            (pl.col("metric") == CALIBRATION) & (pl.col("n") == b["n"]) & pl.col("value").is_not_nan()
        ).sort("value", "estimator")
        best = candidates.row(0, named=True) if candidates.height else None
        name = best["estimator"] if best else None
        proper, ranking, base_calibration = (
            value(name, PROPER_SCORE) if name else None,
            value(name, RANKING) if name else None,
            value(BASELINE, CALIBRATION),
        )
        values = (
            model, b["n"], b["value"], b["ci_low"], b["ci_high"], name,
            best and best["value"], best and best["ci_low"], best and best["ci_high"],
            proper and proper["value"], ranking and ranking["value"],
            base_calibration and base_calibration["value"],
        )  # fmt: skip
        rows.append(dict(zip(LEADERBOARD_SCHEMA, values, strict=True)))
    board = pl.DataFrame(rows, schema=LEADERBOARD_SCHEMA)
    return board.sort(pl.col(ACCURACY), "model_id", descending=[True, False], nulls_last=True)


def _overall_points(metrics: pl.DataFrame, names: Iterable[str]) -> pl.DataFrame:
    """model, estimator, label, metric, value, ci_low, ci_high of the main estimators, scope all."""
    overall = overall_headline(metrics).filter(pl.col("metric").is_in(list(names)))
    main = main_estimators(overall["estimator"].unique().to_list())
    order = {e: k for k, e in enumerate(main)}
    return (
        overall.filter(pl.col("estimator").is_in(main))
        .with_columns(pl.col("estimator").replace_strict(order, return_dtype=pl.Int64).alias("order"))
        .sort("order", "model_id")
        .select(
            pl.col("model_id").alias("model"),
            "estimator",
            pl.col("estimator")
            .replace_strict({e: label(e) for e in main}, return_dtype=pl.String)
            .alias("label"),
            "metric",
            "value",
            "ci_low",
            "ci_high",
        )
    )


def ace_accuracy_points(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per model × main estimator with accuracy and ACE and their intervals."""
    points = _overall_points(metrics, [ACCURACY, CALIBRATION])
    wide = points.pivot(
        "metric", index=["model", "estimator", "label"], values=["value", "ci_low", "ci_high"]
    )
    need = [f"{v}_{m}" for m in (ACCURACY, CALIBRATION) for v in ("value", "ci_low", "ci_high")]
    for column in need:
        if column not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(column))
    families = {e: ESTIMATORS[e].family if e in ESTIMATORS else "other" for e in wide["estimator"].unique()}
    return wide.select(
        "model",
        "label",
        pl.col("estimator").replace_strict(families, return_dtype=pl.String).alias("family"),
        *(
            pl.col(f"{v}_{m}").alias(f"{m}{suffix}")
            for m in (ACCURACY, CALIBRATION)
            for v, suffix in (("value", ""), ("ci_low", "_low"), ("ci_high", "_high"))
        ),
    ).filter(pl.col(ACCURACY).is_finite() & pl.col(CALIBRATION).is_finite())


# The metrics of the estimators-across-models figure, each with its direction in the title.
COMPARED_METRICS = tuple(
    (m, f"{METRICS[m].label} ({'higher' if METRICS[m].higher_is_better else 'lower'} is better)")
    for m in (CALIBRATION, PROPER_SCORE, RANKING)
)
NO_MODELS = "No model has metrics on the test split yet: run kcal demo (or materialize metrics)."


def cross_model_figures(metrics: pl.DataFrame) -> dict[str, Figure | str]:
    metrics = overall_headline(metrics)  # once for both figures
    points = ace_accuracy_points(metrics)
    compared = _overall_points(metrics, [m for m, _ in COMPARED_METRICS]).filter(pl.col("value").is_finite())
    shown = [(m, title) for m, title in COMPARED_METRICS if m in set(compared["metric"].to_list())]
    return {
        "ace-accuracy": plots.ace_accuracy_figure(points) if points.height else NO_MODELS,
        "estimators": plots.estimator_comparison_figure(compared, shown) if shown else NO_MODELS,
    }


def leaderboard_display(board: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The leaderboard as the page shows it (intervals as 'value [low, high]') and each model's
    report link, relative to index.html."""
    shown = board.select(
        pl.col("model_id").alias("model"),
        "instances",
        pl.struct(ACCURACY, f"{ACCURACY}_ci_low", f"{ACCURACY}_ci_high")
        .map_elements(lambda r: plots.interval_text(*r.values()), return_dtype=pl.String)
        .alias(f"{METRICS[ACCURACY].label} ({label(BASELINE)})"),
        pl.col("best_calibrated")
        .replace_strict(
            {e: label(e) for e in board["best_calibrated"].drop_nulls().to_list()},
            default=None,
            return_dtype=pl.String,
        )
        .alias("best calibrated"),
        pl.struct(CALIBRATION, f"{CALIBRATION}_ci_low", f"{CALIBRATION}_ci_high")
        .map_elements(lambda r: plots.interval_text(*r.values()), return_dtype=pl.String)
        .alias(f"its {METRICS[CALIBRATION].label}"),
        pl.col(PROPER_SCORE).alias(f"its {METRICS[PROPER_SCORE].label}"),
        pl.col(RANKING).alias(f"its {METRICS[RANKING].label}"),
        pl.col(f"{BASELINE}_{CALIBRATION}").alias(f"{label(BASELINE)} {METRICS[CALIBRATION].label}"),
    )
    links = [f"model={quote(model_key(m))}/report.html" for m in board["model_id"].to_list()]
    return shown, links


def cross_model_page(
    metrics: pl.DataFrame,
    meta: dict,
    board: pl.DataFrame | None = None,
    figures: dict[str, Figure | str] | None = None,
) -> str:
    """The page across every model: leaderboard (with links to each model's page), ACE against
    accuracy, and the main estimators compared across models. `board` and `figures` are
    leaderboard(metrics) and cross_model_figures(metrics), when the caller already has them."""
    board = leaderboard(metrics) if board is None else board
    figures = cross_model_figures(metrics) if figures is None else figures
    shown, links = leaderboard_display(board)
    table = (
        html_table(shown, links={"model": links})
        if board.height
        else f'<p class="nodata">{esc(NO_MODELS)}</p>'
    )
    sections = [
        Section("run", "Run", "", run_table(meta), "table"),
        Section(
            "leaderboard",
            "Leaderboard",
            "Most accurate first: Base's accuracy over all relations (test split, full answer spaces) with "
            "its 95 % bootstrap interval, and the best-calibrated estimator (lowest ACE among the "
            "probability-valued estimators that answer every instance Base answers). A model's name "
            "opens its own report. Table: <code>kcal sql --query leaderboard</code>.",
            table,
            "table",
        ),
        figure_section(
            "ace-accuracy",
            "ACE against accuracy",
            "One point per model × main estimator (marker: the estimator's family, colour: the "
            "estimator within it; each model's name above its highest point when there are at most "
            f"{plots.MODEL_NAMES_UP_TO} models): lower is better calibrated, right is more accurate. "
            "Estimators that share Base's prediction share its accuracy, so one model's points stand "
            "in a column; the intervals, model by model, are in the next figure.",
            figures["ace-accuracy"],
        ),
        figure_section(
            "estimators",
            "Estimators across models",
            "Each main estimator on its own row, one point per model with its 95 % interval. Table: "
            "<code>kcal sql --query estimator_comparison</code>.",
            figures["estimators"],
        ),
    ]
    return page("kcal calibration report — all models", sections)
