"""Templates: sentences with one [X] (subject) and one [Y] (object) slot, and filling them.

Filling records the character spans of subject and object so that scoring can assign each token
a role (subject, object, template) without re-parsing the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SUBJECT_SLOT = "[X]"
OBJECT_SLOT = "[Y]"
# Where a verbal epistemic marker goes in a template's marked form (METHODS §2): inside the clause,
# never sentence-initially ("[X] [M] died in [Y].", "The capital of [X] is [M] [Y].").
MARKER_SLOT = "[M]"
# The epistemic markers (METHODS §2) and the names of their variants: a verbal marker's name is the
# word, a numeric one's "numeric-<percent>" (the marker estimators are named after these).
VERBAL_MARKERS = ("certainly", "possibly")
NUMERIC_LEVELS = (0, 25, 50, 75, 100)
_NUMERIC_MARKER = re.compile(r"\bI'm (\d+)% confident\b")


class TemplateError(ValueError):
    """A template is malformed; the message names where it came from and the text."""


def check_template(text: str, where: str = "template") -> str:
    if not isinstance(text, str) or not text.strip():
        raise TemplateError(f"{where}: empty template {text!r}")
    for slot in (SUBJECT_SLOT, OBJECT_SLOT):
        n = text.count(slot)
        if n != 1:
            raise TemplateError(f"{where}: {text!r} must contain {slot} exactly once (found {n})")
    return text


def check_marked_template(marked: str, template: str, where: str = "marked template") -> str:
    """A template's marked form: the template itself with "[M] " inserted once, not at the start
    (so [X] and [Y] stay exactly once and only the marker's place is chosen)."""
    check_template(marked, where)
    n = marked.count(MARKER_SLOT)
    if n != 1:
        raise TemplateError(f"{where}: {marked!r} must contain {MARKER_SLOT} exactly once (found {n})")
    if marked.startswith(MARKER_SLOT):
        raise TemplateError(f"{where}: {marked!r} puts {MARKER_SLOT} first; a marker goes inside the clause")
    if marked.replace(f"{MARKER_SLOT} ", "", 1) != template:
        raise TemplateError(
            f"{where}: {marked!r} must be its template {template!r} with '{MARKER_SLOT} ' inserted once"
        )
    return marked


def numeric_variant(percent: int) -> str:
    """The variant name of the "I'm {percent}% confident" marker."""
    return f"numeric-{percent}"


MARKER_VARIANTS = (*VERBAL_MARKERS, *(numeric_variant(p) for p in NUMERIC_LEVELS))


def marker_variant_of(text: str, parent: str, where: str = "marker template") -> str | None:
    """Which marker variant a hand-written marker template is, read from its text (Kissling's are
    not always the parent with a word inserted, so the text alone says): "numeric-N" if it says
    "I'm N% confident", the marker word if exactly one of VERBAL_MARKERS is in it as a word and not
    in its parent; None if neither (a paraphrase). Anything else (a level kcal has no estimator
    for, both kinds, both words) is a TemplateError naming `where`."""
    words = set(re.findall(r"[^\W\d_]+", text.casefold()))
    parent_words = set(re.findall(r"[^\W\d_]+", parent.casefold()))
    verbal = [m for m in VERBAL_MARKERS if m in words and m not in parent_words]
    numeric = _NUMERIC_MARKER.findall(text)
    if len(numeric) > 1 or (numeric and verbal) or len(verbal) > 1:
        found = [f"I'm {n}% confident" for n in numeric] + verbal
        raise TemplateError(f"{where}: {text!r} has more than one marker ({', '.join(found)}); give one")
    if numeric:
        level = int(numeric[0])
        if level not in NUMERIC_LEVELS:
            raise TemplateError(
                f"{where}: {text!r} says {level}%, not one of the numeric marker levels {NUMERIC_LEVELS}"
            )
        return numeric_variant(level)
    return verbal[0] if verbal else None


@dataclass(frozen=True)
class Filled:
    text: str
    subject_span: tuple[int, int]
    object_span: tuple[int, int]


def fill(template: str, subject: str, obj: str) -> Filled:
    """Fill both slots in one left-to-right pass so spans stay right whichever slot comes first."""
    check_template(template)
    xs, ys = template.index(SUBJECT_SLOT), template.index(OBJECT_SLOT)
    first, second = sorted([(xs, SUBJECT_SLOT, subject), (ys, OBJECT_SLOT, obj)])
    parts, spans, pos = [], {}, 0
    cursor = 0
    for start, slot, value in (first, second):
        parts.append(template[cursor:start])
        pos += start - cursor
        spans[slot] = (pos, pos + len(value))
        parts.append(value)
        pos += len(value)
        cursor = start + len(slot)
    parts.append(template[cursor:])
    text = "".join(parts)
    return Filled(text, spans[SUBJECT_SLOT], spans[OBJECT_SLOT])
