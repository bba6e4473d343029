"""Benchmark: kcal's throughput at fixed token budgets, side by side, and where the automatic
budget settles — so the growth rule (scoring/budget.py: double while throughput rises ≥ 5 %) can be
judged against the best fixed budget measured in the same run.

Every round scores the same statements once per fixed budget, in rotating order (load from other
processes hits every budget alike). Then a budget that starts at the smallest one and grows by
kcal's rule scores the statements until it settles (or --growth-passes run out); the table gives its
trail and its final budget's measured rate against the best fixed one.

Run:  .venv/bin/python bench/token_budget.py                     (embedded SmolLM2, CPU, ≈ 6 min)
      .venv/bin/python bench/token_budget.py --config tiny       (a random model from bench/configs)
      python3 bench/token_budget.py --device cuda --config llama-8b --dtype bfloat16 \\
          --statements .gpu/statements.parquet --budgets 2048,4096,8192,16384,32768,65536
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import weakref
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402
import torch  # noqa: E402

from bench import scoring as bench  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--config", help="a random-weight model from bench/configs (default: the embedded SmolLM2)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument(
        "--instances", type=int, default=15, help="instances to build statements from (≈ 31 each)"
    )
    ap.add_argument("--statements", help="a parquet file written by bench/scoring.py --save-statements")
    ap.add_argument("--budgets", default="256,512,1024,2048,4096", help="fixed budgets (positions per call)")
    ap.add_argument("--paths", default="packed,plain", help="kcal paths to measure: packed, plain")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--growth-passes", type=int, default=4, help="passes at most for the growing budget")
    ap.add_argument("--seed", type=int, default=13)
    return ap.parse_args(argv)


def model_for(args, cache: Path):
    base, _ = bench.embedded_base(cache)
    if not args.config:
        if args.dtype != "float32" or args.device != "cpu":
            raise SystemExit("the embedded model runs float32 on CPU here; use --config for other set-ups")
        return base, "the embedded SmolLM2-135M-Instruct"
    model = bench.random_model(bench.load_config(args.config), args.device, args.seed)
    if args.dtype != "float32":
        model = bench.converted_copy(model, getattr(torch, args.dtype))
    return bench.random_loaded(base, model, args.config, args.seed, args.device), f"random {args.config}"


def plant(loaded, path: str, budget) -> None:
    """Give the model this budget for the path, as budget_for would have chosen one."""
    from kcal_pipeline.scoring import budget as budget_mod

    budget_mod._budgets.setdefault(loaded.model, {})[path] = budget


def timed_pass(loaded, path: str, frame: pl.DataFrame) -> float:
    from kcal_pipeline.scoring import score_clm
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

    scorer = score_clm_shared_prefix if path == "packed" else score_clm
    texts = frame["text"].to_list()
    subj = list(zip(frame["subject_start"], frame["subject_end"], strict=True))
    obj = list(zip(frame["object_start"], frame["object_end"], strict=True))
    bench.synchronize(loaded.device)
    started = time.perf_counter()
    scorer(loaded, texts, subj, obj)  # batch_size None: the planted budget
    bench.synchronize(loaded.device)
    return frame.height / (time.perf_counter() - started)


def sweep(loaded, path: str, frame: pl.DataFrame, budgets: list[int], rounds: int) -> dict[int, list[float]]:
    from kcal_pipeline.scoring.budget import TokenBudget

    rates: dict[int, list[float]] = {b: [] for b in budgets}
    plant(loaded, path, TokenBudget.fixed(budgets[0], "warm-up"))
    timed_pass(loaded, path, frame.head(64))
    for r in range(rounds):
        order = budgets[r % len(budgets) :] + budgets[: r % len(budgets)]
        for b in order:
            plant(loaded, path, TokenBudget.fixed(b, "bench"))
            rates[b].append(timed_pass(loaded, path, frame))
        print(f"  {path} round {r + 1}/{rounds}: " + ", ".join(f"{b}: {rates[b][-1]:.1f}/s" for b in budgets))
    return rates


def growth(loaded, path: str, frame: pl.DataFrame, start: int, passes: int):
    from kcal_pipeline.scoring.budget import UNBOUNDED, TokenBudget

    grown = TokenBudget(tokens=start, ceiling=UNBOUNDED, grow=True, origin=f"grown from {start}")
    plant(loaded, path, grown)
    used = 0
    while grown.grow and used < passes:
        timed_pass(loaded, path, frame)
        used += 1
    return grown, used


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    budgets = sorted({int(b) for b in args.budgets.split(",")})
    paths = [p.strip() for p in args.paths.split(",")]
    if any(p not in ("packed", "plain") for p in paths):
        raise SystemExit(f"--paths: packed and/or plain, got {args.paths!r}")
    from kcal_pipeline.core.paths import kcal_home, model_cache_dir

    cache = model_cache_dir(kcal_home(os.environ.get("KCAL_HOME") or REPO / ".kcal"))
    with tempfile.TemporaryDirectory(prefix="kcal-budget-") as workdir:
        frame = (
            pl.read_parquet(args.statements)
            if args.statements
            else bench.build_statements(args.instances, Path(workdir))
        )
    loaded, what = model_for(args, cache)
    print(
        f"bench/token_budget.py — {bench.versions()}; load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs\nmodel {what} ({loaded.n_params / 1e6:.1f} M parameters), {args.device}/"
        f"{loaded.dtype}, {torch.get_num_threads()} threads; {frame.height} statements; {args.rounds} rounds"
    )
    from kcal_pipeline.scoring import budget as budget_mod

    budget_mod._budgets = weakref.WeakKeyDictionary()  # nothing learned before this run
    for path in paths:
        rates = sweep(loaded, path, frame, budgets, args.rounds)
        median = {b: statistics.median(r) for b, r in rates.items()}
        best = max(median, key=median.get)
        grown, used = growth(loaded, path, frame, budgets[0], args.growth_passes)
        print(f"\n{path} path: statements/s at fixed budgets (median of {args.rounds} rounds)")
        print(f"{'budget':>8}  {'stmt/s':>8}  {'× best':>7}  rounds")
        for b in budgets:
            mark = "  ← best" if b == best else ("  ← grown" if b == grown.tokens else "")
            runs = ", ".join(f"{x:.1f}" for x in rates[b])
            print(f"{b:>8}  {median[b]:>8.1f}  {median[b] / median[best]:>7.2f}  {runs}{mark}")
        at = median.get(grown.tokens)
        share = (
            f"{at / median[best]:.2f} × the best fixed budget's rate" if at else "not among the fixed budgets"
        )
        state = "settled" if not grown.grow else f"still growing after {used} passes"
        print(f"automatic: {grown.describe()}\n  {state} after {used} pass(es); its budget ran at {share}")


if __name__ == "__main__":
    main()
