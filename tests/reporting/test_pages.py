"""Both report pages on a store the whole pipeline made (tests/reporting/conftest.py): their
structure (title, sections, one figure or one no-data sentence per figure section), that they open
offline (no outside resource), that a figure's numbers are the tables' numbers, the per-bin band in
the curves table, the cross-model leaderboard, the Dagster metadata, and atomic writes."""

import re
import shutil
import urllib.request
from html.parser import HTMLParser

import polars as pl
import pytest

from kcal_pipeline.core.paths import cross_model_report_path, report_path
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.reporting import cross_model, figure_data, pages, plots
from kcal_pipeline.reporting.html import summary_table, write_report

pytestmark = pytest.mark.integration

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
KEY = "HuggingFaceTB--SmolLM2-135M-Instruct"
MODEL_FIGURES = ["reliability", "selective", "markers", "consistency", "gold-count", "sweep"]


class Page(HTMLParser):
    """The parts of a page the tests read: title, h1, sections (id, class, figures, svgs, no-data
    sentences, links) and every attribute that could load something."""

    def __init__(self, text: str):
        super().__init__()
        self.title = self.h1 = ""
        self.sections: dict[str, dict] = {}
        self.resources: list[str] = []
        self.tags: set[str] = set()
        self._in, self._current = None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        for name in ("src", "href", "xlink:href", "data", "action", "poster"):
            if attrs.get(name):
                self.resources.append(attrs[name])
        self.resources += re.findall(r"url\(([^)]*)\)", attrs.get("style") or "")
        if tag == "section":
            self._current = self.sections.setdefault(
                attrs["id"], {"class": attrs.get("class"), "figure": 0, "svg": 0, "nodata": [], "links": []}
            )
        elif self._current is not None and tag in ("figure", "svg"):
            self._current[tag] += 1
        elif self._current is not None and tag == "p" and attrs.get("class") == "nodata":
            self._in = "nodata"
        elif self._current is not None and tag == "a":
            self._current["links"].append(attrs["href"])
        elif tag in ("title", "h1"):
            self._in = tag

    def handle_endtag(self, tag):
        if tag == "section":
            self._current = None
        if tag in ("p", "title", "h1"):
            self._in = None

    def handle_data(self, data):
        if self._in == "nodata":
            self._current["nodata"].append(data)
        elif self._in in ("title", "h1"):
            setattr(self, self._in, getattr(self, self._in) + data)


def figure_sections(page: Page) -> dict[str, dict]:
    return {k: s for k, s in page.sections.items() if s["class"] == "figure-section"}


def assert_offline(page: Page, text: str) -> None:
    assert not [r for r in page.resources if re.match(r"\s*['\"]?(https?:)?//", r)], page.resources
    assert not page.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert "@import" not in text
    # the only http(s) strings are XML namespace names of the inline SVG, never fetched
    assert set(re.findall(r"https?://[^\"' )]+", text)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }


def tables(home):
    model = {"model": KEY}
    return {
        "metrics": pl.read_parquet(partition_path(home, "metrics", model)),
        "curves": pl.read_parquet(partition_path(home, "curves", model)),
        "consistency": pl.read_parquet(partition_path(home, "consistency", model)),
        "templates": pl.read_parquet(partition_path(home, "templates")),
    }


def test_the_model_page_has_every_section_with_one_figure_each(report_store):
    text = report_path(report_store, KEY).read_text(encoding="utf-8")
    page = Page(text)
    assert page.title == page.h1 == f"kcal calibration report — {MODEL_ID}"
    assert list(page.sections) == [
        "run",
        "summary",
        "intervals",
        "splits",
        "subsamples",
        *MODEL_FIGURES,
        "more",
    ]
    figures = figure_sections(page)
    assert list(figures) == MODEL_FIGURES
    # this store has every kind of data (markers, perturbations, a MACE relation): no section is
    # left without its figure, and each has exactly one
    for name, section in figures.items():
        assert (section["figure"], section["svg"], section["nodata"]) == (1, 1, []), name
    assert_offline(page, text)


def test_the_cross_model_page_links_each_model_and_has_its_figures(report_store):
    text = cross_model_report_path(report_store).read_text(encoding="utf-8")
    page = Page(text)
    assert page.title == page.h1 == "kcal calibration report — all models"
    assert list(page.sections) == ["run", "leaderboard", "ace-accuracy", "estimators"]
    for name, section in figure_sections(page).items():
        assert (section["figure"], section["svg"], section["nodata"]) == (1, 1, []), name
    link = page.sections["leaderboard"]["links"]
    assert link == [f"model={KEY}/report.html"]
    assert (cross_model_report_path(report_store).parent / link[0]).exists()
    assert_offline(page, text)


def test_a_section_without_data_says_so_in_one_sentence(report_store):
    t = tables(report_store)
    # the same model without its marker templates, consistency rows or MACE relation
    templates = t["templates"].filter(~pl.col("kind").is_in(figure_data.MARKER_KINDS))
    metrics = t["metrics"].filter(
        ~((pl.col("scope") == "n_gold") & (pl.col("scope_value") != "1")) & (pl.col("answer_space_k") == 0)
    )  # and without its option-count sweep
    consistency = t["consistency"].clear()
    html = pages.model_page(
        summary_table(metrics), metrics, t["curves"], templates, consistency, {"model_id": "m"}
    )
    figures = figure_sections(Page(html))
    assert figures["markers"]["nodata"] == [pages.NO_MARKERS]
    assert figures["consistency"]["nodata"] == [pages.NO_CONSISTENCY]
    assert figures["gold-count"]["nodata"] == [pages.NO_GOLD_COUNTS]
    assert figures["sweep"]["nodata"] == [pages.NO_SWEEP]
    for name in ("markers", "consistency", "gold-count", "sweep"):
        assert figures[name]["svg"] == figures[name]["figure"] == 0
    assert figures["reliability"]["svg"] == 1


def test_every_figure_draws_data_and_the_reliability_legend_is_the_metrics_row(report_store):
    t = tables(report_store)
    figures = pages.model_figures(t["metrics"], t["curves"], t["templates"], t["consistency"])
    for name, fig in figures.items():
        plots.assert_not_empty(fig, name)  # a sentence here would fail: every section has data
    # Base's ACE with its interval, read by hand from the metrics Parquet file
    row = (
        t["metrics"]
        .filter(
            (pl.col("estimator") == "base")
            & (pl.col("reduction") == "sum")
            & (pl.col("split") == "test")
            & (pl.col("answer_space_k") == 0)
            & (pl.col("scope") == "all")
            & (pl.col("metric") == "ace")
        )
        .row(0, named=True)
    )
    legend = f"ACE {row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}], n = {row['n']}"
    base = next(ax for ax in figures["reliability"].axes if ax.get_title() == "Base")
    assert [t.get_text() for t in base.get_legend().get_texts()][-1] == legend
    # one panel per main estimator that has a reliability curve
    drawn = [ax.get_title() for ax in figures["reliability"].axes]
    assert drawn[:4] == ["Base", "Margin", "Entropy", "Template marginal"]
    assert "SCA (τ = 0)" in drawn  # MACE's estimators, on the mace-award relation


def test_the_curves_table_carries_the_band_on_reliability_rows_only(report_store):
    curves = tables(report_store)["curves"]
    calibration = curves.filter(pl.col("curve") == "calibration")
    other = curves.filter(pl.col("curve") != "calibration")
    assert calibration["y_low"].null_count() == 0 and calibration["y_high"].null_count() == 0
    assert other["y_low"].null_count() == other.height and other["y_high"].null_count() == other.height
    band = calibration.filter(pl.col("y_low").is_not_nan())
    assert (band["y_low"] <= band["y_high"]).all()
    assert band["y_low"].min() >= 0 and band["y_high"].max() <= 1


def test_the_leaderboard_is_the_argmin_of_ace_among_estimators_answering_every_instance(report_store):
    board = pl.read_parquet(partition_path(report_store, "cross_model_report"))
    assert board.columns == list(cross_model.LEADERBOARD_SCHEMA)
    metrics = tables(report_store)["metrics"]
    assert board.equals(cross_model.leaderboard(metrics))
    head = metrics.filter(
        (pl.col("split") == "test") & (pl.col("answer_space_k") == 0) & (pl.col("scope") == "all")
    )
    base = head.filter(
        (pl.col("estimator") == "base") & (pl.col("reduction") == "sum") & (pl.col("metric") == "accuracy")
    )
    ace = head.filter(
        (pl.col("metric") == "ace") & (pl.col("n") == base["n"][0]) & pl.col("value").is_not_nan()
    )
    # each estimator under its headline reduction ('sum', or the MACE estimators' 'answer_sum')
    ace = ace.filter(
        pl.col("reduction")
        == pl.col("estimator").map_elements(lambda e: ESTIMATORS[e].reductions[0], return_dtype=pl.String)
    )
    best = ace.sort("value", "estimator").row(0, named=True)
    row = board.row(0, named=True)
    assert (row["model_id"], row["instances"], row["accuracy"]) == (MODEL_ID, base["n"][0], base["value"][0])
    assert (row["best_calibrated"], row["ace"], row["ace_ci_low"]) == (
        best["estimator"],
        best["value"],
        best["ci_low"],
    )


def test_the_report_assets_metadata_shows_tables_plots_and_a_link(report_store, tmp_path, monkeypatch):
    """What the UI shows without a click (assets/reporting.py): narrow tables, plot images as short
    markdown links to PNG files that `kcal ui`'s report server serves, and the page over http on
    KCAL_REPORTS_PORT."""
    from dagster import AssetKey, DagsterInstance, materialize

    from assets.definitions import all_assets
    from assets.reporting import INLINE_MARKDOWN_CHARS
    from kcal_pipeline.core.report_server import ReportServer, reports_dir
    from resources import default_resources
    from tests.ui.server import free_port

    home = tmp_path / "store"
    shutil.copytree(report_store, home, ignore=shutil.ignore_patterns("dagster", "kcal.duckdb*", ".lock*"))
    port = free_port()
    monkeypatch.setenv("KCAL_REPORTS_PORT", str(port))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    resources = default_resources(home=str(home))
    result = materialize(
        all_assets, selection=[AssetKey("report")], partition_key=KEY, instance=instance, resources=resources
    )
    meta = result.asset_materializations_for_node("report")[0].metadata
    page = report_path(home, KEY)
    assert meta["report"].value == f"http://127.0.0.1:{port}/model={KEY}/report.html"
    assert meta["report_path"].value == str(page)

    def table(name: str) -> tuple[list[str], list[dict]]:
        value = meta[name].value
        return [c.name for c in value.schema.columns], [r.data for r in value.records]

    columns, rows = table("summary")
    assert columns == ["relation", "instances", "accuracy", "ace_base", "ace_margin"]
    assert rows[-1]["relation"] == "all" and re.fullmatch(r"\d\.\d{3}", rows[-1]["accuracy"])
    columns, rows = table("intervals")
    assert columns == ["estimator", "n", "accuracy", "ACE"] and rows[0]["estimator"] == "Base"
    assert all(re.fullmatch(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]|undefined", r["ACE"]) for r in rows)
    plots_md = meta["plots"].value
    assert len(plots_md) < INLINE_MARKDOWN_CHARS  # shown in place, not behind [Show Markdown]
    images = re.findall(r"!\[([\w-]+)\]\((http://[^)]+)\)", plots_md)
    assert [name for name, _ in images] == ["reliability", "selective"]
    result = materialize(
        all_assets, selection=[AssetKey("cross_model_report")], instance=instance, resources=resources
    )
    meta = result.asset_materializations_for_node("cross_model_report")[0].metadata
    assert meta["report"].value == f"http://127.0.0.1:{port}/index.html"
    columns, rows = table("leaderboard")
    assert columns == ["model_id", "instances", "accuracy", "best_calibrated", "ACE", "Base ACE"]
    assert rows[0]["model_id"] == MODEL_ID
    board_images = re.findall(r"!\[([\w-]+)\]\((http://[^)]+)\)", meta["plots"].value)
    assert [name for name, _ in board_images] == ["ace-accuracy"]
    # every link opens through the report server: the pages, and the plots as PNG images
    with ReportServer(reports_dir(home), port):
        for url in [
            f"http://127.0.0.1:{port}/model={KEY}/report.html",
            f"http://127.0.0.1:{port}/index.html",
        ]:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert b"<html" in response.read(200).lower()
        for _, url in images + board_images:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.headers["Content-Type"] == "image/png"
                assert response.read().startswith(b"\x89PNG")


def test_a_page_that_fails_to_render_leaves_the_old_page(report_store, tmp_path):
    t = tables(report_store)
    target = tmp_path / "reports" / "model=m" / "report.html"
    write_report(target, "<p>old</p>")
    two_models = pl.concat([t["metrics"], t["metrics"].with_columns(model_id=pl.lit("other"))])
    with pytest.raises(ValueError, match="a model's page reads one model"):
        write_report(
            target,
            pages.model_page(
                summary_table(t["metrics"]), two_models, t["curves"], t["templates"], t["consistency"], {}
            ),
        )
    assert target.read_text(encoding="utf-8") == "<p>old</p>"
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]  # no temp file left


def test_an_empty_marker_section_names_the_setting_that_fills_it_instead_of_asking():
    """Issue 34 #11: the page said "were they scored?"; it now says which setting scores them."""
    import shlex

    from assets.cli import build_parser

    for kinds in (["curated", "question"], ["curated", "marker_verbal"]):
        sentence = pages._no_markers(pl.DataFrame({"kind": kinds}))
        assert "?" not in sentence
        assert f"kcal demo {pages.MARKER_SETTING}" in sentence
    args = build_parser().parse_args(["demo", *shlex.split(pages.MARKER_SETTING)])
    assert set(args.template_kinds) >= set(figure_data.MARKER_KINDS)  # the setting scores every marker kind


def test_the_run_table_and_each_scored_partition_say_which_weights_ran(report_store, tmp_path):
    """Issue 34 #9: weights file, quantization, dtype, revision, code version and date on the
    report; the same weights and quantization lines, and the revision, on statement_scores."""
    from dagster import AssetKey, DagsterInstance, MultiPartitionKey, materialize

    from assets.definitions import all_assets
    from resources import default_resources

    text = report_path(report_store, KEY).read_text(encoding="utf-8")
    run = dict(
        re.findall(
            r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", text.split('id="run"')[1].split("</section>")[0]
        )
    )
    assert {"weights", "quantization", "dtype", "revision", "code_version", "date"} <= set(run)
    assert run["quantization"] == "4-bit Q4_1 GGUF, de-quantised to float32" and run["dtype"] == "float32"
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in run["weights"] and run["code_version"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", run["date"])

    home = tmp_path / "store"
    shutil.copytree(report_store, home, ignore=shutil.ignore_patterns("dagster", "kcal.duckdb*", ".lock*"))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [KEY])
    instance.add_dynamic_partitions("relation", ["P36"])
    result = materialize(
        all_assets,
        selection=[AssetKey("statement_scores")],
        partition_key=MultiPartitionKey({"model": KEY, "relation": "P36"}),
        instance=instance,
        resources=default_resources(home=str(home)),
    )  # the scores are up to date: the model loads, nothing is rescored
    meta = result.asset_materializations_for_node("statement_scores")[0].metadata
    assert meta["quantization"].value == run["quantization"] and meta["weights"].value == run["weights"]
    assert meta["model_revision"].value == run["revision"] and meta["rescored"].value is False
