"""Data versions: what a materialized partition was computed from, so "up to date" is a comparison.

A partition's data version is a hash of the asset's name and code version, the settings it read
and the data versions of the exact input files it read. It is stored in the Parquet file's
key-value metadata (and shown as materialization metadata in Dagster). A partition is up to date
when a file exists and its stored version equals the version the current code, settings and
inputs would give; a changed setting, a rebuilt input or an interrupted run (no final file) all
make it differ, and nothing else does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import linecache
import textwrap
import types
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow.parquet as pq

DATA_VERSION_KEY = "kcal.data_version"
UNVERSIONED = "unversioned"  # an input file written before data versions existed


def data_version(asset: str, code_version: str | None, settings: Mapping[str, object],
                 inputs: Mapping[str, str]) -> str:  # fmt: skip
    """The version of one partition of `asset`; `inputs` maps each input file (relative to the
    store) to its own data version."""
    payload = {
        "asset": asset,
        "code_version": code_version,
        "settings": {k: settings[k] for k in sorted(settings)},
        "inputs": {k: inputs[k] for k in sorted(inputs)},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def stored_version(path: Path) -> str | None:
    """The data version recorded in a Parquet file; None if the file is missing or unreadable,
    UNVERSIONED if it has none."""
    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError):
        return None
    value = meta.get(DATA_VERSION_KEY.encode())
    return value.decode() if value else UNVERSIONED


def input_versions(home: Path, paths: list[Path]) -> dict[str, str]:
    """{path relative to the store: its data version} of input files that exist."""
    home = Path(home)
    out = {}
    for path in paths:
        version = stored_version(path)
        if version is not None:
            out[str(Path(path).relative_to(home))] = version
    return out


def code_version(own: str, *registries: Mapping[str, object]) -> str:
    """The code version of an asset whose output follows registries (estimators, metrics): `own`
    is the hand version of the asset's own code, the suffix a hash of every registry entry (its
    fields, and the source of each function in it), so registering, changing or removing an
    entry makes the asset stale by itself and no constant needs a hand bump."""
    entries = [[name, _fingerprint(entry)] for registry in registries for name, entry in registry.items()]
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()).hexdigest()
    return f"{own}+{digest[:12]}"


def _fingerprint(value: object, depth: int = 0) -> object:
    """A JSON-able stand-in for `value` that is equal across processes: plain values as they are,
    dataclasses field by field, functions by their source (formatting and comments aside) and the
    values their closures captured; never a memory address."""
    if depth > 6 or isinstance(value, type):
        return getattr(value, "__qualname__", type(value).__qualname__)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _fingerprint(v, depth + 1) for k, v in value.items()}  # json sorts the keys
    if isinstance(value, (tuple, list)):
        return [_fingerprint(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(str(_fingerprint(v, depth + 1)) for v in value)
    if dataclasses.is_dataclass(value):
        return {f.name: _fingerprint(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, functools.partial):
        return [_fingerprint(v, depth + 1) for v in (value.func, value.args, value.keywords)]
    if callable(value):
        return _function_fingerprint(value, depth)
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


def _function_fingerprint(fn: Callable, depth: int) -> object:
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():  # what a function made by a factory captured
        try:
            cells.append(_fingerprint(cell.cell_contents, depth + 1))
        except ValueError:  # an empty cell
            cells.append(None)
    return {"source": _source(fn), "closure": cells}


@functools.cache
def _source(fn: Callable) -> str:
    """The lines that define the function (decorators to its last expression: a comment edit
    counts as a change), read by line numbers rather than with inspect.getsource, whose tokenizer
    would add ~0.3 s to every import of the code location; a callable object's class source; a
    builtin's name."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    lines = linecache.getlines(code.co_filename) if code is not None else []
    if lines:
        codes, last = [code], code.co_firstlineno
        while codes:  # the function's code and the code of every function or lambda inside it
            inner = codes.pop()
            last = max([last, *(end for _, end, _, _ in inner.co_positions() if end)])
            codes += [c for c in inner.co_consts if isinstance(c, types.CodeType)]
        return textwrap.dedent("".join(lines[code.co_firstlineno - 1 : last]))
    try:
        return inspect.getsource(type(fn))
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
