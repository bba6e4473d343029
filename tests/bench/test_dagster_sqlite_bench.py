"""bench/dagster_sqlite.py runs its three variants on real SQLite instances and prints its table (no
timing asserted: the bench prints those); the engine cache builds one engine per database, the kept
migration scripts are not loaded again per run."""

import os
import re

from assets import sqlite_engines
from bench import dagster_sqlite as bench


def test_the_bench_prints_every_variant_and_restores_the_speed_ups(capsys):
    dagster_home = os.environ["DAGSTER_HOME"]  # the worker's (tests/conftest.py)
    assert bench.main(["--rounds", "2", "--partitions", "1"]) == 0
    assert os.environ["DAGSTER_HOME"] == dagster_home  # not a deleted temporary one for later tests
    out = capsys.readouterr().out
    row = r"^(plain.*?|kcal engine cache|engine cache \+ kept scripts)\s+\d+\s+\d+\s+(\d+)\s+(\d+)$"
    rows = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(row, out, re.M)}
    plain, cache, kept = (
        "plain (an engine per connection)",
        "kcal engine cache",
        "engine cache + kept scripts",
    )
    assert set(rows) == {plain, cache, kept}, out
    # 2 rounds × 2 runs: one engine per run's new event-log file (the instance's own databases were
    # opened before the counts start); plain builds one per connection
    assert rows[cache][0] == rows[kept][0] == 4 and rows[plain][0] > 10 * rows[cache][0]
    # each new run file: the head check and the stamp loaded every migration script, twice per run
    assert rows[plain][1] == rows[cache][1] == 2 * 4 and rows[kept][1] == 0
    for name in (cache, kept):
        assert re.search(rf"plain ÷ {re.escape(name)} per run: \d+\.\d\d .*n = 4 runs each", out), out
    assert all(m.create_engine is sqlite_engines.ENGINES for m in sqlite_engines.STORAGE_MODULES)
    assert all(
        m.ScriptDirectory is sqlite_engines.KeptScriptDirectory for m in sqlite_engines.SCRIPT_DIRECTORY_USERS
    )
