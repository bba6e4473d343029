"""Scale bench: how kcal's stages grow with the number of models in one store (issue 34).

    .venv/bin/python bench/scale.py [--models 5,20,50] [--relations 60] [--home /tmp/scale]
                                    [--instances 100] [--templates 5] [--options 25] [--profile]
                                    [--resamples B] [--steps REGEX] [--repeat N]

Writes a seeded synthetic store (bench/_scale_store.py: the real catalog and schema, random but
plausible scores, real estimation and evaluation outputs copied with perturbed confidences) and
grows it to each M in --models, then times, each step in its own spawned process (so one step's
peak memory does not hide in another's):

  estimation   build_cube + compute_estimate_tables + option_estimates of ONE partition (once:
               independent of M)
  evaluation   metrics_and_differences (B = 1,000 bootstrap) of ONE model over every relation, as
               the metrics multi-asset calls it (once: independent of M)
  cross_model  the cross_model_report asset's reads and library calls: the page's rows of every
               model's metrics (the IO manager's `where` input filter, read_partitions), the headline
               reduction once, leaderboard, cross_model_figures, cross_model_page, write_report
  family_comparison  the family_comparison asset's: one lazy scan per metrics and per
               statement_scores file (the IO manager's `lazy` input), model_families_by_file and
               family_comparison_by_model (one model in five is masked: M/5 pairs)
  views        refresh_views on a store without kcal.duckdb (creates every view)
  sql:<name>   each named SQL report (`kcal sql --list`) through warehouse.query
  up_to_date   assets.runner.is_up_to_date for every partition written (model × relation, model
               and relation tables) — the runner's "nothing to do" check: each reads its file's
               recorded data version and every input file's footer (no data is read or hashed)
  sensor_tick  the automation sensor's evaluation (evaluate_automation_conditions over the code
               location's Definitions, as the daemon's tick) on the store's Dagster instance, where
               the store writer reported every partition's materialization: the tick after a first
               one (whose time the note gives); nothing is to do, so nothing is requested
  ui:<page>    the GraphQL of the Dagster UI's asset pages for statement_scores (M × R partitions):
               the catalog's partition counts, the asset page's partition health, one partition's
               page, the event list — dagster_graphql's executor against workspace.yaml (the code
               location's load and a first execution not timed)

Peak memory is the child process's peak resident set (VmHWM: the whole process, imports
included). R is capped at the catalog's relation count (the runner and the Dagster partitions only
know catalog ids). --profile adds each step's cProfile top lines. The cross-model steps read the
page's rows, and one pair of models at a time: cross_model's memory stays near the imports' at any
M, family_comparison's is its output (≈ 1.2 M rows a pair); bench/README.md "Scale" has the numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import multiprocessing
import os
import platform
import pstats
import re
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` and kcal from this checkout
from bench._scale_store import ScaleStore, StoreShape, estimate, model_inputs

# ------------------------------------------------------------------------------------------------
# Steps: each runs in a fresh spawned process and returns (seconds, peak RSS MiB, note, profile)
# ------------------------------------------------------------------------------------------------


def _timed(work, profile: bool):
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    note = work()
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - started
    top = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(12)
        top = out.getvalue()
    return seconds, peak_rss_mib(), note, top


def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries the parent's peak
    across fork and exec into a spawned child, so every step would report the driver's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_estimation(home: str, model: str, relation: str, profile: bool):
    import polars as pl

    from kcal_pipeline.core.storage import partition_path

    home_ = Path(home)
    scores = pl.read_parquet(
        partition_path(home_, "statement_scores", {"model": model, "relation": relation})
    )
    instances = pl.read_parquet(partition_path(home_, "probe_instances", {"relation": relation}))
    templates = pl.read_parquet(partition_path(home_, "templates"))

    def work():
        tables = estimate(scores, instances, templates)
        return f"{scores.height:,} scores → {tables['estimates'].height:,} estimates"

    return _timed(work, profile)


def step_evaluation(home: str, model: str, profile: bool):
    from kcal_pipeline.evaluation.tables import metrics_and_differences

    inputs = model_inputs(Path(home), model)

    def work():
        metrics, _ = metrics_and_differences(
            inputs["estimates"], inputs["templates"], inputs["relations"], inputs["probe_instances"],
            inputs["option_estimates"],
        )  # fmt: skip
        return f"{inputs['estimates'].height:,} estimates → {metrics.height:,} metric rows"

    return _timed(work, profile)


def step_cross_model(home: str, profile: bool):
    import resources.parquet_io  # noqa: F401  (the IO manager's reader: Dagster's import is not timed)
    from bench._scale_store import cross_model_report_inputs
    from kcal_pipeline.core.paths import cross_model_report_path
    from kcal_pipeline.reporting.cross_model import (
        cross_model_figures,
        cross_model_page,
        leaderboard,
        overall_headline,
    )
    from kcal_pipeline.reporting.html import write_report

    def work():  # as the cross_model_report asset: its input's rows, the headline reduction once
        metrics = cross_model_report_inputs(Path(home))
        overall = overall_headline(metrics)
        board = leaderboard(overall)
        figures = cross_model_figures(overall)
        meta = {"models": metrics["model_id"].n_unique(), "KCAL_HOME": home, "duckdb": ""}
        write_report(cross_model_report_path(Path(home)), cross_model_page(overall, meta, board, figures))
        return f"{metrics.height:,} metric rows read, {board.height} leaderboard rows"

    return _timed(work, profile)


def step_views(home: str, profile: bool):
    from kcal_pipeline.core.paths import duckdb_path
    from kcal_pipeline.core.warehouse import refresh_views

    duckdb_path(Path(home)).unlink(missing_ok=True)
    return _timed(lambda: f"{len(refresh_views(Path(home)))} views", profile)


def step_sql(home: str, name: str, profile: bool):
    from kcal_pipeline.core.warehouse import named_query, query

    def work():
        try:
            _, rows = query(Path(home), named_query(name))
        except Exception as exc:  # a report over a table this store lacks: say so, time it anyway
            return f"error: {str(exc).splitlines()[0][:80]}"
        return f"{len(rows):,} rows"

    return _timed(work, profile)


def step_family_comparison(home: str, profile: bool):
    import resources.parquet_io  # noqa: F401  (the IO manager's reader: Dagster's import is not timed)
    from bench._scale_store import family_comparison_inputs
    from kcal_pipeline.evaluation.families import family_comparison_by_model, model_families_by_file

    def work():  # as the family_comparison asset: one scan per file, a pair of models at a time
        metrics, scores = family_comparison_inputs(Path(home))
        result = family_comparison_by_model(metrics, model_families_by_file(scores))
        return f"{result.pairs.height} pairs, {result.table.height:,} rows"

    return _timed(work, profile)


def step_sensor_tick(home: str, profile: bool):
    """Two evaluations of the automation sensor's conditions (evaluate_automation_conditions over
    the code location's Definitions, as the daemon's tick does) on the store's instance, where
    every partition is materialized: the first tick (no cursor) and the next (its cursor)."""
    import warnings

    from dagster import evaluate_automation_conditions

    from assets.automation import AUTOMATED
    from assets.definitions import defs
    from assets.instance import get_instance

    instance = get_instance(Path(home))
    first: dict = {}

    def tick(cursor):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = evaluate_automation_conditions(defs, instance, cursor=cursor)
        requested = sum(len(result.get_requested_partitions(key)) for key in AUTOMATED)
        return result.cursor, requested

    started = time.perf_counter()
    first["cursor"], first["requested"] = tick(None)
    first["seconds"] = time.perf_counter() - started

    def work():
        _, requested = tick(first["cursor"])
        return (
            f"{requested} partitions requested (first tick, no cursor: {first['seconds']:.2f} s, "
            f"{first['requested']} requested)"
        )

    return _timed(work, profile)


# The Dagster UI's asset pages, as GraphQL: the catalog's partition counts, statement_scores' page
# (its partition keys and the health of every model × relation), one partition's page (its latest
# materialization) and the asset's event list.
UI_QUERIES = {
    "ui:catalog": """query {
  assetNodes { id assetKey { path }
    partitionStats { numMaterialized numMaterializing numFailed numPartitions } }
}""",
    "ui:asset_page": """query($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) { __typename ... on AssetNode { id
    partitionKeysByDimension { name partitionKeys }
    partitionStats { numMaterialized numPartitions }
    assetPartitionStatuses { __typename
      ... on MultiPartitionStatuses { primaryDimensionName
        ranges { primaryDimStartKey primaryDimEndKey
          secondaryDim { __typename ... on DefaultPartitionStatuses {
            materializedPartitions failedPartitions materializingPartitions } } } }
      ... on DefaultPartitionStatuses { materializedPartitions } } } }
}""",
    "ui:partition_page": """query($key: AssetKeyInput!, $partition: String!) {
  assetOrError(assetKey: $key) { __typename ... on Asset {
    assetMaterializations(partitions: [$partition], limit: 1) {
      partition runId timestamp tags { key value } metadataEntries { label } } } }
}""",
    "ui:events": """query($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) { __typename ... on Asset {
    assetMaterializations(limit: 100) { partition runId timestamp } } }
}""",
}


def step_ui(home: str, name: str, partition: str, profile: bool):
    """One of UI_QUERIES for statement_scores, through dagster_graphql's executor against the
    workspace (workspace.yaml, its code location in a gRPC subprocess) on the store's instance; the
    location's load and a first execution (a page opened in a running UI finds the workspace
    loaded) are not timed."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    from assets.instance import get_instance

    instance = get_instance(Path(home))
    workspace = str(Path(__file__).resolve().parent.parent / "workspace.yaml")
    variables = {"key": {"path": ["statement_scores"]}, "partition": partition}
    with define_out_of_process_context(workspace, None, instance) as context:
        execute_dagster_graphql(context, UI_QUERIES[name], variables=variables)

        def work():
            result = execute_dagster_graphql(context, UI_QUERIES[name], variables=variables)
            if result.errors:
                return f"error: {str(result.errors[0])[:100]}"
            return f"{len(str(result.data)):,} characters of JSON"

        return _timed(work, profile)


def step_up_to_date(home: str, models: list[str], relations: list[str], templates: int, profile: bool):
    from assets.runner import is_up_to_date
    from bench._scale_store import CROSS_MODEL_TABLES, MODEL_RELATION_TABLES, MODEL_TABLES, RELATION_TABLES
    from resources import default_resources

    resources = default_resources(home=home, max_templates=templates)
    partitions = (
        [(t, {"relation": r}) for t in RELATION_TABLES for r in relations]
        + [(t, {"model": m, "relation": r}) for t in MODEL_RELATION_TABLES for m in models for r in relations]
        + [(t, {"model": m}) for t in MODEL_TABLES for m in models]
        + [(t, {}) for t in CROSS_MODEL_TABLES]
    )

    def work():
        fresh = sum(is_up_to_date(Path(home), table, dims, resources) for table, dims in partitions)
        return f"{fresh:,} of {len(partitions):,} partitions up to date"

    return _timed(work, profile)


def in_child(fn, *args):
    """Run one step in a fresh spawned interpreter (its own peak RSS)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        name = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        name = cpu
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cores = len(os.sched_getaffinity(0))
    return f"{name}, {cores} cores usable, {memory:.0f} GiB, Python {platform.python_version()}"


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="5,20,50", help="store sizes M, increasing (comma-separated)")
    parser.add_argument("--relations", type=int, default=60, help="R (capped at the catalog)")
    parser.add_argument("--home", default="/tmp/scale", help="KCAL_HOME to write (emptied first)")
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--templates", type=int, default=5)
    parser.add_argument("--options", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--resamples", type=int, default=None,
        help="bootstrap B of the store's one real evaluation (default: the library's); the rows "
        "written are the same, only their intervals differ",
    )  # fmt: skip
    parser.add_argument("--steps", default="", help="time only the steps whose name matches this regex")
    parser.add_argument(
        "--repeat", type=int, default=1,
        help="run each step this many times (fresh processes) and keep the fastest: on a shared "
        "machine one run's time is the machine's load as much as the step's",
    )  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="cProfile top lines of the growing steps")
    args = parser.parse_args(argv)
    sizes = [int(m) for m in args.models.split(",")]
    if sizes != sorted(sizes) or sizes[0] < 1:
        parser.error("--models: increasing positive counts")
    home = Path(args.home)
    shutil.rmtree(home, ignore_errors=True)
    os.environ["KCAL_HOME"] = str(home)
    os.environ.setdefault("DAGSTER_HOME", str(home / ".dagster"))
    shape = StoreShape(
        args.relations, args.instances, args.templates, args.options, args.seed, args.resamples
    )
    started = time.perf_counter()
    store = ScaleStore(home, shape, record_events=True)
    store.write_dataset()
    relations = store.relations
    capped = (
        f" (capped from {args.relations}: the catalog has {len(relations)})"
        if len(relations) < args.relations
        else ""
    )
    print(f"# kcal scale bench, commit after {commit()}; {machine()}")
    sizes_text = f"{shape.instances} instances × {shape.templates} templates × {shape.options} options"
    print(f"# R = {len(relations)} relations{capped}, {sizes_text} per relation; peak RSS: VmHWM")
    rows, once = [], False
    for m in sizes:
        t0, events = time.perf_counter(), store.events_seconds
        store.add_models(m - len(store.models))
        scores = sum(f.height for f in store.statements.values()) * m
        print(
            f"# store M={m}: written in {time.perf_counter() - t0:.0f} s (of which reporting the "
            f"materializations to Dagster {store.events_seconds - events:.0f} s); "
            f"{scores:,} statement scores",
            flush=True,
        )
        steps = []
        if not once:
            steps += [
                ("estimation", step_estimation, (str(home), store.models[0], relations[0], args.profile)),
                ("evaluation", step_evaluation, (str(home), store.models[0], args.profile)),
            ]
            once = True
        steps += [
            ("cross_model", step_cross_model, (str(home), args.profile)),
            ("family_comparison", step_family_comparison, (str(home), args.profile)),
            ("views", step_views, (str(home), args.profile)),
        ]
        from kcal_pipeline.core.warehouse import named_queries

        steps += [(f"sql:{name}", step_sql, (str(home), name, False)) for name in named_queries()]
        steps += [
            (
                "up_to_date",
                step_up_to_date,
                (str(home), list(store.models), relations, shape.templates, args.profile),
            ),
            ("sensor_tick", step_sensor_tick, (str(home), args.profile)),
        ]
        from dagster import MultiPartitionKey

        last = str(MultiPartitionKey({"model": store.models[-1], "relation": relations[-1]}))
        steps += [(name, step_ui, (str(home), name, last, args.profile)) for name in UI_QUERIES]
        for name, fn, fn_args in [step for step in steps if re.search(args.steps, step[0])]:
            runs = [in_child(fn, *fn_args) for _ in range(args.repeat)]
            seconds, peak, note, top = min(runs, key=lambda run: run[0])
            if args.repeat > 1:
                note += f" (fastest of {args.repeat}: {', '.join(f'{run[0]:.2f}' for run in runs)} s)"
            rows.append((name, m, len(relations), seconds, peak, note))
            print(
                f"{name:28s} M={m:<3d} R={len(relations):<3d} {seconds:9.2f} s {peak:8.0f} MiB  {note}",
                flush=True,
            )
            if top:
                print("\n".join(top.splitlines()[:30]))
    print(f"# total {time.perf_counter() - started:.0f} s")
    print_table(rows, sizes)
    return 0


def print_table(rows, sizes) -> None:
    """The markdown table with, per step, the time ratio between consecutive M against the data ratio."""
    by_step: dict[str, dict[int, tuple[float, float, str]]] = {}
    for name, m, _, seconds, peak, note in rows:
        by_step.setdefault(name, {})[m] = (seconds, peak, note)
    head = " | ".join(f"M={m} s (MiB)" for m in sizes)
    ratios = " | ".join(f"{b}/{a} time (data ×{b / a:.1f})" for a, b in itertools.pairwise(sizes))
    print(f"\n| step | {head} | {ratios} |")
    print("|---" * (1 + len(sizes) + len(sizes) - 1) + "|")
    for name, values in by_step.items():
        cells = " | ".join(f"{values[m][0]:.2f} ({values[m][1]:.0f})" if m in values else "—" for m in sizes)
        grows = []
        for a, b in itertools.pairwise(sizes):
            if a in values and b in values:
                ratio = values[b][0] / max(values[a][0], 1e-9)
                flag = " **super-linear**" if ratio > 1.25 * b / a else ""
                grows.append(f"×{ratio:.2f}{flag}")
            else:
                grows.append("—")
        print(f"| {name} | {cells} | {' | '.join(grows)} |")


if __name__ == "__main__":
    sys.exit(main())
