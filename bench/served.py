"""Benchmark: kcal's "openai" engine (a model behind an OpenAI-compatible server) against its torch
engine on the same statements, side by side in one run: fidelity (max |Δ ll_sum| per statement and
|Δ| per token, and whether both pick the same option of every (instance, template)), throughput
(statements/s of each) and HTTP requests per statement.

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
from kcal_pipeline.scoring.engine import score_statements  # noqa: E402
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
    return {"n": statements.height, "max_delta": float(delta.max()), "agree": agree,
            "groups": joined.height, "rates": rates, "requests_per_statement": rows[1][2]}  # fmt: skip


if __name__ == "__main__":
    main()
