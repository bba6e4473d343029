"""Reading a BEAR directory into a BearDataset: metadata, instance lines, answer spaces, drops.

Decisions: an answer_idx that is out of range or does not point at obj_id is an error, not a
drop — it means the dataset is inconsistent, and guessing which side is right would be silent
data loss. A fact's object label is the answer space's label, so facts and options always agree.
Rows that are merely unusable (empty or id-like subject label, a repeated fact) are counted drops;
they are stored with the kept facts (drop_reason set), so `dropped_facts` and the quality table
show them. A template given twice for one relation is the same probe twice: the first is kept and
the repeat dropped with one warning (the real BEAR repeats one for P103); a repeated answer-space
id stays an error, since it would make two options of one object. Labels are kept exactly as
written — BEAR's own text, non-breaking and doubled spaces included, is what lm-pub-quiz scores.

BEAR-big (the larger release BEAR was selected from) has the same lines without answer_idx and
metadata with templates only. A relation without answer_space_ids gets the distinct objects of its
instances as its answer space, in order of first appearance in the file, each with the label of
that first line — lm-pub-quiz's order, and exactly BEAR's spaces for BEAR's own files. Its lines
may then leave answer_idx out; one that gives it must point at its obj_id in that space (an error
otherwise, as above). A subset (lite.py) keeps some of the lines, and a derived space is then
formed from the kept ones. relation_info.json (BEAR's topic domains per relation) is read when
present, from the directory or beside it.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from kcal_pipeline.core.keys import check_entity_id, check_relation_id
from kcal_pipeline.dataset.sources.bear.files import beside, read_json, read_metadata, read_text
from kcal_pipeline.dataset.sources.bear.lite import checked_indices, read_subset
from kcal_pipeline.dataset.sources.bear.parsed import METADATA, BearDataset, BearFormatError, BearRelation
from kcal_pipeline.dataset.sources.wikidata import looks_like_id
from kcal_pipeline.dataset.templates import check_template

RELATION_INFO = "relation_info.json"
LINE_KEYS = ("sub_id", "sub_label", "sub_aliases", "obj_id", "obj_label", "answer_idx")


def _string_list(entry: dict, field: str, where: str, *, unique: bool = True) -> list[str]:
    value = entry.get(field)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise BearFormatError(f"{where}: {field} must be a non-empty list of non-empty strings")
    if unique and len(set(value)) != len(value):
        raise BearFormatError(f"{where}: {field} has duplicates")
    return value


def _relation_meta(rid: str, entry: object, meta_path: Path) -> dict:
    check_relation_id(rid, f"relation id in {meta_path}")
    where = f"{meta_path} [{rid}]"
    if not isinstance(entry, dict):
        raise BearFormatError(f"{where}: expected an object with templates and the answer space")
    given = _string_list(entry, "templates", where, unique=False)
    for i, text in enumerate(given):
        check_template(text, f"{where} templates[{i}]")
    templates = list(dict.fromkeys(given))  # exact repeats go, the first of each stays in place
    repeated = tuple(text for text, n in Counter(given).items() if n > 1)
    label = entry.get("label")
    meta = {
        "label": label if isinstance(label, str) and label.strip() else rid,
        "templates": tuple(templates),
        "repeated_templates": repeated,
    }
    if "answer_space_ids" not in entry and "answer_space_labels" not in entry:
        # BEAR-big: the space is the instances' objects (_derived_space), known once they are read
        return {**meta, "answer_space_ids": None, "answer_space_labels": None, "derived_space": True}
    ids = _string_list(entry, "answer_space_ids", where)
    labels = entry.get("answer_space_labels")
    if not isinstance(labels, list) or not all(isinstance(v, str) and v.strip() for v in labels):
        raise BearFormatError(f"{where}: answer_space_labels must be a list of non-empty strings")
    if len(ids) != len(labels):
        raise BearFormatError(
            f"{where}: answer_space_ids ({len(ids)}) and answer_space_labels ({len(labels)}) differ in length"
        )
    for i, oid in enumerate(ids):
        check_entity_id(oid, f"{where} answer_space_ids[{i}]")
    return {
        **meta,
        "answer_space_ids": tuple(ids),
        "answer_space_labels": tuple(labels),  # as written: no whitespace folding
    }


def _parse_line(text: str, where: str, ids: tuple[str, ...] | None) -> dict:
    """One line, checked; `ids` None: the space is derived, answer_idx may be absent (checked
    later, against the derived space, by _check_answer_idx)."""
    try:
        line = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BearFormatError(
            f"{where}: malformed or truncated JSON line: {exc.msg} (column {exc.colno})"
        ) from exc
    if not isinstance(line, dict):
        raise BearFormatError(f"{where}: expected a JSON object, got {type(line).__name__}")
    missing = [k for k in LINE_KEYS if k not in line and (k != "answer_idx" or ids is not None)]
    if missing:
        raise BearFormatError(f"{where}: missing key(s) {', '.join(missing)}")
    check_entity_id(line["sub_id"], f"{where} sub_id")
    check_entity_id(line["obj_id"], f"{where} obj_id")
    aliases = line["sub_aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise BearFormatError(f"{where}: sub_aliases must be a list of strings")
    if not isinstance(line["sub_label"], str):
        raise BearFormatError(f"{where}: sub_label must be a string")
    if ids is not None:
        _check_answer_idx(line, where, ids, "answer-space options")
    return line


def _check_answer_idx(line: dict, where: str, ids: tuple[str, ...], what: str) -> None:
    idx = line["answer_idx"]
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(ids):
        raise BearFormatError(f"{where}: answer_idx {idx!r} is not an index into the {len(ids)} {what}")
    if ids[idx] != line["obj_id"]:
        raise BearFormatError(
            f"{where}: answer_idx {idx} points to {ids[idx]} but obj_id is {line['obj_id']}"
        )


def _derived_space(lines: list[tuple[int, dict]], path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(ids, labels): the distinct obj_ids in order of first appearance, each with the obj_label of
    its first line (lm-pub-quiz's answer_space_from_instance_table)."""
    space: dict[str, str] = {}
    for lineno, line in lines:
        if line["obj_id"] in space:
            continue
        label = line.get("obj_label")
        if not isinstance(label, str) or not label.strip():
            raise BearFormatError(
                f"{path}:{lineno}: obj_label {label!r} of {line['obj_id']} must be a non-empty string: "
                f"without answer_space_labels in {METADATA} it is the option's label"
            )
        space[line["obj_id"]] = label
    return tuple(space), tuple(space.values())


def _drop_reason(subject_label: str, seen: set, key: tuple) -> str | None:
    if not subject_label.strip():
        return "missing_label"
    if looks_like_id(subject_label):
        return "label_is_id"
    return "duplicate" if key in seen else None


def _read_facts(
    path: Path, meta: dict, keep: Sequence[int] | None = None
) -> tuple[list[dict], list[dict], dict]:
    """(kept facts, dropped lines, answer space {answer_space_ids, answer_space_labels}) of one
    relation file. `keep`: the 0-based indices of the non-blank lines to keep (a subset); every
    line is still checked. A derived space comes from the kept lines, after each line's
    answer_idx, where given, was checked against the space of the whole file."""
    if not path.is_file():
        raise BearFormatError(f"{path}: missing facts file for a relation in {METADATA}")
    ids, labels = meta["answer_space_ids"], meta["answer_space_labels"]
    # io.StringIO splits lines as a text-mode file does (universal newlines).
    with io.StringIO(read_text(path), newline=None) as fh:
        lines = [
            (lineno, _parse_line(text, f"{path}:{lineno}", ids))
            for lineno, text in enumerate(fh, 1)
            if text.strip()
        ]
    if ids is None:
        whole, _ = _derived_space(lines, path)
        for lineno, line in lines:
            if "answer_idx" in line:
                _check_answer_idx(line, f"{path}:{lineno}", whole, "objects of the file (its answer space)")
    if keep is not None:
        lines = [lines[i] for i in checked_indices(keep, len(lines), path)]
    if ids is None:
        ids, labels = _derived_space(lines, path)
    label_of = dict(zip(ids, labels, strict=True))
    kept, dropped, seen = [], [], set()
    for lineno, line in lines:
        row = {
            "subject_id": line["sub_id"],
            "subject_label": line["sub_label"],  # as written (see the module docstring)
            "object_id": line["obj_id"],
            "object_label": label_of[line["obj_id"]],
            "aliases": tuple(line["sub_aliases"]),
        }
        key = (row["subject_id"], row["object_id"])
        why = _drop_reason(row["subject_label"], seen, key)
        if why:
            dropped.append({**row, "line": lineno, "drop_reason": why})
        else:
            seen.add(key)
            kept.append(row)
    if not kept:
        raise BearFormatError(
            f"{path}: no usable facts ({len(dropped)} line(s) dropped: "
            f"{dict(Counter(d['drop_reason'] for d in dropped))})"
        )
    return kept, dropped, {"answer_space_ids": ids, "answer_space_labels": labels}


def _kind(facts: list[dict]) -> str:
    """one_to_one when no object serves two subjects (BEAR's 1:1 relations), else n_to_1."""
    per_object = Counter(f["object_id"] for f in facts)
    return "one_to_one" if max(per_object.values()) == 1 else "n_to_1"


def read_relation_info(root: Path) -> dict[str, tuple[str, ...]]:
    """BEAR's topic domains per relation id from relation_info.json ({} when there is none):
    {"P6": {"domains": ["Political", …]}, …}; a malformed entry is an error naming it."""
    path = beside(root, RELATION_INFO)
    if path is None:
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise BearFormatError(f"{path}: expected an object mapping relation ids to {{'domains': [...]}}")
    out = {}
    for rid, entry in data.items():
        domains = entry.get("domains") if isinstance(entry, dict) else None
        if not isinstance(domains, list) or not all(isinstance(d, str) and d.strip() for d in domains):
            raise BearFormatError(
                f"{path} [{rid}]: domains must be a list of non-empty strings, got {domains!r}"
            )
        out[rid] = tuple(dict.fromkeys(domains))
    return out


def read_bear(directory: Path | str, subset: str | None = None) -> BearDataset:
    """Read and validate a BEAR directory; raises BearFormatError (or InvalidIdError, TemplateError).
    `subset` ("lite"): only the relations and lines bear_lite_indices.json lists."""
    root = Path(directory)
    if not root.is_dir():
        raise BearFormatError(f"{root}: not a directory")
    meta_path = root / METADATA
    metadata = {rid: _relation_meta(rid, entry, meta_path) for rid, entry in read_metadata(meta_path).items()}
    orphans = sorted(p.name for p in root.glob("*.jsonl") if p.stem not in metadata)
    if orphans:
        raise BearFormatError(f"{root}: {', '.join(orphans)} have no entry in {METADATA}")
    domains = read_relation_info(root)
    keep = read_subset(root, subset, list(metadata)) if subset else None
    relations = {}
    missing = tuple(rid for rid in metadata if not (root / f"{rid}.jsonl").is_file())
    if missing and len(missing) == len(metadata):
        raise BearFormatError(f"{root}: no facts file (<relation>.jsonl) for any relation in {METADATA}")
    for rid, meta in metadata.items():
        if keep is not None and rid not in keep:
            continue  # a BEAR-big relation that is not part of BEAR
        if rid in missing:
            continue  # named by BearDataset.warnings
        kept, dropped, space = _read_facts(root / f"{rid}.jsonl", meta, None if keep is None else keep[rid])
        relations[rid] = BearRelation(
            relation_id=rid,
            kind=_kind(kept),
            facts=tuple(kept),
            dropped=tuple(dropped),
            domains=domains.get(rid, ()),
            **{**meta, **space},
        )
    name = root.resolve().name + (f"-{subset}" if subset else "")
    return BearDataset(name=name, root=root, relations=relations, missing_facts=missing)
