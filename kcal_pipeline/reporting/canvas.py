"""The figures' canvas: a matplotlib Figure on its own Agg canvas, the not-empty check, SVG and PNG
output, grids of small multiples, line colours and the interval text shown beside a figure.

No pyplot, no global state, so report pages built on two threads (or two Dagster steps in one
process) never share a figure. A figure is checked before it is saved (`assert_not_empty`): each
of its axes must draw some finite data, so a page never shows an empty frame where a plot should
be. Reference artists (the diagonal of perfect calibration, a zero line) carry the gid REFERENCE
and do not count as data. The figures themselves are in plots.py.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
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


def png_bytes(fig: Figure, label: str, dpi: int = 100) -> bytes:
    """The figure as PNG (checked first: an empty figure is an error naming `label`)."""
    assert_not_empty(fig, label)
    buffer = io.BytesIO()
    _save(fig, buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def grid(count: int, columns: int = COLUMNS, panel: float = PANEL_INCHES, extra_height: float = 0.0):
    """A figure of `count` small multiples, `columns` per row; axes beyond `count` are removed.
    Callers label the outer panels only (`outer_labels`): the panels read as one grid, and a
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


def outer_labels(axes: Sequence, columns: int, xlabel: str, ylabel: str, fontsize: float = 8) -> None:
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
