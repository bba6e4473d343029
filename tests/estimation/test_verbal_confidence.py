"""Verbalized confidence, and the answers stated beside it, read out of hand-made responses
(kcal_pipeline/estimation/verbal.py)."""

import pytest

from kcal_pipeline.estimation.verbal import (
    AMBIGUOUS,
    NO_ANSWER,
    NO_GUESS,
    NO_NUMBER,
    OUT_OF_RANGE,
    parse_topk_guesses,
    parse_verbal_answer,
    parse_verbal_confidence,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("85%", 0.85),
        ("Confidence: 0.85", 0.85),
        ("I am 90 percent sure.", 0.90),
        ("My confidence is 70/100.", 0.70),
        ("0.3", 0.3),
        ("1", 1.0),  # a probability of 1, not 1 %
        ("40", 0.40),  # above 1: a percentage
        ("Paris, founded in 250 BC. Confidence: 95%", 0.95),  # the number after the cue, not the year
        ("I'm certain: 100%", 1.0),
        ("confidence .5", 0.5),
    ],
)
def test_numbers_are_read_by_hand(text, value):
    got, reason = parse_verbal_confidence(text)
    assert reason is None and got == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I don't know.", NO_NUMBER),
        ("Confidence: high", NO_NUMBER),
        ("Between 60 and 80.", AMBIGUOUS),
        ("Confidence: 150%", OUT_OF_RANGE),
        ("250", OUT_OF_RANGE),
    ],
)
def test_unreadable_answers_are_refused_with_their_reason(text, reason):
    assert parse_verbal_confidence(text) == (None, reason)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Answer: Martin Perl\nConfidence: 80%", ("Martin Perl", 0.8, None)),
        ("answer:  Lyon  confidence 0.9", ("Lyon", 0.9, None)),  # cut at the word, case aside
        ("Answer: 1995\nConfidence: 80%", ("1995", 0.8, None)),  # the year is the answer, not C
        ("Sure. Answer: Lyon\nConfidence: 70%", ("Lyon", 0.7, None)),  # text after "Answer:"
        ("  Paris\n90%", ("Paris", 0.9, None)),  # no "Answer:": the first line
        ("Paris, I think. Confidence: 60 percent", ("Paris, I think.", 0.6, None)),
        ("Answer: Mars\nConfidence: high", ("Mars", None, NO_NUMBER)),  # the answer survives
        ("Answer: Mars\nConfidence: 150%", ("Mars", None, OUT_OF_RANGE)),
        ("Answer: Mars", ("Mars", None, NO_NUMBER)),
        ("Answer:\nConfidence: 80%", (None, None, NO_ANSWER)),
        ("Confidence: 50%", (None, None, NO_ANSWER)),
        ("", (None, None, NO_ANSWER)),
    ],
)
def test_verbal_answers_and_their_confidence_are_read_by_hand(text, parsed):
    assert parse_verbal_answer(text) == pytest.approx(parsed)


@pytest.mark.parametrize(
    ("text", "guesses"),
    [
        (
            "G1: Martin Perl P1: 70%\nG2: Frederick Reines P2: 20%\nG3: Einstein P3: 10%",
            [("Martin Perl", 0.7), ("Frederick Reines", 0.2), ("Einstein", 0.1)],
        ),
        ("G1: Lyon P1: 0.8 G2: Paris P2: 15 percent", [("Lyon", 0.8), ("Paris", 0.15)]),  # one line
        ("G1: Lyon\nP1: 60%", [("Lyon", 0.6)]),  # a guess over two lines
        ("G1: A P1: 40%\nG2: B P2: 30%\nG3: C P3: 20%\nG4: D P4: 10%", [("A", 0.4), ("B", 0.3), ("C", 0.2)]),
        ("1. Martin Perl (80%)\n2) Einstein (0.1)", [("Martin Perl", 0.8), ("Einstein", 0.1)]),  # tolerant
        ("Here: G2: Lyon P2: 50%", [("Lyon", 0.5)]),  # text order, whatever the numbering
    ],
)
def test_topk_guesses_are_read_in_text_order_up_to_k(text, guesses):
    got, reason = parse_topk_guesses(text)
    assert reason is None and got == pytest.approx(guesses)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I don't know.", NO_GUESS),
        ("Martin Perl 80%", NO_GUESS),  # neither form
        ("G1: P1: 50%", NO_ANSWER),
        ("G1: Lyon P1: 150%", OUT_OF_RANGE),
        ("1. Lyon (250)", OUT_OF_RANGE),
    ],
)
def test_unreadable_topk_answers_are_refused_with_their_reason(text, reason):
    assert parse_topk_guesses(text) == ([], reason)


def test_only_the_first_k_guesses_are_checked():
    assert parse_topk_guesses("G1: A P1: 60%\nG2: B P2: 900%", k=1) == ([("A", 0.6)], None)
