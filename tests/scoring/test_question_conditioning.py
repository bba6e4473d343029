"""MACE question templates condition the answer on the question (issue 12): with the real embedded
model, one option's ll_answer_sum differs between two questions under the question template, and
is the same under the headline template "[Y] received [X].", whose answer comes first."""

import os
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.dataset.instances.probe import build_statements, templates_frame
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.scoring import score_clm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

QUESTIONS = ("the Nobel Prize in Physics in 1921", "the Nobel Prize in Literature in 1995")


@pytest.fixture(scope="module")
def scores() -> pl.DataFrame:
    """Albert Einstein as the one option of two award questions, under the question template and
    the headline template of mace-award, as build_statements writes them, scored by the model."""
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[2] / ".kcal" / "models")
    loaded = load_model(DEFAULT_MODEL, cache)
    templates = templates_frame({"mace-award": load_catalog()["mace-award"]}).filter(
        pl.col("template_id").is_in(["mace-award:c0", "mace-award:q0"])
    )
    einstein = {"gold_ids": ["einstein"], "gold_labels": ["Albert Einstein"], "n_gold": 1}
    options = {"option_ids": ["einstein"], "option_labels": ["Albert Einstein"], "n_options": 1}
    instances = pl.DataFrame(
        [
            {
                "instance_id": f"mace-award:q{n}", "relation_id": "mace-award", "subject_id": f"kcal:q{n}",
                "subject_label": label, **einstein, **options, "split": "test",
            }
            for n, label in enumerate(QUESTIONS)
        ]
    )  # fmt: skip
    statements = build_statements(instances, templates)
    scored = score_clm(
        loaded,
        statements["text"],
        list(zip(statements["subject_start"], statements["subject_end"], strict=True)),
        list(zip(statements["object_start"], statements["object_end"], strict=True)),
    )
    return pl.concat([statements, scored], how="horizontal")


def _answer_scores(scores: pl.DataFrame, template_id: str) -> list[float]:
    rows = scores.filter(pl.col("template_id") == template_id).sort("instance_id")
    return rows["ll_answer_sum"].to_list()


def test_the_question_template_conditions_the_answer_on_the_question(scores):
    question = scores.filter(pl.col("template_id") == "mace-award:q0").sort("instance_id")
    assert question["text"].to_list() == [
        f"Question: Name one person who received {q}.\nAnswer: Albert Einstein" for q in QUESTIONS
    ]
    physics, literature = _answer_scores(scores, "mace-award:q0")
    # The model knows Einstein's prize: the physics question makes him much likelier (≈ 2.8 nats).
    assert physics - literature > 1.0


def test_the_object_first_headline_template_ignores_the_question(scores):
    headline = scores.filter(pl.col("template_id") == "mace-award:c0").sort("instance_id")
    assert headline["text"].to_list() == [f"Albert Einstein received {q}." for q in QUESTIONS]
    physics, literature = _answer_scores(scores, "mace-award:c0")
    assert physics == pytest.approx(literature, abs=1e-4)  # the answer precedes the question
