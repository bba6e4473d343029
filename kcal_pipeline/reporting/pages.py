"""The per-model report page (report.html; the page across models: reporting/cross_model.py).

Both are single self-contained HTML files (inline CSS, matplotlib's inline SVG; no script, no
external file, font or URL), so a page can be mailed or opened offline. A page is a list of
sections; a figure section holds exactly one figure, or one sentence saying which data the store
lacks and which setting would give it, never an empty plot.

What each figure shows is selected in reporting/figure_data.py from the evaluation tables, with
the selection of sql/views/headline_metrics.sql (reporting/selection.py): the test split, each
instance's full answer space (the option-count sweep's figure: its cut answer spaces beside them)
and each estimator's headline reduction (its spec's first), so a number on a page is the number
`kcal sql --query …` prints for it.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from kcal_pipeline.estimation.registry import FULL_ANSWER_SPACE, HEADLINE_SPLIT, summary_estimators
from kcal_pipeline.evaluation.registry import summary_metrics
from kcal_pipeline.reporting import plots
from kcal_pipeline.reporting.figure_data import (
    MARKER_KINDS,
    consistency_matrix,
    consistency_panel,
    gold_count_points,
    intervals_table,
    marker_deltas,
    marker_panels,
    reliability_panels,
    selective_curves,
    sweep_points,
)
from kcal_pipeline.reporting.generation import GenerationReport, generation_section_html
from kcal_pipeline.reporting.html import (
    LEGEND,
    TEMPLATE_MEAN_SUFFIX,
    esc,
    first_line,
    html_table,
    split_table,
    subsample_tables,
)
from kcal_pipeline.reporting.sections import Section, figure_section, page, run_table
from kcal_pipeline.reporting.selection import label, one_model

# --- no-data sentences: what is missing and which setting would give it ---------------------------

NO_RELIABILITY = "No probability-valued main estimator has a reliability curve on the test split."
NO_SELECTIVE = "No estimator has accuracy–rejection or risk–coverage curves on the test split."
# The setting that scores the marker templates (the default template kinds are curated,question).
MARKER_SETTING = "--template-kinds curated,marker_verbal,marker_numeric"
NO_MARKERS = (
    "No epistemic-marker templates were scored in this store, so there is no marker effect to show: "
    f"kcal demo {MARKER_SETTING} adds them (add ,question to keep the question templates)."
)
NO_CONSISTENCY = (
    "The consistency table has no setup besides each estimator's headline prompt for the main "
    "estimators: perturbation or marker templates (--template-kinds … ,perturbation), a second "
    "curated template or --answer-space-k give it some."
)
NO_MARKER_VALUES = (
    "The template catalog has marker templates, but this model has no test-split accuracy or ACE on "
    "them: statements are built only from the template kinds of --template-kinds (default "
    f"curated,question). kcal demo {MARKER_SETTING} scores the marker templates and fills this "
    "section (add ,question to keep the question templates); where they were scored, "
    'the estimator_status table (kcal sql "SELECT * FROM estimator_status") says why no marker '
    "estimator ran."
)
NO_CONSISTENCY_VALUES = (
    "Every IoU_cons of the main estimators is undefined here (NaN: in each pair some setup accepted "
    "nothing, or rejected nothing, on the test split): a larger probe gives both kinds of decision."
)
NO_SWEEP = (
    "This store has no option-count sweep (answer spaces cut to k options, several draws each): "
    "kcal demo --answer-space-k 5,10,20,30,60 --answer-space-draws 3 adds it."
)
NO_GOLD_COUNTS = (
    "Every test instance has the same number of gold answers, so there is no gold-count effect to show: "
    "a MACE relation (e.g. --relation mace-award) asks questions with 1, 2, 4 and 6 answers."
)


def _no_markers(templates: pl.DataFrame) -> str:
    has_markers = "kind" in templates.columns and templates["kind"].is_in(MARKER_KINDS).any()
    return NO_MARKER_VALUES if has_markers else NO_MARKERS


def model_figures(
    metrics: pl.DataFrame, curves: pl.DataFrame, templates: pl.DataFrame, consistency: pl.DataFrame
) -> dict[str, Figure | str]:
    """Section id → its figure, or the sentence that stands in for it (no rows, or no finite value:
    a degenerate store gets a sentence, never a failed report)."""
    one_model(metrics, "metrics")
    one_model(curves, "curves")
    panels = reliability_panels(metrics, curves)
    selective = selective_curves(curves)
    deltas = marker_deltas(metrics, templates)
    matrix = consistency_matrix(consistency)
    golds = gold_count_points(metrics)
    sweep = sweep_points(metrics)
    defined = matrix.filter(pl.col("iou_cons").is_finite())
    return {
        "reliability": plots.reliability_figure(panels) if panels else NO_RELIABILITY,
        "selective": plots.selective_figure(selective) if selective.height else NO_SELECTIVE,
        "markers": plots.heatmap_figure(marker_panels(deltas)) if deltas.height else _no_markers(templates),
        "consistency": (
            plots.heatmap_figure([consistency_panel(matrix)])
            if defined.height
            else (NO_CONSISTENCY_VALUES if matrix.height else NO_CONSISTENCY)
        ),
        "gold-count": plots.gold_count_figure(golds) if golds["n_gold"].n_unique() >= 2 else NO_GOLD_COUNTS,
        "sweep": plots.sweep_figure(sweep) if (sweep["k"] != FULL_ANSWER_SPACE).any() else NO_SWEEP,
    }


def preview_figures(metrics: pl.DataFrame, curves: pl.DataFrame) -> dict[str, Figure]:
    """Small figures for Dagster's metadata: the summary estimators' reliability diagrams and their
    accuracy–rejection and risk–coverage curves (none where the data has none)."""
    names = [s.name for s in summary_estimators()]
    out: dict[str, Figure] = {}
    panels = [p for p in reliability_panels(metrics, curves) if p.title in {label(n) for n in names}]
    if panels:
        out["reliability"] = plots.reliability_figure(panels)
    return out | selective_preview(curves)


def selective_preview(curves: pl.DataFrame) -> dict[str, Figure]:
    """The summary estimators' accuracy–rejection and risk–coverage curves (none without data)."""
    selective = selective_curves(curves, [s.name for s in summary_estimators()])
    return {} if selective.is_empty() else {"selective": plots.selective_figure(selective)}


def generation_section(generation: GenerationReport) -> Section:
    """The generation section: MACE's Table 3 layout, its figure and the methods that could not run."""
    note, body = generation_section_html(generation)
    return Section("generation", "Generation: open answers (MACE's Table 3)", note, body, "figure")


def model_page(
    summary: pl.DataFrame,
    metrics: pl.DataFrame,
    curves: pl.DataFrame,
    templates: pl.DataFrame,
    consistency: pl.DataFrame,
    meta: dict,
    generation: GenerationReport | None = None,
) -> str:
    """The whole per-model report as one HTML string; every value from data or meta is escaped.
    `generation` (issue 33) adds the "generation" section after the gold-count one; without it the
    page is exactly what it was before that section existed."""
    figures = model_figures(metrics, curves, templates, consistency)
    sections = [
        *table_sections(summary, metrics, meta),
        *figure_sections(figures, generation),
        EVERY_NUMBER,
    ]
    return page(f"kcal calibration report — {meta.get('model_id', '')}", sections)


def table_sections(summary: pl.DataFrame, metrics: pl.DataFrame, meta: dict) -> list[Section]:
    """The page's tables: the run, the summary, the main estimators' intervals, accuracy by split and
    (where the store has them) the answer-space subsamples."""
    columns = "".join(
        f"<li><b>{esc(m.name)}</b>: {esc(first_line(m.fn.__doc__))}</li>" for m in summary_metrics()
    )
    sub = subsample_tables(metrics)
    sections = [
        Section("run", "Run", "", run_table(meta), "table"),
        Section(
            "summary",
            f"Summary ({HEADLINE_SPLIT} split, full answer spaces)",
            f"Headline template; acc{TEMPLATE_MEAN_SUFFIX} is the accuracy averaged over the relation's "
            "curated templates (BEAR's way). A column named after a metric alone holds a value every "
            f"estimator shares; the others are &lt;metric&gt;_&lt;estimator&gt;. Binning — {esc(LEGEND)}.",
            f'<ul class="note">{columns}</ul>{html_table(summary)}',
            "table",
        ),
        Section(
            "intervals",
            "Main estimators with 95 % intervals",
            "All relations, test split, full answer spaces, each estimator's headline reduction; "
            "seeded bootstrap, B = 1,000, clustered by relation (relations, then instances within them). "
            "Every reduction: <code>kcal sql --query intervals</code>.",
            html_table(intervals_table(metrics)),
            "table",
        ),
        Section(
            "splits",
            "Accuracy by split (BEAR's way)",
            "Each split on its own, full answer spaces: dev only tunes thresholds and recalibration, the "
            "metrics above are on test.",
            html_table(split_table(metrics)),
            "table",
        ),
    ]
    if sub:
        sections.append(
            Section(
                "subsamples",
                f"Answer-space subsamples ({HEADLINE_SPLIT} split)",
                "Every instance again, its answer space cut to k options (gold kept): the options-count "
                "study, never pooled into the summary above.",
                "".join(html_table(t, caption=title) for title, t in sub),
                "table",
            )
        )
    return sections


def figure_sections(figures: dict[str, Figure | str], generation: GenerationReport | None) -> list[Section]:
    """The page's figures (model_figures'), each with the note that says what it shows; the
    generation section, where there is one, after the gold-count figure."""
    return [
        figure_section(
            "reliability",
            "Reliability diagrams",
            f"All relations, {HEADLINE_SPLIT} split, one panel per main estimator. Points are ACE's quantile "
            "bins (area grows with the bin's count), the dashed diagonal is perfect calibration, the "
            "band is each bin's 95 % bootstrap interval of the accuracy (clustered by relation, B = "
            f"1,000). {esc(LEGEND)}. The legend gives ACE with its 95 % interval and n.",
            figures["reliability"],
        ),
        figure_section(
            "selective",
            "Accuracy–rejection and risk–coverage",
            "Per estimator family (one row each), all relations, test split. Accuracy–rejection: the "
            "accuracy of the answers kept when those with confidence below τ = 0.1 … 0.9 are rejected; "
            "risk–coverage: the error rate of the most confident answers at each coverage (its area is "
            "AURC). Score-valued estimators have the risk–coverage curve only.",
            figures["selective"],
        ),
        figure_section(
            "markers",
            "Epistemic markers",
            "Each marker's Δ against Base on the unmarked parent template (the same instances), "
            "averaged over the relation's templates with that marker; 'all' weighs the relations by "
            "their instances. Table: <code>kcal sql --query marker_deltas</code>.",
            figures["markers"],
        ),
        figure_section(
            "consistency",
            "Consistency of decisions",
            "IoU_cons (Zhao et al. 2025) of each main estimator's accept/reject decisions on its headline "
            "prompt against each other setup (test split, thresholds tuned on dev; a setup drawn under "
            "several perturbation seeds shows the mean over them). Table: "
            "<code>kcal sql --query consistency_matrix</code>.",
            figures["consistency"],
        ),
        figure_section(
            "gold-count",
            "Accuracy and confidence by gold count",
            "All relations' test instances by their number of gold answers (MACE asks with 1, 2, 4 and "
            "6; closed-set relations mostly have 1): a top-option confidence that does not rise with "
            "the answers understates what the model knows. Table: "
            "<code>kcal sql --query calibration_by_gold_count</code>.",
            figures["gold-count"],
        ),
        *([generation_section(generation)] if generation is not None else []),
        figure_section(
            "sweep",
            "Accuracy and calibration by answer-space size",
            "The option-count sweep (Kissling et al., §5.4, Fig. 5): every instance with more than k "
            "options and fewer than k golds, its answer space cut to k (golds kept), in several seeded "
            "draws; all relations, test split, one line per estimator family (each family's first "
            "estimator, under its headline reduction). A point is the mean over the draws, its bar ± one "
            "standard deviation; 'full' is each instance's own answer space. A k counts only the "
            "instances it cuts. Table: <code>kcal sql --query options_sweep</code>.",
            figures["sweep"],
        ),
    ]


# The last section: where every number the page leaves out is.
EVERY_NUMBER = Section(
    "more",
    "Every number",
    "This page shows a selection. Every metric of every estimator, reduction, split, answer "
    "space and breakdown is in the metrics table: <code>kcal sql --list</code> names the report "
    'queries, and <code>kcal sql "select * from metrics"</code> reads it all.',
    "",
    "text",
)
