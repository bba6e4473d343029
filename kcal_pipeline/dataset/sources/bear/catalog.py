"""A read BEAR dataset as relations.toml entries, and the catalog.toml an import writes.

The TOML is written here (strings and lists of strings only, escaped by hand) and checked to read
back to its entries and to be a valid catalog before it is written; an earlier import's catalog is
read back, checked the same way, so a new import can merge with it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from kcal_pipeline.core.keys import check_relation_id
from kcal_pipeline.core.storage import write_text_atomic
from kcal_pipeline.dataset.relations import parse_catalog
from kcal_pipeline.dataset.sources.bear.parsed import BearDataset


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
