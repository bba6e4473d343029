"""Templates: sentences with one [X] (subject) and one [Y] (object) slot, and filling them.

Filling records the character spans of subject and object so that scoring can assign each token
a role (subject, object, template) without re-parsing the text.
"""

from __future__ import annotations

from dataclasses import dataclass

SUBJECT_SLOT = "[X]"
OBJECT_SLOT = "[Y]"
# Where a verbal epistemic marker goes in a template's marked form (METHODS §2): inside the clause,
# never sentence-initially ("[X] [M] died in [Y].", "The capital of [X] is [M] [Y].").
MARKER_SLOT = "[M]"


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
