"""Running a scorer's batches with out-of-memory recovery, shared by every scorer.

On a GPU the right batch size depends on the statements' lengths and on what else holds memory, so a
configured size can fail part-way. Instead of failing the run, a batch that raises CUDA out-of-memory
is split in half and retried; the smaller size is kept for the rest of the call, and for a token
budget (budget.py) for the rest of the process (the next batches are no wider, since scorers feed the
widest first). A batch of one that still runs out of memory re-raises: nothing smaller exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from kcal_pipeline.scoring.budget import TokenBudget

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
    one = lambda _item: 1  # noqa: E731
    return map_budgeted(items, one, one, TokenBudget.fixed(batch_size, "batch size"), run, progress)


def map_budgeted(
    items: Sequence[T],
    width: Callable[[T], int],
    work: Callable[[T], int],
    budget: TokenBudget,
    run: Callable[[list[T]], list[R]],
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """run() on consecutive slices whose count × width(first item) stays within budget.tokens.

    Items come widest first, so a slice's first item sets its padded width. A slice always holds at
    least one item. Each call's positions, useful work (sum of work(item)) and time go to the budget,
    which may grow (budget.py); an out-of-memory call halves it and is retried. Results come back in
    input order, one per item; progress(done, total) counts items.
    """
    out: list[R] = []
    total, start = len(items), 0
    while start < total:
        step = max(1, width(items[start]))
        batch = list(items[start : start + max(1, min(total - start, budget.tokens // step))])
        began = time.perf_counter()
        try:
            results = run(batch)
        except Exception as exc:
            if not is_oom(exc) or len(batch) == 1:
                raise
            _release_memory()
            budget.after_oom(len(batch) * step, floor=step)
            log.warning(
                "out of memory at %d items (%d positions); retrying with a budget of %d positions",
                len(batch),
                len(batch) * step,
                budget.tokens,
            )
            continue
        if len(results) != len(batch):
            raise RuntimeError(f"batch runner returned {len(results)} results for {len(batch)} items")
        budget.after_call(len(batch) * step, sum(work(item) for item in batch), time.perf_counter() - began)
        out.extend(results)
        start += len(batch)
        if progress is not None:
            progress(start, total)
    return out
