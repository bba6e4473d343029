"""Many samples evaluated at once: the vectorised core under every metric and curve.

A metrics table holds tens of thousands of small samples — one per (model, estimator, reduction,
split, answer space) × breakdown scope, or per template — each a few dozen to a few thousand
(confidence, correct) pairs. Computing a metric sample by sample costs a Python call, an argsort
and a handful of numpy temporaries each; `Segments` lays all samples end to end in two arrays
(sample s is rows starts[s] … starts[s] + sizes[s] − 1, in the order a metric reads them) and every
batched metric computes all samples in a few whole-array passes (bincount, lexsort, cumsum).

The per-sample functions registered with each metric stay the definitions; each batched function
is tested to equal them sample by sample (tests/evaluation/test_batched_metrics.py), including
the tie order a stable sort gives and the exact quantile bin edges np.percentile gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


def in_threads(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """fn(item) for every item, in order, on one thread per CPU: for work that is numpy or scipy.fft
    on large arrays, which runs outside the GIL (a pure-Python fn gains nothing)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(fn, items))


class Segments:
    """Samples laid end to end: c (float64), y (bool), and each sample's size.

    Derived views (descending order with ties in row order, ascending order, runs of equal
    confidence) are computed once, on first use, and shared by every metric.
    """

    def __init__(self, c: np.ndarray, y: np.ndarray, sizes: np.ndarray):
        self.c = np.asarray(c, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.bool_)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if self.c.shape != self.y.shape or self.c.ndim != 1:
            raise ValueError(f"c and y must be 1-D of equal length, got {self.c.shape} and {self.y.shape}")
        if (self.sizes < 1).any() or self.sizes.sum() != self.c.size:
            raise ValueError(f"sizes must be positive and sum to {self.c.size}, got sum {self.sizes.sum()}")
        self.starts = np.cumsum(self.sizes) - self.sizes

    @property
    def count(self) -> int:
        """How many samples."""
        return self.sizes.size

    @cached_property
    def segment(self) -> np.ndarray:
        """The sample of every row."""
        return np.repeat(np.arange(self.count), self.sizes)

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Per sample, the sum of `values` (one per row, in row order)."""
        return np.bincount(self.segment, weights=values, minlength=self.count)

    def mean(self, values: np.ndarray) -> np.ndarray:
        return self.sum(values) / self.sizes

    def cumsum(self, values: np.ndarray) -> np.ndarray:
        """Running sum within each sample (restarting at every sample's first row)."""
        total = np.cumsum(values)
        before = np.concatenate([[0], total])[self.starts]
        return total - before[self.segment]

    @cached_property
    def position(self) -> np.ndarray:
        """0-based position of every row within its sample."""
        return np.arange(self.c.size) - self.starts[self.segment]

    # --- descending confidence, ties in row order (AURC, selective accuracy, coverage at risk) ---

    @cached_property
    def descending(self) -> np.ndarray:
        """Row order by sample, then confidence descending; lexsort is stable, so ties keep their
        row order, as np.argsort(−c, kind="stable") on the sample alone."""
        return np.lexsort((-self.c, self.segment))

    @cached_property
    def y_descending(self) -> np.ndarray:
        return self.y[self.descending]

    @cached_property
    def correct_so_far(self) -> np.ndarray:
        """Correct among the k most confident, k = position + 1 (descending order)."""
        return self.cumsum(self.y_descending.astype(np.int64))

    @cached_property
    def k(self) -> np.ndarray:
        """k = position + 1 as float, the denominators of running rates."""
        return (self.position + 1).astype(np.float64)

    # --- ascending confidence (quantiles, ranks) ---

    @cached_property
    def ascending(self) -> np.ndarray:
        return np.lexsort((self.c, self.segment))

    @cached_property
    def c_ascending(self) -> np.ndarray:
        return self.c[self.ascending]

    @cached_property
    def y_ascending(self) -> np.ndarray:
        return self.y[self.ascending]

    @cached_property
    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Runs of equal confidence within a sample, ascending: (run of every ascending row, each
        run's sample, its size, its correct count). 0.0 and −0.0 are one value, as in np.unique."""
        c, seg = self.c_ascending, self.segment
        new = np.ones(c.size, dtype=np.bool_)
        new[1:] = (c[1:] != c[:-1]) | (seg[1:] != seg[:-1])
        run = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        size = np.diff(np.append(first, c.size))
        correct = np.bincount(run, weights=self.y_ascending, minlength=first.size)
        return run, seg[first], size, correct

    def percentiles(self, percent) -> np.ndarray:
        """np.percentile(sample, percent) (method "linear") of every sample, [S, Q], to the last bit."""
        starts = self.starts[:, None]
        return row_percentiles(lambda pos: self.c_ascending[starts + pos], self.sizes, percent)

    def count_at_or_below(self, values: np.ndarray) -> np.ndarray:
        """Per sample s and column q: how many of sample s's confidences are ≤ values[s, q]
        (np.searchsorted(sorted sample, value, side="right")), by one binary search run on all
        samples and columns at once."""
        lo = np.zeros(values.shape, dtype=np.int64)
        hi = np.broadcast_to(self.sizes[:, None], values.shape).copy()
        starts = self.starts[:, None]
        for _ in range(int(self.sizes.max(initial=0)).bit_length() + 1):
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) // 2
            at = self.c_ascending[starts + np.minimum(mid, np.maximum(hi - 1, 0))]
            right = open_ & (at <= values)
            lo = np.where(right, mid + 1, lo)
            hi = np.where(open_ & ~right, mid, hi)
        return lo

    def take(self, samples: np.ndarray) -> Segments:
        """The given samples (indices, ascending), as their own Segments."""
        samples = np.asarray(samples, dtype=np.int64)
        sizes = self.sizes[samples]
        shift = self.starts[samples] - (np.cumsum(sizes) - sizes)  # old start − new start
        rows = np.arange(sizes.sum()) + np.repeat(shift, sizes)
        return Segments(self.c[rows], self.y[rows], sizes)


def row_percentiles(ascending_at: Callable[[np.ndarray], np.ndarray], n: np.ndarray, percent) -> np.ndarray:
    """np.percentile(method="linear") of each row's first n[b] sorted values, to the last bit.

    `ascending_at(pos)` returns, per row, the values at ascending positions pos [b, q]. `percent`
    is [Q] (the same for every row) or [b, Q] (each row its own, as bias-corrected intervals read).
    The arithmetic is numpy's own (q/100, virtual index (n−1)·q, its two-sided lerp), so that
    quantile bin edges, and hence the bins, equal those np.percentile gives the sample alone.
    """
    q = np.true_divide(np.asarray(percent, dtype=np.float64), 100)
    virtual = (n - 1)[:, None] * np.atleast_2d(q)
    above = virtual >= (n - 1)[:, None]
    prev = np.where(above, (n - 1)[:, None], np.floor(virtual)).astype(np.intp)
    nxt = np.where(above, prev, prev + 1)
    gamma = virtual - prev  # any finite value where a == b (above): the lerp returns a exactly
    a, b = np.split(ascending_at(np.concatenate([prev, nxt], axis=1)), 2, axis=1)
    diff = b - a
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
