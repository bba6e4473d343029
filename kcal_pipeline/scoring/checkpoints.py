"""Resumable scoring: a partition is scored in chunks, each saved as it finishes.

Scoring one model × relation can take many minutes. Each finished chunk is written atomically to a
checkpoint folder named after the partition, together with the fingerprint of what is being scored
(statements, weights, options; engine.fingerprint). A run that is killed loses at most the chunk in
progress; the next run with the same fingerprint reads the finished chunks back and scores only the
rest. Chunks are fixed slices of the input order, so a resumed run neither loses nor duplicates a
row; a chunk whose statement ids are not exactly its slice's (a stale or foreign file) is rescored.
A different fingerprint discards every checkpoint of the partition first.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kcal_pipeline.core.storage import partition_path, write_parquet_atomic, write_text_atomic

FINGERPRINT_FILE = "fingerprint.txt"
DEFAULT_CHUNK_SIZE = 1024


@dataclass
class ChunkReport:
    chunks: int = 0
    resumed: int = 0  # chunks read back from an interrupted run
    scored: int = 0


def score_in_chunks(
    statements: pl.DataFrame,
    score: Callable[[pl.DataFrame], pl.DataFrame],
    directory: Path,
    fingerprint: str,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_chunk: Callable[[int, int], None] | None = None,
    key: str = "statement_id",
    rows_per_item: bool = True,
) -> tuple[pl.DataFrame, ChunkReport]:
    """score(chunk) → one row per chunk statement, in order; the result is statements' order.

    on_chunk(done_statements, total) is called after every chunk, resumed ones included. The
    checkpoints stay until `discard` is called, so the caller removes them only once the result is
    safely stored. Other work checkpoints the same way by its own `key` column (open answers: by
    instance_id, with `rows_per_item` false since a question gives several rows, in its order).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if key not in statements.columns:
        raise ValueError(f"the input must have a {key!r} column to checkpoint by")
    directory = Path(directory)
    _claim(directory, fingerprint)
    report, parts = ChunkReport(), []
    total = statements.height
    for index, start in enumerate(range(0, total, chunk_size)):
        chunk = statements.slice(start, chunk_size)
        path = directory / f"chunk-{index:06d}.parquet"
        done = _read_chunk(path, chunk[key], key)
        if done is None:
            done = score(chunk)
            if rows_per_item and done.height != chunk.height:
                raise RuntimeError(f"scorer returned {done.height} rows for a chunk of {chunk.height}")
            done = done.with_columns(chunk[key]) if key not in done.columns else done
            if not _keys_of(done, key).equals(chunk[key], check_names=False):
                raise RuntimeError(f"a chunk's result does not hold exactly its {key}s, in order")
            write_parquet_atomic(done, path)
            report.scored += 1
        else:
            report.resumed += 1
        report.chunks += 1
        parts.append(done)
        if on_chunk is not None:
            on_chunk(min(start + chunk_size, total), total)
    if not parts:
        return score(statements), report
    return pl.concat(parts, how="vertical"), report


# The tables whose partitions are made in checkpointed chunks (scoring/partition.py, open_answers.py).
CHECKPOINTED_TABLES = ("statement_scores", "generations")


def partition_dir(home: Path, table: str, model_key: str, relation: str) -> Path:
    """KCAL_HOME/.checkpoints/<table>/model=…/relation=… (hidden: not a table, no view)."""
    return partition_path(
        Path(home) / ".checkpoints", table, {"model": model_key, "relation": relation}
    ).parent


def discard_partition(home: Path, table: str, partition: Mapping[str, str]) -> None:
    """Drop one partition's checkpoints ({'model': key, 'relation': id}); call it only once the
    partition's final file is written, flushed and renamed (the IO manager does, after its write).

    Until then the checkpoints are the only copy of the work: a failed write (a full disk, a
    kill) leaves them, and the next run resumes from them instead of starting over.
    """
    discard(partition_dir(home, table, partition["model"], partition["relation"]))


def discard(directory: Path) -> None:
    """Remove a partition's checkpoints (after its result is stored)."""
    shutil.rmtree(directory, ignore_errors=True)


def _claim(directory: Path, fingerprint: str) -> None:
    """Keep checkpoints only if they were made for exactly this input."""
    marker = directory / FINGERPRINT_FILE
    try:
        current = marker.read_text(encoding="utf-8").strip()
    except OSError:
        current = None
    if current != fingerprint:
        discard(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(marker, fingerprint + "\n")


def _keys_of(frame: pl.DataFrame, key: str) -> pl.Series:
    """The keys a chunk's result covers, in order (each once, however many rows it has)."""
    return frame[key].unique(maintain_order=True)


def _read_chunk(path: Path, ids: pl.Series, key: str = "statement_id") -> pl.DataFrame | None:
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):
        return None
    if key not in frame.columns or not _keys_of(frame, key).equals(ids, check_names=False):
        return None
    return frame
