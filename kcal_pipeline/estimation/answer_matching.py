"""Open answers to entities: is a generated response a gold answer, another entity the relation
knows, or neither?

MACE (Wang et al.) judges sampled answers with GPT-4o; kcal has no such judge offline, so it matches
by rule (issue 33): a response and every name of an entity (its label and aliases) are normalised
alike (normalise_answer); the response is the entity whose name it mentions first, as a whole-word
run (at one position the longest name wins, so "New York City" beats "New York"). A gold entity is
gold by any of its names, whichever list gave them, and a name that a gold entity shares with
another entity counts as gold. A response that names nobody is unmatched; it clusters by its
normalised text, so two identical unknown answers still count as one meaning (Sem Entropy, SCA).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import polars as pl

MatchStatus = Literal["correct", "wrong_known_entity", "unmatched"]
ARTICLES = frozenset({"a", "an", "the"})
UNMATCHED_CLUSTER = "text:"  # prefix of the cluster of an unmatched response: its normalised text


def normalise_answer(text: str) -> str:
    """Case, accents, punctuation, articles and spacing removed, SQuAD-style, so that "The
    Eiffel-Tower!" and "eiffel tower" are one answer and "Zürich" matches "Zurich"."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = []
    for char in decomposed:
        category = unicodedata.category(char)
        if category == "Mn":  # a combining accent
            continue
        kept.append(" " if category[0] in "PSZC" else char)  # punctuation, symbols, spaces, controls
    return " ".join(word for word in "".join(kept).casefold().split() if word not in ARTICLES)


@dataclass(frozen=True)
class AnswerMatch:
    """What one response was matched to. `cluster` groups responses that mean the same: the
    entity's id, or UNMATCHED_CLUSTER + the normalised text."""

    status: MatchStatus
    entity_id: str | None
    cluster: str


class AnswerIndex:
    """The names of a question's gold entities and of the relation's other entities, normalised
    once, looked up per response by word runs (no scan over every name)."""

    def __init__(self, gold: Mapping[str, Iterable[str]], others: Mapping[str, Iterable[str]] | None = None):
        self._names: dict[str, tuple[bool, str]] = {}
        for is_gold, entities in ((True, gold), (False, others or {})):
            for entity_id, names in entities.items():
                if not isinstance(entity_id, str) or not entity_id:
                    field = "gold" if is_gold else "others"
                    raise ValueError(f"{field}: entity id {entity_id!r} is not a non-empty string")
                if isinstance(names, str):
                    raise ValueError(
                        f"entity {entity_id!r}: names must be a list of strings, got the string {names!r}"
                    )
                for name in names:
                    key = normalise_answer(name)
                    if key and key not in self._names:  # gold first, then the first entity named so
                        self._names[key] = (is_gold or entity_id in gold, entity_id)
        if not any(is_gold for is_gold, _ in self._names.values()):
            raise ValueError(f"gold: no gold entity has a usable name (got {dict(gold)!r})")
        self._longest = max(len(key.split()) for key in self._names)

    def match(self, response: str) -> AnswerMatch:
        """The entity `response` names first (the whole response when it is a name); else unmatched."""
        text = normalise_answer(response)
        words = text.split()
        for start in range(len(words)):
            for length in range(min(self._longest, len(words) - start), 0, -1):
                found = self._names.get(" ".join(words[start : start + length]))
                if found is not None:
                    is_gold, entity_id = found
                    return AnswerMatch("correct" if is_gold else "wrong_known_entity", entity_id, entity_id)
        return AnswerMatch("unmatched", None, UNMATCHED_CLUSTER + text)

    def match_all(self, responses: Iterable[str]) -> list[AnswerMatch]:
        return [self.match(response) for response in responses]


def with_matches(generations: pl.DataFrame, indexes: Mapping[str, AnswerIndex]) -> pl.DataFrame:
    """The generations (scoring/generation.py's rows) with each response's status, entity_id, cluster
    and correct: the input of the generation estimators. `indexes`: the AnswerIndex of every instance."""
    missing = sorted(set(generations["instance_id"]) - set(indexes))
    if missing:
        raise ValueError(
            f"instance_id {missing[0]!r}: no answer index (its gold and known entities) to match against"
        )
    matches = [
        indexes[i].match(r) for i, r in zip(generations["instance_id"], generations["response"], strict=True)
    ]
    return generations.with_columns(
        status=pl.Series([m.status for m in matches], dtype=pl.String),
        entity_id=pl.Series([m.entity_id for m in matches], dtype=pl.String),
        cluster=pl.Series([m.cluster for m in matches], dtype=pl.String),
        correct=pl.Series([m.status == "correct" for m in matches], dtype=pl.Boolean),
    )
