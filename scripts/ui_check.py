"""Issue 34's bar on a real store, in headless Chromium: `kcal ui` over a `make demo` store (the
report links' port, KCAL_REPORTS_PORT, is the one the demo wrote them with: 3030 unless set),
then Overview → Timeline shows the CLI's runs, the report asset shows its plots without a click,
its `report` link opens the report over http, and every "value [low, high]" on the report holds
its point. Prints what it saw; screenshots go to OUT. The UI is stopped with every process it
started.

    .venv/bin/python scripts/ui_check.py [KCAL_HOME (.kcal)] [OUT (/tmp/kcal-ui-check)]
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kcal_pipeline.core.report_server import reports_port  # noqa: E402
from tests.ui.server import UiServer, free_port, stop_and_check  # noqa: E402

INTERVAL = re.compile(r"\s*(-?[\d.]+(?:e-?\d+)?) \[(-?[\d.]+(?:e-?\d+)?), (-?[\d.]+(?:e-?\d+)?)\]\s*")
RUNS = "{ runsOrError { ... on Runs { count results { repositoryOrigin { repositoryLocationName } } } } }"


def check(page, server: UiServer, out: Path) -> list[str]:
    """The checks; returns the failures (empty: all held)."""
    from playwright.sync_api import expect

    failures = []
    runs = server.graphql(RUNS)["runsOrError"]
    placed = sum(1 for run in runs["results"] if run["repositoryOrigin"])
    print(f"runs: {runs['count']}, with the code location's origin (what the timeline needs): {placed}")
    if placed != runs["count"]:
        failures.append(f"{runs['count'] - placed} runs without an origin")

    page.goto(f"{server.url}/overview/activity/timeline")
    expect(page.get_by_text("scoring", exact=True).first).to_be_visible()
    time.sleep(3)
    if page.get_by_text("No runs or scheduled ticks in this time period").count():
        failures.append("the timeline says it has no runs")
    page.screenshot(path=str(out / "timeline.png"))

    page.goto(f"{server.url}/assets/report")
    images = page.locator(f"img[src^='{server.reports_url}/']")
    expect(images.first).to_be_visible()
    for index in range(images.count()):
        images.nth(index).scroll_into_view_if_needed()
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=images.nth(index).element_handle()
        )
    print(f"report asset: {images.count()} plots served over http, shown without a click")
    page.screenshot(path=str(out / "report_asset.png"))

    link = page.locator(f"a[href^='{server.reports_url}/']").first
    with page.context.expect_page() as opened:
        link.click()
    report = opened.value
    report.wait_for_load_state()
    print(f"report link: {report.url} → {report.locator('h1').first.inner_text()!r}")
    cells = [m.groups() for c in report.locator("td").all_inner_texts() if (m := INTERVAL.fullmatch(c))]
    outside = [c for c in cells if not float(c[1]) <= float(c[0]) <= float(c[2])]
    print(f"report: {len(cells)} 'value [low, high]' cells, {len(outside)} with the point outside")
    if not cells or outside:
        failures.append(f"intervals: {len(cells)} found, outside: {outside[:5]}")
    report.screenshot(path=str(out / "report.png"))
    return failures


def main() -> int:
    home = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / ".kcal").resolve()
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/kcal-ui-check")
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "KCAL_HOME")}
    port, log = free_port(), out / "ui.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(REPO / ".venv/bin/kcal"), "--home", str(home), "ui", "--port", str(port)],
            env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = UiServer(proc, port, log, reports_port())
    try:
        print(f"kcal ui up in {server.wait_until_up():.1f} s on {server.url} (reports: {server.reports_url})")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 1800, "height": 1000})
            page.set_default_timeout(120_000)
            failures = check(page, server, out)
    finally:
        print(
            f"kcal ui stopped in {stop_and_check(server, lambda: os.killpg(proc.pid, signal.SIGINT)):.1f} s"
        )
    print(f"screenshots: {out}")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
