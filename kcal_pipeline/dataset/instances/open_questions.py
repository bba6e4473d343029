"""Open questions (issue 33; MACE's own setting): the question each probe instance is asked without
options, and every name its answers may be given by.

The question is the relation's first question template (the catalog's `questions`, e.g. "Question:
Name one person who received [X].\\nAnswer: [Y]") without its "Question:" label and its answer line,
[X] filled with the instance's subject: "Name one person who received the Nobel Prize in Physics in
1995." Relations without question templates (the closed-set ones) have no open questions; asking
for them is an error that says so.

Names: an entity is known by its label in the probe (gold_labels, option_labels) and in the
relation's facts (object_label), and by the aliases any facts table records for it (BEAR's
sub_aliases, kept in wikidata_facts.qualifiers by the BEAR import). The relation's other entities
are every object its facts and answer spaces know, so a wrong answer that names one is told apart
from an answer that names nothing the store knows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import polars as pl

from kcal_pipeline.dataset.relations import RelationSpec

QUESTION_LABEL = re.compile(r"^\s*Question:\s*", re.IGNORECASE)
ANSWER_LINE = re.compile(r"\s*(?:\n|^)\s*Answer:\s*$", re.IGNORECASE)


def question_text(template: str, subject_label: str) -> str:
    """The question a question template asks about one subject (its label and answer line off)."""
    if template.count("[X]") != 1 or template.count("[Y]") != 1:
        raise ValueError(f"question template {template!r}: needs [X] and [Y] once each")
    before_answer = template.split("[Y]")[0]
    question = ANSWER_LINE.sub("", QUESTION_LABEL.sub("", before_answer)).strip()
    if not question or question == "[X]":
        raise ValueError(f"question template {template!r}: no question before its answer [Y]")
    return question.replace("[X]", subject_label)


def open_questions(spec: RelationSpec, instances: pl.DataFrame) -> pl.DataFrame:
    """instance_id, question: one open question per probe instance (full answer spaces only: a
    `#k` copy asks the same question as its parent)."""
    if not spec.questions:
        raise ValueError(
            f"relation {spec.relation_id!r} has no question template (catalog field `questions`): only "
            "relations that ask questions (the MACE domains) can be asked open questions"
        )
    full = full_answer_spaces(instances)
    return full.select(
        "instance_id",
        question=pl.col("subject_label").map_elements(
            lambda label: question_text(spec.questions[0], label), return_dtype=pl.String
        ),
    ).sort("instance_id")


def full_answer_spaces(instances: pl.DataFrame) -> pl.DataFrame:
    """The instances with their full answer space (not the `#k` copies of the option-count sweep)."""
    if "parent_instance_id" in instances.columns:
        return instances.filter(pl.col("parent_instance_id").is_null())
    return instances


def entity_aliases(facts: Iterable[pl.DataFrame]) -> dict[str, list[str]]:
    """{entity id: aliases} from facts tables whose qualifiers record a subject's aliases (BEAR's
    sub_aliases); other qualifiers are ignored. A malformed qualifier is an error naming the row."""
    aliases: dict[str, list[str]] = {}
    for frame in facts:
        if "qualifiers" not in frame.columns or frame.is_empty():
            continue
        rows = frame.filter(pl.col("qualifiers").str.contains("sub_aliases", literal=True))
        for subject_id, qualifiers in rows.select("subject_id", "qualifiers").iter_rows():
            try:
                found = json.loads(qualifiers).get("sub_aliases", [])
            except (json.JSONDecodeError, AttributeError) as error:
                raise ValueError(
                    f"wikidata_facts.qualifiers of subject {subject_id!r}: not a JSON object ({qualifiers!r})"
                ) from error
            known = aliases.setdefault(subject_id, [])
            known += [a for a in found if isinstance(a, str) and a not in known]
    return aliases


def answer_names(
    instances: pl.DataFrame, facts: pl.DataFrame | None = None, aliases: Mapping[str, list[str]] | None = None
) -> dict[str, tuple[dict[str, list[str]], dict[str, list[str]]]]:
    """{instance_id: (gold {id: names}, others {id: names})}: each entity's labels and aliases; the
    others are every entity of the relation's facts and answer spaces that is not gold."""
    aliases = aliases or {}
    names: dict[str, list[str]] = {}

    def add(entity_id: str, label: str | None) -> None:
        known = names.setdefault(entity_id, [])
        if label and label not in known:
            known.append(label)

    full = full_answer_spaces(instances)
    for column_ids, column_labels in (("gold_ids", "gold_labels"), ("option_ids", "option_labels")):
        for ids, labels in full.select(column_ids, column_labels).iter_rows():
            for entity_id, label in zip(ids or [], labels or [], strict=True):
                add(entity_id, label)
    if facts is not None and not facts.is_empty():
        for entity_id, label in (
            facts.select("object_id", "object_label").unique().sort("object_id").iter_rows()
        ):
            add(entity_id, label)
    for entity_id, known in names.items():
        known += [a for a in aliases.get(entity_id, []) if a not in known]
    result = {}
    for instance_id, gold_ids in full.select("instance_id", "gold_ids").iter_rows():
        gold = {g: names.get(g, []) for g in gold_ids}
        result[instance_id] = (gold, {e: n for e, n in names.items() if e not in gold})
    return result
