"""Benchmark: kcal's "openai" engine (a model behind an OpenAI-compatible server) against its torch
engine on the same statements, side by side in one run: fidelity (max |Δ ll_sum| per statement and
|Δ| per token, and whether both pick the same option of every (instance, template)), throughput
(statements/s of each) and HTTP requests per statement; then open answers (a greedy answer and
N samples per question, MACE's setting): responses/s of each engine, requests per question, and
how many greedy answers are the same tokens, with their max |Δ logprob_sum|.

The statements are bench/scoring.py's (P36, P30, P37 from the embedded snapshot, gold + 5 sampled
distractors, its 5 templates). The server must serve the embedded SmolLM2 (kcal's float32 cache):
vLLM's CPU build does with `make serving-vllm`, then
  scripts/serving/vllm-serve.sh 8000 smol .kcal/models/HuggingFaceTB--SmolLM2-135M-Instruct &
  .venv/bin/python bench/served.py --endpoint http://127.0.0.1:8000/v1 --model smol
Both engines share the machine: on a 2-core CPU the server competes with the torch engine only in
its own phase, but the numbers say what each costs here, not on a GPU server.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from bench.scoring import build_statements  # noqa: E402
from kcal_pipeline.core.options import ScoringOptions  # noqa: E402
from kcal_pipeline.scoring import answering  # noqa: E402
from kcal_pipeline.scoring.engine import score_statements  # noqa: E402
from kcal_pipeline.scoring.generation import GenerationSettings  # noqa: E402
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, load_model  # noqa: E402
from kcal_pipeline.scoring.models.loading import load_served  # noqa: E402


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--endpoint", required=True, help="the server's API base URL, e.g. http://127.0.0.1:8000/v1"
    )
    p.add_argument("--model", default="smol", help="the name the server serves the model under")
    p.add_argument("--api-key-env", help="the environment variable holding the API key, if any")
    p.add_argument("--start-token", default="<|endoftext|>", help="kcal's start token for the model")
    p.add_argument(
        "--instances", type=int, default=60, help="instances over P36, P30, P37 (60: 1,735 statements)"
    )
    p.add_argument(
        "--questions", type=int, default=24, help="open questions (\"What is the capital of S?\" over "
        "the statements' subjects); 0: statements only",
    )  # fmt: skip
    p.add_argument("--samples", type=int, default=4, help="sampled answers per question (and the greedy one)")
    p.add_argument("--cache", default=str(REPO / ".kcal" / "models"), help="kcal's model cache")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    with tempfile.TemporaryDirectory() as work:
        statements = build_statements(args.instances, Path(work))
    entry = ModelEntry(id=args.model, source="server", engine="openai", endpoint=args.endpoint,
                       api_key_env=args.api_key_env, start_token=args.start_token)  # fmt: skip
    served = load_served(entry)
    local = load_model(DEFAULT_MODEL, args.cache)
    print(f"{statements.height} statements; {served.engine_check.describe()}")
    rows, frames = [], {}
    for name, loaded in (("torch (packed)", local), ("openai", served)):
        requests = getattr(loaded.native, "requests", 0)
        started = time.perf_counter()
        frames[name] = score_statements(loaded, statements, ScoringOptions())
        took = time.perf_counter() - started
        sent = getattr(loaded.native, "requests", 0) - requests
        rows.append((name, statements.height / took, sent / statements.height if sent else None))
    a, b = frames["torch (packed)"], frames["openai"]
    delta = np.abs(a["ll_sum"].to_numpy() - b["ll_sum"].to_numpy())
    per_token = max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(a["token_logprobs"].to_list(), b["token_logprobs"].to_list(), strict=True)
    )
    picks = {
        name: statements.with_columns(ll=frame["ll_sum"])
        .sort("ll", descending=True)
        .group_by("instance_id", "template_id", maintain_order=True)
        .first()
        .select("instance_id", "template_id", pl.col("option_index").alias(name))
        for name, frame in frames.items()
    }
    joined = picks["torch (packed)"].join(picks["openai"], on=["instance_id", "template_id"])
    agree = int((joined["torch (packed)"] == joined["openai"]).sum())
    print(f"\n{'engine':<16}{'statements/s':>14}{'requests/statement':>20}")
    for name, rate, per in rows:
        print(f"{name:<16}{rate:>14.1f}{'' if per is None else f'{per:.3f}':>20}")
    ratio = rows[1][1] / rows[0][1]
    print(f"\nopenai / torch throughput: {ratio:.2f}×")
    print(f"max |Δ ll_sum| {delta.max():.2e} (mean {delta.mean():.2e}), max |Δ| per token {per_token:.2e}; "
          f"same predicted option on {agree} of {joined.height} (instance, template) groups")  # fmt: skip
    rates = {name: rate for name, rate, _ in rows}
    result = {"n": statements.height, "max_delta": float(delta.max()), "agree": agree,
              "groups": joined.height, "rates": rates, "requests_per_statement": rows[1][2]}  # fmt: skip
    if args.questions:
        result["generation"] = open_answers(local, served, statements, args.questions, args.samples)
    return result


def open_answers(local, served, statements: pl.DataFrame, n: int, samples: int) -> dict:
    """Both engines answer the same questions (greedy + `samples`, 16 new tokens): responses/s,
    requests per question, greedy answers with the same tokens and their max |Δ logprob_sum|."""
    length = pl.col("subject_end") - pl.col("subject_start")
    subjects = (
        statements.select(pl.col("text").str.slice("subject_start", length))
        .unique(maintain_order=True)["text"]
        .head(n)
        .to_list()
    )
    questions = [f"What is the capital of {s}?" for s in subjects]
    keys = [f"q{i}" for i in range(len(questions))]
    settings = GenerationSettings(n_samples=samples, max_new_tokens=16)
    frames, rows = {}, []
    for name, loaded in (("torch", local), ("openai", served)):
        requests = getattr(loaded.native, "requests", 0)
        started = time.perf_counter()
        frames[name] = answering.generate_answers(loaded, questions, keys, settings)
        took = time.perf_counter() - started
        sent = getattr(loaded.native, "requests", 0) - requests
        rows.append((name, frames[name].height / took, sent / len(questions) if sent else None))
    greedy = pl.col("sample") == 0
    both = frames["torch"].filter(greedy).join(frames["openai"].filter(greedy), on="instance_id", suffix="_s")
    same = both.filter(pl.col("token_ids") == pl.col("token_ids_s"))
    delta = float((same["logprob_sum"] - same["logprob_sum_s"]).abs().max() or 0.0)
    print(f"\nopen answers: {len(questions)} questions × (greedy + {samples} samples), at most 16 tokens")
    print(f"{'engine':<16}{'responses/s':>14}{'requests/question':>20}")
    for name, rate, per in rows:
        print(f"{name:<16}{rate:>14.1f}{'' if per is None else f'{per:.2f}':>20}")
    print(f"openai / torch throughput: {rows[1][1] / rows[0][1]:.2f}×; greedy answers with the same "
          f"tokens: {same.height} of {both.height}, max |Δ logprob_sum| {delta:.2e}")  # fmt: skip
    return {"questions": len(questions), "same_greedy": same.height, "max_delta": delta,
            "rates": {name: rate for name, rate, _ in rows}, "requests_per_question": rows[1][2]}  # fmt: skip


if __name__ == "__main__":
    main()
