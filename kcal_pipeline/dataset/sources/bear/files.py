"""BEAR's JSON files, read strictly: UTF-8 only, no key given twice, errors naming file and line.

Shared by a directory's metadata, its side files (relation_info.json, bear_lite_indices.json) and a
templates file, so that each is held to the same rules and its errors read the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from kcal_pipeline.dataset.sources.bear.parsed import METADATA, BearFormatError


def _no_duplicate_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise BearFormatError(
            f"duplicate key(s) {', '.join(map(repr, dup))} (a relation id or field given twice)"
        )
    return dict(pairs)


def read_text(path: Path) -> str:
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


def read_json(path: Path) -> object:
    try:
        return json.loads(read_text(path), object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise BearFormatError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except BearFormatError as exc:
        raise BearFormatError(f"{path}: {exc}") from exc


def read_metadata(path: Path) -> dict:
    if not path.is_file():
        raise BearFormatError(f"{path.parent}: missing {METADATA}")
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise BearFormatError(f"{path}: expected a non-empty object mapping relation ids to metadata")
    return data


def beside(root: Path, name: str) -> Path | None:
    """`name` in the directory, else beside it (the BEAR repository's root); None if neither."""
    return next((p for p in (root / name, root.parent / name) if p.is_file()), None)
