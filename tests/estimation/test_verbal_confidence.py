"""Verbalized confidence read out of hand-made answers (kcal_pipeline/estimation/verbal.py)."""

import pytest

from kcal_pipeline.estimation.verbal import AMBIGUOUS, NO_NUMBER, OUT_OF_RANGE, parse_verbal_confidence


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
