"""Open-answer sampling (kcal_pipeline/scoring/generation.py, scoring/prompted.py) on the embedded
model, side by side in one run on the same questions: the answer prompt one question per call against
several per call, every prompted kind (verbal, Self-Ask, P(True)), and the statements-equivalent
throughput: as many (question, answer) statements as the answer prompt drew responses, scored by the
scorer score_partition picks (scoring/engine.py's scorer_for: the packed prefix scorer on this model).

Decoding reads every weight once per step whatever the batch, so rows of several questions share
the cost; the script checks that both ways draw the same responses and prints the ratios. After an
untimed warm-up, every round runs every path in the same order, so a slower host affects all alike;
best of the rounds.
    .venv/bin/python bench/generation.py [--questions 8] [--samples 10] [--max-new-tokens 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import kcal_pipeline.scoring.generation as generation  # noqa: E402
from kcal_pipeline.core.options import ScoringOptions  # noqa: E402
from kcal_pipeline.core.paths import kcal_home, model_cache_dir  # noqa: E402
from kcal_pipeline.scoring.engine import scorer_for  # noqa: E402
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model  # noqa: E402
from kcal_pipeline.scoring.prompted import PROMPTS, generate_prompted  # noqa: E402


def statements_of(questions: list[str], keys: list[str], answers) -> tuple[list, list, list]:
    """One statement per answer response: "<question> <response>", the year as subject, the response
    as object (what scoring the same (question, answer) pairs as statements would read)."""
    question_of = dict(zip(keys, questions, strict=True))
    texts, subjects, objects = [], [], []
    for key, response in answers.select("instance_id", "response").iter_rows():
        question = question_of[key]
        start = question.index(key)
        texts.append(f"{question} {response}")
        subjects.append((start, start + len(key)))
        objects.append((len(question) + 1, len(question) + 1 + len(response)))
    return texts, subjects, objects


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
    scorer_name, scorer = scorer_for(loaded, ScoringOptions())
    batched_rows = generation.ROWS_PER_CALL
    answer_labels = ("answer, one question per call", f"answer, {batched_rows} rows per call")
    times: dict[str, list[float]] = {label: [] for label in (*answer_labels, *PROMPTS, scorer_name)}
    drawn: dict = {}
    # warm-up, untimed: first-call costs (the stop-token sets, the packing check, allocator growth)
    warm = generation.generate_answers(loaded, questions[:1], keys[:1], settings)
    generate_prompted(loaded, questions[:1], keys[:1], warm, settings, prompts=("self_ask", "p_true"))
    scorer(loaded, *statements_of(questions[:1], keys[:1], warm))
    for _ in range(args.rounds):
        for label, rows in zip(answer_labels, (args.samples + 1, batched_rows), strict=True):
            generation.ROWS_PER_CALL = rows
            start = time.perf_counter()
            drawn[label] = generation.generate_answers(loaded, questions, keys, settings)
            times[label].append(time.perf_counter() - start)
        generation.ROWS_PER_CALL = batched_rows
        answers = drawn[answer_labels[1]]
        for name in PROMPTS:
            start = time.perf_counter()
            drawn[name] = generate_prompted(loaded, questions, keys, answers, settings, prompts=(name,))
            times[name].append(time.perf_counter() - start)
        texts, subjects, objects = statements_of(questions, keys, answers)
        start = time.perf_counter()
        drawn[scorer_name] = scorer(loaded, texts, subjects, objects)
        times[scorer_name].append(time.perf_counter() - start)
    one, many = (drawn[label]["token_ids"].to_list() for label in answer_labels)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    print(
        f"{DEFAULT_MODEL.id} (4-bit Q4_1 GGUF de-quantised to float32, instruction-tuned), "
        f"{os.cpu_count()} CPUs, commit after {head.stdout.strip() or '?'}"
    )
    limits = ", ".join(f"{name} {spec.max_new_tokens(args.max_new_tokens)}" for name, spec in PROMPTS.items())
    print(
        f"{args.questions} questions × ({args.samples} samples + greedy); answer ≤ {args.max_new_tokens} "
        f"new tokens, the prompts their own ({limits}); best of {args.rounds} rounds"
    )
    print(f"  {'path':32s} {'s':>6s} {'responses':>9s} {'resp/s':>7s} {'tokens':>7s} {'tok/s':>7s}")
    for label, seconds in times.items():
        frame, best = drawn[label], min(seconds)
        # tokens: decoded (with the stop token) for generations, read by the forward for statements
        tokens = int(frame["n_scored" if "n_scored" in frame.columns else "n_tokens"].sum())
        print(
            f"  {label:32s} {best:6.2f} {frame.height:9d} {frame.height / best:7.2f} {tokens:7d} "
            f"{tokens / best:7.1f}"
        )
    answer_rate = drawn[answer_labels[1]].height / min(times[answer_labels[1]])
    statement_rate = drawn[scorer_name].height / min(times[scorer_name])
    batching = min(times[answer_labels[0]]) / min(times[answer_labels[1]])
    print(
        f"  batching over questions {batching:.2f}×; same responses both ways: {one == many}\n"
        f"  statements-equivalent: {scorer_name} scores {statement_rate:.1f} statements/s against "
        f"{answer_rate:.2f} answer responses/s: {statement_rate / answer_rate:.1f}× "
        f"(one sampled response costs {statement_rate / answer_rate:.1f} statements)"
    )
    return 0 if one == many else 1


if __name__ == "__main__":
    sys.exit(main())
