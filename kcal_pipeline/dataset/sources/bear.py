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
from kcal_pipeline.dataset.templates import check_template

METADATA = "metadata_relations.json"
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

    def dropped_counts(self) -> dict[str, int]:
        return dict(Counter(d["drop_reason"] for d in self.dropped))


@dataclass(frozen=True)
class BearDataset:
    name: str
    root: Path
    relations: dict[str, BearRelation]

    def warnings(self) -> list[str]:
        """One line per repeated template that was dropped, naming the relation and the template."""
        return [
            f"warning: {METADATA} [{rid}]: template {text!r} is given more than once; kept the first"
            for rid, rel in self.relations.items()
            for text in rel.repeated_templates
        ]


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


def _read_metadata(path: Path) -> dict:
    if not path.is_file():
        raise BearFormatError(f"{path.parent}: missing {METADATA}")
    text = _read_text(path)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise BearFormatError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except BearFormatError as exc:
        raise BearFormatError(f"{path}: {exc}") from exc
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
    label = entry.get("label")
    return {
        "label": label if isinstance(label, str) and label.strip() else rid,
        "templates": tuple(templates),
        "repeated_templates": repeated,
        "answer_space_ids": tuple(ids),
        "answer_space_labels": tuple(labels),  # as written: no whitespace folding
    }


def _parse_line(text: str, where: str, ids: tuple[str, ...]) -> dict:
    try:
        line = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BearFormatError(
            f"{where}: malformed or truncated JSON line: {exc.msg} (column {exc.colno})"
        ) from exc
    if not isinstance(line, dict):
        raise BearFormatError(f"{where}: expected a JSON object, got {type(line).__name__}")
    missing = [k for k in LINE_KEYS if k not in line]
    if missing:
        raise BearFormatError(f"{where}: missing key(s) {', '.join(missing)}")
    check_entity_id(line["sub_id"], f"{where} sub_id")
    check_entity_id(line["obj_id"], f"{where} obj_id")
    aliases = line["sub_aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise BearFormatError(f"{where}: sub_aliases must be a list of strings")
    if not isinstance(line["sub_label"], str):
        raise BearFormatError(f"{where}: sub_label must be a string")
    idx = line["answer_idx"]
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(ids):
        raise BearFormatError(
            f"{where}: answer_idx {idx!r} is not an index into the {len(ids)} answer-space options"
        )
    if ids[idx] != line["obj_id"]:
        raise BearFormatError(
            f"{where}: answer_idx {idx} points to {ids[idx]} but obj_id is {line['obj_id']}"
        )
    return line


def _drop_reason(subject_label: str, seen: set, key: tuple) -> str | None:
    if not subject_label.strip():
        return "missing_label"
    if looks_like_id(subject_label):
        return "label_is_id"
    return "duplicate" if key in seen else None


def _read_facts(path: Path, meta: dict) -> tuple[list[dict], list[dict]]:
    if not path.is_file():
        raise BearFormatError(f"{path}: missing facts file for a relation in {METADATA}")
    ids, labels = meta["answer_space_ids"], meta["answer_space_labels"]
    kept, dropped, seen = [], [], set()
    # io.StringIO splits lines as a text-mode file does (universal newlines).
    with io.StringIO(_read_text(path), newline=None) as fh:
        for lineno, text in enumerate(fh, 1):
            if not text.strip():
                continue
            line = _parse_line(text, f"{path}:{lineno}", ids)
            row = {
                "subject_id": line["sub_id"],
                "subject_label": line["sub_label"],  # as written (see the module docstring)
                "object_id": line["obj_id"],
                "object_label": labels[line["answer_idx"]],
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
    return kept, dropped


def _kind(facts: list[dict]) -> str:
    """one_to_one when no object serves two subjects (BEAR's 1:1 relations), else n_to_1."""
    per_object = Counter(f["object_id"] for f in facts)
    return "one_to_one" if max(per_object.values()) == 1 else "n_to_1"


def read_bear(directory: Path | str) -> BearDataset:
    """Read and validate a BEAR directory; raises BearFormatError (or InvalidIdError, TemplateError)."""
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
    relations = {}
    for rid, meta in metadata.items():
        kept, dropped = _read_facts(root / f"{rid}.jsonl", meta)
        relations[rid] = BearRelation(
            relation_id=rid, kind=_kind(kept), facts=tuple(kept), dropped=tuple(dropped), **meta
        )
    return BearDataset(name=root.resolve().name, root=root, relations=relations)


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
    """relations.toml entries for the dataset; `data` is each relation's facts parquet."""
    return {
        rid: {
            "label": rel.label,
            "kind": rel.kind,
            "domain": "closed_set",
            "source": "bear",
            "answer_space": "fixed",
            "object_type": rid,
            "templates": list(rel.templates),
            "answer_space_ids": list(rel.answer_space_ids),
            "answer_space_labels": list(rel.answer_space_labels),
            "data": str(Path(facts_dir) / f"{rid}.parquet"),
        }
        for rid, rel in ds.relations.items()
    }


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
) -> tuple[Path, dict[str, Path]]:
    """BEAR directory -> home/datasets/bear/{catalog.toml, facts/<prefix><rel>.parquet}.

    `relations` (BEAR's ids, e.g. P19, or prefixed ones) imports only those; the whole directory is
    still read and checked. Fewer relations mean fewer facts partitions for every later run.

    Relation ids get `prefix` so an imported P19 never replaces the packaged P19 (the catalog
    loader picks up every home/datasets/*/catalog.toml). A second import merges with the first by
    relation id: a relation imported again gets the new entry and facts, the others stay. With
    `replace` the catalog holds only this import's relations and the other facts files go.

    Everything is read and checked (the new directory, the earlier catalog, the merged catalog)
    before anything is written; facts are written before the catalog that points at them, so a
    loaded catalog never names a missing file. Returns the catalog and this import's facts files.
    """
    ds = select_relations(read_bear(directory), relations, prefix)
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
            f"BEAR {rid} -> {new_id}: {len(rel.facts)} facts, {len(rel.answer_space_ids)} options, "
            f"dropped {rel.dropped_counts() or 'none'}"
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
