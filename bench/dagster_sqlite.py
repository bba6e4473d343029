"""Benchmark: Dagster in-process runs on a SQLite instance, plain, with kcal's engine cache, and with
the engine cache and the kept migration scripts (assets/sqlite_engines.py), side by side in one
process.

Each round materializes the same model × relation dynamic-partitioned graph (two assets, the shape of
kcal's scoring stage, values trivial so only Dagster's own work is timed) once per variant, in
rotating order, on a temporary DAGSTER_HOME per variant; the table gives the mean time per run, the
ratios to plain, how many engines each variant built and how many times it loaded the migration
scripts.

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
from alembic.script import ScriptDirectory  # noqa: E402
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


class Variant:
    """How Dagster's SQLite storages are set up for one column of the table."""

    def __init__(self, name: str, engines, keep_scripts: bool, built: Counting):
        self.name, self.engines, self.keep_scripts, self.built = name, engines, keep_scripts, built
        self.script_loads = 0
        self.seconds: list[float] = []

    def install(self) -> None:
        sqlite_engines.cache_sqlite_engines(self.engines)
        sqlite_engines.cache_migration_scripts(self.keep_scripts)


def count_script_loads(current: list[Variant]):
    """Count ScriptDirectory revision loads (every migration script imported) for current[0];
    returns alembic's own loader, to put back."""
    load = ScriptDirectory._load_revisions

    def counted(self):
        current[0].script_loads += 1
        return load(self)

    ScriptDirectory._load_revisions = counted
    return load


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=4, help="relation partitions (one model)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    relations = [f"P{i}" for i in range(1, args.partitions + 1)]
    plain, cached, both = Counting(), Counting(), Counting()
    variants = [
        Variant("plain (an engine per connection)", plain, False, plain),
        Variant("kcal engine cache", sqlite_engines.EngineCache(cached), False, cached),
        Variant("engine cache + kept scripts", sqlite_engines.EngineCache(both), True, both),
    ]
    current = [variants[0]]
    load = count_script_loads(current)
    dagster_home = os.environ.get("DAGSTER_HOME")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            instances = {}
            for i, variant in enumerate(variants):
                home = Path(tmp) / f"dagster-{i}"
                home.mkdir()
                (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
                os.environ["DAGSTER_HOME"] = str(home)
                current[0] = variant
                variant.install()
                instances[variant.name] = instance = DagsterInstance.get()
                instance.add_dynamic_partitions("model", ["m"])
                instance.add_dynamic_partitions("relation", relations)
            for variant in variants:  # what opening the instance cost is not the runs'
                variant.script_loads, variant.built.calls = 0, 0
            for round_ in range(args.rounds):
                shift = round_ % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    current[0] = variant
                    variant.install()
                    started = time.perf_counter()
                    for relation in relations:
                        instance = instances[variant.name]
                        materialize([statements], instance=instance, partition_key=relation)
                        key = MultiPartitionKey({"model": "m", "relation": relation})
                        materialize(
                            [statements, scores], instance=instance, partition_key=key, selection=[scores]
                        )
                    variant.seconds.append((time.perf_counter() - started) / (2 * len(relations)))
    finally:  # the caller's DAGSTER_HOME again: Dagster would recreate the deleted folder to log to it
        if dagster_home is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = dagster_home
        ScriptDirectory._load_revisions = load
        sqlite_engines.speed_up_sqlite_storages()
    runs = 2 * len(relations) * args.rounds
    print(
        f"bench/dagster_sqlite.py: {args.rounds} rounds × {2 * len(relations)} in-process runs per variant "
        f"({len(relations)} relation partitions, 1 model); load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs\n"
    )
    header = f"{'ms per run (mean)':>18s} {'median round':>13s} {'engines built':>14s} {'script loads':>13s}"
    print(f"{'variant':34s} {header}")
    for v in variants:
        mean, median = 1000 * statistics.mean(v.seconds), 1000 * statistics.median(v.seconds)
        print(f"{v.name:34s} {mean:18.0f} {median:13.0f} {v.built.calls:14d} {v.script_loads:13d}")
    base = variants[0].seconds
    print()
    for v in variants[1:]:
        ratios = [a / b for a, b in zip(base, v.seconds, strict=True)]
        spread = f"range {min(ratios):.2f}–{max(ratios):.2f}"
        print(
            f"plain ÷ {v.name} per run: {statistics.mean(base) / statistics.mean(v.seconds):.2f} (per-round "
            f"median {statistics.median(ratios):.2f}, {spread}; n = {runs} runs each)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
