"""The relation catalog: what is probed, where its facts come from, and its curated templates.

Closed-set relations (BEAR-style) live in data/relations.toml, MACE multi-answer domains in
data/mace.toml. Datasets imported into KCAL_HOME/datasets/*/catalog.toml (`kcal dataset
import-bear`) and a user catalog (KCAL_CATALOG) add entries or replace entries of equal id. Relation
ids become partition keys, so the catalog is read once at start-up.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from kcal_pipeline.core.keys import check_pid, check_qid, check_relation_id
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.dataset.templates import (
    MARKER_VARIANTS,
    OBJECT_SLOT,
    check_marked_template,
    check_template,
    marker_variant_of,
)

DOMAINS = ("closed_set", "mace")
KINDS = ("n_to_1", "n_to_m", "one_to_one", "multi_answer", "rule")
SOURCES = ("sparql", "rule", "bear")
ANSWER_SPACES = ("sampled", "fixed")
PACKAGED = ("data/relations.toml", "data/mace.toml")


@dataclass(frozen=True)
class RelationSpec:
    relation_id: str
    label: str
    kind: str
    object_type: str
    templates: tuple[str, ...]
    property: str | None = None  # the Wikidata property queried (sparql sources)
    subject_type: str | None = None  # class the subject must be an instance of (wdt:P31)
    domain: str = "closed_set"
    source: str = "sparql"
    answer_space: str = "sampled"  # sampled distractors, or one fixed answer space (BEAR 1:1)
    query: str | None = None  # MACE: name of the domain's query/question builder
    data: str | None = None  # bear: the imported facts file
    answer_space_ids: tuple[str, ...] = ()
    answer_space_labels: tuple[str, ...] = ()
    # templates[i] with a [M] slot where a verbal marker goes (templates.MARKER_SLOT); empty =
    # none curated (imported sets), then variants.verbal_marker places it by rule or not at all.
    marked_templates: tuple[str, ...] = ()
    # Question-answer templates, the answer [Y] last (MACE): their ll_answer_sum is
    # log P(answer | question), what answer-conditional estimators (SCA, Token) read.
    questions: tuple[str, ...] = ()
    # Hand-written marker templates of the first template (Kissling's BEAR file), verbatim, and
    # their variant names (templates.MARKER_VARIANTS), pairwise. When given they are the relation's
    # only marker variants (variants.marker_variants); marked_templates then has no use.
    marker_templates: tuple[str, ...] = ()
    marker_variants: tuple[str, ...] = ()
    # BEAR's topic domains of the relation (relation_info.json: Geographic, Biographical, …); a
    # relation may have several. The metrics scope bear_domain splits on them.
    bear_domains: tuple[str, ...] = ()


_REQUIRED = ("label", "kind", "object_type", "templates")
_CHOICES = {"domain": DOMAINS, "kind": KINDS, "source": SOURCES, "answer_space": ANSWER_SPACES}


def parse_entry(rid: str, entry: dict, origin: str) -> RelationSpec:
    """Validate one catalog entry; every error names the relation and the field."""
    check_relation_id(rid, f"relation id in {origin}")
    where = f"{origin} [{rid}]"
    unknown = set(entry) - set(RelationSpec.__dataclass_fields__) - {"relation_id"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    missing = [f for f in _REQUIRED if f not in entry]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    for field, choices in _CHOICES.items():
        if field in entry and entry[field] not in choices:
            raise ValueError(f"{where}: {field} {entry[field]!r} is not one of {choices}")
    if entry.get("source", "sparql") == "sparql":
        if "property" not in entry:
            raise ValueError(f"{where}: missing field(s) property (needed for source 'sparql')")
        check_pid(entry["property"], f"{where} property")
    if entry.get("subject_type") is not None:
        check_qid(entry["subject_type"], f"{where} subject_type")
    templates = entry["templates"]
    if not isinstance(templates, list) or not templates:
        raise ValueError(f"{where}: templates must be a non-empty list")
    if len(set(templates)) != len(templates):
        raise ValueError(f"{where}: duplicate templates")
    for t in templates:
        check_template(t, f"{where} template")
    questions = _questions(entry.get("questions", []), where)
    marked = _marked_templates(entry.get("marked_templates", []), templates, where)
    ids, labels = entry.get("answer_space_ids", []), entry.get("answer_space_labels", [])
    if len(ids) != len(labels):
        raise ValueError(
            f"{where}: answer_space_ids ({len(ids)}) and answer_space_labels ({len(labels)}) differ in length"
        )
    if entry.get("answer_space") == "fixed" and entry.get("source") == "bear" and not ids:
        raise ValueError(f"{where}: a fixed BEAR answer space needs answer_space_ids")
    fields = {k: v for k, v in entry.items() if k != "relation_id"}
    fields.update(templates=tuple(templates), answer_space_ids=tuple(ids), answer_space_labels=tuple(labels))
    fields.update(questions=questions)
    fields.update(marked_templates=marked)
    markers, variants = _explicit_markers(entry, templates, where)
    fields.update(marker_templates=markers, marker_variants=variants)
    fields.update(bear_domains=_string_list(entry.get("bear_domains", []), "bear_domains", where))
    return RelationSpec(relation_id=rid, **fields)


def _string_list(value, field: str, where: str) -> tuple[str, ...]:
    """A list of distinct non-empty strings, or an error naming the field and the value."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: {field} must be a list of non-empty strings, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: {field} has duplicates: {value!r}")
    return tuple(value)


def _explicit_markers(
    entry: dict, templates: list[str], where: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(marker_templates, marker_variants), checked pairwise: each text a template whose content
    says the variant its name claims (templates.marker_variant_of, against the first template),
    each variant once; errors name the field and the index."""
    texts = _string_list(entry.get("marker_templates", []), "marker_templates", where)
    names = _string_list(entry.get("marker_variants", []), "marker_variants", where)
    if len(texts) != len(names):
        raise ValueError(
            f"{where}: marker_templates has {len(texts)} entries but marker_variants has {len(names)}; "
            "give one variant name per marker template, in the same order"
        )
    if texts and entry.get("marked_templates"):
        raise ValueError(
            f"{where}: marker_templates and marked_templates both say where markers go; give one "
            "(marker_templates are the only markers of a relation that has them)"
        )
    for i, (text, name) in enumerate(zip(texts, names, strict=True)):
        if name not in MARKER_VARIANTS:
            raise ValueError(f"{where}: marker_variants[{i}] {name!r} is not one of {list(MARKER_VARIANTS)}")
        at = f"{where} marker_templates[{i}]"
        check_template(text, at)
        if text in templates:
            raise ValueError(f"{at}: {text!r} is one of the templates, not a marked form of one")
        found = marker_variant_of(text, templates[0], at)
        if found != name:
            raise ValueError(
                f"{at}: {text!r} reads as {found or 'no marker'!r} (against the first template "
                f"{templates[0]!r}) but marker_variants[{i}] says {name!r}"
            )
    return texts, names


def _questions(questions, where: str) -> tuple[str, ...]:
    """Question templates: [X] and [Y] once each and nothing but a final period after [Y], so the
    answer's log-probability is conditioned on the whole question."""
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise ValueError(f"{where}: questions must be a list of strings, got {questions!r}")
    if len(set(questions)) != len(questions):
        raise ValueError(f"{where}: duplicate questions")
    for q in questions:
        check_template(q, f"{where} question")
        if not q.removesuffix(".").endswith(OBJECT_SLOT):
            raise ValueError(f"{where} question: {q!r} must end with the answer slot {OBJECT_SLOT}")
    return tuple(questions)


def _marked_templates(marked, templates: list[str], where: str) -> tuple[str, ...]:
    """The marked forms, one per template in the same order (or none); errors name the index."""
    if not isinstance(marked, list) or not all(isinstance(m, str) for m in marked):
        raise ValueError(f"{where}: marked_templates must be a list of strings, got {marked!r}")
    if marked and len(marked) != len(templates):
        raise ValueError(
            f"{where}: marked_templates has {len(marked)} entries but templates has {len(templates)}; "
            "give one marked form per template, in the same order"
        )
    for i, (m, t) in enumerate(zip(marked, templates, strict=False)):
        check_marked_template(m, t, f"{where} marked_templates[{i}]")
    return tuple(marked)


def parse_catalog(data: dict, origin: str = "relations.toml") -> dict[str, RelationSpec]:
    out = {rid: parse_entry(rid, entry, origin) for rid, entry in data.items()}
    if not out:
        raise ValueError(f"{origin}: no relations defined")
    return out


def _read(path_or_resource: str, packaged: bool) -> tuple[dict, str]:
    if packaged:
        return tomllib.loads(
            resources.files("kcal_pipeline.dataset").joinpath(path_or_resource).read_text("utf-8")
        ), path_or_resource.split("/")[-1]
    path = Path(path_or_resource)
    try:
        return tomllib.loads(path.read_text("utf-8")), str(path)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not a valid TOML catalog ({exc}); {_how_to_fix(path)}") from None


def _how_to_fix(path: Path) -> str:
    """What to do about a bad catalog file: imported ones are rebuilt by re-importing."""
    if path.name == "catalog.toml" and path.parent.parent.name == "datasets":
        return (
            "it is written by `kcal dataset import-bear`: re-run the import (with --replace to start "
            "the catalog over), or delete the file to drop the imported relations"
        )
    return "fix the file (KCAL_CATALOG names it), or unset KCAL_CATALOG"


@cache
def load_catalog(path: str | None = None) -> dict[str, RelationSpec]:
    """The packaged catalogs plus KCAL_CATALOG (or `path`), whose entries win on equal ids.

    Within the packaged files a relation id may appear once only: a duplicate is an error, not
    a silent override.
    """
    catalog = merge_catalogs(
        [
            _read(name, packaged=True)
            for name in PACKAGED
            if resources.files("kcal_pipeline.dataset").joinpath(name).is_file()
        ]
    )
    for extra in [*_imported_catalogs(), path or os.environ.get("KCAL_CATALOG")]:
        if extra:
            data, origin = _read(str(extra), packaged=False)
            try:
                catalog.update(parse_catalog(data, origin))
            except ValueError as exc:  # names the file and the relation; add the way out
                raise type(exc)(f"{exc}; {_how_to_fix(Path(origin))}") from exc
    return catalog


def merge_catalogs(parts: list[tuple[dict, str]]) -> dict[str, RelationSpec]:
    """Catalog files that must not overlap: a relation id defined twice is an error naming both files."""
    catalog: dict[str, RelationSpec] = {}
    origins: dict[str, str] = {}
    for data, origin in parts:
        dup = sorted(set(data) & set(catalog))
        if dup:
            raise ValueError(
                f"{origin}: relation id(s) {', '.join(dup)} already defined in "
                f"{', '.join(sorted({origins[d] for d in dup}))}"
            )
        catalog.update(parse_catalog(data, origin))
        origins.update(dict.fromkeys(data, origin))
    return catalog


def _imported_catalogs() -> list[Path]:
    """Catalogs of datasets imported into KCAL_HOME (e.g. `kcal dataset import-bear`)."""
    return sorted((kcal_home() / "datasets").glob("*/catalog.toml"))


def relation_ids() -> list[str]:
    return list(load_catalog())


def get_relation(relation_id: str) -> RelationSpec:
    catalog = load_catalog()
    if relation_id not in catalog:
        raise KeyError(f"unknown relation {relation_id!r}; known: {', '.join(catalog)}")
    return catalog[relation_id]


def relation_label(relation_id: str) -> str:
    """'P36 (capital)': the id with its catalog label, for places that show partition keys (the
    UI, logs); the bare id when the relation has left the catalog."""
    spec = load_catalog().get(relation_id)
    return f"{relation_id} ({spec.label})" if spec is not None else relation_id
