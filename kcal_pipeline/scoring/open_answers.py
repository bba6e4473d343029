"""One model × relation of open answers (the `generations` table): every question's greedy and
sampled answers, and with `prompted` its verbal and double-turn prompts, resumable in chunks.

Like statement scoring (partition.py), the work is checkpointed per chunk of questions under
KCAL_HOME/.checkpoints/generations/model=…/relation=…, keyed by a fingerprint of what is drawn
(the model and its revision, the questions, the settings, this code's version): a killed run
resumes with the chunks it finished, and a chunk is never drawn twice or lost. Each question draws
from its own seeded generator, so a resumed run gives the rows an uninterrupted one gives.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import polars as pl

from kcal_pipeline.core.options import GenerationOptions
from kcal_pipeline.core.progress import ProgressMeter
from kcal_pipeline.scoring import answering, generation, prompted
from kcal_pipeline.scoring.checkpoints import partition_dir, score_in_chunks
from kcal_pipeline.scoring.served.generation import ENTROPY_UNAVAILABLE, check_generation

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

TABLE = "generations"
# Bump when what is drawn for the same inputs changes (a prompt's wording, the stop rule, the
# sampler). 2: inverse-CDF sampling, 96 rows per call.
GENERATION_VERSION = "2"
QUESTIONS_PER_CHUNK = 16


@dataclass(frozen=True)
class PartitionGenerations:
    frame: pl.DataFrame
    metadata: dict


def checkpoint_dir(home: Path, model_key: str, relation: str) -> Path:
    """KCAL_HOME/.checkpoints/generations/model=…/relation=…"""
    return partition_dir(home, TABLE, model_key, relation)


def sampler_settings(options: GenerationOptions):
    """The sampler's settings (scoring/generation.py) for the user's generation options."""
    return generation.GenerationSettings(
        n_samples=options.n_samples,
        temperature=options.temperature,
        top_p=options.top_p,
        max_new_tokens=options.max_new_tokens,
        seed=options.generation_seed,
    )


def prompt_style(loaded: LoadedModel) -> str:
    """ "chat" (the model's chat template: an instruction-tuned model) or "completion"."""
    return "chat" if getattr(loaded.tokenizer, "chat_template", None) else "completion"


def fingerprint(loaded: LoadedModel, questions: pl.DataFrame, options: GenerationOptions) -> str:
    payload = {
        "model": loaded.key,
        "revision": loaded.revision,
        "dtype": loaded.dtype,
        "prompt_style": prompt_style(loaded),
        "options": options.values(),
        "questions": questions.select("instance_id", "question").rows(),
        "version": GENERATION_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def generate_partition(
    loaded: LoadedModel,
    questions: pl.DataFrame,
    options: GenerationOptions,
    home: Path,
    relation: str,
    log: Callable[[str], None] | None = None,
    stream: TextIO | None = None,
    chunk_size: int = QUESTIONS_PER_CHUNK,
) -> PartitionGenerations:
    """The generations of one partition's questions (instance_id, question), in their order."""
    print_ = log or (lambda _: None)
    if questions.is_empty():
        raise ValueError(f"relation {relation!r}: no questions to ask (probe_instances is empty)")
    # A server draws only once it showed its sampled log-probabilities are the model's own.
    engine = {}
    if answering.is_served(loaded):
        check = check_generation(loaded).describe()
        engine = {"endpoint": loaded.native.endpoint.host, "engine_check": check,
                  "entropy_mean": ENTROPY_UNAVAILABLE}  # fmt: skip
    settings = sampler_settings(options)
    fp = fingerprint(loaded, questions, options)
    directory = checkpoint_dir(home, loaded.key, relation)
    meter = ProgressMeter(
        f"generating {loaded.key} × {relation}:", log=print_, stream=stream, unit="questions"
    )
    position = [0]

    def draw(chunk: pl.DataFrame) -> pl.DataFrame:
        texts, keys = chunk["question"].to_list(), chunk["instance_id"].to_list()
        parts = 2 if options.prompted else 1  # the prompted prompts count as much as the answers

        def within(part: int):
            def report(done: int, total: int) -> None:
                share = (part + done / max(total, 1)) / parts
                meter(position[0] + int(share * chunk.height), questions.height)

            return report

        answers = answering.generate_answers(loaded, texts, keys, settings, progress=within(0))
        if not options.prompted:
            return answers
        prompted_rows = prompted.generate_prompted(loaded, texts, keys, answers, settings, progress=within(1))
        # one row order whatever prompts ran: by question, then prompt, then sample
        return _in_question_order(pl.concat([answers, prompted_rows], how="vertical"), keys)

    def after_chunk(done: int, total: int) -> None:
        position[0] = done
        meter(done, total)

    started = time.perf_counter()
    frame, report = score_in_chunks(
        questions, draw, directory, fp, chunk_size=chunk_size, on_chunk=after_chunk, key="instance_id",
        rows_per_item=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if report.resumed:
        print_(f"{relation}: resumed {report.resumed} of {report.chunks} chunks from an interrupted run")
    share = report.scored / max(report.chunks, 1)
    return PartitionGenerations(
        frame,
        {
            "questions": questions.height,
            "rows": frame.height,
            "prompts": ", ".join(sorted(set(frame["prompt"]))),
            "prompt_style": prompt_style(loaded),
            "engine": getattr(loaded, "engine", "torch"),
            **engine,
            "device": str(loaded.device),
            "dtype": loaded.dtype,
            "model_revision": loaded.revision,
            "fingerprint": fp,
            "chunks": report.chunks,
            "chunks_resumed": report.resumed,
            "seconds": round(elapsed, 1),
            "questions_per_s": round(questions.height * share / max(elapsed, 1e-9), 3),
            "responses_per_s": round(frame.height * share / max(elapsed, 1e-9), 2),
            "checkpoints": str(directory),
        },
    )


def _in_question_order(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    order = pl.DataFrame({"instance_id": keys, "_order": range(len(keys))})
    return frame.join(order, on="instance_id").sort("_order", "prompt", "sample").drop("_order")
