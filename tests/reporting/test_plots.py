"""The report's figures: every axes draws finite data (or the figure is refused), inline SVG with no
outside reference, PNG data URIs, and what each figure draws from its tidy frame."""

import re

import numpy as np
import polars as pl
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from kcal_pipeline.reporting import canvas, plots


def test_a_figure_has_its_own_agg_canvas():
    fig = canvas.new_figure(3, 2)
    assert isinstance(fig.canvas, FigureCanvasAgg)
    assert canvas.new_figure(3, 2) is not fig  # no shared (pyplot) figure


def test_assert_not_empty_names_the_axes_that_draws_nothing():
    fig = canvas.new_figure(6, 3)
    full, empty = fig.subplots(1, 2)
    full.plot([0, 1], [0.2, 0.4])
    empty.set_title("rejection")
    empty.plot([0, 1], [0, 1], gid=canvas.REFERENCE)  # a diagonal is orientation, not data
    empty.plot([0.5], [np.nan])  # a point with no value draws nothing
    with pytest.raises(
        canvas.EmptyFigureError, match=r"figure 'demo': axes 1 \('rejection'\) draws no finite data"
    ):
        canvas.assert_not_empty(fig, "demo")
    empty.scatter([0.3], [0.6])
    assert canvas.assert_not_empty(fig, "demo") is fig
    with pytest.raises(canvas.EmptyFigureError, match="has no plot"):
        canvas.assert_not_empty(canvas.new_figure(2, 2), "blank")


@pytest.mark.parametrize(
    "draw",
    [
        lambda ax: ax.imshow(np.array([[np.nan, 0.4]])),  # one finite cell is data
        lambda ax: ax.bar([0], [0.0]),  # a bar of height 0 is a value
        lambda ax: ax.fill_between([0, 1], [0.1, 0.2], [0.3, 0.4]),
    ],
)
def test_images_bars_and_bands_count_as_data(draw):
    fig = canvas.new_figure(3, 3)
    draw(fig.subplots())
    canvas.assert_not_empty(fig)


def test_an_all_nan_image_is_empty():
    fig = canvas.new_figure(3, 3)
    fig.subplots().imshow(np.full((2, 2), np.nan))
    with pytest.raises(canvas.EmptyFigureError):
        canvas.assert_not_empty(fig)


def test_svg_is_inline_and_references_nothing_outside():
    fig = canvas.new_figure(3, 2)
    fig.subplots().plot([0, 1], [1, 0])
    text = canvas.svg(fig, 'a "quoted" <label>')
    assert text.startswith("<svg ") and text.rstrip().endswith("</svg>")
    assert "<?xml" not in text and "DOCTYPE" not in text and "<metadata" not in text
    # the only URLs are the SVG namespaces, never a resource
    assert set(re.findall(r"https?://[^\"' ]+", text)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    assert 'role="img" aria-label="a &quot;quoted&quot; &lt;label>"' in text
    assert re.search(r"<svg[^>]*viewBox=", text) and not re.search(
        r"<svg[^>]*\swidth=", text.split(">")[0] + ">"
    )


def test_svg_and_png_refuse_an_empty_figure():
    fig = canvas.new_figure(3, 2)
    fig.subplots()
    with pytest.raises(canvas.EmptyFigureError, match="figure 'reliability'"):
        canvas.svg(fig, "reliability")
    with pytest.raises(canvas.EmptyFigureError):
        canvas.png_bytes(fig, "reliability")


def test_png_bytes_are_a_png():
    fig = canvas.new_figure(2, 2)
    fig.subplots().plot([0, 1], [0, 1])
    assert canvas.png_bytes(fig, "x", dpi=50)[:8] == b"\x89PNG\r\n\x1a\n"


def test_interval_text():
    assert canvas.interval_text(0.1454, 0.09, 0.2101) == "0.145 [0.090, 0.210]"
    assert canvas.interval_text(0.5, None, None) == "0.500"
    assert canvas.interval_text(float("nan"), float("nan"), float("nan")) == "undefined"  # one class
    assert canvas.interval_text(0.5, float("nan"), float("nan")) == "0.500"


def test_reliability_figure_draws_points_band_and_legend():
    bins = pl.DataFrame(
        {
            "x": [0.2, 0.6, 0.9],
            "y": [0.0, 0.5, 1.0],
            "y_low": [0.0, 0.2, 0.8],
            "y_high": [0.3, 0.9, 1.0],
            "n": [3, 4, 5],
        }
    )
    panels = [
        plots.ReliabilityPanel("Base", bins, "ACE 0.145 [0.090, 0.210], n = 12"),
        plots.ReliabilityPanel("Margin", bins, "ACE 0.2, n = 12"),
    ]
    fig = plots.reliability_figure(panels)
    assert [ax.get_title() for ax in fig.axes] == ["Base", "Margin"]
    base = fig.axes[0]
    assert [t.get_text() for t in base.get_legend().get_texts()] == [
        "95 % band",
        "ACE 0.145 [0.090, 0.210], n = 12",
    ]
    band = base.collections[0].get_paths()[0].vertices
    # the band's polygon runs along y_high and back along y_low at the bins' x
    assert {tuple(v) for v in band} >= {
        (0.2, 0.0),
        (0.6, 0.2),
        (0.9, 0.8),
        (0.2, 0.3),
        (0.6, 0.9),
        (0.9, 1.0),
    }
    assert base.lines[0].get_gid() == canvas.REFERENCE
    np.testing.assert_array_equal(base.lines[1].get_xydata(), [[0.2, 0.0], [0.6, 0.5], [0.9, 1.0]])
    canvas.assert_not_empty(fig)
    # six panels: a row of four and a row of two, no empty axes left over; the axes are named (and
    # their ticks labelled) on the outer panels only: y on the first column, x on each column's
    # lowest panel (the short last row leaves columns 3 and 4 ending in the first row)
    six = plots.reliability_figure(panels * 3).axes
    assert len(six) == 6
    assert [ax.get_xlabel() for ax in six] == ["", "", *["confidence (bin mean)"] * 4]
    assert [ax.get_ylabel() for ax in six] == ["accuracy", "", "", "", "accuracy", ""]
    assert [ax.xaxis.get_tick_params()["labelbottom"] for ax in six] == [False, False, True, True, True, True]
    assert [t.get_text() for t in six[4].get_xticklabels()] == ["0", "0.25", "0.5", "0.75", "1"]


@pytest.mark.parametrize(
    ("count", "title"), [(5, "Base"), (8, "Base"), (8, "Template marginal + temperature scaling")]
)
def test_no_reliability_legend_overlaps_a_title_label_or_another_panel(count, title):
    """Issue 34 #11: each panel's legend sits under it, clear of the next row's titles."""
    bins = pl.DataFrame(
        {"x": [0.2, 0.9], "y": [0.0, 1.0], "y_low": [0.0, 0.8], "y_high": [0.3, 1.0], "n": [3, 5]}
    )
    fig = plots.reliability_figure(
        [plots.ReliabilityPanel(title, bins, "ACE 0.145 [0.090, 0.210], n = 1200")] * count
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for k, ax in enumerate(fig.axes):
        legend = ax.get_legend().get_window_extent(renderer)
        for j, other in enumerate(fig.axes):
            texts = [other.title, other.xaxis.label, other.yaxis.label, *other.get_xticklabels()]
            boxes = [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]
            boxes += [other.get_window_extent(renderer)] if j != k else []
            assert not any(legend.overlaps(box) for box in boxes), (k, j)


def test_selective_figure_gives_score_families_a_caption_for_accuracy_rejection():
    curves = pl.DataFrame(
        {
            "family": ["single_template"] * 4 + ["selective_lama"] * 2,
            "label": ["Base", "Base", "Base", "Base", "Gap", "Gap"],
            "curve": [
                "rejection",
                "rejection",
                "risk_coverage",
                "risk_coverage",
                "risk_coverage",
                "risk_coverage",
            ],
            "x": [0.0, 0.5, 0.5, 1.0, 0.5, 1.0],
            "y": [0.6, 0.8, 0.1, 0.4, 0.2, 0.3],
        }
    )
    fig = plots.selective_figure(curves)
    assert [ax.get_title() for ax in fig.axes] == [
        "single_template: accuracy–rejection",
        "single_template: risk–coverage",
        "",  # switched off, holding a caption
        "selective_lama: risk–coverage",
    ]
    caption = fig.axes[2]
    assert not caption.axison and caption.texts[0].get_text().startswith("no accuracy–rejection curve")
    # each column names its x axis once, on its lowest drawn panel (above the caption on the left)
    assert [ax.get_xlabel() for ax in fig.axes] == ["share rejected (C < τ)", "", "", "coverage"]
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.xaxis.get_tick_params()["labelbottom"] for ax in drawn] == [True, False, True]
    canvas.assert_not_empty(fig)  # a caption panel is not a plot


def test_a_figure_of_captions_only_is_empty():
    fig = canvas.new_figure(3, 3)
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, "nothing")
    with pytest.raises(canvas.EmptyFigureError, match="has no plot"):
        canvas.assert_not_empty(fig)


def test_heatmap_writes_every_value_and_a_dash_where_there_is_none():
    panel = plots.HeatmapPanel(
        "Δ",
        np.array([[0.25, np.nan], [-0.5, 0.0]]),
        ["P36", "all"],
        ["a", "b"],
        colorbar="Δ",
        diverging=True,
        cmap="RdBu",
    )
    fig = plots.heatmap_figure([panel])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["+0.25", "—", "-0.50", "+0.00"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["P36", "all"]
    canvas.assert_not_empty(fig)


def test_the_ace_accuracy_scatter_uses_dark_colours_and_a_marker_per_family():
    """Issue 34 #11: 19 estimators were 19 pale tab20 colours; now the marker says the family and
    a saturated colour the estimator within it, so every estimator has its own pair."""
    from matplotlib.colors import to_rgb
    from matplotlib.legend import Legend

    families = {"recalibration": 9, "multi_answer": 6, "single_template": 3, "template_marginal": 1}
    estimators = [(f"{f} + a long estimator name {k}", f) for f, n in families.items() for k in range(n)]
    points = pl.DataFrame(
        [
            {"model": m, "label": lab, "family": f, "accuracy": 0.5 + 0.1 * i, "ace": 0.01 * (j + 1)}
            for i, m in enumerate(["m1", "m2"])
            for j, (lab, f) in enumerate(estimators)
        ]
    )
    styles = plots.estimator_styles(points)
    assert len(styles) == 19 and len(set(styles.values())) == 19
    for lab, f in estimators:
        assert (
            styles[lab][1] == styles[estimators[[e[1] for e in estimators].index(f)][0]][1]
        )  # one marker a family
    assert len({marker for _, marker in styles.values()}) == len(families)
    for colour, _ in styles.values():
        r, g, b = to_rgb(colour)
        assert 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.65, colour  # no pale colour on the white page
    fig = plots.ace_accuracy_figure(points)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["m1", "m2"]  # each model named above its points
    legends = [a for a in ax.get_children() if isinstance(a, Legend)]
    assert [[t.get_text() for t in legend.get_texts()] for legend in legends] == [
        list(families),
        list(styles),
    ]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert all(
        fig.bbox.contains(*legend.get_window_extent(renderer).p1) for legend in legends
    )  # none clipped
    canvas.assert_not_empty(fig)
