"""Open answers and next-token readings from whichever engine holds the model: the torch sampler
(generation.py; also for engine "llama.cpp", whose float32 reference generates) or a server
(served/generation.py, engine "openai"). The callers (open_answers.py, prompted.py) ask here and
never branch on the engine themselves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import polars as pl

from kcal_pipeline.scoring import generation
from kcal_pipeline.scoring.generation import ANSWER_PROMPT, GenerationSettings, NextTokenReading, Question
from kcal_pipeline.scoring.served.client import ENGINE as SERVED_ENGINE
from kcal_pipeline.scoring.served.generation import generate_answers_served, next_token_readings_served

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel


def is_served(loaded: LoadedModel) -> bool:
    return getattr(loaded, "engine", "torch") == SERVED_ENGINE


def generate_answers(
    loaded: LoadedModel,
    questions: Sequence[Question],
    keys: Sequence[str],
    settings: GenerationSettings,
    progress: Callable[[int, int], None] | None = None,
    *,
    prompt: str = ANSWER_PROMPT,
    stop: str = "line",
) -> pl.DataFrame:
    """generation.generate_answers' rows, from the model's engine."""
    draw = generate_answers_served if is_served(loaded) else generation.generate_answers
    return draw(loaded, questions, keys, settings, progress, prompt=prompt, stop=stop)


def next_token_readings(
    loaded: LoadedModel,
    prompts: Sequence[Sequence[int]],
    pair: tuple[int, int],
    settings: GenerationSettings,
    seeds: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[NextTokenReading]:
    """generation.next_token_readings, from the model's engine."""
    read = next_token_readings_served if is_served(loaded) else generation.next_token_readings
    return read(loaded, prompts, pair, settings, seeds, progress)
