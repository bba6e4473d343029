"""MACE's Table 3 layout of the generation metrics (issue 33), for the terminal (`kcal demo
--generate`) and the model page's "generation" section, with its figure.

Table 3 (Wang et al. 2026): a row for the greedy answer's accuracy, then one row per generation
method in registry order (GENERATION_ESTIMATORS: labels and order come from there), and knowledge
coverage last when present. Columns 1a, 2a, 4a, 6a hold the questions with exactly 1, 2, 4, 6 gold
answers, **macro-averaged over the MACE relations** (scope n_gold_macro: each domain's value first,
then their unweighted mean, as MACE's mixtures are), not pooled over relations: a domain with many
questions of one gold count does not outweigh the others. A probability-valued method shows its
mean confidence, a score-valued one its mean score (column `shows` says which: a log-probability
or a negative entropy, not comparable with the probabilities). AUROC is over all gold counts mixed
(the {1,2,4,6} mixture, macro over domains); `answered` is the share of instances the method gave
an estimate for, shown only where it is below 1.

Every 1a…6a cell has its 95 % bootstrap interval where generation_metrics computed one (the test
split; none from a single question): columns "1a_low", "1a_high", … in the DataFrame, written
"0.41 [0.33, 0.50]" in the terminal (2 decimals, so the 18 methods stay about 150 characters
wide) and "0.412 [0.331, 0.502]" on the page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS
from kcal_pipeline.estimation.registry import HEADLINE_SPLIT
from kcal_pipeline.evaluation.generation import (
    ANSWERED_SHARE,
    COVERAGE_ESTIMATOR,
    GOLD_MACRO,
    MEAN_SCORE,
)
from kcal_pipeline.evaluation.scopes import MACE_MIXTURES, mixture_value
from kcal_pipeline.reporting.canvas import REFERENCE, colour, linestyle, new_figure, svg
from kcal_pipeline.reporting.html import esc, format_summary, html_table

GOLD_COUNTS = MACE_MIXTURES[-1]  # (1, 2, 4, 6): MACE's question cardinalities
GOLD_COLUMNS = tuple(f"{g}a" for g in GOLD_COUNTS)
ALL_GOLD_COUNTS = mixture_value(GOLD_COUNTS)  # the mixture AUROC is read on: "1,2,4,6"
# The estimator whose accuracy is the greedy answer's: its prediction is the greedy answer by
# definition (1 / perplexity of that answer) and it never refuses. Any other present one stands in.
GREEDY_SOURCE = "perplexity"
GREEDY_LABEL = "Accuracy (greedy answer)"
SHOWS = {"probability": "mean confidence", "score": "mean score"}
INTERVAL_COLUMNS = tuple(f"{col}_{side}" for col in GOLD_COLUMNS for side in ("low", "high"))
TABLE_SCHEMA = {
    "method": pl.String,
    "shows": pl.String,
    **dict.fromkeys(GOLD_COLUMNS, pl.Float64),
    "AUROC": pl.Float64,
    "answered": pl.Float64,
    **dict.fromkeys(INTERVAL_COLUMNS, pl.Float64),
    "split": pl.String,
}
TEXT_DIGITS, PAGE_DIGITS = 2, 3  # the decimals of a cell with its interval: terminal, page
STATUS_COLUMNS = ("estimator", "status", "answered", "refused", "refusals", "reason")


def method_label(estimator: str) -> str:
    spec = GENERATION_ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def _methods(present: set[str]) -> list[str]:
    """The present generation estimators, registry order first, then unknown names sorted."""
    known = [e for e in GENERATION_ESTIMATORS if e in present]
    return known + sorted(present - set(known) - {COVERAGE_ESTIMATOR})


def table_split(metrics: pl.DataFrame, split: str = HEADLINE_SPLIT) -> str | None:
    """`split` when the metrics have rows in it, else the split that has (a tiny run may put every
    question in dev), first by name; None without rows."""
    have = sorted(s for s in metrics["split"].unique().to_list() if s is not None)
    return split if split in have else (have[0] if have else None)


def _picked(rows: pl.DataFrame, estimator: str, metric: str, scope: str) -> pl.DataFrame:
    return rows.filter(
        (pl.col("estimator") == estimator) & (pl.col("metric") == metric) & (pl.col("scope") == scope)
    )


def _values(rows: pl.DataFrame, estimator: str, metric: str, scope: str) -> dict[str, float]:
    """scope_value → value of one estimator's metric in one scope."""
    return dict(_picked(rows, estimator, metric, scope).select("scope_value", "value").iter_rows())


def _cells(rows: pl.DataFrame, estimator: str, metric: str, scope: str) -> dict[str, tuple]:
    """scope_value → (value, ci_low, ci_high) of one estimator's metric in one scope; the bounds are
    None where no interval was computed (or the metrics predate intervals)."""
    picked = _picked(rows, estimator, metric, scope)
    bounds = [
        pl.col(c) if c in picked.columns else pl.lit(None, pl.Float64).alias(c) for c in ("ci_low", "ci_high")
    ]
    return {v: tuple(rest) for v, *rest in picked.select("scope_value", "value", *bounds).iter_rows()}


def _row(method: str, shows: str, per_gold: dict, auroc: float | None, answered: float | None) -> dict:
    """A table row; `per_gold`: gold count → (value, ci_low, ci_high)."""
    cells = [per_gold.get(str(g), (None, None, None)) for g in GOLD_COUNTS]
    gold = {col: cell[0] for col, cell in zip(GOLD_COLUMNS, cells, strict=True)}
    bounds = {
        f"{col}_{side}": cell[k]
        for col, cell in zip(GOLD_COLUMNS, cells, strict=True)
        for k, side in ((1, "low"), (2, "high"))
    }
    return {"method": method, "shows": shows, **gold, "AUROC": auroc, "answered": answered, **bounds}


def coverage_label(metric: str) -> str:
    """The Table 3 row of knowledge coverage, its τ read from the metric name (coverage_tau0.1)."""
    return f"Knowledge coverage (τ = {metric.removeprefix('coverage_tau')})"


def table3(metrics: pl.DataFrame, split: str = HEADLINE_SPLIT) -> pl.DataFrame:
    """MACE's Table 3 of one model's generation metrics (and coverage rows, if concatenated), in
    TABLE_SCHEMA (module docstring); `split` is the split read, `split` or the fallback of
    table_split. No rows when the metrics have none."""
    chosen = table_split(metrics, split) if not metrics.is_empty() else None
    if chosen is None:
        return pl.DataFrame(schema=TABLE_SCHEMA)
    rows = metrics.filter(pl.col("split") == chosen)
    methods = _methods(set(rows["estimator"].unique().to_list()))
    out = []
    if methods:
        source = GREEDY_SOURCE if GREEDY_SOURCE in methods else methods[0]
        out.append(_row(GREEDY_LABEL, "accuracy", _cells(rows, source, "accuracy", GOLD_MACRO), None, None))
    for estimator in methods:
        spec = GENERATION_ESTIMATORS.get(estimator)
        kind = spec.output_kind if spec else "probability"
        metric = "mean_confidence" if kind == "probability" else MEAN_SCORE
        auroc = _values(rows, estimator, "auroc", "mixture").get(ALL_GOLD_COUNTS)
        share = _values(rows, estimator, ANSWERED_SHARE, "all").get("all")
        answered = share if share is not None and share < 1.0 else None
        out.append(
            _row(
                method_label(estimator),
                SHOWS[kind],
                _cells(rows, estimator, metric, GOLD_MACRO),
                auroc,
                answered,
            )
        )
    coverage = rows.filter((pl.col("estimator") == COVERAGE_ESTIMATOR) & (pl.col("scope") == GOLD_MACRO))
    if not coverage.is_empty():
        metric = coverage["metric"][0]
        out.append(
            _row(
                coverage_label(metric),
                "coverage",
                _cells(rows, COVERAGE_ESTIMATOR, metric, GOLD_MACRO),
                None,
                None,
            )
        )
    table = pl.DataFrame(out, schema={k: v for k, v in TABLE_SCHEMA.items() if k != "split"}, orient="row")
    return table.with_columns(split=pl.lit(chosen)).cast(TABLE_SCHEMA)


def split_note(table: pl.DataFrame, split: str = HEADLINE_SPLIT) -> str:
    """Which split the table shows, and that it fell back when `split` had no rows."""
    if table.is_empty():
        return f"no generation metrics on any split (asked for {split})"
    shown = table["split"][0]
    return f"{shown} split" if shown == split else f"{shown} split (the {split} split has no generation rows)"


def _with_interval(value: float | None, low: float | None, high: float | None, digits: int) -> str | None:
    """ "0.41 [0.33, 0.50]": the value and its interval at `digits` decimals; the value alone where
    there is no interval; None (shown "—") without a value."""
    if value is None:
        return None
    point = f"{value:.{digits}f}"
    return point if low is None or high is None else f"{point} [{low:.{digits}f}, {high:.{digits}f}]"


def display_table(table: pl.DataFrame, digits: int, align: bool = False) -> pl.DataFrame:
    """table3's frame as shown: each 1a…6a cell written with its interval (_with_interval), the
    bound columns and the split dropped; `align` right-justifies those text cells (and their
    headers) to one width per column, as the terminal's numbers are."""
    shown = table.with_columns(
        pl.Series(
            col,
            [
                _with_interval(*cell, digits)
                for cell in zip(table[col], table[f"{col}_low"], table[f"{col}_high"], strict=True)
            ],
            dtype=pl.String,
        )
        for col in GOLD_COLUMNS
    ).drop(*INTERVAL_COLUMNS, "split")
    if not align:
        return shown
    shown = shown.with_columns(pl.col(GOLD_COLUMNS).fill_null("—"))
    widths = {col: max(len(col), shown[col].str.len_chars().max() or 0) for col in GOLD_COLUMNS}
    return shown.with_columns(pl.col(col).str.pad_start(w) for col, w in widths.items()).rename(
        {col: col.rjust(w) for col, w in widths.items()}
    )


def format_table3(table: pl.DataFrame, title: str, split: str = HEADLINE_SPLIT) -> str:
    """The terminal text: `title` (the caller says n, the model and whether it is instruction-tuned),
    the split line, then the aligned table (format_summary: 3 decimals, '—' where empty; the 1a…6a
    cells with their intervals at TEXT_DIGITS decimals where the table has any)."""
    if table.is_empty():
        return f"{title}\n{split_note(table, split)}"
    has_intervals = table.select(INTERVAL_COLUMNS).null_count().row(0) != (table.height,) * len(
        INTERVAL_COLUMNS
    )
    gold = "1a…6a: macro over MACE relations" + (" [95 % bootstrap interval]" if has_intervals else "")
    head = f"{title}\n{split_note(table, split)}; {gold}; AUROC: all gold counts"
    digits = TEXT_DIGITS if has_intervals else PAGE_DIGITS
    return f"{head}\n{format_summary(display_table(table, digits, align=True))}"


# --- the figure -----------------------------------------------------------------------------------


def _family(estimator: str) -> str:
    spec = GENERATION_ESTIMATORS.get(estimator)
    return spec.family if spec else "other"


def _family_colours() -> dict[str, object]:
    """One colour per method family, in registry order, shared by the lines and the bars."""
    families = list(dict.fromkeys([*(s.family for s in GENERATION_ESTIMATORS.values()), "other"]))
    return {f: colour(k, len(families)) for k, f in enumerate(families)}


def _family_name(family: str) -> str:
    """generation_single_turn → single turn (every family here is a generation family)."""
    return family.removeprefix("generation_").replace("_", " ")


def confidence_lines(metrics: pl.DataFrame, split: str) -> pl.DataFrame:
    """One line per method family, its first probability-valued method in registry order (the
    others of a family follow it closely; the table has them all), and the greedy accuracy:
    label, n_gold, value (scope n_gold_macro), in legend order."""
    rows = metrics.filter((pl.col("split") == split) & (pl.col("scope") == GOLD_MACRO))
    present = set(rows.filter(pl.col("metric") == "mean_confidence")["estimator"].unique().to_list())
    firsts: dict[str, str] = {}
    for name, spec in GENERATION_ESTIMATORS.items():
        if spec.output_kind == "probability" and name in present:
            firsts.setdefault(spec.family, name)
    lines = [
        (f"{_family_name(family)}: {method_label(e)}", family, e, "mean_confidence")
        for family, e in firsts.items()
    ]
    methods = _methods(set(rows["estimator"].unique().to_list()))
    if methods:
        source = GREEDY_SOURCE if GREEDY_SOURCE in methods else methods[0]
        lines.append((GREEDY_LABEL, None, source, "accuracy"))
    frames = [
        rows.filter((pl.col("estimator") == e) & (pl.col("metric") == m)).select(
            pl.lit(name).alias("label"),
            pl.lit(family, pl.String).alias("family"),
            pl.col("scope_value").cast(pl.Int64).alias("n_gold"),
            "value",
        )
        for name, family, e, m in lines
    ]
    schema = {"label": pl.String, "family": pl.String, "n_gold": pl.Int64, "value": pl.Float64}
    return (
        pl.concat([f.cast(schema) for f in frames]).sort("n_gold", maintain_order=True)
        if frames
        else pl.DataFrame(schema=schema)
    )


def auroc_bars(metrics: pl.DataFrame, split: str) -> pl.DataFrame:
    """AUROC on the {1,2,4,6} mixture per method, registry order: label, value, n."""
    rows = metrics.filter(
        (pl.col("split") == split)
        & (pl.col("metric") == "auroc")
        & (pl.col("scope") == "mixture")
        & (pl.col("scope_value") == ALL_GOLD_COUNTS)
    )
    order = _methods(set(rows["estimator"].unique().to_list()))
    return pl.DataFrame(
        [
            (method_label(e), _family(e), *rows.filter(pl.col("estimator") == e).select("value", "n").row(0))
            for e in order
        ],
        schema={"label": pl.String, "family": pl.String, "value": pl.Float64, "n": pl.Int64},
        orient="row",
    )


def generation_figure(lines: pl.DataFrame, bars: pl.DataFrame) -> Figure:
    """Left: mean confidence against the gold count, one line per method family (the greedy
    answer's accuracy dashed, for reference); right: AUROC per method as horizontal bars labelled
    with its value and n (an undefined AUROC, one class only, is written, not drawn). A family has
    one colour in both panels. `lines`: label, family (null: the accuracy), n_gold, value;
    `bars`: label, family, value, n."""
    height = max(3.8, 1.0 + 0.28 * bars.height)
    fig = new_figure(12.5, height)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1.0]})
    colours = _family_colours()
    labels = lines["label"].unique(maintain_order=True).to_list()
    for k, label in enumerate(labels):
        g = lines.filter(pl.col("label") == label).sort("n_gold")
        family = g["family"][0]
        left.plot(
            g["n_gold"].to_numpy(),
            g["value"].to_numpy(),
            "--" if family is None else linestyle(k, len(labels)),
            color="0.2" if family is None else colours[family],
            marker="o",
            ms=3,
            lw=1.1,
            label=label,
        )
    left.set(ylim=(0, 1), title="mean confidence by gold count (macro over MACE relations)")
    left.title.set_fontsize(9)
    left.set_xticks(list(GOLD_COUNTS), labels=list(GOLD_COLUMNS))
    left.set_xlabel("gold answers per question", fontsize=8)
    left.set_ylabel("mean confidence (accuracy: dashed)", fontsize=8)
    left.tick_params(labelsize=7)
    left.legend(loc="upper left", bbox_to_anchor=(0.0, -0.16), fontsize=7, frameon=False, ncol=2)
    y = np.arange(bars.height)
    values = bars["value"].fill_null(np.nan).to_numpy()
    right.barh(y, np.nan_to_num(values), color=[colours[f] for f in bars["family"]], height=0.6)
    for k, (value, n) in enumerate(zip(values, bars["n"].to_list(), strict=True)):
        text = "undefined" if math.isnan(value) else f"{value:.3f}"
        right.text(min(np.nan_to_num(value), 0.98) + 0.01, k, f"{text} (n = {n})", va="center", fontsize=7)
    right.axvline(0.5, ls=":", lw=0.8, color="0.5", gid=REFERENCE)
    right.set_yticks(y, labels=bars["label"].to_list(), fontsize=7)
    right.invert_yaxis()
    right.set(xlim=(0, 1.25), title="AUROC per method (gold counts 1, 2, 4, 6 mixed)")
    right.title.set_fontsize(9)
    right.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    right.tick_params(labelsize=7)
    return fig


# --- the page section -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationReport:
    """What the model page's generation section reads: the generation metrics (generation_metrics),
    the knowledge coverage rows (coverage_metrics; None: not computed) and the estimators' status
    rows (STATUS_COLUMNS: which methods ran, how many instances they answered or refused, and why)."""

    metrics: pl.DataFrame
    coverage: pl.DataFrame | None = None
    status: pl.DataFrame | None = None


NO_GENERATION = "No generation metrics for this model: kcal demo --generate --relation mace-award adds them."
ALL_RAN = "Every method ran and gave an estimate for every question."
RAN = "ran"  # the status of a method that ran (estimation.generation's status rows; else "skipped")


def _joined(column: str) -> pl.Expr:
    """The distinct non-empty texts of a status column, joined (one estimator over relations)."""
    text = pl.col(column).cast(pl.String)
    return text.filter(text.is_not_null() & (text != "")).unique(maintain_order=True).str.join("; ")


def status_rows(status: pl.DataFrame | None) -> pl.DataFrame | None:
    """Per method that was skipped or refused some questions (its relations' rows summed): method,
    status, answered, refused, refusals, reason, in registry order; None without status rows."""
    if status is None:
        return None
    missing = [c for c in STATUS_COLUMNS if c not in status.columns]
    if missing:
        raise ValueError(f"generation status: missing column(s) {missing} (have {status.columns})")
    per_method = status.group_by("estimator", maintain_order=True).agg(
        pl.when((pl.col("status") == RAN).all())
        .then(pl.lit(RAN))
        .when((pl.col("status") != RAN).all())
        .then(pl.col("status").first())
        .otherwise(pl.lit("partly ") + pl.col("status").filter(pl.col("status") != RAN).first())
        .alias("status"),
        pl.col("answered", "refused").sum(),
        _joined("refusals").alias("refusals"),
        _joined("reason").alias("reason"),
    )
    order = {e: k for k, e in enumerate(_methods(set(per_method["estimator"])))}
    failing = per_method.filter((pl.col("status") != RAN) | (pl.col("refused") > 0))
    return failing.sort(pl.col("estimator").replace_strict(order, return_dtype=pl.Int64)).select(
        pl.col("estimator").map_elements(method_label, return_dtype=pl.String).alias("method"),
        *STATUS_COLUMNS[1:],
    )


def generation_section_html(report: GenerationReport, split: str = HEADLINE_SPLIT) -> tuple[str, str]:
    """(note, body) of the page's generation section: the Table 3 layout, the figure (or the
    sentence standing in for it) and the methods that could not run or refused, with why."""
    metrics = report.metrics if report.coverage is None else pl.concat([report.metrics, report.coverage])
    table = table3(metrics, split)
    if table.is_empty():
        return "", f'<p class="nodata">{esc(NO_GENERATION)}</p>'
    shown = table["split"][0]
    lines, bars = confidence_lines(metrics, shown), auroc_bars(metrics, shown)
    if lines.is_empty() or not bars["value"].fill_null(np.nan).is_finite().any():
        figure = (
            '<p class="nodata">No method has a mean confidence per gold count and a defined AUROC here.</p>'
        )
    else:
        drawn = svg(generation_figure(lines, bars), "Generation: confidence by gold count and AUROC")
        figure = f"<figure>{drawn}</figure>"
    status = status_rows(report.status)
    if status is None:
        refusals = ""
    elif status.height:
        refusals = html_table(status, caption="Methods that could not run or refused questions")
    else:
        refusals = f'<p class="note">{esc(ALL_RAN)}</p>'
    note = (
        "MACE's setting (Wang et al. 2026, Table 3): sampled answers to open questions, "
        f"{esc(split_note(table, split))}. "
        "Columns 1a…6a: questions with that many gold answers, macro-averaged over the MACE relations; "
        "probability-valued methods show their mean confidence, score-valued ones (shows = mean score) their "
        "mean score, each with its 95 % bootstrap interval in brackets where computed (test split, "
        "at least two questions); AUROC over all gold counts mixed; answered: the share of questions "
        "with an estimate, where below 1. Every number, its n and its interval: the generation_metrics table."
    )
    return note, html_table(display_table(table, PAGE_DIGITS)) + figure + refusals
