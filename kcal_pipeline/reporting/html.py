"""Summary tables and a self-contained HTML report (inline CSS and SVG, no JS, no external assets).

Everything shown comes from the metrics and curves tables; the report only selects and formats, so
a number on the page can always be traced to one row of `compute_metrics`.
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
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    summary_estimators,
)
from kcal_pipeline.evaluation.calibration import BINNING, METRIC_BINNING
from kcal_pipeline.evaluation.registry import METRICS, summary_metrics

LEGEND = "; ".join(f"{METRICS[m].label}: {text}" for m, text in BINNING.items())


def _esc(value: object) -> str:
    return escape(str(value), quote=True)


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def _label(estimator: str) -> str:
    spec = ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def _headline(metrics: pl.DataFrame, estimator: str) -> pl.DataFrame:
    """Rows of one estimator under its headline (first) reduction."""
    rows = metrics.filter(pl.col("estimator") == estimator)
    spec = ESTIMATORS.get(estimator)
    if spec and "reduction" in rows.columns and rows["reduction"].null_count() < rows.height:
        rows = rows.filter(pl.col("reduction") == spec.reductions[0])
    return rows


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


def _html_table(df: pl.DataFrame) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in df.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if not isinstance(v, str) else "txt"}">{_esc(_fmt(v))}</td>' for v in row
        )
        + "</tr>"
        for row in df.iter_rows()
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def reliability_svg(curve: pl.DataFrame, title: str, note: str = "", size: int = 380) -> str:
    """Inline SVG reliability diagram: one circle per bin at (conf_b, acc_b), sized by n_b.

    A red segment joins each point to the diagonal, so the drawn length is the bin's |acc − conf|
    that ACE averages. Hover text (SVG <title>) gives the bin's exact numbers and n.
    """
    left, right, top, bottom = 52, 14, 28, 100
    pw = ph = size - left - right
    height = top + ph + bottom

    def sx(v: float) -> float:
        return left + v * pw

    def sy(v: float) -> float:
        return top + (1.0 - v) * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{height}" '
        f'viewBox="0 0 {size} {height}" role="img" aria-label="{_esc(title)}">',
        f'<text x="{size / 2}" y="16" text-anchor="middle" font-weight="bold">{_esc(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>',
    ]
    for i in range(6):
        t = i / 5
        parts += [
            f'<line x1="{sx(t):.1f}" y1="{sy(0)}" x2="{sx(t):.1f}" y2="{sy(0) + 4}" stroke="#333"/>',
            f'<text x="{sx(t):.1f}" y="{sy(0) + 16}" text-anchor="middle" font-size="11">{t:.1f}</text>',
            f'<line x1="{left - 4}" y1="{sy(t):.1f}" x2="{left}" y2="{sy(t):.1f}" stroke="#333"/>',
            f'<text x="{left - 7}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:.1f}</text>',
        ]
    parts += [
        f'<text x="{sx(0.5):.1f}" y="{sy(0) + 32}" text-anchor="middle" font-size="12">'
        f"confidence (mean per bin)</text>",
        f'<text x="14" y="{sy(0.5):.1f}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {sy(0.5):.1f})">accuracy (per bin)</text>',
        f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(1)}" y2="{sy(1)}" stroke="#888" stroke-dasharray="4 3"/>',
    ]
    n_max = max(curve["n"].max() or 1, 1)
    for b, x, y, n in curve.select("bin", "x", "y", "n").iter_rows():
        r = 1.5 + 4.5 * math.sqrt(n / n_max)
        cx = f"{sx(x):.1f}"
        parts += [
            f'<line x1="{cx}" y1="{sy(x):.1f}" x2="{cx}" y2="{sy(y):.1f}" stroke="#c33"/>',
            f'<circle cx="{cx}" cy="{sy(y):.1f}" r="{r:.1f}" fill="#2a6fb0" fill-opacity="0.75">'
            f"<title>bin {b}: conf {x:.3f}, acc {y:.3f}, n {n}</title></circle>",
        ]
    sizes = f"n_b {curve['n'].min()}–{curve['n'].max()}" if curve.height else "no bins"
    lines = [LEGEND, f"points: quantile bins; circle size grows with n_b ({sizes})", note]
    parts += [
        f'<text x="8" y="{sy(0) + 52 + 15 * i}" font-size="11">{_esc(t)}</text>' for i, t in enumerate(lines)
    ] + ["</svg>"]
    return "\n".join(parts)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.2em .6em}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.diagrams{display:flex;flex-wrap:wrap;gap:1.5em}.note{color:#555;font-size:.9em}"""


def _scalar(metrics: pl.DataFrame, model: str, est: str, metric: str) -> str:
    v = _in_split(metrics, HEADLINE_SPLIT, FULL_ANSWER_SPACE).filter(
        (pl.col("model_id") == model)
        & (pl.col("estimator") == est)
        & (pl.col("scope") == "all")
        & (pl.col("metric") == metric)
    )["value"]
    return _fmt(v[0]) if len(v) else "n/a"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if doc else ""


def _diagrams(metrics: pl.DataFrame, curves: pl.DataFrame) -> str:
    """One reliability diagram per estimator: all relations, test split, full answer spaces."""
    headline = _in_split(curves, HEADLINE_SPLIT, FULL_ANSWER_SPACE)
    overall = headline.filter((pl.col("scope") == "all") & (pl.col("curve") == "calibration")).sort(
        "model_id", "estimator", "bin"
    )
    svgs = []
    for (model, est), g in overall.group_by("model_id", "estimator", maintain_order=True):
        binned = ", ".join(f"{METRICS[m].label} {_scalar(metrics, model, est, m)}" for m in BINNING)
        note = f"{binned}, n = {g['n'].sum()}"
        # The page is per model (its title says which); a diagram title names the estimator only,
        # so it fits the drawing whatever the model id's length.
        svgs.append(reliability_svg(g, f"{_label(est)} confidence", note))
    return f'<div class="diagrams">{"".join(svgs)}</div>'


def _subsample_sections(metrics: pl.DataFrame) -> str:
    """A summary per cut answer space (kcal demo --answer-space-k), on the test split, to read
    beside the full-space summary; nothing when the probe has no `#k` copies."""
    ks = sorted(k for k in metrics["answer_space_k"].unique().to_list() if k != FULL_ANSWER_SPACE)
    if not ks:
        return ""
    tables = "".join(
        f"<h3>{_esc(_space(k))}</h3>{_html_table(summary_table(metrics, answer_space_k=k))}" for k in ks
    )
    return f"""<h2>Answer-space subsamples ({_esc(HEADLINE_SPLIT)} split)</h2>
<p class="note">Every instance again, its answer space cut to k options (gold kept): the options-count
study, never pooled into the summary above.</p>
{tables}"""


def render_html(summary: pl.DataFrame, metrics: pl.DataFrame, curves: pl.DataFrame, meta: dict) -> str:
    """The whole report as one HTML string; every value from data or meta is HTML-escaped."""
    title = f"kcal calibration report — {meta.get('model_id', '')}"
    meta_rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in meta.items())
    full = metrics.with_columns(binning=pl.col("metric").replace_strict(METRIC_BINNING, default="—"))
    columns = "".join(
        f"<li><b>{_esc(m.name)}</b>: {_esc(_first_line(m.fn.__doc__))}</li>" for m in summary_metrics()
    )
    unbinned = ", ".join(m.label for m in METRICS.values() if m.name not in METRIC_BINNING)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{_esc(title)}</h1>
<h2>Run</h2><table>{meta_rows}</table>
<h2>Summary ({_esc(HEADLINE_SPLIT)} split, full answer spaces)</h2>
<p class="note">Headline template; acc{TEMPLATE_MEAN_SUFFIX} is the accuracy averaged over the relation's
curated templates (BEAR's way). A column named after a metric alone holds a value every estimator shares;
the others are &lt;metric&gt;_&lt;estimator&gt;. Binning — {_esc(LEGEND)}.</p><ul class="note">{columns}</ul>
{_html_table(summary)}
<h2>Accuracy by split (BEAR's way)</h2>
<p class="note">Each split on its own, full answer spaces: dev only tunes thresholds and recalibration,
the metrics above are on test.</p>
{_html_table(split_table(metrics))}
{_subsample_sections(metrics)}
<h2>Reliability diagrams (all relations, {_esc(HEADLINE_SPLIT)} split)</h2>
<p class="note">{_esc(LEGEND)}. Points are the quantile bins (those of ACE); the dashed diagonal is
perfect calibration and each red segment is a bin's gap |acc − conf|.</p>
{_diagrams(metrics, curves)}
<h2>All metrics</h2>
<p class="note">Binning — {_esc(LEGEND)}; {_esc(unbinned)} are unbinned. A ranking metric is NaN where a
scope has only correct or only wrong predictions.</p>
{_html_table(full)}
</body></html>
"""


def write_report(path: str | os.PathLike, html: str) -> Path:
    """Atomic (temp file + rename), world-readable: a reader never sees half a page."""
    return write_text_atomic(Path(path), html, mode=0o644)
