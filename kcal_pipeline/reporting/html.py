"""The report's tables: the summary (terminal and page), accuracy by split, the cut answer spaces,
and their HTML and Markdown forms; the atomic write of a page (the pages themselves: pages.py).

Everything shown comes from the metrics table; a table only selects and formats, so a number on
the page can always be traced to one row of `compute_metrics`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from html import escape
from pathlib import Path

import polars as pl

from kcal_pipeline.core.storage import write_text_atomic
from kcal_pipeline.estimation.registry import (
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    summary_estimators,
)
from kcal_pipeline.evaluation.calibration import BINNING
from kcal_pipeline.evaluation.registry import METRICS, summary_metrics
from kcal_pipeline.reporting.selection import at_headline_reduction

LEGEND = "; ".join(f"{METRICS[m].label}: {text}" for m, text in BINNING.items())


def _esc(value: object) -> str:
    return escape(str(value), quote=True)


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def _headline(metrics: pl.DataFrame, estimator: str) -> pl.DataFrame:
    """Rows of one estimator under its headline reduction (the estimator catalog's)."""
    return at_headline_reduction(metrics.filter(pl.col("estimator") == estimator))


# Which metrics rows a summary column reads: the headline template (scopes all and relation), or
# the mean over the relation's curated templates (BEAR's way).
HEADLINE_SCOPES = {"all": "all", "relation": "relation"}
TEMPLATE_MEAN_SCOPES = {"all_template_mean": "all", "relation_template_mean": "relation"}
TEMPLATE_MEAN_SUFFIX = "_mean_t"


def _metric(metrics: pl.DataFrame, estimator: str, metric: str, scopes: dict[str, str]) -> pl.DataFrame:
    """(scope, relation, n, value) of one metric in the given scopes (renamed to all/relation);
    missing rows are an error, not a blank cell."""
    rows = _headline(metrics, estimator).filter(
        (pl.col("metric") == metric) & pl.col("scope").is_in(list(scopes))
    )
    if rows.is_empty():
        raise ValueError(
            f"metrics: no rows for estimator {estimator!r}, metric {metric!r}, scope {sorted(scopes)}"
        )
    return rows.select(
        pl.col("scope").replace_strict(scopes), pl.col("scope_value").alias("relation"), "n", "value"
    )


def _in_split(metrics: pl.DataFrame, split: str | None, answer_space_k: int | None) -> pl.DataFrame:
    """Rows of one split and answer space (None: every one)."""
    if split is not None:
        metrics = metrics.filter(pl.col("split") == split)
    if answer_space_k is not None:
        metrics = metrics.filter(pl.col("answer_space_k") == answer_space_k)
    return metrics


def _space(answer_space_k: int) -> str:
    return (
        "full answer spaces"
        if answer_space_k == FULL_ANSWER_SPACE
        else f"answer spaces cut to {answer_space_k}"
    )


def summary_title(model_id: str, split: str = HEADLINE_SPLIT, answer_space_k: int = FULL_ANSWER_SPACE) -> str:
    """The line above the summary table: which split, answer space, template, estimators and
    binning it shows."""
    labels = " and ".join(s.label for s in summary_estimators())
    binned = "; ".join(f"{m.label}: {BINNING[m.name]}" for m in summary_metrics() if m.name in BINNING)
    space = "" if answer_space_k == FULL_ANSWER_SPACE else f", {_space(answer_space_k)}"
    return (
        f"Model {model_id} — {split} split{space}, headline template, {labels}; "
        f"acc{TEMPLATE_MEAN_SUFFIX}: accuracy averaged over the curated templates\n{binned}"
    )


def summary_table(
    metrics: pl.DataFrame,
    estimators: Sequence[str] | None = None,
    split: str = HEADLINE_SPLIT,
    answer_space_k: int = FULL_ANSWER_SPACE,
) -> pl.DataFrame:
    """One row per relation (sorted) and a final "all" row of one split and answer space (the test
    split on full answer spaces by default; nothing is pooled across them): instances, then the
    summary metrics on the headline template, with accuracy also averaged over the curated
    templates (`acc_mean_t`, BEAR's way) next to it.

    Estimators and metrics come from the registries (`in_summary`). A metric whose values are the
    same for every estimator (accuracy: Base and Margin share the argmax prediction) is one column
    named after the metric; the others are `<metric>_<estimator>`, estimator by estimator. A split
    with no rows gives a table with no rows (a tiny probe may put every subject in dev).
    """
    models = metrics["model_id"].unique().to_list()
    if len(models) != 1:
        raise ValueError(f"summary_table expects metrics of exactly one model, got {sorted(models)}")
    names = [s.name for s in summary_estimators()] if estimators is None else list(estimators)
    if not names:
        raise ValueError("summary_table: no estimators given")
    metrics = _in_split(metrics, split, answer_space_k)
    specs = []  # (metric, scopes, column name)
    for m in summary_metrics():
        specs.append((m.name, HEADLINE_SCOPES, m.name))
        if m.name == "accuracy":
            specs.append((m.name, TEMPLATE_MEAN_SCOPES, f"acc{TEMPLATE_MEAN_SUFFIX}"))
    if metrics.is_empty():
        return pl.DataFrame(
            schema={"relation": pl.String, "instances": pl.Int64} | {c: pl.Float64 for *_, c in specs}
        )
    keys = ["scope", "relation"]
    columns = {(c, e): _metric(metrics, e, m, scopes) for m, scopes, c in specs for e in names}
    table = columns[(specs[0][2], names[0])].select(*keys, pl.col("n").alias("instances"))
    shared = [
        c for *_, c in specs
        if all(columns[(c, e)].sort(keys).equals(columns[(c, names[0])].sort(keys)) for e in names)
    ]  # fmt: skip
    wanted = [(c, names[0], c) for *_, c in specs if c in shared] + [
        (c, e, f"{c}_{e}") for e in names for *_, c in specs if c not in shared
    ]
    for name, est, column in wanted:
        value = columns[(name, est)].select(*keys, pl.col("value").alias(column))
        table = table.join(value, on=keys, how="left")
    return table.sort(pl.col("scope") == "all", "relation").drop("scope")


def split_table(metrics: pl.DataFrame, answer_space_k: int = FULL_ANSWER_SPACE) -> pl.DataFrame:
    """Relations the way BEAR reports them, split by split (never pooled): per relation and split,
    the instances, the accuracy averaged over the curated templates and the headline template's
    accuracy, of the first summary estimator (accuracy reads only its prediction)."""
    estimator = summary_estimators()[0].name
    rows = _in_split(metrics, None, answer_space_k)
    if rows.is_empty():
        return pl.DataFrame(
            schema={"relation": pl.String, "split": pl.String, "instances": pl.Int64}
            | {f"acc{TEMPLATE_MEAN_SUFFIX}": pl.Float64, "accuracy": pl.Float64}
        )
    keys = ["scope", "relation", "split"]

    def column(scopes: dict[str, str], name: str) -> pl.DataFrame:
        picked = _headline(rows, estimator).filter(
            (pl.col("metric") == "accuracy") & pl.col("scope").is_in(list(scopes))
        )
        if picked.is_empty():
            raise ValueError(f"metrics: no accuracy rows for estimator {estimator!r}, scope {sorted(scopes)}")
        return picked.select(
            pl.col("scope").replace_strict(scopes),
            pl.col("scope_value").alias("relation"),
            "split",
            pl.col("n").alias("instances"),
            pl.col("value").alias(name),
        )

    mean_t = column(TEMPLATE_MEAN_SCOPES, f"acc{TEMPLATE_MEAN_SUFFIX}")
    head = column(HEADLINE_SCOPES, "accuracy").drop("instances")
    return (
        mean_t.join(head, on=keys, how="full", coalesce=True, nulls_equal=True)
        .sort(pl.col("scope") == "all", "relation", "split", nulls_last=True)
        .select("relation", "split", "instances", f"acc{TEMPLATE_MEAN_SUFFIX}", "accuracy")
    )


def format_summary(summary: pl.DataFrame) -> str:
    """Aligned plain-text table for the terminal: text left-aligned, numbers right-aligned, 3 decimals."""
    cells = [[_fmt(v) for v in row] for row in summary.iter_rows()]
    numeric = [summary[c].dtype.is_numeric() for c in summary.columns]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(summary.columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(summary.columns), rule, *(line(r) for r in cells)])


def esc(value: object) -> str:
    """HTML-escaped text (quotes too: safe inside an attribute)."""
    return _esc(value)


def html_table(df: pl.DataFrame, caption: str = "", links: dict[str, Sequence[str]] | None = None) -> str:
    """The frame as an HTML table inside a horizontally scrollable box (a wide table is never
    clipped): text left, numbers right with 3 decimals, every cell escaped. `links` makes the cells
    of a column links (one href per row)."""
    links = links or {}
    head = "".join(f"<th>{_esc(c)}</th>" for c in df.columns)

    def cell(column: str, i: int, v: object) -> str:
        text = _esc(_fmt(v))
        if column in links:
            text = f'<a href="{_esc(links[column][i])}">{text}</a>'
        return f'<td class="{"num" if not isinstance(v, str) else "txt"}">{text}</td>'

    body = "".join(
        "<tr>" + "".join(cell(c, i, v) for c, v in zip(df.columns, row, strict=True)) + "</tr>"
        for i, row in enumerate(df.iter_rows())
    )
    cap = f"<caption>{_esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    )


def first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if doc else ""


def subsample_tables(metrics: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(title, summary) per k of the option-count sweep (kcal demo --answer-space-k), test split:
    read beside the full-space summary, each value the mean over the k's draws (the spread over
    them: the sweep figure and `kcal sql --query options_sweep`); empty when the probe has no
    subsample copies."""
    out = []
    ks = sorted(k for k in metrics["answer_space_k"].unique().to_list() if k != FULL_ANSWER_SPACE)
    for k in ks:
        rows = metrics.filter(pl.col("answer_space_k") == k)
        title = _space(k)
        if "answer_space_draw" in rows.columns and (draws := rows["answer_space_draw"].n_unique()) > 1:
            keys = [
                c for c in rows.columns if c not in ("answer_space_draw", "value", "n", "ci_low", "ci_high")
            ]
            rows = rows.group_by(keys, maintain_order=True).agg(pl.col("value").mean(), pl.col("n").max())
            title = f"{title}, mean of {draws} draws"
        out.append((title, summary_table(rows, answer_space_k=k)))
    return out


def write_report(path: str | os.PathLike, html: str) -> Path:
    """Atomic (temp file + rename), world-readable: a reader never sees half a page."""
    return write_text_atomic(Path(path), html, mode=0o644)
