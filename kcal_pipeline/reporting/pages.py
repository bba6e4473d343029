"""The report's pages: one per model (report.html) and one across every model (index.html).

Both are single self-contained HTML files (inline CSS, matplotlib's inline SVG; no script, no
external file, font or URL), so a page can be mailed or opened offline. A page is a list of
sections; a figure section holds exactly one figure, or one sentence saying which data the store
lacks and which setting would give it, never an empty plot.

What each figure shows is selected here, from the evaluation tables, with the selection of
sql/views/headline_metrics.sql: the test split, each instance's full answer space (the option-count
sweep's figure: its cut answer spaces beside them) and each estimator's headline reduction (its
spec's first), so a number on a page is the number `kcal sql --query …` prints for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.estimation.markers import estimator_name
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    FULL_ANSWER_SPACE,
    HEADLINE_SPLIT,
    summary_estimators,
)
from kcal_pipeline.evaluation.registry import summary_metrics
from kcal_pipeline.reporting import plots
from kcal_pipeline.reporting.html import (
    LEGEND,
    TEMPLATE_MEAN_SUFFIX,
    esc,
    first_line,
    html_table,
    split_table,
    subsample_tables,
)

# The main estimators (what `kcal sql --query intervals` lists): Base, Margin, Entropy, the template
# marginal, their recalibrated forms and MACE's SCA family; probability-valued ones only.
MAIN_FAMILIES = ("single_template", "template_marginal", "recalibration", "multi_answer")
RECALIBRATION = "recalibration"
# Families in the order the selective-prediction figure shows them: the seeds' estimators first.
FAMILY_ORDER = (*MAIN_FAMILIES, "aggregation", "markers", "selective_lama", "null_model")
INTERVAL_METRICS = (("accuracy", "accuracy"), ("ace", "ACE"), ("brier", "Brier"), ("auroc", "AUROC"))
MARKER_KINDS = ("marker_verbal", "marker_numeric")

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto;max-width:100%;margin:.5em 0 1.2em}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.2em .6em;white-space:nowrap}
th{background:#f0f0f0;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:bold;padding:.3em 0}
figure{margin:.5em 0}svg.figure{max-width:100%;height:auto}
.note{color:#555;font-size:.9em;max-width:60em}.nodata{font-style:italic;color:#555}
nav a{margin-right:1em}"""


def main_estimators(present: Iterable[str]) -> list[str]:
    """The main estimators among `present`, family by family (MAIN_FAMILIES' order: the seeds'
    estimators first), in registry order within a family."""
    have = set(present)
    return [
        name
        for family in MAIN_FAMILIES
        for name, spec in ESTIMATORS.items()
        if spec.family == family and spec.output_kind == "probability" and name in have
    ]


def family_rank(family: str) -> int:
    """A family's place in FAMILY_ORDER (a family it does not list comes last)."""
    return FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)


def accuracy_n(rows: pl.DataFrame) -> int | None:
    """The instances behind one estimator's scope rows: its accuracy row's n (the statement-level
    metrics count (instance, option) pairs instead)."""
    hit = rows.filter(pl.col("metric") == "accuracy")["n"]
    return int(hit[0]) if hit.len() else None


def label(estimator: str) -> str:
    spec = ESTIMATORS.get(estimator)
    return spec.label if spec else estimator


def headline_reduction(estimator: str, reductions: Iterable[str | None]) -> str | None:
    """The reduction an estimator's headline numbers use: its spec's first; for a name the registry
    does not know, 'sum' where it has it, else the first by name (sql/views/headline_reductions.sql).
    None when its rows carry no reduction at all."""
    have = sorted(r for r in reductions if r is not None)
    if not have:
        return None
    spec = ESTIMATORS.get(estimator)
    if spec is not None:
        return spec.reductions[0]
    return "sum" if "sum" in have else have[0]


def at_headline_reduction(frame: pl.DataFrame, column: str = "estimator") -> pl.DataFrame:
    """The rows of each estimator (named in `column`) under its headline reduction."""
    if "reduction" not in frame.columns or frame.is_empty():
        return frame
    have: dict[str, list[str | None]] = {}
    for estimator, reduction in frame.select(column, "reduction").unique().iter_rows():
        have.setdefault(estimator, []).append(reduction)
    keep = pl.DataFrame(
        {column: list(have), "reduction": [headline_reduction(e, r) for e, r in have.items()]},
        schema={column: pl.String, "reduction": pl.String},
    )
    return frame.join(keep, on=[column, "reduction"], how="semi", nulls_equal=True)


def headline(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows of a metrics or curves table on the test split, full answer spaces and each estimator's
    headline reduction (sql/views/headline_metrics.sql)."""
    rows = frame.filter((pl.col("split") == HEADLINE_SPLIT) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE))
    if "metric" in rows.columns:  # metrics computed without intervals (compute_metrics) have none
        rows = rows.with_columns(
            pl.lit(None, pl.Float64).alias(c) for c in ("ci_low", "ci_high") if c not in rows.columns
        )
    return at_headline_reduction(rows)


def _one_model(frame: pl.DataFrame, what: str) -> None:
    models = frame["model_id"].unique().to_list() if "model_id" in frame.columns else []
    if len(models) > 1:
        raise ValueError(f"{what}: a model's page reads one model, got {sorted(models)}")


# --- what each figure shows ----------------------------------------------------------------------


def reliability_panels(metrics: pl.DataFrame, curves: pl.DataFrame) -> list[plots.ReliabilityPanel]:
    """One panel per main estimator with a reliability curve (all relations): its bins with the
    bootstrap band, and its ACE with the 95 % interval from the metrics table in the legend."""
    calibration = headline(curves).filter((pl.col("curve") == "calibration") & (pl.col("scope") == "all"))
    for column in ("y_low", "y_high"):  # a curves table written before the band had none
        if column not in calibration.columns:
            calibration = calibration.with_columns(pl.lit(None, pl.Float64).alias(column))
    ace = headline(metrics).filter((pl.col("scope") == "all") & (pl.col("metric") == "ace"))
    panels = []
    for estimator in main_estimators(calibration["estimator"].unique().to_list()):
        bins = calibration.filter(pl.col("estimator") == estimator).sort("bin")
        row = ace.filter(pl.col("estimator") == estimator)
        if row.is_empty():
            legend = f"n = {bins['n'].sum()}"
        else:
            r = row.row(0, named=True)
            legend = f"ACE {plots.interval_text(r['value'], r.get('ci_low'), r.get('ci_high'))}, n = {r['n']}"
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
        (pl.col("scope") == "template") & pl.col("metric").is_in(["accuracy", "ace"])
    )
    base = per_template.filter(pl.col("estimator") == "base").select(
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
    for metric, title, cmap in (
        ("accuracy", "Δaccuracy (marked − unmarked)", "RdBu"),
        ("ace", "ΔACE (marked − unmarked)", "RdBu_r"),
    ):
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
                colorbar=f"Δ{'accuracy' if metric == 'accuracy' else 'ACE'} (blue: the marker helps)",
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
        (pl.col("scope") == "n_gold") & pl.col("metric").is_in(["accuracy", "mean_confidence"])
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
        "accuracy": pl.Float64,
        "mean_confidence": pl.Float64,
        "n": pl.Int64,
    }
    if rows.is_empty():
        return pl.DataFrame(schema=schema)
    wide = rows.pivot("metric", index=["estimator", "scope_value", "n"], values="value")
    for column in ("accuracy", "mean_confidence"):
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


# A family's line in the option-count sweep figure: its first estimator in this order (each
# family's plain form; Vote(5) reads Kissling et al.'s five paraphrases), then in registry order.
SWEEP_REPRESENTATIVES = ("base", "template_marginal", "vote5_average", "base_temperature", "sca_tau0")


def sweep_points(metrics: pl.DataFrame) -> pl.DataFrame:
    """The option-count sweep figure's points: per estimator family with sweep rows, one estimator
    (SWEEP_REPRESENTATIVES, else the family's first probability-valued one in registry order) under
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
    order = [*SWEEP_REPRESENTATIVES, *ESTIMATORS]
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


# --- no-data sentences: what is missing and which setting would give it ---------------------------

NO_RELIABILITY = "No probability-valued main estimator has a reliability curve on the test split."
NO_SELECTIVE = "No estimator has accuracy–rejection or risk–coverage curves on the test split."
NO_MARKERS = (
    "No epistemic-marker templates were scored in this store, so there is no marker effect to show: "
    "kcal demo --template-kinds curated,question,marker_verbal,marker_numeric adds them."
)
NO_CONSISTENCY = (
    "The consistency table has no setup besides each estimator's headline prompt for the main "
    "estimators: perturbation or marker templates (--template-kinds … ,perturbation), a second "
    "curated template or --answer-space-k give it some."
)
NO_MARKER_VALUES = (
    "Marker templates exist, but no marker estimator has a test-split accuracy or ACE on them for this "
    "model (were they scored? see estimator_status)."
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
    _one_model(metrics, "metrics")
    _one_model(curves, "curves")
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


# --- pages ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One part of a page: a figure section holds one figure or one no-data sentence (`body` is
    HTML); a table section holds tables."""

    id: str
    title: str
    note: str  # HTML
    body: str  # HTML
    kind: str  # "figure", "table", "text"

    def html(self) -> str:
        note = f'<p class="note">{self.note}</p>' if self.note else ""
        head = f'<section id="{esc(self.id)}" class="{self.kind}-section"><h2>{esc(self.title)}</h2>'
        return f"{head}{note}{self.body}</section>"


def figure_section(id_: str, title: str, note: str, figure: Figure | str, caption: str = "") -> Section:
    if isinstance(figure, str):
        body = f'<p class="nodata">{esc(figure)}</p>'
    else:
        cap = f'<figcaption class="note">{esc(caption)}</figcaption>' if caption else ""
        body = f"<figure>{plots.svg(figure, title)}{cap}</figure>"
    return Section(id_, title, note, body, "figure")


def _page(title: str, sections: list[Section]) -> str:
    nav = "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style></head><body>
<h1>{esc(title)}</h1>
<nav>{nav}</nav>
{"".join(s.html() for s in sections)}
</body></html>
"""


def _run_table(meta: dict) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in meta.items())
    return f'<div class="scroll"><table>{rows}</table></div>'


def model_page(
    summary: pl.DataFrame,
    metrics: pl.DataFrame,
    curves: pl.DataFrame,
    templates: pl.DataFrame,
    consistency: pl.DataFrame,
    meta: dict,
) -> str:
    """The whole per-model report as one HTML string; every value from data or meta is escaped."""
    figures = model_figures(metrics, curves, templates, consistency)
    columns = "".join(
        f"<li><b>{esc(m.name)}</b>: {esc(first_line(m.fn.__doc__))}</li>" for m in summary_metrics()
    )
    sub = subsample_tables(metrics)
    sections = [
        Section("run", "Run", "", _run_table(meta), "table"),
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
    sections += [
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
        Section(
            "more",
            "Every number",
            "This page shows a selection. Every metric of every estimator, reduction, split, answer "
            "space and breakdown is in the metrics table: <code>kcal sql --list</code> names the report "
            'queries, and <code>kcal sql "select * from metrics"</code> reads it all.',
            "",
            "text",
        ),
    ]
    return _page(f"kcal calibration report — {meta.get('model_id', '')}", sections)


# --- across models -------------------------------------------------------------------------------

LEADERBOARD_SCHEMA = {
    "model_id": pl.String,
    "instances": pl.Int64,
    "accuracy": pl.Float64,
    "accuracy_ci_low": pl.Float64,
    "accuracy_ci_high": pl.Float64,
    "best_calibrated": pl.String,
    "ace": pl.Float64,
    "ace_ci_low": pl.Float64,
    "ace_ci_high": pl.Float64,
    "brier": pl.Float64,
    "auroc": pl.Float64,
    "base_ace": pl.Float64,
}


def leaderboard(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per model, most accurate first (as sql/queries/leaderboard.sql): Base's accuracy
    with its interval, and the best-calibrated estimator, the probability-valued one with the
    lowest ACE among those that answer as many headline instances as Base (ties: the first name),
    with its ACE interval, Brier and AUROC, and Base's ACE to read the gain against."""
    overall = headline(metrics).filter(pl.col("scope") == "all")
    rows = []
    for (model,), own in overall.group_by("model_id", maintain_order=True):
        base = own.filter((pl.col("estimator") == "base") & (pl.col("metric") == "accuracy"))
        if base.is_empty():
            continue
        b = base.row(0, named=True)

        def value(estimator: str, metric: str, own=own) -> dict | None:
            hit = own.filter((pl.col("estimator") == estimator) & (pl.col("metric") == metric))
            return hit.row(0, named=True) if hit.height else None

        candidates = own.filter(
            (pl.col("metric") == "ace") & (pl.col("n") == b["n"]) & pl.col("value").is_not_nan()
        ).sort("value", "estimator")
        best = candidates.row(0, named=True) if candidates.height else None
        name = best["estimator"] if best else None
        brier, auroc, base_ace = (
            value(name, "brier") if name else None,
            value(name, "auroc") if name else None,
            value("base", "ace"),
        )
        rows.append(
            {
                "model_id": model,
                "instances": b["n"],
                "accuracy": b["value"],
                "accuracy_ci_low": b["ci_low"],
                "accuracy_ci_high": b["ci_high"],
                "best_calibrated": name,
                "ace": best and best["value"],
                "ace_ci_low": best and best["ci_low"],
                "ace_ci_high": best and best["ci_high"],
                "brier": brier and brier["value"],
                "auroc": auroc and auroc["value"],
                "base_ace": base_ace and base_ace["value"],
            }
        )
    board = pl.DataFrame(rows, schema=LEADERBOARD_SCHEMA)
    return board.sort(pl.col("accuracy"), "model_id", descending=[True, False], nulls_last=True)


def _overall_points(metrics: pl.DataFrame, names: Iterable[str]) -> pl.DataFrame:
    """model, estimator, label, metric, value, ci_low, ci_high of the main estimators, scope all."""
    overall = headline(metrics).filter((pl.col("scope") == "all") & pl.col("metric").is_in(list(names)))
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
    points = _overall_points(metrics, ["accuracy", "ace"])
    wide = points.pivot(
        "metric", index=["model", "estimator", "label"], values=["value", "ci_low", "ci_high"]
    )
    need = [f"{v}_{m}" for m in ("accuracy", "ace") for v in ("value", "ci_low", "ci_high")]
    for column in need:
        if column not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(column))
    return wide.select(
        "model",
        "label",
        *(
            pl.col(f"{v}_{m}").alias(f"{m}{suffix}")
            for m in ("accuracy", "ace")
            for v, suffix in (("value", ""), ("ci_low", "_low"), ("ci_high", "_high"))
        ),
    ).filter(pl.col("accuracy").is_finite() & pl.col("ace").is_finite())


COMPARED_METRICS = (
    ("ace", "ACE (lower is better)"),
    ("brier", "Brier (lower is better)"),
    ("auroc", "AUROC (higher is better)"),
)
NO_MODELS = "No model has metrics on the test split yet: run kcal demo (or materialize metrics)."


def cross_model_figures(metrics: pl.DataFrame) -> dict[str, Figure | str]:
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
        pl.struct("accuracy", "accuracy_ci_low", "accuracy_ci_high")
        .map_elements(lambda r: plots.interval_text(*r.values()), return_dtype=pl.String)
        .alias("accuracy (Base)"),
        pl.col("best_calibrated")
        .replace_strict(
            {e: label(e) for e in board["best_calibrated"].drop_nulls().to_list()},
            default=None,
            return_dtype=pl.String,
        )
        .alias("best calibrated"),
        pl.struct("ace", "ace_ci_low", "ace_ci_high")
        .map_elements(lambda r: plots.interval_text(*r.values()), return_dtype=pl.String)
        .alias("its ACE"),
        pl.col("brier").alias("its Brier"),
        pl.col("auroc").alias("its AUROC"),
        pl.col("base_ace").alias("Base ACE"),
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
        Section("run", "Run", "", _run_table(meta), "table"),
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
            "One point per model × main estimator (colour: estimator, marker: model): lower is better "
            "calibrated, right is more accurate. Estimators that share Base's prediction share its "
            "accuracy, so one model's points stand in a column; the intervals are in the next figure.",
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
    return _page("kcal calibration report — all models", sections)
