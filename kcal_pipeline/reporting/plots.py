"""The report's figures, drawn with matplotlib from tidy frames that reporting/pages.py selects:
reliability diagrams, selective-prediction curves, heatmaps, gold-count and option-count trends,
and the model comparison. Each is drawn on canvas.py's checked figure (its own Agg canvas, no
pyplot), which also saves it as SVG or PNG.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kcal_pipeline.reporting.canvas import (  # noqa: F401  (assert_not_empty, interval_text, svg: pages.py reads them as plots.*)
    COLUMNS,
    REFERENCE,
    assert_not_empty,
    colour,
    grid,
    interval_text,
    linestyle,
    new_figure,
    outer_labels,
    svg,
    unit_axes,
)

# --- reliability ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReliabilityPanel:
    """One estimator's reliability diagram: its bins (x = mean confidence, y = accuracy, the 95 %
    bootstrap band of y, n) and the legend line naming its ACE."""

    title: str
    bins: pl.DataFrame  # x, y, y_low, y_high, n (ascending x)
    legend: str


def reliability_figure(panels: Sequence[ReliabilityPanel]) -> Figure:
    """Small multiples, one per estimator: the bins as points (area ∝ n) joined by a line, the
    per-bin 95 % interval of the accuracy as a shaded band, and the diagonal of perfect calibration;
    the legend (band, ACE) under each panel, where it hides no bin."""
    # 1.2 in per row below the square panels for the legend (and the lowest panels' x labels): with
    # less, constrained layout centres the equal-aspect axes and a legend reaches the next row's title
    fig, axes = grid(len(panels), extra_height=1.2 * math.ceil(len(panels) / COLUMNS))
    for ax, panel in zip(axes, panels, strict=True):
        b = panel.bins.sort("x")
        x, y = b["x"].to_numpy(), b["y"].to_numpy()
        low = b["y_low"].fill_null(np.nan).to_numpy()
        high = b["y_high"].fill_null(np.nan).to_numpy()
        n = b["n"].to_numpy().astype(np.float64)
        ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color="0.55", gid=REFERENCE)
        ax.fill_between(x, low, high, color="C0", alpha=0.22, lw=0, label="95 % band")
        ax.plot(x, y, color="C0", lw=1.1, label=panel.legend)
        ax.scatter(x, y, s=6 + 34 * np.sqrt(n / max(n.max(), 1.0)), color="C0", zorder=3, clip_on=False)
        unit_axes(ax)
        ax.set_aspect("equal")
        ax.set_title(textwrap.fill(panel.title, 30), fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, frameon=False, handlelength=1.2)
    outer_labels(axes, min(COLUMNS, len(axes)), "confidence (bin mean)", "accuracy")
    return fig


# --- selective prediction ------------------------------------------------------------------------

SELECTIVE_CURVES = {
    "rejection": ("accuracy–rejection", "share rejected (C < τ)", "accuracy of the kept"),
    "risk_coverage": ("risk–coverage", "coverage", "risk (error rate)"),
}


def selective_figure(curves: pl.DataFrame) -> Figure:
    """One row per estimator family, one column per curve (accuracy–rejection, risk–coverage), one
    line per estimator, the family's legend at the row's right. `curves`: family, label, curve, x,
    y (rows in drawing order). Score-valued estimators have no accuracy–rejection curve (it reads
    the confidence as a probability), so a family of scores has the risk–coverage panel only."""
    families = curves["family"].unique(maintain_order=True).to_list()
    fig = new_figure(2 * 4.2 + 2.8, 3.0 * len(families))
    axes = fig.subplots(len(families), 2, squeeze=False)
    lowest = {}  # column → (its lowest drawn panel, the x axis's name): that panel names the axis
    for row, family in enumerate(families):
        rows = curves.filter(pl.col("family") == family)
        colours = {label: k for k, label in enumerate(rows["label"].unique(maintain_order=True).to_list())}
        drawn = []
        for col, (curve, (title, xlabel, ylabel)) in enumerate(SELECTIVE_CURVES.items()):
            ax = axes[row, col]
            lines = rows.filter(pl.col("curve") == curve)
            if lines.is_empty():  # a caption in its place, not an empty frame
                ax.axis("off")
                ax.text(
                    0.5,
                    0.5,
                    f"no {title} curve:\nscore-valued confidences are not probabilities",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="0.4",
                    transform=ax.transAxes,
                )
                continue
            for (label,), g in lines.group_by("label", maintain_order=True):
                k = colours[label]
                ax.plot(
                    g["x"].to_numpy(),
                    g["y"].to_numpy(),
                    linestyle(k, len(colours)),
                    color=colour(k, len(colours)),
                    lw=1.1,
                    label=label,
                )
            unit_axes(ax)
            ax.set_title(f"{family}: {title}", fontsize=9)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7, labelbottom=False)
            lowest[col] = (ax, xlabel)
            drawn.append(ax)
        # the panel with the most lines holds every estimator of the family (risk–coverage)
        handles, labels = max((a.get_legend_handles_labels() for a in drawn), key=lambda hl: len(hl[1]))
        drawn[-1].legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=7,
            frameon=False,
            ncol=1 if len(labels) <= 12 else 2,
        )
    for ax, xlabel in lowest.values():  # a column's x axis: its ticks and name once, at the bottom
        ax.tick_params(labelbottom=True)
        ax.set_xlabel(xlabel, fontsize=8)
    return fig


# --- heatmaps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeatmapPanel:
    """A matrix of values (NaN = no value) with its row and column labels; `diverging` centres the
    colours on 0 (differences), else they run from `vmin` to `vmax`. `better` says which end is
    good (for the colour bar's label)."""

    title: str
    values: np.ndarray  # [rows, columns]
    rows: Sequence[str]
    columns: Sequence[str]
    colorbar: str
    diverging: bool = False
    vmin: float = 0.0
    vmax: float = 1.0
    cmap: str = "viridis"


def heatmap_figure(panels: Sequence[HeatmapPanel]) -> Figure:
    """Panels side by side, each a heatmap with every cell's value written in it ('—' where
    there is none)."""
    n_rows = max(len(p.rows) for p in panels)
    width = sum(1.6 + 0.62 * len(p.columns) for p in panels) + 1.8 * len(panels)
    fig = new_figure(max(width, 5.0), 1.6 + 0.32 * n_rows)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, p in zip(axes, panels, strict=True):
        values = np.asarray(p.values, dtype=np.float64)
        if p.diverging:
            span = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
            span = span if span > 0 else 1.0
            norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
            image = ax.imshow(np.ma.masked_invalid(values), cmap=p.cmap, norm=norm, aspect="auto")
        else:
            image = ax.imshow(
                np.ma.masked_invalid(values), cmap=p.cmap, vmin=p.vmin, vmax=p.vmax, aspect="auto"
            )
        ax.set_facecolor("0.92")
        ax.set_xticks(range(len(p.columns)), labels=list(p.columns), rotation=40, ha="right", fontsize=7)
        ax.set_yticks(range(len(p.rows)), labels=list(p.rows), fontsize=7)
        ax.set_title(p.title, fontsize=9)
        for (i, j), v in np.ndenumerate(values):
            rgba = image.cmap(image.norm(v)) if np.isfinite(v) else (1, 1, 1, 1)
            dark = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5
            ax.text(
                j,
                i,
                "—" if not np.isfinite(v) else f"{v:+.2f}" if p.diverging else f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if dark else "black",
            )
        bar = fig.colorbar(image, ax=ax, shrink=0.85, pad=0.02)
        bar.set_label(p.colorbar, fontsize=7)
        bar.ax.tick_params(labelsize=6)
    return fig


# --- by gold count -------------------------------------------------------------------------------


def gold_count_figure(points: pl.DataFrame) -> Figure:
    """Accuracy and mean confidence against the number of gold answers, one line per estimator:
    with more correct answers a top-option confidence should understate what the model knows.
    `points`: label, n_gold (int), accuracy, mean_confidence, n, rows in legend order. A metrics
    table without mean_confidence (written before it existed) gets the accuracy panel alone."""
    panels = [
        (column, title)
        for column, title in (("accuracy", "accuracy"), ("mean_confidence", "mean confidence"))
        if points[column].cast(pl.Float64).fill_null(np.nan).is_finite().any()
    ]
    fig = new_figure(5.0 * len(panels) + 2.2, 3.8)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    golds = sorted(points["n_gold"].unique().to_list())
    n_lines = points["label"].n_unique()
    for k, ((label,), g) in enumerate(points.group_by("label", maintain_order=True)):
        g = g.sort("n_gold")
        for ax, (column, _) in zip(axes, panels, strict=True):
            ax.plot(
                g["n_gold"].to_numpy(),
                g[column].to_numpy(),
                linestyle(k, n_lines),
                marker="o",
                ms=3,
                color=colour(k, n_lines),
                lw=1.1,
                label=label,
            )
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set(ylim=(0, 1), title=f"{title} by gold count")
        ax.set_xticks(golds)
        ax.set_xlabel("gold answers per question (n_gold)", fontsize=8)
        ax.set_ylabel(title, fontsize=8)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return fig


# --- option-count sweep --------------------------------------------------------------------------

SWEEP_METRICS = (("ace", "ACE"), ("accuracy", "accuracy"), ("mean_confidence", "mean confidence"))
FULL = "full"  # the tick of each instance's full answer space, right of the swept k


def sweep_figure(points: pl.DataFrame) -> Figure:
    """ACE, accuracy and mean confidence against the answer-space size k of the option-count sweep
    (Kissling et al. §5.4, Fig. 5), one line per estimator family: each point the mean over the k's
    draws with an error bar of ± one standard deviation (none with one draw), the full answer
    spaces as an unjoined hollow point at "full" (their size varies by relation). `points`: label,
    k (0 = full), metric, mean, sd, rows in legend order. The k ticks are evenly spaced: the swept
    sizes (5, 10, …, 60) are read as categories."""
    ks = sorted(k for k in points["k"].unique().to_list() if k != 0)
    positions = {k: i for i, k in enumerate(ks)} | {0: len(ks)}
    panels = [(m, t) for m, t in SWEEP_METRICS if (points["metric"] == m).any()]
    fig = new_figure(4.2 * len(panels) + 2.6, 3.6)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = points["label"].unique(maintain_order=True).to_list()
    for n, lab in enumerate(labels):
        for ax, (metric, _) in zip(axes, panels, strict=True):
            g = points.filter((pl.col("label") == lab) & (pl.col("metric") == metric)).sort("k")
            swept = g.filter(pl.col("k") != 0)
            full = g.filter(pl.col("k") == 0)
            style = {"color": colour(n, len(labels)), "ms": 4, "capsize": 2, "elinewidth": 0.8}
            if swept.height:
                ax.errorbar(
                    [positions[k] for k in swept["k"]],
                    swept["mean"].to_numpy(),
                    yerr=swept["sd"].fill_null(0.0).fill_nan(0.0).to_numpy(),
                    fmt=linestyle(n, len(labels)),
                    marker="o",
                    lw=1.1,
                    label=lab,
                    **style,
                )
            if full.height:
                ax.errorbar([positions[0]], full["mean"].to_numpy(), fmt="o", mfc="white", **style)
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_xticks(range(len(ks) + 1), labels=[*map(str, ks), FULL])
        ax.set(ylim=(0, 1), xlim=(-0.5, len(ks) + 0.5), title=f"{title} by answer-space size")
        ax.set_xlabel("options per instance (k)", fontsize=8)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(axis="y", lw=0.4, color="0.88")
        ax.tick_params(labelsize=7)
    handles, names = axes[0].get_legend_handles_labels()
    axes[-1].legend(handles, names, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return fig


# --- across models -------------------------------------------------------------------------------


# Saturated colours that read on white (Okabe-Ito without its yellow, and three of Tol's dark
# ones): the scatter's estimators of one family, each family with its own marker.
READABLE_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
                    "#882255", "#332288")  # fmt: skip
FAMILY_MARKERS = "osD^vP*Xh"
MODEL_NAMES_UP_TO = 12  # more model names than this would hide the points; the next figure names them


def estimator_styles(points: pl.DataFrame) -> dict[str, tuple[str, str]]:
    """{label: (colour, marker)}: the marker says the family, the colour the estimator within it,
    so no two estimators share both (a family of more than nine repeats a colour)."""
    families = points["family"] if "family" in points.columns else pl.Series(["all"] * points.height)
    pairs = pl.DataFrame({"label": points["label"], "family": families}).unique(maintain_order=True)
    family_order = pairs["family"].unique(maintain_order=True).to_list()
    styles, seen = {}, {}
    for lab, family in pairs.iter_rows():
        k = seen[family] = seen.get(family, -1) + 1
        marker = FAMILY_MARKERS[family_order.index(family) % len(FAMILY_MARKERS)]
        styles.setdefault(lab, (READABLE_COLOURS[k % len(READABLE_COLOURS)], marker))
    return styles


def ace_accuracy_figure(points: pl.DataFrame) -> Figure:
    """ACE against accuracy, one point per model × estimator (marker: family, colour: estimator
    within it; each model's name above its highest point, up to MODEL_NAMES_UP_TO models); the
    axes span the points (estimators that share a prediction share an accuracy, so one model's
    points stand in a column). The intervals are in the page's tables and the next figure.
    `points`: model, label, accuracy, ace (and family)."""
    fig = new_figure(10.0, 5.5)
    ax = fig.subplots()
    styles = estimator_styles(points)
    for row in points.iter_rows(named=True):
        colour_, marker = styles[row["label"]]
        ax.scatter(row["accuracy"], row["ace"], s=46, alpha=0.9, edgecolors="white", linewidths=0.5,
                   color=colour_, marker=marker)  # fmt: skip
    models = points["model"].unique(maintain_order=True).to_list()
    if len(models) <= MODEL_NAMES_UP_TO:
        for model in models:
            top = points.filter(pl.col("model") == model).sort("ace", descending=True).row(0, named=True)
            ax.annotate(model, (top["accuracy"], top["ace"]), xytext=(0, 7), textcoords="offset points",
                        ha="center", fontsize=6.5, color="0.3")  # fmt: skip
    legend = {"fontsize": 7, "title_fontsize": 8, "frameon": False}
    if "family" in points.columns:
        families = points["family"].unique(maintain_order=True).to_list()
        markers = [FAMILY_MARKERS[k % len(FAMILY_MARKERS)] for k in range(len(families))]
        handles = [
            Line2D([], [], color="0.3", marker=m, ls="", label=f)
            for f, m in zip(families, markers, strict=True)
        ]
        by_family = ax.legend(
            handles=handles, title="family (marker)", loc="lower left", bbox_to_anchor=(1.02, 0.0), **legend
        )
        ax.add_artist(by_family)
    # the estimators' (wider) legend last: the axes' own legend is the one the layout makes room for
    ax.legend(
        handles=[Line2D([], [], color=c, marker=m, ls="", label=lab) for lab, (c, m) in styles.items()],
        title="estimator",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        **legend,
    )
    accuracy, ace = points["accuracy"].to_numpy(), points["ace"].to_numpy()
    pad = max(0.05, 0.1 * (accuracy.max() - accuracy.min()))
    ax.set_xlim(max(0.0, accuracy.min() - pad), min(1.0, accuracy.max() + pad))
    ax.set_ylim(0.0, max(0.05, 1.15 * ace.max()))
    ax.grid(lw=0.4, color="0.88")
    ax.set_xlabel("accuracy (test split, all relations; higher is better)", fontsize=9)
    ax.set_ylabel("ACE (lower is better)", fontsize=9)
    ax.tick_params(labelsize=8)
    return fig


def estimator_comparison_figure(points: pl.DataFrame, metrics: Sequence[tuple[str, str]]) -> Figure:
    """One panel per metric: each estimator on its own row, one point per model with its 95 %
    interval, so the same estimator reads across models. `points`: label, model, metric, value,
    ci_low, ci_high; `metrics`: (name, axis title) in panel order."""
    labels = points["label"].unique(maintain_order=True).to_list()
    models = points["model"].unique(maintain_order=True).to_list()
    fig = new_figure(3.0 * len(metrics) + 4.4, 1.6 + 0.3 * len(labels))
    axes = fig.subplots(1, len(metrics), squeeze=False, sharey=True)[0]
    offsets = np.linspace(-0.25, 0.25, len(models)) if len(models) > 1 else np.zeros(1)
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        rows = points.filter(pl.col("metric") == metric)
        for m, model in enumerate(models):
            g = rows.filter(pl.col("model") == model)
            if g.is_empty():
                continue
            y = np.array([labels.index(v) for v in g["label"]]) + offsets[m]
            value = g["value"].to_numpy()
            low = g["ci_low"].fill_null(np.nan).to_numpy()
            high = g["ci_high"].fill_null(np.nan).to_numpy()
            err = np.vstack([np.nan_to_num(value - low), np.nan_to_num(high - value)]).clip(min=0)
            ax.errorbar(value, y, xerr=err, fmt="o", ms=5, color=f"C{m % 10}", elinewidth=1.0, label=model)
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, 1)
        ax.grid(axis="x", lw=0.4, color="0.85")
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(range(len(labels)), labels=labels)
    axes[0].invert_yaxis()
    handles, names = axes[0].get_legend_handles_labels()
    axes[-1].legend(
        handles,
        names,
        title="model",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=7,
        title_fontsize=8,
        frameon=False,
    )
    return fig
