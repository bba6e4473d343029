"""bench/dagster_sqlite.py runs both variants on real SQLite instances and prints its table (no
timing asserted: the bench prints those); the cached variant builds one engine per database."""

import re

from assets import sqlite_engines
from bench import dagster_sqlite as bench


def test_the_bench_prints_both_variants_and_restores_the_cache(capsys):
    assert bench.main(["--rounds", "2", "--partitions", "1"]) == 0
    out = capsys.readouterr().out
    rows = {m[0]: int(m[1]) for m in re.findall(r"^(plain.*?|kcal cache)\s+\d+\s+\d+\s+(\d+)$", out, re.M)}
    assert set(rows) == {"plain (an engine per connection)", "kcal cache"}, out
    # 2 rounds × 2 runs: the runs database, the event log's index and one shard per run (the rest of
    # the instance was opened before the bench swapped engines in); plain builds one per connection
    assert rows["kcal cache"] == 2 + 4 and rows["plain (an engine per connection)"] > 10 * rows["kcal cache"]
    assert re.search(r"plain ÷ cached per run: \d+\.\d\d .*n = 4 runs each", out), out
    assert all(m.create_engine is sqlite_engines.ENGINES for m in sqlite_engines.STORAGE_MODULES)
