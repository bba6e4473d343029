"""The lite subset: BEAR is a selection of BEAR-big's lines, listed by bear_lite_indices.json.

`subset="lite"` keeps the relations and lines that bear_lite_indices.json lists (0-based indices
of a file's non-blank lines; BEAR is exactly that selection of BEAR-big), and a derived space is
then formed from the kept lines, as lm-pub-quiz's filter_subset does (reading.py). The file is
looked for in the directory, then beside it (the BEAR repository keeps it at its root, next to
BEAR/ and BEAR-big/).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from kcal_pipeline.dataset.sources.bear.files import beside, read_json
from kcal_pipeline.dataset.sources.bear.parsed import METADATA, BearFormatError

LITE_INDICES = "bear_lite_indices.json"
SUBSETS = ("lite",)


def read_subset(root: Path, subset: str, relation_ids: Sequence[str]) -> dict[str, list]:
    """The lines a subset keeps, per relation: bear_lite_indices.json for "lite". A relation it
    lists that the directory lacks is an error (the file belongs to another release)."""
    if subset not in SUBSETS:
        raise ValueError(f"--subset {subset!r} is not one of {list(SUBSETS)}")
    path = beside(root, LITE_INDICES)
    if path is None:
        raise BearFormatError(
            f"--subset lite needs {LITE_INDICES} (per relation, the 0-based lines of BEAR-big that make "
            f"up BEAR) in {root} or {root.parent}; it is in neither"
        )
    data = read_json(path)
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


def checked_indices(keep: Sequence[int], n_lines: int, path: Path) -> list[int]:
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
