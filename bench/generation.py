"""Open-answer sampling (kcal_pipeline/scoring/generation.py): questions decoded one per call
against several per call, side by side in one run, on the embedded model.

Decoding reads every weight once per step whatever the batch, so rows of several questions share
the cost; the script checks that both ways draw the same responses and prints the ratio.
    .venv/bin/python bench/generation.py [--questions 8] [--samples 10] [--max-new-tokens 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import kcal_pipeline.scoring.generation as generation  # noqa: E402
from kcal_pipeline.core.paths import kcal_home, model_cache_dir  # noqa: E402
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    loaded = load_model(DEFAULT_MODEL, model_cache_dir(kcal_home(os.environ.get("KCAL_HOME"))))
    years = range(1990, 1990 + args.questions)
    questions = [f"Name one person who received the Nobel Prize in Physics in {y}." for y in years]
    keys = [str(y) for y in years]
    settings = generation.GenerationSettings(n_samples=args.samples, max_new_tokens=args.max_new_tokens)
    batched_rows = generation.ROWS_PER_CALL
    times: dict[str, list[float]] = {"one question per call": [], f"{batched_rows} rows per call": []}
    drawn = {}
    for _ in range(args.rounds):  # interleaved, so a slower host affects both alike
        for label, rows in zip(times, (args.samples + 1, batched_rows), strict=True):
            generation.ROWS_PER_CALL = rows
            start = time.perf_counter()
            drawn[label] = generation.generate_answers(loaded, questions, keys, settings)
            times[label].append(time.perf_counter() - start)
    generation.ROWS_PER_CALL = batched_rows
    one, many = (drawn[label]["token_ids"].to_list() for label in times)
    tokens = int(drawn[next(iter(times))]["n_tokens"].sum())
    print(
        f"{DEFAULT_MODEL.id} (4-bit Q4_1 GGUF de-quantised to float32, instruction-tuned), "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{args.questions} questions × ({args.samples} samples + greedy), "
        f"≤ {args.max_new_tokens} new tokens, {tokens} tokens drawn"
    )
    for label, seconds in times.items():
        best = min(seconds)
        print(
            f"  {label:24s} {best:6.1f} s (best of {args.rounds})  {args.questions / best:5.2f} questions/s"
        )
    ratio = min(times[next(iter(times))]) / min(list(times.values())[1])
    print(f"  ratio {ratio:.2f}×; same responses both ways: {one == many}")
    return 0 if one == many else 1


if __name__ == "__main__":
    sys.exit(main())
