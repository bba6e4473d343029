"""What reading a BEAR directory yields: a BearDataset of BearRelation, or a BearFormatError.

Apart from the reading, so that converting, re-templating and importing a dataset depend on its
shape only, not on how its files were read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

METADATA = "metadata_relations.json"


class BearFormatError(ValueError):
    """The directory is not valid BEAR format; the message names file, line or relation, and field."""


@dataclass(frozen=True)
class BearRelation:
    relation_id: str
    label: str
    kind: str
    templates: tuple[str, ...]
    answer_space_ids: tuple[str, ...]
    answer_space_labels: tuple[str, ...]
    facts: tuple[dict, ...]  # kept rows: subject_id, subject_label, object_id, object_label, aliases
    dropped: tuple[dict, ...]  # the same keys plus line and drop_reason
    repeated_templates: tuple[str, ...] = ()  # dropped repeats of a template (the first is kept)
    derived_space: bool = False  # the answer space is the instances' objects (no answer_space_ids)
    domains: tuple[str, ...] = ()  # BEAR's topic domains (relation_info.json)
    marker_templates: tuple[str, ...] = ()  # from a templates file: markers of templates[0]
    marker_variants: tuple[str, ...] = ()  # their variant names, pairwise

    def dropped_counts(self) -> dict[str, int]:
        return dict(Counter(d["drop_reason"] for d in self.dropped))


@dataclass(frozen=True)
class BearDataset:
    name: str
    root: Path
    relations: dict[str, BearRelation]
    # metadata entries without a <relation>.jsonl: the published BEAR-big lists P414 and ships no
    # P414.jsonl; lm-pub-quiz's loader skips such an entry, and so does kcal, saying so.
    missing_facts: tuple[str, ...] = ()

    def warnings(self) -> list[str]:
        """One line per repeated template that was dropped, naming the relation and the template,
        and one per metadata entry without a facts file, then their count."""
        lines = [
            f"warning: {METADATA} [{rid}]: template {text!r} is given more than once; kept the first"
            for rid, rel in self.relations.items()
            for text in rel.repeated_templates
        ]
        lines += [
            f"warning: {METADATA} [{rid}]: no {rid}.jsonl in {self.root}: relation skipped"
            for rid in self.missing_facts
        ]
        if self.missing_facts:
            lines.append(
                f"warning: {len(self.missing_facts)} relation(s) of {METADATA} without a facts file "
                f"skipped; {len(self.relations)} read"
            )
        return lines
