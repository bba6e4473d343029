"""A partition of open answers (kcal_pipeline/scoring/open_answers.py) on the embedded model: a run
killed after its first chunk resumes with the chunks it finished and ends with exactly the rows of
an uninterrupted run; other settings draw afresh."""

import os
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.core.options import GenerationOptions
from kcal_pipeline.scoring import open_answers
from kcal_pipeline.scoring.checkpoints import discard_partition
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

QUESTIONS = pl.DataFrame(
    {
        "instance_id": ["a", "b", "c"],
        "question": [
            "Name one planet of the solar system.",
            "Name one person who received the Nobel Prize in Physics in 1921.",
            "What is the capital of France?",
        ],
    }
)
OPTIONS = GenerationOptions(n_samples=2, max_new_tokens=4, prompted=False)


@pytest.fixture(scope="module")
def loaded():
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")
    return load_model(DEFAULT_MODEL, cache)


@pytest.fixture(scope="module")
def uninterrupted(loaded, tmp_path_factory):
    home = tmp_path_factory.mktemp("kcal")
    return open_answers.generate_partition(loaded, QUESTIONS, OPTIONS, home, "mace-award", chunk_size=2)


def test_rows_per_question_and_sample_in_question_order(uninterrupted):
    frame = uninterrupted.frame
    assert frame["instance_id"].unique(maintain_order=True).to_list() == ["a", "b", "c"]
    assert frame.group_by("instance_id").len().sort("instance_id")["len"].to_list() == [3, 3, 3]
    assert set(frame["prompt"]) == {"answer"}
    meta = uninterrupted.metadata
    assert (
        meta["questions"] == 3 and meta["rows"] == 9 and meta["chunks"] == 2 and meta["chunks_resumed"] == 0
    )
    assert meta["prompt_style"] == "chat"  # the embedded model is instruction-tuned


def test_a_killed_run_resumes_without_losing_or_duplicating_rows(
    loaded, uninterrupted, tmp_path, monkeypatch
):
    from kcal_pipeline.scoring import generation

    real = generation.generate_answers
    calls = []

    def dies_on_the_second_chunk(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt  # what Ctrl-C or a kill leaves: the first chunk's checkpoint
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "generate_answers", dies_on_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        open_answers.generate_partition(loaded, QUESTIONS, OPTIONS, tmp_path, "mace-award", chunk_size=2)
    monkeypatch.setattr(generation, "generate_answers", real)
    resumed = open_answers.generate_partition(
        loaded, QUESTIONS, OPTIONS, tmp_path, "mace-award", chunk_size=2
    )
    assert resumed.metadata["chunks_resumed"] == 1
    assert resumed.frame.equals(uninterrupted.frame)


def test_changed_settings_discard_the_checkpoints(loaded, tmp_path):
    directory = open_answers.checkpoint_dir(tmp_path, loaded.key, "mace-award")
    first = open_answers.generate_partition(loaded, QUESTIONS.head(1), OPTIONS, tmp_path, "mace-award")
    marker = (directory / "fingerprint.txt").read_text().strip()
    assert marker == first.metadata["fingerprint"]
    other = OPTIONS.model_copy(update={"generation_seed": 1})
    second = open_answers.generate_partition(loaded, QUESTIONS.head(1), other, tmp_path, "mace-award")
    assert second.metadata["fingerprint"] != marker and second.metadata["chunks_resumed"] == 0
    discard_partition(tmp_path, open_answers.TABLE, {"model": loaded.key, "relation": "mace-award"})
    assert not directory.exists()


def test_no_questions_is_an_error(loaded, tmp_path):
    with pytest.raises(ValueError, match="no questions to ask"):
        open_answers.generate_partition(loaded, QUESTIONS.head(0), OPTIONS, tmp_path, "mace-award")


def test_a_prompts_length_is_its_answers_and_its_format():
    """(Here, not in test_prompted.py, whose module fixture shortens every prompt.)"""
    from kcal_pipeline.scoring import prompted

    assert prompted.PROMPTS["verb"].max_new_tokens(16) == 32
    assert prompted.PROMPTS["verb_topk"].max_new_tokens(16) == 64
    assert prompted.PROMPTS["verb_topk"].max_new_tokens(4) == 3 * 4 + 16
    assert prompted.PROMPTS["self_ask"].max_new_tokens(4) == 12
    assert prompted.PROMPTS["p_true"].max_new_tokens(16) == 1
