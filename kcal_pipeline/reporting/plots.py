"""The report's figures, drawn with matplotlib from tidy frames that reporting/pages.py selects.

Every figure is a `matplotlib.figure.Figure` with its own Agg canvas: no pyplot, no global state,
so report pages built on two threads (or two Dagster steps in one process) never share a figure.
A figure is checked before it is saved (`assert_not_empty`): each of its axes must draw some
finite data, so a page never shows an empty frame where a plot should be. Reference artists (the
diagonal of perfect calibration, a zero line) carry the gid REFERENCE and do not count as data.
"""

from __future__ import annotations

import base64
import io
import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib
import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

REFERENCE = "reference"  # gid of an artist drawn for orientation, not data
# Saved without matplotlib's RDF block (it names http:// vocabularies) and without a date, so the
# page references no outside URL and two renders of the same data differ only in clip-path ids.
_SVG_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
PANEL_INCHES = 3.2  # one small-multiple panel
COLUMNS = 4  # panels per row in a grid of small multiples
_NUMBER = "{:.3f}"
# Ticks of a [0, 1] axis, fixed with their labels: no locator or formatter runs per panel and draw
# (a quarter of a model page's figure time went to them).
UNIT_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
UNIT_TICK_LABELS = ("0", "0.25", "0.5", "0.75", "1")


def unit_axes(ax) -> None:
    """Both axes span [0, 1], with the fixed ticks."""
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.set_xticks(UNIT_TICKS, labels=UNIT_TICK_LABELS)
    ax.set_yticks(UNIT_TICKS, labels=UNIT_TICK_LABELS)


class EmptyFigureError(ValueError):
    """A figure with an axes that draws nothing: a selection bug, never something to publish."""


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (the explicit backend), laid out by constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finite_rows(xy: np.ndarray) -> bool:
    xy = np.asarray(xy, dtype=np.float64)
    return xy.size > 0 and bool(np.isfinite(xy.reshape(len(xy), -1)).all(axis=1).any())


def _draws_data(artist) -> bool:
    if artist.get_gid() == REFERENCE or not artist.get_visible():
        return False
    if isinstance(artist, Line2D):
        return _finite_rows(artist.get_xydata())
    if isinstance(artist, AxesImage):
        return np.ma.masked_invalid(np.ma.asarray(artist.get_array(), dtype=np.float64)).count() > 0
    if isinstance(artist, Collection):
        paths = [p.vertices for p in artist.get_paths() if len(p.vertices)]
        offsets = artist.get_offsets()
        return any(_finite_rows(v) for v in paths) and (len(offsets) == 0 or _finite_rows(offsets))
    if isinstance(artist, Patch):
        return _finite_rows(artist.get_path().vertices) and _finite_rows(
            artist.get_patch_transform().transform(artist.get_path().vertices)
        )
    return False


def assert_not_empty(fig: Figure, name: str = "") -> Figure:
    """Raise EmptyFigureError naming the figure and the axes (by title) if some axes draws no line,
    collection, patch or image with finite data (reference lines do not count), or if no axes is a
    plot at all. A colour bar and a panel switched off to hold a caption are not plots. Returns the
    figure, so it can wrap a return value."""
    plots_ = [
        (k, ax)
        for k, ax in enumerate(fig.axes)
        if ax.axison and getattr(ax, "_colorbar", None) is None and ax.get_label() != "<colorbar>"
    ]
    if not plots_:
        raise EmptyFigureError(f"figure {name!r} has no plot")
    for k, ax in plots_:
        artists = [*ax.lines, *ax.collections, *ax.patches, *ax.images]
        if not any(_draws_data(a) for a in artists):
            raise EmptyFigureError(
                f"figure {name!r}: axes {k} ({ax.get_title() or 'untitled'!r}) draws no finite data"
            )
    return fig


def _save(fig: Figure, buffer, **options) -> None:
    """Save without a tight bounding box (constrained layout already keeps every label inside the
    figure; "tight" cost one more full draw per save), then keep the positions the layout found:
    a second save of the figure (SVG for the page, PNG for Dagster's metadata) draws once, without
    laying it out again (the layout was ~half of a figure's rendering time)."""
    fig.savefig(buffer, **options)
    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.set_layout_engine("none")


def svg(fig: Figure, label: str) -> str:
    """The figure as inline SVG for an HTML page (checked first): no XML prolog or DOCTYPE, its
    natural width as CSS but never wider than the page (the viewBox keeps the aspect ratio), with
    `label` as its accessible name."""
    assert_not_empty(fig, label)
    buffer = io.StringIO()
    _save(fig, buffer, format="svg", metadata=_SVG_METADATA)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    head, rest = text.split(">", 1)
    width = re.search(r'\swidth="([^"]*)"', head)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    style = (f"width:{width.group(1)};" if width else "") + "max-width:100%;height:auto"
    label = label.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return f'{head} style="{style}" role="img" aria-label="{label}" class="figure">{rest}'


def png_data_uri(fig: Figure, label: str, dpi: int = 100) -> str:
    """The figure as a PNG data: URI (checked first), e.g. for Dagster's markdown metadata."""
    assert_not_empty(fig, label)
    buffer = io.BytesIO()
    _save(fig, buffer, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _grid(count: int, columns: int = COLUMNS, panel: float = PANEL_INCHES, extra_height: float = 0.0):
    """A figure of `count` small multiples, `columns` per row; axes beyond `count` are removed.
    Callers label the outer panels only (`_outer_labels`): the panels read as one grid, and a
    16-panel figure lays out and renders in about half the time (its tick labels were most of the
    text matplotlib measured). The axes are not shared: matplotlib's sibling bookkeeping for shared
    axes cost what the hidden labels saved, and every panel sets the same limits anyway."""
    cols = max(1, min(columns, count))
    rows = math.ceil(count / cols)
    fig = new_figure(cols * panel, rows * panel + extra_height)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[count:]:
        fig.delaxes(ax)
    return fig, list(axes[:count])


def _outer_labels(axes: Sequence, columns: int, xlabel: str, ylabel: str, fontsize: float = 8) -> None:
    """Axis labels and tick labels on the grid's outer panels only: y on the first column, x on the
    lowest panel of each column (the last row may be short)."""
    for k, ax in enumerate(axes):
        lowest = k + columns >= len(axes)
        ax.tick_params(labelsize=7, labelbottom=lowest, labelleft=k % columns == 0)
        if lowest:
            ax.set_xlabel(xlabel, fontsize=fontsize)
        if k % columns == 0:
            ax.set_ylabel(ylabel, fontsize=fontsize)


def colour(k: int, n: int):
    """The k-th of n line colours: matplotlib's ten-colour cycle, or tab20's twenty when there are
    more lines than ten (beyond twenty the line style tells them apart too)."""
    if n <= 10:
        return f"C{k}"
    return matplotlib.colormaps["tab20"](k % 20)


def linestyle(k: int, n: int) -> str:
    return ("-", "--", ":", "-.")[(k // (10 if n <= 10 else 20)) % 4]


def _fmt(value: float | None) -> str:
    return (
        "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else _NUMBER.format(value)
    )


def _undefined(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def interval_text(value: float | None, low: float | None, high: float | None) -> str:
    """'0.145 [0.090, 0.210]'; the value alone when it has no interval; 'undefined' for a NaN
    value (AUROC with one class), rather than 'nan [nan, nan]'."""
    if _undefined(value):
        return "undefined"
    if _undefined(low) or _undefined(high):
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(low)}, {_fmt(high)}]"


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
    fig, axes = _grid(len(panels), extra_height=0.6 * math.ceil(len(panels) / COLUMNS))
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
    _outer_labels(axes, min(COLUMNS, len(axes)), "confidence (bin mean)", "accuracy")
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


def ace_accuracy_figure(points: pl.DataFrame) -> Figure:
    """ACE against accuracy, one point per model × estimator (colour: estimator, marker: model); the
    axes span the points (estimators that share a prediction share an accuracy, so one model's
    points stand in a column). The intervals are in the page's tables and the next figure.
    `points`: model, label, accuracy, ace."""
    fig = new_figure(10.0, 5.5)
    ax = fig.subplots()
    labels = points["label"].unique(maintain_order=True).to_list()
    models = points["model"].unique(maintain_order=True).to_list()
    markers = "osD^vP*Xh<>p"
    for row in points.iter_rows(named=True):
        ax.scatter(
            row["accuracy"],
            row["ace"],
            s=46,
            alpha=0.85,
            edgecolors="white",
            linewidths=0.5,
            color=colour(labels.index(row["label"]), len(labels)),
            marker=markers[models.index(row["model"]) % len(markers)],
        )
    legend_estimators = [
        Line2D([], [], color=colour(k, len(labels)), marker="o", ls="", label=lab)
        for k, lab in enumerate(labels)
    ]
    legend_models = [
        Line2D([], [], color="0.3", marker=markers[k % len(markers)], ls="", label=m)
        for k, m in enumerate(models)
    ]
    first = ax.legend(
        handles=legend_estimators,
        title="estimator",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=7,
        title_fontsize=8,
        frameon=False,
    )
    ax.add_artist(first)
    ax.legend(
        handles=legend_models,
        title="model",
        loc="lower left",
        bbox_to_anchor=(1.02, 0.0),
        fontsize=7,
        title_fontsize=8,
        frameon=False,
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
