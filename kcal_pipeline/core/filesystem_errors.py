"""One sentence for a store the file system refuses: read-only, not writable by this user, or full.

Such a failure can surface as an OSError with its errno (the store lock, a Parquet write), as an
OSError that carries only the system's text (pyarrow), as SQLite's own words from Dagster's
instance ("database or disk is full", "attempt to write a readonly database", raised through
SQLAlchemy), or as any of these wrapped by Dagster's step and resource errors. `storage_failure`
walks the chain of causes and finds the first; the command line prints `describe` of it instead of
a traceback. Nothing here deletes or repairs anything: kcal's writes are atomic, so a rerun after
the cause is fixed resumes where the failed command stopped.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kcal_pipeline.core.paths import dagster_home

READ_ONLY, NO_PERMISSION, FULL = "read-only", "no permission", "full"
KIND_OF_ERRNO = {
    errno.EROFS: READ_ONLY,
    errno.EACCES: NO_PERMISSION,
    errno.EPERM: NO_PERMISSION,
    errno.ENOSPC: FULL,
    errno.EDQUOT: FULL,
}
# The system's and SQLite's words for them, for errors that carry text only.
KIND_OF_TEXT = {
    os.strerror(errno.EROFS): READ_ONLY,
    "attempt to write a readonly database": READ_ONLY,
    os.strerror(errno.EACCES): NO_PERMISSION,
    os.strerror(errno.ENOSPC): FULL,
    os.strerror(errno.EDQUOT): FULL,
    "database or disk is full": FULL,
}
# Error types whose message may be all there is to go by (text matching is kept to these).
_TEXT_ONLY_MODULES = ("sqlite3", "sqlalchemy", "duckdb", "_duckdb", "pyarrow", "polars")
_MiB = 1024 * 1024


@dataclass(frozen=True)
class StorageFailure:
    kind: str  # READ_ONLY, NO_PERMISSION or FULL
    path: Path  # the file the system named, else the store or Dagster's instance folder
    sqlite: bool  # said by SQLite (Dagster's instance), which names no file


def _causes(error: BaseException):
    """The error, then what caused it, depth first, each once (Dagster keeps the user's error as
    `user_exception` as well as the cause)."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack += [current.__context__, getattr(current, "user_exception", None), current.__cause__]


def _kind_of(error: BaseException) -> str | None:
    if isinstance(error, OSError) and error.errno in KIND_OF_ERRNO:
        return KIND_OF_ERRNO[error.errno]
    module = type(error).__module__.split(".")[0]
    if isinstance(error, OSError | sqlite3.Error) or module in _TEXT_ONLY_MODULES:
        text = str(error)
        return next((kind for words, kind in KIND_OF_TEXT.items() if words in text), None)
    return None


def folder_refusal(folder: Path) -> str | None:
    """READ_ONLY or NO_PERMISSION when `folder` (or its nearest existing parent) cannot be
    written, else None: what SQLite's "unable to open database file" leaves unsaid."""
    for existing in (folder, *folder.parents):
        if existing.exists():
            if os.statvfs(existing).f_flag & os.ST_RDONLY:
                return READ_ONLY
            return None if os.access(existing, os.W_OK | os.X_OK) else NO_PERMISSION
    return None


def storage_failure(error: BaseException, home: Path) -> StorageFailure | None:
    """The file-system refusal behind `error`, if one is (a read-only or full store, no
    permission); `home` is the store, whose Dagster instance SQLite's errors are about."""
    for cause in _causes(error):
        kind = _kind_of(cause)
        if kind is None and _is_sqlite(cause) and "unable to open database file" in str(cause):
            kind = folder_refusal(dagster_home(home))
        if kind is not None:
            named = getattr(cause, "filename", None) if isinstance(cause, OSError) else None
            named = named and _target_of_temporary(Path(named))
            where = Path(named) if named else (home if isinstance(cause, OSError) else dagster_home(home))
            return StorageFailure(kind=kind, path=where, sqlite=_is_sqlite(cause))
    return None


def _target_of_temporary(path: Path) -> Path:
    """The file an atomic write was making (`.<name>.<random>.tmp` beside it), else the path."""
    made = re.fullmatch(r"\.(.+)\.[0-9A-Za-z_]+\.tmp", path.name)
    return path.with_name(made.group(1)) if made else path


def _is_sqlite(error: BaseException) -> bool:
    return isinstance(error, sqlite3.Error) or type(error).__module__.startswith("sqlalchemy")


def free_bytes(path: Path) -> int | None:
    """Free space on the file system of `path` (or of its nearest existing folder)."""
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


def _size(n_bytes: int) -> str:
    if n_bytes >= 1024 * _MiB:
        return f"{n_bytes / 1024 / _MiB:.1f} GiB"
    return f"{n_bytes / _MiB:.1f} MiB" if n_bytes >= _MiB else f"{n_bytes / 1024:.0f} KiB"


def describe(failure: StorageFailure, home: Path) -> str:
    """One line: which path, what the file system refused, what to do."""
    where, instance = failure.path, dagster_home(home)
    if where.is_relative_to(home):
        subject, elsewhere = f"the store {home}", "another --home (or KCAL_HOME)"
    elif where.is_relative_to(instance):
        subject, elsewhere = f"Dagster's instance {instance}", "another DAGSTER_HOME"
    else:
        subject, elsewhere = "that path", "another path"
    said = f"{where}: " + ("Dagster's instance database: " if failure.sqlite else "")
    if failure.kind == READ_ONLY:
        reading = "; kcal sql still reads it" if subject.startswith("the store") else ""
        return f"{said}read-only file system: {subject} cannot be written; give {elsewhere}{reading}"
    if failure.kind == NO_PERMISSION:
        return (
            f"{said}permission denied: {subject} is not writable by this user (uid {os.getuid()}); "
            f"make it writable (chown/chmod) or give {elsewhere}"
        )
    free = free_bytes(where)
    room = "free space unknown" if free is None else f"{_size(free)} free there"
    return (
        f"{said}no space left on the device ({room}): free some space and run the same command "
        "again; it resumes where it stopped (writes are atomic: nothing half-written was kept)"
    )
