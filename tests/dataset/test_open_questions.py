"""Open questions from question templates, and the names an answer may be given by."""

import json

import polars as pl
import pytest

from kcal_pipeline.dataset.instances.open_questions import (
    answer_names,
    entity_aliases,
    full_answer_spaces,
    open_questions,
    question_text,
)
from kcal_pipeline.dataset.relations import get_relation


def test_the_question_drops_its_label_and_answer_line():
    template = "Question: Name one person who received [X].\nAnswer: [Y]"
    assert (
        question_text(template, "the Nobel Prize in Physics in 1995")
        == "Name one person who received the Nobel Prize in Physics in 1995."
    )
    assert question_text("Which country is [X] in? [Y]", "Ulm") == "Which country is Ulm in?"


@pytest.mark.parametrize("template", ["Name [X].", "[Y] is [X] [X]", "Question: [X]\nAnswer: [Y]"])
def test_a_template_without_a_question_is_refused(template):
    with pytest.raises(ValueError, match="question template"):
        question_text(template, "s")


def instances(rows):
    return pl.DataFrame(
        rows,
        schema={
            "instance_id": pl.String,
            "subject_label": pl.String,
            "gold_ids": pl.List(pl.String),
            "gold_labels": pl.List(pl.String),
            "option_ids": pl.List(pl.String),
            "option_labels": pl.List(pl.String),
            "parent_instance_id": pl.String,
        },
        orient="row",
    )


PERL, ZINK, LEE, RICH = "Martin Perl", "Rolf Zinkernagel", "David Lee", "Robert Richardson"
PHYSICS = "the Nobel Prize in Physics in 199"
PROBE = instances(
    [
        ("q1", PHYSICS + "5", ["Q1"], [PERL], ["Q1", "Q2"], [PERL, ZINK], None),
        ("q2", PHYSICS + "6", ["Q3", "Q4"], [LEE, RICH], ["Q3", "Q4", "Q1"], [LEE, RICH, PERL], None),
        ("q2#k2d1", PHYSICS + "6", ["Q3"], [LEE], ["Q3", "Q1"], [LEE, PERL], "q2"),
    ]
)


def test_one_question_per_full_answer_space_instance():
    questions = open_questions(get_relation("mace-award"), PROBE)
    assert questions.rows() == [
        ("q1", "Name one person who received the Nobel Prize in Physics in 1995."),
        ("q2", "Name one person who received the Nobel Prize in Physics in 1996."),
    ]
    assert full_answer_spaces(PROBE)["instance_id"].to_list() == ["q1", "q2"]


def test_a_closed_set_relation_has_no_open_questions():
    with pytest.raises(ValueError, match="'P36' has no question template"):
        open_questions(get_relation("P36"), PROBE)


def test_names_come_from_the_probe_the_facts_and_the_aliases():
    facts = pl.DataFrame({"object_id": ["Q1", "Q5"], "object_label": ["Martin L. Perl", "Frederick Reines"]})
    names = answer_names(PROBE, facts, {"Q1": ["Perl"], "Q9": ["nobody asked"]})
    gold, others = names["q1"]
    assert gold == {"Q1": ["Martin Perl", "Martin L. Perl", "Perl"]}
    assert others == {
        "Q2": ["Rolf Zinkernagel"],
        "Q3": ["David Lee"],
        "Q4": ["Robert Richardson"],
        "Q5": ["Frederick Reines"],
    }
    gold, others = names["q2"]
    assert set(gold) == {"Q3", "Q4"} and "Q1" in others and "Q3" not in others
    assert set(names) == {"q1", "q2"}  # the #k copy asks its parent's question


def test_aliases_are_read_from_bear_qualifiers_only():
    facts = pl.DataFrame(
        {
            "subject_id": ["Q1", "Q1", "Q2", "Q3"],
            "qualifiers": [
                json.dumps({"sub_aliases": ["A", "B"]}),
                json.dumps({"sub_aliases": ["B", "C"]}),
                json.dumps({"year": 1995}),
                json.dumps({"sub_aliases": []}),
            ],
        }
    )
    assert entity_aliases([facts, pl.DataFrame({"subject_id": ["Q4"]})]) == {"Q1": ["A", "B", "C"], "Q3": []}
    broken = pl.DataFrame({"subject_id": ["Q7"], "qualifiers": ["sub_aliases: ["]})
    with pytest.raises(ValueError, match="qualifiers of subject 'Q7'"):
        entity_aliases([broken])
