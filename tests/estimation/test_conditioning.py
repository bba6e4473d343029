"""answer_conditional_templates on hand-made cubes: the templates whose ll_answer_sum is the answer
given the question (SCA, Token read these)."""

import polars as pl

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.conditioning import answer_conditional_templates, subject_before_object

# Template ids sort as t0 < t1 < t2 < t3 < t4 on the cube's template axis.
TEXTS = {
    "t0": ("curated", "[Y] received [X]."),  # answer first: its score ignores the question
    "t1": ("curated", "One of the laureates of [X] is [Y]."),  # answer after the subject
    "t2": ("marker_verbal", "One of the laureates of [X] is certainly [Y]."),  # a variant, not curated
    "t3": ("question", "Question: Name one person who received [X].\nAnswer: [Y]"),
    "t4": ("curated", "[X] went to [Y] that year."),  # text after the answer does not matter
}


def cube(template_ids: list[str], with_texts: bool = True):
    scores = pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": "mace-award",
            "instance_id": "i1",
            "template_id": template_ids,
            "option_index": 0,
            "object_id": "Q1",
            "is_gold": True,
            "ll_sum": -1.0,
        }
    )
    templates = pl.DataFrame(
        {
            "relation_id": "mace-award",
            "template_id": list(TEXTS),
            "kind": [kind for kind, _ in TEXTS.values()],
            "rank": 0,
            "text": [text for _, text in TEXTS.values()],
        }
    )
    return build_cube(scores, templates=templates if with_texts else templates.drop("text"))


def test_question_templates_win_when_the_cube_has_them():
    assert answer_conditional_templates(cube(["t0", "t1", "t2", "t3", "t4"])).tolist() == [3]


def test_otherwise_the_curated_templates_whose_answer_follows_the_subject():
    assert answer_conditional_templates(cube(["t0", "t1", "t2", "t4"])).tolist() == [1, 3]
    assert answer_conditional_templates(cube(["t0", "t2"])).tolist() == []  # none: skip the estimator


def test_without_template_texts_only_question_kinds_can_be_told():
    assert answer_conditional_templates(cube(["t1", "t3"], with_texts=False)).tolist() == [1]
    assert answer_conditional_templates(cube(["t0", "t1"], with_texts=False)).tolist() == []


def test_subject_before_object():
    assert subject_before_object("The capital of [X] is [Y].")
    assert not subject_before_object("[Y] is the capital of [X].")
