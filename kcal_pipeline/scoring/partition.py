"""Scoring one model × relation partition: skip if unchanged, resume if interrupted, report progress.

This is what the statement_scores asset does, without Dagster: the asset passes its logger and
gets the frame to store plus the metadata to show in the UI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import polars as pl

from kcal_pipeline.core.progress import ProgressMeter
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.scoring.checkpoints import ChunkReport, discard, partition_dir, score_in_chunks

if TYPE_CHECKING:
    from kcal_pipeline.core.options import ScoringOptions
    from kcal_pipeline.scoring.loaded_model import LoadedModel

TABLE = "statement_scores"
# Statement columns repeated in the scores so estimators and SQL need no join.
CARRIED = [
    "statement_id",
    "instance_id",
    "relation_id",
    "template_id",
    "option_index",
    "object_id",
    "is_gold",
]
FINGERPRINT_COLUMN = "scoring_fingerprint"
# The model's kind as loading resolved it ("clm" or "mlm", never the registry's "auto"): the only
# record of a model's family (causal or masked) that evaluation/families.py can read.
KIND_COLUMN = "model_kind"


@dataclass
class PartitionScores:
    frame: pl.DataFrame
    metadata: dict


def checkpoint_dir(home: Path, model_key: str, relation: str) -> Path:
    """KCAL_HOME/.checkpoints/statement_scores/model=…/relation=…"""
    return partition_dir(home, TABLE, model_key, relation)


def score_partition(
    loaded: LoadedModel,
    model_id: str,
    statements: pl.DataFrame,
    options: ScoringOptions,
    home: Path,
    relation: str,
    chunk_size: int,
    log: Callable[[str], None] | None = None,
    stream: TextIO | None = None,
) -> PartitionScores:
    """Scores of one partition's statements, in their order, with carried statement columns.

    If the stored partition was scored from the same statements, weights, options and scorer
    version (its fingerprint), it is returned as it is and nothing is rescored.
    """
    # torch comes in here, not at import: the code location (every kcal command, run worker and
    # UI process) imports this module and most never score (2 s of a 5 s import).
    from kcal_pipeline.scoring.engine import fingerprint

    print_ = log or (lambda _: None)
    fp = fingerprint(loaded, statements, options)
    stored = partition_path(Path(home), TABLE, {"model": loaded.key, "relation": relation})
    previous = _stored_with(stored, fp)
    meta = _partition_meta(loaded, statements, options, fp)
    directory = checkpoint_dir(home, loaded.key, relation)
    if previous is not None:
        discard(directory)  # the stored file already holds these scores: leftovers are redundant
        print_(f"{relation}: scores are up to date (fingerprint {fp}); nothing rescored")
        # a partition stored before the kind was recorded gets it here, without rescoring
        previous = _with_kind(previous.drop(KIND_COLUMN, strict=False), loaded.kind)
        return PartitionScores(
            previous, {**meta, "rescored": False, "tokens": int(previous["n_tokens"].sum())}
        )
    _say_scoring_choices(loaded, options, relation, print_)
    meter = ProgressMeter(f"scoring {loaded.key} × {relation} ({meta['scorer']}):", log=print_, stream=stream)
    started = time.perf_counter()
    scores, report = _score_resumably(loaded, statements, options, directory, fp, chunk_size, meter)
    elapsed = time.perf_counter() - started
    # The checkpoints stay until the final file is stored: the IO manager discards them after the write.
    if report.resumed:
        print_(f"{relation}: resumed {report.resumed} of {report.chunks} chunks from an interrupted run")
    frame = pl.concat(
        [statements.select(CARRIED), scores.drop("statement_id", strict=False)], how="horizontal"
    ).with_columns(model_id=pl.lit(model_id), **{FINGERPRINT_COLUMN: pl.lit(fp)})
    frame = _with_kind(frame, loaded.kind)
    return PartitionScores(frame, _rescored_meta(meta, frame, report, elapsed, directory, loaded, options))


def _partition_meta(loaded: LoadedModel, statements: pl.DataFrame, options: ScoringOptions, fp: str) -> dict:
    """What any partition's metadata says, rescored or not: statements, device, dtype, revision,
    scorer, fingerprint and the dropout and subject mask used. Refuses dropout on a model without
    dropout and without a rate, before any work."""
    from kcal_pipeline.scoring.engine import refuse_native_dropout, scorer_for
    from kcal_pipeline.scoring.stochastic import dropout_plan

    scorer_name, _ = scorer_for(loaded, options)
    meta = {
        "statements": statements.height,
        "device": str(loaded.device),
        "dtype": loaded.dtype,
        "model_revision": loaded.revision,
        "scorer": scorer_name,
        "fingerprint": fp,
    }
    if options.dropout:  # also refuses a model without dropout and without a rate, before any work
        refuse_native_dropout(loaded)
        plan = dropout_plan(loaded.model, options.dropout_rate)
        meta["dropout"] = f"{options.dropout_passes} passes, {plan.describe()}"
    if options.subject_mask:
        meta["subject_mask"] = (
            "mask tokens" if loaded.kind == "mlm" else f"placeholder {options.placeholder!r}"
        )
    return meta


def _say_scoring_choices(
    loaded: LoadedModel, options: ScoringOptions, relation: str, print_: Callable[[str], None]
) -> None:
    """Log a scoring engine that does not give float32 scores (on every partition it scores), or
    else the prefix-packing decision of a causal LM on the fast path."""
    from kcal_pipeline.scoring.engine import scoring_choices

    choices = scoring_choices(loaded, options)
    if "engine" in choices:  # not float32 scores: say so on every partition it scores
        print_(f"{relation}: {choices['engine']}")
    elif loaded.kind == "clm" and options.fast_path:
        print_(f"{relation}: {choices['packing']}")


def _score_resumably(
    loaded: LoadedModel,
    statements: pl.DataFrame,
    options: ScoringOptions,
    directory: Path,
    fp: str,
    chunk_size: int,
    meter: ProgressMeter,
) -> tuple[pl.DataFrame, ChunkReport]:
    """Score the statements in checkpointed chunks (resuming from the chunks an interrupted run left
    in `directory`), the meter counting statements within and across chunks. Returns
    score_in_chunks' scores and report."""
    from kcal_pipeline.scoring.engine import score_statements

    position = [0]  # statements before the chunk being scored

    def score_chunk(chunk: pl.DataFrame) -> pl.DataFrame:
        def within(done: int, total: int) -> None:
            meter(position[0] + done * chunk.height // max(total, 1), statements.height)

        return score_statements(loaded, chunk, options, progress=within)

    def after_chunk(done: int, total: int) -> None:
        position[0] = done
        meter(done, total)

    return score_in_chunks(
        statements, score_chunk, directory, fp, chunk_size=chunk_size, on_chunk=after_chunk
    )


def _rescored_meta(
    meta: dict,
    frame: pl.DataFrame,
    report: ChunkReport,
    elapsed: float,
    directory: Path,
    loaded: LoadedModel,
    options: ScoringOptions,
) -> dict:
    """The metadata of a partition scored in this run: `meta` with its tokens, chunks (resumed
    ones too), time and rates, checkpoint folder and the scoring choices."""
    from kcal_pipeline.scoring.engine import scoring_choices

    share = report.scored / max(report.chunks, 1)  # rates count this run's work, not resumed chunks
    tokens = int(frame["n_tokens"].sum())
    return {
        **meta,
        "rescored": True,
        "tokens": tokens,
        "chunks": report.chunks,
        "chunks_resumed": report.resumed,
        "seconds": round(elapsed, 1),
        "statements_per_s": round(meta["statements"] * share / max(elapsed, 1e-9), 1),
        "tokens_per_s": round(tokens * share / max(elapsed, 1e-9), 1),
        "checkpoints": str(directory),
        **scoring_choices(loaded, options),
    }


def _with_kind(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The frame with KIND_COLUMN right after model_id."""
    if kind not in ("clm", "mlm"):
        raise ValueError(f"model kind {kind!r}: scoring needs the resolved kind, 'clm' or 'mlm'")
    columns = frame.columns
    at = columns.index("model_id") + 1
    return frame.with_columns(pl.lit(kind, pl.String).alias(KIND_COLUMN)).select(
        *columns[:at], KIND_COLUMN, *columns[at:]
    )


def _stored_with(path: Path, fp: str) -> pl.DataFrame | None:
    if not path.exists():
        return None
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):
        return None
    if FINGERPRINT_COLUMN not in frame.columns or frame.height == 0:
        return None
    return frame if (frame[FINGERPRINT_COLUMN] == fp).all() else None
