"""The relation catalog: which Wikidata properties are probed and with which curated templates."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from kcal_pipeline.keys import check_pid, check_qid, check_relation_id
from kcal_pipeline.templates import check_template

KINDS = ("n_to_1", "n_to_m", "one_to_one", "multi_answer", "rule")


@dataclass(frozen=True)
class RelationSpec:
    relation_id: str
    label: str
    kind: str
    property: str
    object_type: str
    templates: tuple[str, ...]
    subject_type: str | None = None


def parse_catalog(data: dict, origin: str = "relations.toml") -> dict[str, RelationSpec]:
    """Validate a catalog mapping; every error names the relation and the field."""
    out: dict[str, RelationSpec] = {}
    for rid, entry in data.items():
        check_relation_id(rid, f"relation id in {origin}")
        where = f"{origin} [{rid}]"
        missing = [f for f in ("label", "kind", "property", "object_type", "templates") if f not in entry]
        if missing:
            raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
        if entry["kind"] not in KINDS:
            raise ValueError(f"{where}: kind {entry['kind']!r} is not one of {KINDS}")
        check_pid(entry["property"], f"{where} property")
        if entry.get("subject_type") is not None:
            check_qid(entry["subject_type"], f"{where} subject_type")
        templates = entry["templates"]
        if not templates:
            raise ValueError(f"{where}: templates is empty")
        for t in templates:
            check_template(t, f"{where} template")
        out[rid] = RelationSpec(
            relation_id=rid, label=entry["label"], kind=entry["kind"], property=entry["property"],
            object_type=entry["object_type"], templates=tuple(templates),
            subject_type=entry.get("subject_type"),
        )
    if not out:
        raise ValueError(f"{origin}: no relations defined")
    return out


@lru_cache(maxsize=None)
def load_catalog(path: str | None = None) -> dict[str, RelationSpec]:
    """The packaged catalog, or a user's file when a path is given."""
    if path is None:
        text = resources.files("kcal_pipeline").joinpath("data/relations.toml").read_text("utf-8")
        origin = "relations.toml"
    else:
        text = Path(path).read_text("utf-8")
        origin = str(path)
    return parse_catalog(tomllib.loads(text), origin)


def relation_ids() -> list[str]:
    return list(load_catalog())


def get_relation(relation_id: str) -> RelationSpec:
    catalog = load_catalog()
    if relation_id not in catalog:
        raise KeyError(f"unknown relation {relation_id!r}; known: {', '.join(catalog)}")
    return catalog[relation_id]
