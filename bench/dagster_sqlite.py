"""Benchmark: Dagster in-process runs on a SQLite instance, with and without kcal's engine cache
(assets/sqlite_engines.py), side by side in one process.

Each round materializes the same model × relation dynamic-partitioned graph (two assets, the shape of
kcal's scoring stage, values trivial so only Dagster's own work is timed) once per variant, in
alternating order, on two temporary DAGSTER_HOMEs; the table gives the mean time per run, the
ratio, and how many engines each variant built.

Run:  .venv/bin/python bench/dagster_sqlite.py             (≈ 30 s)
      .venv/bin/python bench/dagster_sqlite.py --rounds 20 --partitions 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sqlalchemy  # noqa: E402
from dagster import (  # noqa: E402
    AssetIn,
    DagsterInstance,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    asset,
    materialize,
)

from assets import sqlite_engines  # noqa: E402

MODELS = DynamicPartitionsDefinition(name="model")
RELATIONS = DynamicPartitionsDefinition(name="relation")
GRID = MultiPartitionsDefinition({"model": MODELS, "relation": RELATIONS})


@asset(partitions_def=RELATIONS)
def statements(context) -> int:
    return len(context.partition_key)


@asset(partitions_def=GRID, ins={"statements": AssetIn()})
def scores(context, statements: int) -> int:
    return statements + 1


class Counting:
    """sqlalchemy.create_engine, counting its calls (the engines a variant builds)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, url, **options):
        self.calls += 1
        return sqlalchemy.create_engine(url, **options)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=4, help="relation partitions (one model)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    relations = [f"P{i}" for i in range(1, args.partitions + 1)]
    plain, counted = Counting(), Counting()
    variants = {"plain (an engine per connection)": plain, "kcal cache": sqlite_engines.EngineCache(counted)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        instances = {}
        for i, name in enumerate(variants):
            home = Path(tmp) / f"dagster-{i}"
            home.mkdir()
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
            os.environ["DAGSTER_HOME"] = str(home)
            instances[name] = instance = DagsterInstance.get()
            instance.add_dynamic_partitions("model", ["m"])
            instance.add_dynamic_partitions("relation", relations)
        for round_ in range(args.rounds):
            order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for name in order:
                sqlite_engines.cache_sqlite_engines(variants[name])
                started = time.perf_counter()
                for relation in relations:
                    materialize([statements], instance=instances[name], partition_key=relation)
                    key = MultiPartitionKey({"model": "m", "relation": relation})
                    materialize(
                        [statements, scores], instance=instances[name], partition_key=key, selection=[scores]
                    )
                times[name].append((time.perf_counter() - started) / (2 * len(relations)))
    sqlite_engines.cache_sqlite_engines()
    runs = 2 * len(relations) * args.rounds
    print(
        f"bench/dagster_sqlite.py: {args.rounds} rounds × {2 * len(relations)} in-process runs per variant "
        f"({len(relations)} relation partitions, 1 model); load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs\n"
    )
    print(f"{'variant':36s} {'ms per run (mean)':>18s} {'median round':>13s} {'engines built':>14s}")
    for name, values in times.items():
        built = plain.calls if variants[name] is plain else counted.calls
        mean, median = 1000 * statistics.mean(values), 1000 * statistics.median(values)
        print(f"{name:36s} {mean:18.0f} {median:13.0f} {built:14d}")
    slow, fast = times.values()
    ratios = [a / b for a, b in zip(slow, fast, strict=True)]
    print(
        f"\nplain ÷ cached per run: {statistics.mean(slow) / statistics.mean(fast):.2f} (per-round median "
        f"{statistics.median(ratios):.2f}, range {min(ratios):.2f}–{max(ratios):.2f}; n = {runs} runs each)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
