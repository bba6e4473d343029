"""The cockpit in a real browser (issue 16): `kcal ui` on 127.0.0.1 over a small probe, headless
Chromium (Debian's, driven by Playwright) opens the asset graph and statement_scores, launches a
backfill of two scoring partitions from the Materialize dialog, and the backfill succeeds: the
Parquet files appear under KCAL_HOME, the DuckDB views see their rows, and the UI shows the
partitions' metadata. Then the rest of the pipeline runs in this process, as `kcal demo` would
(estimation, evaluation, the report, the cross-model page), and the browser checks what issue 34
asked of the UI: the report asset's page shows its plot images without a click (edge 3); its
`report` link opens the HTML report over http, from `kcal ui`'s report server (edge 4); on that
report every ACE value lies within its 95 % interval (edge 6) and the Run table names the weights
file, quantization, dtype, revision, code version and date (edge 9); the Catalog's selection box
offers `tag:accuracy` for "accuracy" (edge 13); and Overview → Timeline shows the probe's CLI runs
(edge 1). Then the UI stops, with every process it started.

The probe: the embedded SmolLM2, relations P36 and P30, 4 instances, 1 template, 5 options each
(the dataset stages are materialized in-process as the CLI runs them, before the server starts;
nothing is scored). The automation sensor (`kcal_automation_sensor`, RUNNING by default) would
score these missing partitions itself and race the UI's backfill, so it is stopped in the
temporary instance first (`dagster sensor stop`); the test then asserts that the backfill's two
runs are the only runs.

Screenshots go to $KCAL_TEST_ARTIFACTS (else the test's tmp_path/artifacts); their paths are
printed. Without a chromium binary the test skips, naming it and how to install it."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from assets.definitions import STAGE_ASSETS
from kcal_pipeline.core.paths import report_path
from kcal_pipeline.core.report_server import REPORTS_PORT_ENV, report_url
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.core.warehouse import query
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from tests.ui.server import UiServer, start_ui, stop_and_check

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RELATIONS = ["P36", "P30"]
PROBE = {"max_instances": 4, "max_templates": 1, "answer_space": "sampled", "n_negatives": 4}
MODEL = DEFAULT_MODEL.key
UI_TIMEOUT_MS = 120_000  # one UI step (2 shared CPUs: the first page load compiles a lot of JS)
CLICK_TIMEOUT_MS = 20_000  # a click on a menu item before it is dispatched instead (choose)
BACKFILL_TIMEOUT_S = 360


def chromium_or_skip() -> str:
    for path in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium"):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip(
        "BROWSER TEST NOT RUN: no `chromium` binary on PATH or at /usr/bin/chromium. Install Debian's "
        "package: `apt-get install -y chromium` (scripts/system-deps.sh, which `make test` runs, does)"
    )


def choose(menu_item) -> None:
    """Click a menu item of the launch dialog's partition list. On two busy CPUs the list can
    re-render under the pointer for as long as the click waits for it to hold still (a CI run timed
    out after 120 s on "element is not stable ... detached from the DOM"); the item's own click event
    is then dispatched, which needs it attached, not still. The dialog's partition count checks the
    outcome either way."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        menu_item.click(timeout=CLICK_TIMEOUT_MS)
    except PlaywrightTimeout:
        menu_item.dispatch_event("click")


def artifacts_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("KCAL_TEST_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_probe(home: Path) -> None:
    """The dataset stages for RELATIONS (facts of those relations only), in this process, on the
    instance under DAGSTER_HOME, each a run of its stage's job as the CLI starts it (run_stage);
    the probe's relations and the model become partitions."""
    from assets.runner import get_instance, run_stage, sync_model_partitions, sync_relation_partitions
    from resources import default_resources

    instance = get_instance(home)
    sync_model_partitions(home, instance)
    sync_relation_partitions(home, instance, RELATIONS)
    resources = default_resources(home=str(home), **PROBE)

    def run(assets: list[str], partition: str | None = None) -> None:
        assert run_stage(instance, resources, assets, partition).success

    run(["relations", "templates"])
    for relation in RELATIONS:
        run(["wikidata_facts", "dropped_facts"], relation)
    run(["object_pools"])
    for relation in RELATIONS:
        run(["probe_instances", "statements"], relation)


def stop_automation_sensor(home: Path, dagster_home: Path) -> None:
    env = {**os.environ, "KCAL_HOME": str(home), "DAGSTER_HOME": str(dagster_home)}
    dagster = Path(sys.executable).with_name("dagster")
    done = subprocess.run(
        [str(dagster), "sensor", "stop", "kcal_automation_sensor", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "Stopped sensor kcal_automation_sensor" in done.stdout, done.stderr


def evaluate_the_probe(home: Path) -> None:
    """The model's estimates on both scored relations, then its evaluation stage (metrics, curves,
    report, ...), each a run of its stage's job as the CLI starts it. (`kcal demo`'s run_missing
    would also build the data-quality table from every catalog relation's facts: minutes more.)"""
    from assets.runner import get_instance, run_stage
    from resources import default_resources

    instance, resources = get_instance(home), default_resources(home=str(home), **PROBE)
    for relation in RELATIONS:
        assert run_stage(instance, resources, list(STAGE_ASSETS["estimation"]), f"{MODEL}|{relation}").success
    assert run_stage(instance, resources, list(STAGE_ASSETS["evaluation"]), MODEL).success


def check_the_report_in_the_ui(page, server: UiServer, home: Path, shot) -> None:
    """Edges 3, 4, 6 and 9 of issue 34 on the report asset's page and the report it links."""
    from playwright.sync_api import expect

    # Edge 3: the plots on the asset's page without a click, images the report server sends.
    page.goto(f"{server.url}/assets/report")
    plots = page.locator(f"img[src^='{server.reports_url}/model={MODEL}/plots/']")
    expect(plots.first).to_be_visible()
    assert plots.count() >= 2  # the reliability diagrams and the selective curves
    for index in range(plots.count()):
        plots.nth(index).scroll_into_view_if_needed()
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=plots.nth(index).element_handle()
        )
    expect(page.get_by_text("[Show Markdown]")).to_have_count(0)  # nothing of the report behind a click
    shot("08_report_asset_plots")

    # Edge 4: its `report` link opens the report over http (a new tab, as the UI opens links).
    url = report_url(home, report_path(home, MODEL), server.reports_port)
    with page.context.expect_page() as opened:
        page.locator(f"a[href='{url}']").first.click()
    report = opened.value
    report.wait_for_load_state()
    assert report.url == url
    expect(report.locator("h1")).to_contain_text("kcal calibration report")

    # Edge 6: every ACE on the report lies within its own 95 % interval.
    table = report.locator("#intervals table")
    column = table.locator("thead th").all_inner_texts().index("ACE")
    cells = [row.locator("td").nth(column).inner_text() for row in table.locator("tbody tr").all()]
    assert cells, "no intervals on the report"
    for cell in cells:
        value, low, high = map(float, re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell).groups())
        assert low <= value <= high, f"ACE {cell}: the point lies outside its interval"

    # Edge 9: which weights ran, how, and when, in the report's Run table.
    names, values = (report.locator(f"#run {cell}").all_inner_texts() for cell in ("th", "td"))
    run = dict(zip(names, values, strict=True))
    for key in ("weights", "quantization", "dtype", "revision", "code_version", "date"):
        assert run.get(key, "").strip(), (key, run)
    shot("09_report_over_http", report)
    report.close()


def check_the_metric_words(page, server: UiServer, shot) -> None:
    """Edge 13 of issue 34: the Catalog's selection box offers the metric assets' tags for a metric
    word (the global search matches names only)."""
    from playwright.sync_api import expect

    page.goto(f"{server.url}/assets")
    page.locator(".CodeMirror").first.click()  # the selection box: a CodeMirror editor, no <input>
    page.keyboard.type("accuracy")
    expect(page.get_by_text("tag:accuracy").first).to_be_visible()
    shot("10_catalog_accuracy")
    page.keyboard.press("Escape")


def check_the_timeline(page, server: UiServer, shot) -> None:
    """Edge 1 of issue 34: Overview → Timeline shows the runs the CLI started (the probe's)."""
    from playwright.sync_api import expect

    page.goto(f"{server.url}/overview/activity/timeline")
    for job in ("dataset", "facts", "probe"):  # only run_stage (the CLI) runs these jobs here
        expect(page.get_by_text(job, exact=True).first).to_be_visible()
    expect(page.get_by_text("No runs or scheduled ticks in this time period")).to_have_count(0)
    shot("11_timeline")


BACKFILL = """query ($id: String!) { partitionBackfillOrError(backfillId: $id) {
  ... on PartitionBackfill { status numPartitions partitionNames runs(limit: 10) { runId status } }
  ... on PythonError { message } } }"""
RUNS = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"


def wait_for_backfill(server: UiServer, backfill_id: str) -> dict:
    started = time.monotonic()
    while time.monotonic() - started < BACKFILL_TIMEOUT_S:
        backfill = server.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        if backfill["status"] in ("COMPLETED_SUCCESS", "COMPLETED", "COMPLETED_FAILED", "FAILED", "CANCELED"):
            return backfill
        time.sleep(1)
    raise AssertionError(f"backfill {backfill_id} not done in {BACKFILL_TIMEOUT_S} s: {backfill}")


def test_a_backfill_of_two_scoring_partitions_launched_from_the_ui(tmp_path, monkeypatch):
    chromium = chromium_or_skip()
    from playwright.sync_api import expect, sync_playwright

    home, dagster_home, shots = tmp_path / "kcal", tmp_path / "dagster", artifacts_dir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    clock = {"start": time.monotonic()}
    build_probe(home)
    stop_automation_sensor(home, dagster_home)
    clock["probe"] = time.monotonic()
    server = start_ui(home, dagster_home, tmp_path / "ui.log", fast_daemon=True)
    saved: list[Path] = []
    try:
        server.wait_until_up()
        clock["up"] = time.monotonic()

        def new_page(playwright):
            page = playwright.chromium.launch(executable_path=chromium).new_page(
                viewport={"width": 1800, "height": 1000}, device_scale_factor=1.5
            )
            page.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            return page

        def shot(name: str, of=None) -> None:
            time.sleep(1.5)  # let the last poll's data render
            saved.append(shots / f"{name}.png")
            (of or page).screenshot(path=saved[-1])

        with sync_playwright() as playwright:
            page = new_page(playwright)

            def asset_graph(name: str) -> None:
                """The whole graph, every group expanded, top to bottom (the UI keeps these settings
                in the browser; the reload fits the graph to the page)."""
                page.goto(f"{server.url}/asset-groups")
                if not saved:
                    settings = page.get_by_role("button", name="settings", exact=True)
                    for item in ("Change graph to vertical orientation", "Expand all groups"):
                        settings.click()
                        page.get_by_role("menuitem", name=item).click()
                        page.keyboard.press("Escape")
                    page.get_by_role("button", name="Hide navigation").click()
                    page.reload()
                for group in STAGE_ASSETS:  # the asset groups: one per stage (assets/jobs.py)
                    expect(
                        page.locator("#asset-graph, body").first.get_by_text(group, exact=True).last
                    ).to_be_visible()
                expect(page.get_by_text("statement_scores", exact=True).last).to_be_visible()
                page.locator("button:right-of(input[placeholder='Jump to…'])").first.click()  # the group list
                shot(name)

            asset_graph("01_asset_graph")

            # statement_scores: the model × relation partitions, both missing.
            page.goto(f"{server.url}/assets/statement_scores?view=partitions")
            expect(page.get_by_text("Missing (2)")).to_be_visible()
            shot("02_partitions_missing")

            # Materialize… → one model × two relations → Launch backfill.
            page.get_by_role("button", name="Materialize…").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Launch runs to materialize statement_scores")).to_be_visible()
            dialog.get_by_text("Select a partition or create one").first.click()  # the model dimension
            choose(page.get_by_role("menuitem", name=re.compile(rf"^{re.escape(MODEL)}")))
            dialog.get_by_text("Launch runs to materialize").click()  # closes the list
            dialog.get_by_text("Select a partition or create one").last.click()  # the relation dimension
            for relation in RELATIONS:
                choose(page.get_by_role("menuitem", name=re.compile(rf"^{relation}\b")))
            dialog.get_by_text("Launch runs to materialize").click()
            expect(dialog.get_by_text("2 partitions", exact=True)).to_be_visible()
            shot("03_launch_dialog")
            runs_before = {r["runId"] for r in server.graphql(RUNS)["runsOrError"]["results"]}  # the probe's
            dialog.get_by_role("button", name="Launch backfill").click()
            toast = page.get_by_text(re.compile(r"Created backfill \w+")).first
            backfill_id = re.search(r"Created backfill (\w+)", toast.inner_text()).group(1)
            clock["launched"] = time.monotonic()

            backfill = wait_for_backfill(server, backfill_id)
            clock["backfilled"] = time.monotonic()
            assert backfill["status"] == "COMPLETED_SUCCESS", (backfill, server.log_tail())
            assert sorted(backfill["partitionNames"]) == sorted(f"{MODEL}|{r}" for r in RELATIONS)
            assert [r["status"] for r in backfill["runs"]] == ["SUCCESS", "SUCCESS"]
            runs = server.graphql(RUNS)["runsOrError"]["results"]
            runs = [r for r in runs if r["runId"] not in runs_before]
            assert {r["runId"] for r in runs} == {r["runId"] for r in backfill["runs"]}  # nothing else ran
            assert all({"key": "dagster/backfill", "value": backfill_id} in r["tags"] for r in runs)

            page.goto(f"{server.url}/runs/b/{backfill_id}")
            expect(page.get_by_text("Succeeded").first).to_be_visible()
            expect(page.get_by_text("100% completed")).to_be_visible()
            shot("04_backfill_done")

            page.goto(f"{server.url}/assets/statement_scores?view=partitions")
            expect(page.get_by_text("Materialized (2)")).to_be_visible()
            page.get_by_text("P36", exact=True).first.click()
            expect(page.get_by_text("statements_per_s").first).to_be_visible()
            shot("05_partition_metadata")

            page.goto(f"{server.url}/assets/statement_scores")
            for key in ("statements_per_s", "device", "dtype", "fingerprint"):
                expect(page.get_by_text(key, exact=True).first).to_be_visible()
            shot("06_latest_materialization")
            asset_graph("07_asset_graph_after")  # statement_scores now materialized
            page.context.browser.close()

        # The model's estimation and evaluation, as the CLI runs them after the UI's backfill (with
        # no browser open: Dagster's in-process runs and Playwright's event loop share this thread).
        # Its report links point to this UI's report server (its KCAL_REPORTS_PORT).
        monkeypatch.setenv(REPORTS_PORT_ENV, str(server.reports_port))
        evaluate_the_probe(home)
        clock["evaluated"] = time.monotonic()
        with sync_playwright() as playwright:
            page = new_page(playwright)
            check_the_report_in_the_ui(page, server, home, shot)
            check_the_metric_words(page, server, shot)
            check_the_timeline(page, server, shot)  # edge 1 (helper UA's change to assets/runner.py)
            page.context.browser.close()
        clock["report_checked"] = time.monotonic()

        # The files and the DuckDB views: every statement scored once, in both partitions.
        for relation in RELATIONS:
            statements = pl.read_parquet(partition_path(home, "statements", {"relation": relation}))
            where = {"model": MODEL, "relation": relation}
            scores = pl.read_parquet(partition_path(home, "statement_scores", where))
            assert scores["statement_id"].to_list() == statements["statement_id"].to_list() != []
            assert scores["ll_sum"].is_finite().all()
            _, rows = query(home, f"select count(*) from statement_scores where relation_id = '{relation}'")
            assert rows[0][0] == statements.height
        took = {k: clock[k] - clock[before] for before, k in zip(clock, list(clock)[1:], strict=False)}
        print("UI test, seconds per phase:", {k: round(v) for k, v in took.items()})

        took = stop_and_check(server, lambda: os.killpg(server.proc.pid, signal.SIGINT))
        print(f"UI stopped, every process gone {took:.1f} s after Ctrl-C")
    finally:
        server.kill_everything()
        for path in saved:
            print(f"screenshot: {path}")
