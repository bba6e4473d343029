"""When two labels name the same thing for a reader: shared by sampling, probes, contexts and checks.

It sits below all of them (it imports nothing of kcal) so that none has to import another for it.
"""

from __future__ import annotations


def label_key(label: str) -> str:
    """What a reader (or a model) would take to be the same name: case and spacing do not count."""
    return " ".join(label.split()).casefold()
