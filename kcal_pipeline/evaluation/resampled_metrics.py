"""The batched metrics of the bootstrap (BATCHED): a metric on every resample of a Resamples matrix
at once, vectorised over resamples in chunks that bound memory (no Python loop per resample), each
equal to the registered single-sample metric applied resample by resample. What bootstrap.py,
curves.py and the findings evaluate on resamples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kcal_pipeline.evaluation.binning import BINS
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.resamples import PAD, Resamples
from kcal_pipeline.evaluation.segments import row_percentiles

# Resamples per chunk are chosen so that one chunk holds about this many cells ([b, M] or [b, U]):
# the gathered values, the sort keys and the per-value counts stay a few tens of MB whatever B and N.
_CHUNK_CELLS = 1 << 21


@dataclass(frozen=True)
class _Distinct:
    """The distinct confidences (ascending) of the rows start … start+len(rank)−1, the span the
    resamples touch, and each of those rows' rank among them; equal values (0.0 and −0.0 too)
    share one rank. A scope of resample_plan is one run of rows, so U ≤ the scope's rows."""

    values: np.ndarray
    rank: np.ndarray
    start: int

    @classmethod
    def of(cls, c: np.ndarray, indices: np.ndarray) -> _Distinct:
        used = indices[indices != PAD]
        start, stop = int(used.min()), int(used.max()) + 1  # a scope's rows are one run
        values, rank = np.unique(c[start:stop], return_inverse=True)
        return cls(values, rank, start)


class _Chunk:
    """A block of resamples, [b, M] with the padding masked, seen two ways that the metrics share.

    - per distinct confidence: `count` and `positives` [b, U] (U distinct values in the rows the
      resamples touch, ascending): each resample's sorted sample without sorting it, enough for
      the order statistics of ACE and the tie-averaged ranks of AUROC;
    - in descending order with ties in draw order (AURC's stable sort): a plain (fast, unstable)
      sort of the distinct integer keys rank·M + position.
    """

    def __init__(
        self, distinct: _Distinct, c: np.ndarray, y: np.ndarray, indices: np.ndarray, sizes: np.ndarray
    ):
        self.n = sizes
        self.valid = np.arange(indices.shape[1]) < sizes[:, None]
        self.y = y[indices] & self.valid  # PAD (−1) reads the last row: masked
        self.distinct = distinct.values
        self._c, self._indices, self._ranks, self._start = c, indices, distinct.rank, distinct.start

    @cached_property
    def c(self) -> np.ndarray:
        """Confidence of every cell (the padding's is the last row's: mask it)."""
        return self._c[self._indices]

    @cached_property
    def rank(self) -> np.ndarray:
        """Ascending dense rank of every cell; the padding gets rank U, one past the real values."""
        return np.where(self.valid, self._ranks[self._indices - self._start], self.distinct.size)

    @cached_property
    def _per_value(self) -> tuple[np.ndarray, np.ndarray]:
        b, u = self.rank.shape[0], self.distinct.size
        cell = (self.rank + (u + 1) * np.arange(b)[:, None]).ravel()
        count = np.bincount(cell, minlength=b * (u + 1)).reshape(b, u + 1)[:, :u]
        positives = np.bincount(cell, weights=self.y.ravel(), minlength=b * (u + 1)).reshape(b, u + 1)[:, :u]
        return count, positives

    @property
    def count(self) -> np.ndarray:
        """[b, U] how many times each distinct value is in each resample."""
        return self._per_value[0]

    @property
    def positives(self) -> np.ndarray:
        """[b, U] how many of those are correct."""
        return self._per_value[1]

    @cached_property
    def y_desc(self) -> np.ndarray:
        """Correctness in descending confidence order, ties in draw order, padding last."""
        m = self.rank.shape[1]
        key_type = np.int32 if (self.distinct.size + 1) * m < np.iinfo(np.int32).max else np.int64
        u = self.distinct.size
        descending_rank = np.where(self.valid, u - 1 - self.rank, u).astype(key_type)  # padding last
        keys = descending_rank * m + np.arange(m, dtype=key_type)
        return np.take_along_axis(self.y, np.sort(keys, axis=1) % m, axis=1)


def _accuracy(ch: _Chunk) -> np.ndarray:
    return ch.y.sum(axis=1) / ch.n


def _brier(ch: _Chunk) -> np.ndarray:
    return np.where(ch.valid, (ch.c - ch.y) ** 2, 0.0).sum(axis=1) / ch.n


def _confidence_gap(ch: _Chunk) -> np.ndarray:
    """calibration.confidence_gap per row: mean C − accuracy."""
    return ((ch.count * ch.distinct).sum(axis=1) - ch.positives.sum(axis=1)) / ch.n


def _ascending_value_index(cumulative: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per row, the distinct value at ascending position pos [b, q] of the sample whose value
    counts accumulate to `cumulative` [b, U]: the first v with cumulative[v] > pos. One
    searchsorted over all rows at once: row r's cumulative counts are shifted by r·(N + 1), N the
    largest sample, so the rows lie end to end in ascending order and never overlap."""
    b, u = cumulative.shape
    shift = (np.arange(b, dtype=np.int64) * (int(cumulative[:, -1].max()) + 1))[:, None]
    found = np.searchsorted((cumulative + shift).ravel(), (pos + shift).ravel(), side="right")
    return found.reshape(pos.shape) - (np.arange(b) * u)[:, None]


def _ace(ch: _Chunk) -> np.ndarray:
    """calibration.ace per row: edges at the row's own quantiles (np.percentile, 20 bins), bin =
    number of inner edges strictly below c (searchsorted side "left"), mean over non-empty bins.

    On the per-value counts: distinct value v lies in bin #{k : v ≥ s_k}, where s_k = how many
    distinct values are ≤ inner edge k (one searchsorted on the sorted distinct values).
    """
    b, u = ch.count.shape
    edges = row_percentiles(
        lambda pos: ch.distinct[_ascending_value_index(np.cumsum(ch.count, axis=1), pos)],
        ch.n,
        np.linspace(0, 1, BINS + 1)[1:-1] * 100,
    )
    at = np.searchsorted(ch.distinct, edges, side="right") + (u + 1) * np.arange(b)[:, None]
    marks = np.bincount(at.ravel(), minlength=b * (u + 1)).reshape(b, u + 1)
    ids = (np.cumsum(marks[:, :u], axis=1) + BINS * np.arange(b)[:, None]).ravel()
    size = b * BINS
    count = np.bincount(ids, weights=ch.count.ravel(), minlength=size).reshape(b, BINS)
    conf = np.bincount(ids, weights=(ch.count * ch.distinct).ravel(), minlength=size).reshape(b, BINS)
    acc = np.bincount(ids, weights=ch.positives.ravel(), minlength=size).reshape(b, BINS)
    full = count > 0
    safe = np.maximum(count, 1)
    gap = np.where(full, np.abs(acc / safe - conf / safe), 0.0)
    return gap.sum(axis=1) / full.sum(axis=1)


def _auroc(ch: _Chunk) -> np.ndarray:
    """selective.auroc per row: the Mann–Whitney U statistic, each correct answer counting the
    wrong ones below its confidence and half those tied with it (equal, not just close, to the
    average-rank sum less n₊(n₊+1)/2: every term is a half-integer); NaN with one class."""
    negatives = ch.count - ch.positives
    below = np.cumsum(negatives, axis=1) - negatives
    u_stat = (ch.positives * (below + 0.5 * negatives)).sum(axis=1)
    n_pos = ch.positives.sum(axis=1)
    n_neg = ch.n - n_pos
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = u_stat / (n_pos * n_neg)
    return np.where((n_pos == 0) | (n_neg == 0), np.nan, auc)


def _aurc(ch: _Chunk) -> np.ndarray:
    """selective.aurc per row: mean over k of the error rate of the k most confident (stable)."""
    errors = np.cumsum(ch.valid & ~ch.y_desc, axis=1)
    risk = errors / np.arange(1, ch.valid.shape[1] + 1)
    return np.where(ch.valid, risk, 0.0).sum(axis=1) / ch.n


BATCHED: dict[str, Callable[[_Chunk], np.ndarray]] = {
    "accuracy": _accuracy,
    "ace": _ace,
    "brier": _brier,
    "auroc": _auroc,
    "aurc": _aurc,
    "confidence_gap": _confidence_gap,
}
assert set(BATCHED) <= set(METRICS), "every batched metric is a registered metric"


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """`metrics` as a list, refused if empty or if one has no batched form (BATCHED)."""
    names = list(metrics)
    unknown = [m for m in names if m not in BATCHED]
    if unknown or not names:
        raise ValueError(f"metrics {names}: bootstrap intervals exist for {list(BATCHED)}")
    return names


def batched_metrics(metrics: Sequence[str], c, y, resamples: Resamples) -> dict[str, np.ndarray]:
    """Each metric on every resample at once: {name: [B] values}. `c`, `y` are the group's rows
    (validated by the caller); the resamples' indices point into them."""
    names = check_metrics(metrics)
    c = np.asarray(c, dtype=np.float64)
    y = np.asarray(y, dtype=bool)
    idx, sizes = resamples.indices, resamples.sizes
    distinct = _Distinct.of(c, idx)
    step = max(1, _CHUNK_CELLS // max(idx.shape[1], distinct.values.size))
    out = {m: np.empty(idx.shape[0]) for m in names}
    for lo in range(0, idx.shape[0], step):  # chunks of many resamples, to bound memory
        chunk = _Chunk(distinct, c, y, idx[lo : lo + step], sizes[lo : lo + step])
        for m in names:
            out[m][lo : lo + step] = BATCHED[m](chunk)
    return out
