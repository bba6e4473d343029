"""Running a scorer's batches with out-of-memory recovery, shared by every scorer.

On a GPU the right batch size depends on the statements' lengths and on what else holds memory, so a
configured size can fail part-way. Instead of failing the run, a batch that raises CUDA out-of-memory
is split in half and retried; the smaller size is kept for the rest of the call (the next batches
are no shorter, since scorers feed the longest first). A batch of one that still runs out of memory
re-raises: nothing smaller exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)


def is_oom(exc: BaseException) -> bool:
    """True for the errors a smaller batch can cure: torch's OutOfMemoryError (CUDA, MPS)."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _release_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def map_batches(
    items: Sequence[T],
    batch_size: int,
    run: Callable[[list[T]], list[R]],
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """run() on consecutive slices of at most batch_size items; results concatenated in input order.

    run must return one result per item. progress(done, total) is called after each slice.
    """
    out: list[R] = []
    total, start, size = len(items), 0, batch_size
    while start < total:
        batch = list(items[start : start + size])
        try:
            results = run(batch)
        except Exception as exc:
            if not is_oom(exc) or len(batch) == 1:
                raise
            _release_memory()
            size = max(1, len(batch) // 2)
            log.warning("out of memory at batch size %d; retrying with %d", len(batch), size)
            continue
        if len(results) != len(batch):
            raise RuntimeError(f"batch runner returned {len(results)} results for {len(batch)} items")
        out.extend(results)
        start += len(batch)
        if progress is not None:
            progress(start, total)
    return out
