"""Verbalized confidence (MACE's Verb, Xiong et al. 2024): the model is asked how confident it is and
answers in words; this reads the number out of that answer, or says why it cannot.

The rule: where the answer has a cue word ("confiden…", "certain…", "sure", "probability"), the first
number after the first cue, else the last one before it ("90 percent sure"); without a cue its only
number; several numbers and no such word is ambiguous. A number with "%"
or "percent", or above 1, is a percentage (0–100); one in [0, 1] without it is a probability.
Refusals are counted by reason (NO_NUMBER, AMBIGUOUS, OUT_OF_RANGE), never guessed. The answers
stated beside a confidence (Verb, Verb-Topk) are read by parse_verbal_answer and parse_topk_guesses.
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


# --- Answers stated with a confidence (MACE's Verb and Verb-Topk prompts) ---------------------------

NO_ANSWER = "no_answer"
NO_GUESS = "no_guess"
TOPK_GUESSES = 3  # the guesses the verb_topk prompt asks for (MACE, Xiong et al. 2024: top-k, k = 3)
_ANSWER_CUE = re.compile(r"\banswer\s*:", re.IGNORECASE)
_ANSWER_END = re.compile(r"\n|\bconfidence\b", re.IGNORECASE)
_P = r"(\d+(?:\.\d+)?|\.\d+)\s*(%|percent\b)?"  # a probability: number, then "%" or "percent" or not
# "G1: Martin Perl P1: 60%" (the prompt's form; a guess may span lines), else "1. Martin Perl (60%)".
_TAGGED_GUESS = re.compile(rf"\bG(\d+)\s*:\s*(.*?)\s*\bP\1\s*:\s*{_P}", re.IGNORECASE | re.DOTALL)
_NUMBERED_GUESS = re.compile(rf"^\s*\d+\s*[.)]\s*(.*?)\s*\(\s*{_P}\s*\)", re.IGNORECASE | re.MULTILINE)


def parse_verbal_answer(text: str) -> tuple[str | None, float | None, str | None]:
    """(answer, confidence, None) read from an "Answer: … Confidence: …%" response, or with a refusal
    reason in place of what could not be read (the answer is kept when only the confidence fails).

    The answer: the text after the first "Answer:" (without one, from the start) up to a line break
    or the word "confidence"; empty is NO_ANSWER. The confidence: parse_verbal_confidence on the text
    after the answer, so a number inside the answer (a year) is never read as the confidence."""
    cue = _ANSWER_CUE.search(text)
    start = cue.end() if cue else len(text) - len(text.lstrip())
    end = _ANSWER_END.search(text, start)
    stop = end.start() if end else len(text)
    answer = text[start:stop].strip()
    if not answer:
        return None, None, NO_ANSWER
    confidence, reason = parse_verbal_confidence(text[stop:])
    return answer, confidence, reason


def _probability(number: str, percent: str | None) -> float:
    value = float(number)
    return value / 100 if percent or value > 1 else value


def parse_topk_guesses(text: str, k: int = TOPK_GUESSES) -> tuple[list[tuple[str, float]], str | None]:
    """([(answer, probability), …] for up to the first k guesses in text order, None), or ([], the
    reason): NO_GUESS when neither "G<i>: <answer> P<i>: <p>%" nor "<i>. <answer> (<p>%)" occurs,
    NO_ANSWER when a kept guess has an empty answer, OUT_OF_RANGE when its probability is outside
    [0, 1] (a number with "%" or above 1 is a percentage, as in parse_verbal_confidence)."""
    tagged = [(m.group(2), m.group(3), m.group(4)) for m in _TAGGED_GUESS.finditer(text)]
    found = tagged or [(m.group(1), m.group(2), m.group(3)) for m in _NUMBERED_GUESS.finditer(text)]
    if not found:
        return [], NO_GUESS
    guesses = [(answer.strip(), _probability(number, percent)) for answer, number, percent in found[:k]]
    if any(not answer for answer, _ in guesses):
        return [], NO_ANSWER
    if any(not 0 <= p <= 1 for _, p in guesses):
        return [], OUT_OF_RANGE
    return guesses, None
