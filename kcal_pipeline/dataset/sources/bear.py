"""Import of a BEAR-format dataset into kcal's catalog and facts tables.

A BEAR directory holds metadata_relations.json (relation id -> templates, answer_space_ids,
answer_space_labels) and one `<relation id>.jsonl` per relation (sub_id, sub_label, sub_aliases,
obj_id, obj_label, answer_idx per line). Everything is validated before anything is written, and
every error names the file, the line or relation, and the field.

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
otherwise, as above). `subset="lite"` keeps the relations and lines that bear_lite_indices.json
lists (0-based indices of a file's non-blank lines; BEAR is exactly that selection of BEAR-big),
and a derived space is then formed from the kept lines, as lm-pub-quiz's filter_subset does.
relation_info.json (BEAR's topic domains per relation) is read when present. Both JSON files are
looked for in the directory, then beside it (the BEAR repository keeps them at its root, next to
BEAR/ and BEAR-big/).

A templates file (import_bear's `templates`; Kissling et al.'s metadata_relations.json) replaces
each imported relation's templates: its paraphrases become the curated templates in file order,
its marker templates the relation's explicit markers of the first paraphrase (relations.py
marker_templates), classified by their text (templates.marker_variant_of). Its answer space must
be the directory's, relation by relation.
"""

from __future__ import annotations

import hashlib
import io
import json
import tomllib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import replace as with_fields
from pathlib import Path

import polars as pl

from kcal_pipeline.core.keys import check_entity_id, check_relation_id
from kcal_pipeline.core.storage import write_parquet_atomic, write_text_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY
from kcal_pipeline.dataset.relations import parse_catalog
from kcal_pipeline.dataset.sources.wikidata import looks_like_id
from kcal_pipeline.dataset.templates import check_template, marker_variant_of

METADATA = "metadata_relations.json"
RELATION_INFO = "relation_info.json"
LITE_INDICES = "bear_lite_indices.json"
SUBSETS = ("lite",)
LINE_KEYS = ("sub_id", "sub_label", "sub_aliases", "obj_id", "obj_label", "answer_idx")
BEAR_FACT_SCHEMA = {
    "relation_id": pl.Utf8,
    "subject_id": pl.Utf8,
    "subject_label": pl.Utf8,
    "object_id": pl.Utf8,
    "object_label": pl.Utf8,
    "qualifiers": pl.Utf8,
    "source": pl.Utf8,
    "retrieved_at": pl.Utf8,
}
STORED_SCHEMA = {**BEAR_FACT_SCHEMA, "drop_reason": pl.Utf8}  # a facts file: kept rows have no reason


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


# --- reading -----------------------------------------------------------------------------------


def _no_duplicate_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise BearFormatError(
            f"duplicate key(s) {', '.join(map(repr, dup))} (a relation id or field given twice)"
        )
    return dict(pairs)


def _read_text(path: Path) -> str:
    """The file as text; a byte that is not UTF-8 is an error naming the file, line and column."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise BearFormatError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); BEAR files "
            "are UTF-8: convert the file (e.g. `iconv -f latin1 -t utf-8`), then re-run "
            "`kcal dataset import-bear`"
        ) from None


def _read_json(path: Path) -> object:
    try:
        return json.loads(_read_text(path), object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise BearFormatError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except BearFormatError as exc:
        raise BearFormatError(f"{path}: {exc}") from exc


def _read_metadata(path: Path) -> dict:
    if not path.is_file():
        raise BearFormatError(f"{path.parent}: missing {METADATA}")
    data = _read_json(path)
    if not isinstance(data, dict) or not data:
        raise BearFormatError(f"{path}: expected a non-empty object mapping relation ids to metadata")
    return data


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
    with io.StringIO(_read_text(path), newline=None) as fh:
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
        lines = [lines[i] for i in _checked_indices(keep, len(lines), path)]
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


def _checked_indices(keep: Sequence[int], n_lines: int, path: Path) -> list[int]:
    """The subset's line indices, ascending (file order); one out of range or given twice is an
    error naming the relation's file and the index."""
    where = f"{LITE_INDICES} [{path.stem}]"
    for i in keep:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_lines:
            raise BearFormatError(
                f"{where}: index {i!r} is not a line of {path} ({n_lines} instance lines, indices 0 to "
                f"{n_lines - 1})"
            )
    repeated = sorted(i for i, n in Counter(keep).items() if n > 1)
    if repeated:
        raise BearFormatError(f"{where}: index {repeated[0]} is listed more than once")
    return sorted(keep)


def _kind(facts: list[dict]) -> str:
    """one_to_one when no object serves two subjects (BEAR's 1:1 relations), else n_to_1."""
    per_object = Counter(f["object_id"] for f in facts)
    return "one_to_one" if max(per_object.values()) == 1 else "n_to_1"


def _beside(root: Path, name: str) -> Path | None:
    """`name` in the directory, else beside it (the BEAR repository's root); None if neither."""
    return next((p for p in (root / name, root.parent / name) if p.is_file()), None)


def read_relation_info(root: Path) -> dict[str, tuple[str, ...]]:
    """BEAR's topic domains per relation id from relation_info.json ({} when there is none):
    {"P6": {"domains": ["Political", …]}, …}; a malformed entry is an error naming it."""
    path = _beside(root, RELATION_INFO)
    if path is None:
        return {}
    data = _read_json(path)
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


def read_subset(root: Path, subset: str, relation_ids: Sequence[str]) -> dict[str, list]:
    """The lines a subset keeps, per relation: bear_lite_indices.json for "lite". A relation it
    lists that the directory lacks is an error (the file belongs to another release)."""
    if subset not in SUBSETS:
        raise ValueError(f"--subset {subset!r} is not one of {list(SUBSETS)}")
    path = _beside(root, LITE_INDICES)
    if path is None:
        raise BearFormatError(
            f"--subset lite needs {LITE_INDICES} (per relation, the 0-based lines of BEAR-big that make "
            f"up BEAR) in {root} or {root.parent}; it is in neither"
        )
    data = _read_json(path)
    if not isinstance(data, dict) or not data:
        raise BearFormatError(
            f"{path}: expected a non-empty object mapping relation ids to lists of line indices"
        )
    for rid, indices in data.items():
        if not isinstance(indices, list):
            raise BearFormatError(f"{path} [{rid}]: expected a list of line indices, got {indices!r}")
        if rid not in relation_ids:
            raise BearFormatError(f"{path} [{rid}]: no such relation in {root / METADATA}")
    return data


def read_bear(directory: Path | str, subset: str | None = None) -> BearDataset:
    """Read and validate a BEAR directory; raises BearFormatError (or InvalidIdError, TemplateError).
    `subset` ("lite"): only the relations and lines bear_lite_indices.json lists."""
    root = Path(directory)
    if not root.is_dir():
        raise BearFormatError(f"{root}: not a directory")
    meta_path = root / METADATA
    metadata = {
        rid: _relation_meta(rid, entry, meta_path) for rid, entry in _read_metadata(meta_path).items()
    }
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


# --- converting --------------------------------------------------------------------------------


def _fact_rows(ds: BearDataset, rows_of: Callable[[BearRelation], tuple[dict, ...]]) -> list[dict]:
    return [
        {
            "relation_id": rel.relation_id,
            "subject_id": r["subject_id"],
            "subject_label": r["subject_label"],
            "object_id": r["object_id"],
            "object_label": r["object_label"],
            "qualifiers": json.dumps({"sub_aliases": list(r["aliases"])}, ensure_ascii=False),
            "source": f"bear:{ds.name}",
            "retrieved_at": None,
            **({"drop_reason": r["drop_reason"]} if "drop_reason" in r else {}),
        }
        for rel in ds.relations.values()
        for r in rows_of(rel)
    ]


def facts_frame(ds: BearDataset) -> pl.DataFrame:
    """The kept facts of every relation, in the facts-table layout, sorted."""
    return pl.DataFrame(_fact_rows(ds, lambda rel: rel.facts), schema=BEAR_FACT_SCHEMA).sort(
        ["relation_id", "subject_id", "object_id"]
    )


def dropped_frame(ds: BearDataset) -> pl.DataFrame:
    """The dropped lines, same layout plus drop_reason, for the quality report."""
    return pl.DataFrame(_fact_rows(ds, lambda rel: rel.dropped), schema=STORED_SCHEMA)


def stored_frame(ds: BearDataset) -> pl.DataFrame:
    """What an import stores per relation: the kept facts (drop_reason null), then the dropped
    lines with their reason, so the facts and their drops are written together or not at all."""
    kept = facts_frame(ds).with_columns(drop_reason=pl.lit(None, pl.Utf8))
    return pl.concat([kept, dropped_frame(ds)]).sort(
        ["relation_id", "drop_reason", "subject_id", "object_id"], nulls_last=False, maintain_order=True
    )


def split_stored(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept facts, dropped lines) of a stored facts file; a file imported before drops were stored
    has no drop_reason column and no dropped lines."""
    if "drop_reason" not in frame.columns:
        return frame, pl.DataFrame(schema={**frame.schema, "drop_reason": pl.Utf8})
    dropped = pl.col("drop_reason").is_not_null()
    return frame.filter(~dropped).drop("drop_reason"), frame.filter(dropped)


def content_version(frame: pl.DataFrame) -> str:
    """A hash of a stored facts file's rows: its data version, so a re-import that changes facts
    (and nothing in the catalog entry) still makes the relation's facts stale."""
    rows = json.dumps([frame.columns, frame.rows()], ensure_ascii=False, default=str)
    return hashlib.sha256(rows.encode()).hexdigest()[:20]


def catalog_entries(ds: BearDataset, facts_dir: Path | str) -> dict[str, dict]:
    """relations.toml entries for the dataset; `data` is each relation's facts parquet. Explicit
    markers and BEAR domains only where the relation has them, so a plain import's entries stay
    as they were."""
    return {
        rid: {
            "label": rel.label,
            "kind": rel.kind,
            "domain": "closed_set",
            "source": "bear",
            "answer_space": "fixed",
            "object_type": rid,
            "templates": list(rel.templates),
            **({"marker_templates": list(rel.marker_templates)} if rel.marker_templates else {}),
            **({"marker_variants": list(rel.marker_variants)} if rel.marker_variants else {}),
            "answer_space_ids": list(rel.answer_space_ids),
            "answer_space_labels": list(rel.answer_space_labels),
            **({"bear_domains": list(rel.domains)} if rel.domains else {}),
            "data": str(Path(facts_dir) / f"{rid}.parquet"),
        }
        for rid, rel in ds.relations.items()
    }


# --- a templates file (Kissling et al.'s) --------------------------------------------------------


def split_templates(
    rid: str, given: list[str], where: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(paraphrases, marker templates, their variant names) of one relation's templates, in file
    order, each classified by its text against the first template (templates.marker_variant_of).
    Paraphrases must come first and every variant at most once; errors name the index."""
    if not given:
        raise BearFormatError(f"{where}: templates is empty")
    paraphrases, markers, first = [], [], {}  # first: variant name -> its index
    for i, text in enumerate(given):
        at = f"{where} templates[{i}]"
        check_template(text, at)
        if text in given[:i]:
            raise BearFormatError(f"{at}: {text!r} repeats templates[{given.index(text)}]")
        variant = marker_variant_of(text, given[0], at)
        if variant is None and markers:
            raise BearFormatError(
                f"{at}: {text!r} has no marker but follows the marker templates; give the paraphrases "
                "first, then the markers of the first one"
            )
        if variant is not None and i == 0:
            raise BearFormatError(
                f"{at}: {text!r} is a marker template; the first template must be a paraphrase"
            )
        if variant in first:
            raise BearFormatError(
                f"{at}: a second {variant!r} marker template (the first is templates[{first[variant]}])"
            )
        if variant is None:
            paraphrases.append(text)
        else:
            markers.append(text)
            first[variant] = i
    return tuple(paraphrases), tuple(markers), tuple(first)


def with_templates_file(ds: BearDataset, path: Path | str) -> BearDataset:
    """`ds` with each relation's templates from a templates file in BEAR's metadata format (e.g.
    Kissling et al.'s: 5 paraphrases, then "possibly", "certainly" and 0 … 100 % markers): the
    paraphrases replace the relation's templates, the markers become its explicit markers. The
    file must have every relation of `ds`, with the same answer space (ids and labels, in order);
    relations it has beyond those are ignored."""
    path = Path(path)
    if not path.is_file():
        raise BearFormatError(f"{path}: no such templates file")
    data = _read_metadata(path)
    relations = {}
    for rid, rel in ds.relations.items():
        where = f"{path} [{rid}]"
        entry = data.get(rid)
        if not isinstance(entry, dict):
            raise BearFormatError(
                f"{where}: the templates file has no entry for relation {rid}, which is being imported"
                if entry is None
                else f"{where}: expected an object with templates and the answer space"
            )
        for field in ("answer_space_ids", "answer_space_labels"):
            theirs, ours = entry.get(field), list(getattr(rel, field))
            if theirs != ours:
                if not isinstance(theirs, list):
                    detail = f"the templates file gives {theirs!r}"
                else:
                    at = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), None)
                    detail = (
                        f"first difference at [{at}]: {theirs[at]!r} there, {ours[at]!r} here"
                        if at is not None
                        else f"{len(theirs)} entries there, {len(ours)} here"
                    )
                raise BearFormatError(
                    f"{where}: {field} differs from the imported directory's {ds.root / METADATA} "
                    f"({detail}); a templates file must probe the same answer space"
                )
        given = entry.get("templates")
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise BearFormatError(f"{where}: templates must be a list of strings")
        paraphrases, markers, names = split_templates(rid, given, where)
        relations[rid] = with_fields(
            rel, templates=paraphrases, marker_templates=markers, marker_variants=names, repeated_templates=()
        )
    return with_fields(ds, relations=relations)


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, the rest verbatim."""
    out = []
    for ch in text:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: object, where: str) -> str:
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[\n" + "".join(f"    {toml_string(v)},\n" for v in value) + "]"
    raise TypeError(
        f"{where}: cannot write {type(value).__name__} to the catalog (strings and lists of strings only)"
    )


def catalog_toml(entries: dict[str, dict]) -> str:
    parts = ["# Written by `kcal dataset import-bear`; re-import instead of editing.\n"]
    for rid, entry in entries.items():
        check_relation_id(rid)  # so the bare table key [rid] is valid TOML
        parts.append(f"\n[{rid}]\n")
        parts += [f"{key} = {_toml_value(value, f'[{rid}] {key}')}\n" for key, value in entry.items()]
    return "".join(parts)


def checked_catalog_toml(entries: dict[str, dict], path: Path | str) -> str:
    """The catalog text, after checking it reads back to `entries` and is a valid catalog."""
    text = catalog_toml(entries)
    if tomllib.loads(text) != entries:
        raise RuntimeError(f"{path}: catalog TOML does not read back to the entries written")
    parse_catalog(tomllib.loads(text), str(path))
    return text


def write_catalog_toml(entries: dict[str, dict], path: Path | str) -> Path:
    """Write atomically, after checking the text reads back to `entries` and is a valid catalog."""
    return write_text_atomic(Path(path), checked_catalog_toml(entries, path))


def imported_entries(path: Path) -> dict[str, dict]:
    """The entries of an earlier import's catalog.toml ({} when there is none), validated; a
    catalog that cannot be read is an error naming it and the way out (--replace)."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text("utf-8"))
        parse_catalog(data, str(path))
        catalog_toml(data)  # only what this module writes: strings and lists of strings
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError, TypeError) as exc:
        reason = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        raise ValueError(
            f"{reason}; cannot merge the new relations into it: re-run `kcal dataset import-bear` "
            "with --replace (the catalog then holds only the relations of this import)"
        ) from None
    return data


def select_relations(ds: BearDataset, relations: Sequence[str], prefix: str) -> BearDataset:
    """`ds` with only `relations` (BEAR's ids, or with the import prefix); all of it when empty."""
    if not relations:
        return ds
    wanted = [r.removeprefix(prefix) if r not in ds.relations else r for r in relations]
    unknown = [given for given, rid in zip(relations, wanted, strict=True) if rid not in ds.relations]
    if unknown:
        raise ValueError(
            f"--relation {', '.join(unknown)}: not in {ds.root}; it has {', '.join(ds.relations)}"
        )
    return with_fields(ds, relations={rid: ds.relations[rid] for rid in dict.fromkeys(wanted)})


def import_bear(
    directory: Path | str,
    home: Path | str,
    prefix: str = "bear-",
    log: Callable[[str], None] = print,
    replace: bool = False,
    relations: Sequence[str] = (),
    templates: Path | str | None = None,
    subset: str | None = None,
) -> tuple[Path, dict[str, Path]]:
    """BEAR directory -> home/datasets/bear/{catalog.toml, facts/<prefix><rel>.parquet}.

    `relations` (BEAR's ids, e.g. P19, or prefixed ones) imports only those; the whole directory is
    still read and checked. Fewer relations mean fewer facts partitions for every later run.
    `subset` ("lite"): only the lines bear_lite_indices.json lists (BEAR out of BEAR-big).
    `templates`: a templates file (with_templates_file) whose paraphrases and markers replace the
    directory's templates of every imported relation.

    Relation ids get `prefix` so an imported P19 never replaces the packaged P19 (the catalog
    loader picks up every home/datasets/*/catalog.toml). A second import merges with the first by
    relation id: a relation imported again gets the new entry and facts, the others stay. With
    `replace` the catalog holds only this import's relations and the other facts files go.

    Everything is read and checked (the new directory, the earlier catalog, the merged catalog)
    before anything is written; facts are written before the catalog that points at them, so a
    loaded catalog never names a missing file. Returns the catalog and this import's facts files.
    """
    ds = select_relations(read_bear(directory, subset=subset), relations, prefix)
    if templates is not None:
        ds = with_templates_file(ds, templates)
    for warning in ds.warnings():
        log(warning)
    base = Path(home) / "datasets" / "bear"
    catalog = base / "catalog.toml"
    new = {
        check_relation_id(prefix + rid, "prefixed BEAR relation id"): {
            **entry,
            "object_type": prefix + rid,
            "data": str(base / "facts" / f"{prefix}{rid}.parquet"),
        }
        for rid, entry in catalog_entries(ds, base / "facts").items()
    }
    earlier = {} if replace else imported_entries(catalog)
    # Earlier relations keep their place (a re-imported one gets its new entry there); new ones follow.
    entries = {rid: new.get(rid, entry) for rid, entry in earlier.items()} | new
    text = checked_catalog_toml(entries, catalog)
    facts = stored_frame(ds).with_columns(relation_id=pl.lit(prefix) + pl.col("relation_id"))
    paths = {}
    for rid, rel in ds.relations.items():
        new_id = prefix + rid
        paths[new_id] = base / "facts" / f"{new_id}.parquet"
        frame = facts.filter(pl.col("relation_id") == new_id)
        write_parquet_atomic(frame, paths[new_id], metadata={DATA_VERSION_KEY: content_version(frame)})
        log(
            f"BEAR {rid} -> {new_id}: {len(rel.facts)} facts, {len(rel.answer_space_ids)} options"
            + (" (the objects of its instances)" if rel.derived_space else "")
            + (
                f", {len(rel.templates)} templates + {len(rel.marker_templates)} markers"
                if rel.marker_templates
                else ""
            )
            + f", dropped {rel.dropped_counts() or 'none'}"
        )
    write_text_atomic(catalog, text)
    replaced = [rid for rid in new if rid in earlier]
    kept = [rid for rid in earlier if rid not in new]
    if replaced:
        log(
            f"replaced {', '.join(replaced)}: catalog entr{'ies' if len(replaced) > 1 else 'y'} and facts "
            f"now come from {Path(directory)}"
            + (f"; kept {', '.join(kept)} from the earlier import" if kept else "")
        )
    elif kept:
        log(f"merged with the earlier import: kept {', '.join(kept)}")
    if replace:
        stale = sorted(p for p in (base / "facts").glob("*.parquet") if p not in paths.values())
        for path in stale:  # after the catalog stopped naming them
            path.unlink()
        if stale:
            log(f"--replace: removed {len(stale)} earlier relation(s): {', '.join(p.stem for p in stale)}")
    return catalog, paths
