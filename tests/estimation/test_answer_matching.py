"""Open answers matched to entities by rule (kcal_pipeline/estimation/answer_matching.py), on
hand-made responses: aliases, articles, case, accents, a wrong known entity, an unmatched string."""

import polars as pl
import pytest

from kcal_pipeline.estimation.answer_matching import (
    UNMATCHED_CLUSTER,
    AnswerIndex,
    AnswerMatch,
    normalise_answer,
)

GOLD = {"Q30": ["United States of America", "USA", "United States"], "Q72": ["Zürich"]}
OTHERS = {
    "Q16": ["Canada"],
    "Q60": ["New York"],
    "Q90": ["Paris"],
    "Q30": ["America"],  # also gold: the gold entry wins
}


@pytest.fixture
def index():
    return AnswerIndex(GOLD, OTHERS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Eiffel-Tower!", "eiffel tower"),
        ("Zürich", "zurich"),
        ("An Apple a day", "apple day"),
        ("ÉCOLE\tnormale\n", "ecole normale"),
        ("  the  ", ""),
        ("Q&A", "q"),  # '&' is a symbol: a separator; the article 'a' then drops
    ],
)
def test_normalisation_by_hand(text, expected):
    assert normalise_answer(text) == expected


@pytest.mark.parametrize(
    ("response", "status", "entity"),
    [
        ("USA", "correct", "Q30"),  # an alias
        ("the United States.", "correct", "Q30"),  # article and punctuation
        ("THE UNITED STATES OF AMERICA", "correct", "Q30"),  # case; the longest name at position 0
        ("Zurich", "correct", "Q72"),  # accent folded on the label's side
        ("It was awarded in Zürich, Switzerland.", "correct", "Q72"),  # named inside a sentence
        ("Canada", "wrong_known_entity", "Q16"),
        ("Canada, not the USA", "wrong_known_entity", "Q16"),  # the first entity named
        ("America", "correct", "Q30"),  # a name of a gold and of another entry: gold
        ("Parisian cafés", "unmatched", None),  # whole words only
        ("I don't know.", "unmatched", None),
        ("", "unmatched", None),
    ],
)
def test_responses_by_hand(index, response, status, entity):
    match = index.match(response)
    assert (match.status, match.entity_id) == (status, entity)
    assert match.cluster == (entity if entity else UNMATCHED_CLUSTER + normalise_answer(response))


def test_the_longest_name_at_a_position_wins():
    index = AnswerIndex({"Q1": ["New York City"]}, {"Q60": ["New York"], "Q2": ["York"]})
    assert index.match("new york city, of course").entity_id == "Q1"
    assert index.match("New York state").entity_id == "Q60"
    assert index.match("old York").entity_id == "Q2"


def test_unmatched_responses_cluster_by_their_normalised_text(index):
    a, b, c = index.match_all(["I don't know!", "i DON'T know", "no idea"])
    assert a == b == AnswerMatch("unmatched", None, "text:i don t know")
    assert c.cluster == "text:no idea" != a.cluster


def test_matching_does_not_depend_on_the_order_entities_are_given():
    forward = AnswerIndex(GOLD, OTHERS)
    backward = AnswerIndex(dict(reversed(GOLD.items())), dict(reversed(OTHERS.items())))
    for response in ["usa", "Canada or Zurich", "New York", "nothing", "america"]:
        assert forward.match(response) == backward.match(response)


@pytest.mark.parametrize(
    ("gold", "others", "message"),
    [
        ({"": ["x"]}, {}, "gold: entity id '' is not a non-empty string"),
        ({"Q1": ["x"]}, {7: ["y"]}, "others: entity id 7 is not a non-empty string"),
        ({"Q1": "Paris"}, {}, "entity 'Q1': names must be a list of strings, got the string 'Paris'"),
        ({"Q1": ["", "!!"]}, {"Q2": ["x"]}, "gold: no gold entity has a usable name"),
    ],
)
def test_bad_entities_are_refused_naming_the_field_and_value(gold, others, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        AnswerIndex(gold, others)


def test_generations_get_their_matches_per_instance():
    """Each row is matched with its own instance's index; an instance without one is refused."""
    from kcal_pipeline.estimation.answer_matching import with_matches

    generations = pl.DataFrame({"instance_id": ["a", "a", "b"], "response": ["USA", "Canada", "USA"]})
    indexes = {"a": AnswerIndex(GOLD, OTHERS), "b": AnswerIndex({"Q16": ["Canada"]}, {"Q30": ["USA"]})}
    got = with_matches(generations, indexes)
    assert got.select("status", "entity_id", "cluster", "correct").rows() == [
        ("correct", "Q30", "Q30", True),
        ("wrong_known_entity", "Q16", "Q16", False),
        ("wrong_known_entity", "Q30", "Q30", False),
    ]
    with pytest.raises(ValueError, match="instance_id 'b': no answer index"):
        with_matches(generations, {"a": indexes["a"]})


def test_a_gold_named_like_another_known_entity_is_still_correct():
    """Namesakes: a name gold Georgia (country) shares with another entity (the US state) is gold."""
    index = AnswerIndex(
        {"Q230": ["Georgia", "Sakartvelo"]}, {"Q1428": ["Georgia", "State of Georgia"], "Q16": ["Canada"]}
    )
    assert index.match("Georgia.") == AnswerMatch("correct", "Q230", "Q230")
    assert index.match("the State of Georgia") == AnswerMatch("wrong_known_entity", "Q1428", "Q1428")
