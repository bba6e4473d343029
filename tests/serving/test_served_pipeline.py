"""A served model through the whole pipeline: `kcal models add --engine openai`, then `kcal demo`,
against tests/serving/server.py over the embedded SmolLM2 (with an API key set): its predictions
equal the torch engine's, its metadata shows the endpoint's host and never the key, no file of the
store holds the key, and a run SIGKILLed midway resumes without lost or doubled rows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.core.paths import report_path
from kcal_pipeline.scoring.models import DEFAULT_MODEL
from tests.conftest import copy_facts_store, run_kcal
from tests.serving.server import ReferenceServer
from tests.serving.test_served_engine import NAME, folder, torch_model  # noqa: F401 (fixtures)

KEY = "kcal-test-key-7c1e9f"
DEMO = ("--relation", "P36", "--max-instances", "4", "--max-templates", "1", "--template-kinds",
        "curated", "--no-progress", "--chunk-size", "64")  # fmt: skip


def files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.fixture
def store(tmp_path, facts_store, torch_model, folder, monkeypatch):  # noqa: F811
    home = copy_facts_store(facts_store, tmp_path / "kcal")
    monkeypatch.setenv("KCAL_TEST_KEY", KEY)
    with ReferenceServer(torch_model, NAME, root=folder) as server:
        server.faults.api_key = KEY
        added = run_kcal(home, "models", "add", NAME, "--engine", "openai", "--endpoint", server.url,
                         "--api-key-env", "KCAL_TEST_KEY", "--start-token", "<|endoftext|>")  # fmt: skip
        assert added.returncode == 0, added.stderr
        yield home, server


def scores_of(home: Path, model_key: str) -> pl.DataFrame:
    path = home / "statement_scores" / f"model={model_key}" / "relation=P36" / "part.parquet"
    return pl.read_parquet(path).sort("statement_id")


def kill_midway(home: Path, server: ReferenceServer, log: Path) -> None:
    """`kcal demo` of the served model in a process group of its own, SIGKILLed once its first
    chunk is checkpointed (each request slowed, so the run lasts long enough to be killed)."""
    server.faults.delay_s = 0.5
    env = {**os.environ, "DAGSTER_HOME": str(home / "dagster")}
    env.pop("KCAL_HOME", None)
    with log.open("w") as out:
        kcal = str(Path(sys.executable).with_name("kcal"))
        proc = subprocess.Popen(
            [kcal, "--home", str(home), "demo", "--model", NAME, *DEMO],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not list((home / ".checkpoints").rglob("chunk-*.parquet")) and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    server.faults.delay_s = 0.0
    assert not (home / "statement_scores" / f"model={NAME}").exists()


def test_a_served_run_killed_midway_resumes_and_scores_as_the_torch_engine(store, tmp_path):
    home, server = store
    assert "endpoint" in (home / "models.toml").read_text() and KEY not in (home / "models.toml").read_text()
    listed = run_kcal(home, "models", "list").stdout
    assert f"openai at {server.url.removesuffix('/v1')}" in listed and "torch" in listed
    kill_midway(home, server, tmp_path / "killed.log")  # SIGKILL once a chunk is checkpointed
    run = run_kcal(home, "demo", "--model", NAME, "--model", DEFAULT_MODEL.id, *DEMO)
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r"P36: resumed [123] of 4 chunks from an interrupted run", run.stdout + run.stderr)
    served, local = scores_of(home, NAME), scores_of(home, DEFAULT_MODEL.key)
    statements = pl.read_parquet(home / "statements" / "relation=P36" / "part.parquet")
    assert served["statement_id"].is_unique().all()  # nothing doubled, nothing lost
    assert (
        served["statement_id"].to_list()
        == local["statement_id"].to_list()
        == sorted(statements["statement_id"])
    )
    assert (served["ll_sum"] - local["ll_sum"]).abs().max() < 2e-3
    predicted = (
        pl.concat([served.with_columns(m=pl.lit("served")), local.with_columns(m=pl.lit("torch"))])
        .join(statements, on="statement_id")
        .sort("ll_sum", descending=True)
        .group_by("m", "instance_id", "template_id", maintain_order=True)
        .first()
        .pivot(on="m", index=["instance_id", "template_id"], values="option_index")
    )
    assert predicted.height == 4 and (predicted["served"] == predicted["torch"]).all()
    # The key went to the server on every request and nowhere else: no file of the store or of
    # the Dagster instance, no line of the output.
    assert server.seen.headers and all(h.get("Authorization") == f"Bearer {KEY}" for h in server.seen.headers)
    assert files_holding(home, KEY.encode()) == []
    output = (tmp_path / "killed.log").read_text() + run.stdout + run.stderr
    assert KEY not in output and "Bearer" not in output
    # The report's Run table names the endpoint's host, not its path.
    host = server.url.removesuffix("/v1")
    report = report_path(home, NAME).read_text()
    assert f"smol served at {host} (engine openai)" in report and f"openai:smol@{host}" in report
