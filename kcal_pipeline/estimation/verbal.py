"""Verbalized confidence (MACE's Verb, Xiong et al. 2024): the model is asked how confident it is and
answers in words; this reads the number out of that answer, or says why it cannot.

The rule: where the answer has a cue word ("confiden…", "certain…", "sure", "probability"), the first
number after the first cue, else the last one before it ("90 percent sure"); without a cue its only
number; several numbers and no such word is ambiguous. A number with "%"
or "percent", or above 1, is a percentage (0–100); one in [0, 1] without it is a probability.
Refusals are counted by reason (NO_NUMBER, AMBIGUOUS, OUT_OF_RANGE), never guessed.
"""

from __future__ import annotations

import re

NO_NUMBER = "no_number"
AMBIGUOUS = "ambiguous"
OUT_OF_RANGE = "out_of_range"
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%|percent\b|/\s*100\b)?", re.IGNORECASE)
_CUE = re.compile(r"confiden|certain|\bsure\b|probability", re.IGNORECASE)


def parse_verbal_confidence(text: str) -> tuple[float | None, str | None]:
    """(confidence in [0, 1], None), or (None, the reason it could not be read)."""
    cue = _CUE.search(text)
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return None, NO_NUMBER
    if cue is None:
        if len({m.group(1) for m in numbers}) > 1:
            return None, AMBIGUOUS
        number = numbers[0]
    else:
        after = [m for m in numbers if m.start() >= cue.end()]
        number = after[0] if after else [m for m in numbers if m.end() <= cue.start()][-1]
    value = float(number.group(1))
    if number.group(2) or value > 1:
        value /= 100
    if not 0 <= value <= 1:
        return None, OUT_OF_RANGE
    return value, None
