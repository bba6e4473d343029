"""Scale bench: how kcal's stages grow with the number of models in one store (issue 34).

    .venv/bin/python bench/scale.py [--models 5,20,50] [--relations 60] [--home /tmp/scale]
                                    [--instances 100] [--templates 5] [--options 25] [--profile]

Writes a seeded synthetic store (bench/_scale_store.py: the real catalog and schema, random but
plausible scores, real estimation and evaluation outputs copied with perturbed confidences) and
grows it to each M in --models, then times, each step in its own spawned process (so one step's
peak memory does not hide in another's):

  estimation   build_cube + compute_estimate_tables + option_estimates of ONE partition (once:
               independent of M)
  evaluation   metrics_and_differences (B = 1,000 bootstrap) of ONE model over every relation, as
               the metrics multi-asset calls it (once: independent of M)
  cross_model  the cross_model_report asset's library calls over every model's metrics: reading
               them, leaderboard, cross_model_figures, cross_model_page, write_report
  family_comparison  reading every model's metrics and the model_id/model_kind columns of every
               statement_scores file, the leaderboard and family_comparison (the cross_model stage's
               tables)
  views        refresh_views on a store without kcal.duckdb (creates every view)
  sql:<name>   each named SQL report (`kcal sql --list`) through warehouse.query
  up_to_date   assets.runner.is_up_to_date for every partition written (model × relation, model
               and relation tables) — the runner's "nothing to do" check: each reads its file's
               recorded data version and every input file's footer (no data is read or hashed)

Peak memory is the child process's peak resident set (VmHWM: the whole process, imports
included). R is capped at the catalog's relation count (the runner and the Dagster partitions only
know catalog ids). --profile adds each step's cProfile top lines. Memory: the cross-model steps
hold every model's metrics table (≈ 1.2 M rows, ≈ 300–450 MiB a model at the default sizes), so
M = 50 needs ≈ 16–23 GiB; bench/README.md "Scale" has the numbers.
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
    import polars as pl

    from kcal_pipeline.core.paths import cross_model_report_path
    from kcal_pipeline.core.storage import existing_partitions
    from kcal_pipeline.reporting.cross_model import cross_model_figures, cross_model_page, leaderboard
    from kcal_pipeline.reporting.html import write_report

    def work():
        files = existing_partitions(Path(home), "metrics")
        metrics = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
        board = leaderboard(metrics)
        figures = cross_model_figures(metrics)
        meta = {"models": metrics["model_id"].n_unique(), "KCAL_HOME": home, "duckdb": ""}
        write_report(cross_model_report_path(Path(home)), cross_model_page(metrics, meta, board, figures))
        return f"{metrics.height:,} metric rows, {board.height} leaderboard rows"

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
    from bench._scale_store import cross_model_tables

    return _timed(lambda: f"{cross_model_tables(Path(home))['family_comparison'].height} rows", profile)


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
    parser.add_argument("--profile", action="store_true", help="cProfile top lines of the growing steps")
    args = parser.parse_args(argv)
    sizes = [int(m) for m in args.models.split(",")]
    if sizes != sorted(sizes) or sizes[0] < 1:
        parser.error("--models: increasing positive counts")
    home = Path(args.home)
    shutil.rmtree(home, ignore_errors=True)
    os.environ["KCAL_HOME"] = str(home)
    os.environ.setdefault("DAGSTER_HOME", str(home / ".dagster"))
    shape = StoreShape(args.relations, args.instances, args.templates, args.options, args.seed)
    started = time.perf_counter()
    store = ScaleStore(home, shape)
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
        t0 = time.perf_counter()
        store.add_models(m - len(store.models))
        scores = sum(f.height for f in store.statements.values()) * m
        print(
            f"# store M={m}: written in {time.perf_counter() - t0:.0f} s; {scores:,} statement scores",
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
            )
        ]
        for name, fn, fn_args in steps:
            seconds, peak, note, top = in_child(fn, *fn_args)
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
