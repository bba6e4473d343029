"""Bootstrap confidence intervals (issue 14): is a metric, or a difference between two
estimators, distinguishable from resampling noise?

Resampling is clustered by relation, because instances of one relation share templates and an
answer space and are not independent: scope "all" draws the relations with replacement, then the
instances within each drawn relation with replacement (the two-stage bootstrap for clustered data,
Davison & Hinkley 1997, §3.8); scope "relation" draws only instances. Intervals are
bias-corrected percentile (BC) intervals (bias_corrected_interval; Efron & Tibshirani 1993, §14.3)
moved to their point where BC misses it, so every interval contains its point estimate, even for
a metric biased under resampling (ACE). Resamples are drawn once per row layout as INDEX matrices
(`Resamples`) into a group's rows, so every estimator on the same instances, the paired
differences and an outside reference implementation all read the very same resamples. The
batched metrics (BATCHED) evaluate all resamples at once (vectorised over resamples, in chunks
that bound memory; no Python loop per resample) and equal the registered single-sample metric
applied resample by resample.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from kcal_pipeline.evaluation.calibration import BINS
from kcal_pipeline.evaluation.registry import (
    ANSWER_SPACE_KEYS,
    GROUP,
    METRICS,
    SCOPE_KEY_SCHEMA,
    as_arrays,
    with_defaults,
)
from kcal_pipeline.evaluation.segments import in_threads, row_percentiles

N_RESAMPLES = 1000
LEVEL = 0.95
DEFAULT_METRICS = ("accuracy", "ace", "brier", "auroc", "aurc")
# The metrics table's intervals: DEFAULT_METRICS (the paired differences' metrics) and the signed gap.
INTERVAL_METRICS = (*DEFAULT_METRICS, "confidence_gap")
# bias_corrected_interval's tie tolerance (relative, at least absolute): far below any metric's resolution.
TIE = 1e-12
PAD = -1  # index of a padding cell in a Resamples matrix
# Resamples per chunk are chosen so that one chunk holds about this many cells ([b, M] or [b, U]):
# the gathered values, the sort keys and the per-value counts stay a few tens of MB whatever B and N.
_CHUNK_CELLS = 1 << 21
_KEYS = ("model_id", "estimator", "reduction", "split", *ANSWER_SPACE_KEYS)
# A paired difference's group (its first _N_PAIR_GROUP keys), then the instance both answered.
_PAIR_ON = ("model_id", "reduction", "split", *ANSWER_SPACE_KEYS, "relation_id", "instance_id")
_N_PAIR_GROUP = 3 + len(ANSWER_SPACE_KEYS)


@dataclass(frozen=True)
class Resamples:
    """B resamples as row indices into one group's rows (sorted by relation, then instance).

    `indices` is int32 [B, M]: row b uses its first `sizes[b]` entries, in draw order (which is
    AURC's tie order), and the rest is PAD (−1). Two-stage resampling gives resamples of
    different sizes (a drawn relation brings its own instance count), hence the padding rather
    than forcing every resample to N rows, which would change the relations' weights.
    """

    indices: np.ndarray
    sizes: np.ndarray

    def __post_init__(self):
        if self.indices.ndim != 2 or self.sizes.shape != (self.indices.shape[0],):
            raise ValueError(
                f"indices [B, M] and sizes [B] expected, got {self.indices.shape}, {self.sizes.shape}"
            )

    @property
    def n_resamples(self) -> int:
        return self.indices.shape[0]

    def rows(self, b: int) -> np.ndarray:
        """Row indices of resample b (what a loop-based reference implementation reads)."""
        return self.indices[b, : self.sizes[b]]


def _check_size(n_resamples: int) -> None:
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")


def clustered_resamples(relation_sizes, n_resamples: int = N_RESAMPLES, seed: int = 0) -> Resamples:
    """Two-stage resamples of rows laid out as consecutive relation runs of `relation_sizes`.

    With R relations: draw R relations uniformly with replacement, then, for each drawn relation
    of n_r rows, n_r of its rows with replacement. Random stream (numpy default_rng(seed)): first
    the [B, R] relation draws, then every row draw in resample order; the same seed and sizes
    always give the same matrix.
    """
    _check_size(n_resamples)
    sizes = np.asarray(relation_sizes, dtype=np.int64)
    if sizes.ndim != 1 or sizes.size == 0 or (sizes < 1).any():
        raise ValueError(f"relation_sizes must be positive counts, got {sizes.tolist()}")
    if sizes.sum() >= np.iinfo(np.int32).max:
        raise ValueError(f"{sizes.sum()} rows do not fit int32 indices")
    starts = np.cumsum(sizes) - sizes
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, sizes.size, size=(n_resamples, sizes.size))
    drawn_sizes = sizes[drawn]
    lengths = drawn_sizes.sum(axis=1)
    slot_relation = np.repeat(drawn.ravel(), drawn_sizes.ravel())
    rows = starts[slot_relation] + rng.integers(0, sizes[slot_relation])
    indices = np.full((n_resamples, lengths.max()), PAD, dtype=np.int32)
    indices[np.arange(indices.shape[1]) < lengths[:, None]] = rows  # row-major: resample by resample
    return Resamples(indices, lengths)


def instance_resamples(n: int, n_resamples: int = N_RESAMPLES, seed=0, start: int = 0) -> Resamples:
    """Plain resamples of n rows with replacement (rows start … start+n−1), no padding.

    `seed` is anything numpy's default_rng accepts (an int, a SeedSequence).
    """
    _check_size(n_resamples)
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    rows = start + np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    return Resamples(rows.astype(np.int32), np.full(n_resamples, n, dtype=np.int64))


def relation_seed(seed: int, relation_id: str) -> np.random.SeedSequence:
    """The stream of a relation's own resamples: keyed by the relation's name (CRC-32), so they do
    not depend on which other relations the group holds."""
    return np.random.SeedSequence(seed, spawn_key=(zlib.crc32(str(relation_id).encode()),))


@dataclass(frozen=True)
class ScopeResamples:
    """One scope of a group: its resamples index the group's rows."""

    scope: str
    scope_value: str
    rows: slice  # the scope's own rows, for its point estimate
    resamples: Resamples


def resample_plan(relation_ids, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[ScopeResamples]:
    """Scope "all" (clustered by relation) and one scope "relation" per relation (instances only)
    for rows sorted so each relation is one consecutive run (as `registry.scopes` sorts them)."""
    rel = np.asarray(relation_ids)
    if rel.ndim != 1 or rel.size == 0:
        raise ValueError(f"relation_ids must be a non-empty 1-D array, got shape {rel.shape}")
    change = np.flatnonzero(rel[1:] != rel[:-1]) + 1
    starts = np.concatenate([[0], change])
    sizes = np.diff(np.concatenate([starts, [rel.size]]))
    names = rel[starts]
    if len(set(names.tolist())) != names.size:
        raise ValueError("relation_ids: each relation's rows must be consecutive (sort by relation first)")
    plan = [ScopeResamples("all", "all", slice(0, rel.size), clustered_resamples(sizes, n_resamples, seed))]
    for name, start, size in zip(names.tolist(), starts.tolist(), sizes.tolist(), strict=True):
        res = instance_resamples(size, n_resamples, relation_seed(seed, name), start)
        plan.append(ScopeResamples("relation", name, slice(start, start + size), res))
    return plan


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


def _check_metrics(metrics: Sequence[str]) -> list[str]:
    names = list(metrics)
    unknown = [m for m in names if m not in BATCHED]
    if unknown or not names:
        raise ValueError(f"metrics {names}: bootstrap intervals exist for {list(BATCHED)}")
    return names


def batched_metrics(metrics: Sequence[str], c, y, resamples: Resamples) -> dict[str, np.ndarray]:
    """Each metric on every resample at once: {name: [B] values}. `c`, `y` are the group's rows
    (validated by the caller); the resamples' indices point into them."""
    names = _check_metrics(metrics)
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


def interval_percentiles(level: float = LEVEL) -> list[float]:
    """The two percentiles a level reads, 50·(1 ∓ level), rounded to 1e-10 so that 0.95 gives
    exactly 2.5 and 97.5 (as a reference implementation would write them), not 2.5000000000000022."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return [round(50 * (1 - level), 10), round(50 * (1 + level), 10)]


def percentile_interval(
    values: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile interval of each row of `values` [K, B], ignoring NaN resamples (a metric
    undefined on that resample, e.g. AUROC with one class): (low, high, resamples used).
    Equals np.nanpercentile(row, [50(1−level), 50(1+level)]); NaN where no resample is defined.
    What kcal shows is bias_corrected_interval; this one is its z0 = 0 case, for comparison."""
    values = np.atleast_2d(values)
    ascending = np.sort(values, axis=1)  # NaN sorts last
    used = np.isfinite(values).sum(axis=1)
    percent = interval_percentiles(level)
    bounds = row_percentiles(
        lambda pos: np.take_along_axis(ascending, pos, axis=1), np.maximum(used, 1), percent
    )
    bounds[used == 0] = np.nan
    return bounds[:, 0], bounds[:, 1], used


def bias_corrected_interval(
    values: np.ndarray, point: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bias-corrected percentile (BC) interval of each row of `values` [K, B] around its point
    estimate `point` [K], ignoring NaN resamples: (low, high, resamples used).

    Why not the plain percentile interval: a metric biased under resampling (ACE: a resample's bin
    accuracies scatter around the sample's, and |confidence − accuracy| only grows) can have its
    whole percentile interval on one side of its point. BC (Efron & Tibshirani 1993, §14.3: BCa
    with acceleration 0) shifts the percentiles read by that bias: z0 = Φ⁻¹(p), p the share of
    resamples below the point, ties counted half (as scipy.stats.bootstrap counts them; a tie is a
    resample within TIE·max(1, |point|) of the point, so a resample equal to the point but summed
    in another order, 1 ulp off, is a tie whichever implementation computed it); the bounds are the
    percentiles 100·Φ(z0 + (z0 ± z)), z = Φ⁻¹((1 − level)/2). No acceleration: its jackknife would
    re-evaluate every metric once per deleted relation and per deleted instance, per group.

    Containment rule: BC contains the point only while p ∈ (α/2, 1 − α/2) roughly (at p = 0 or 1
    both bounds fall on the resamples' extreme), so each bound is then moved to the point itself:
    low = min(BC low, point), high = max(BC high, point). Every interval contains its point; one
    moved so is narrow on the point's side (no resample there), not precise. A NaN point (the
    metric undefined on the full sample) takes z0 = 0, the percentile interval; NaN bounds where
    no resample is defined.
    """
    from scipy import special  # on first use: see kcal_pipeline/estimation/fitting.py

    values = np.atleast_2d(values)
    point = np.asarray(point, dtype=np.float64).reshape(-1)
    if point.shape[0] != values.shape[0]:
        raise ValueError(f"point: one per row of values ({values.shape[0]}), got {point.shape[0]}")
    interval_percentiles(level)
    used = np.isfinite(values).sum(axis=1)
    tie = TIE * np.maximum(1.0, np.abs(point))[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        below = (values < point[:, None] - tie).sum(axis=1)
        at_or_below = (values <= point[:, None] + tie).sum(axis=1)
        share = (below + at_or_below) / (2 * np.maximum(used, 1))
    z0 = np.where(np.isfinite(point), special.ndtri(share), 0.0)
    z = float(special.ndtri((1 - level) / 2))
    percent = 100 * np.column_stack([special.ndtr(z0 + (z0 + z)), special.ndtr(z0 + (z0 - z))])
    ascending = np.sort(values, axis=1)  # NaN sorts last
    bounds = row_percentiles(
        lambda pos: np.take_along_axis(ascending, pos, axis=1), np.maximum(used, 1), percent
    )
    low, high = np.fmin(bounds[:, 0], point), np.fmax(bounds[:, 1], point)
    low[used == 0], high[used == 0] = np.nan, np.nan
    return low, high, used


def _sorted_estimates(frame: pl.DataFrame, keys: Sequence[str], what: str) -> pl.DataFrame:
    df = with_defaults(frame)
    dup = df.filter(pl.struct([*keys, "relation_id", "instance_id"]).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"{what}: several rows for instance {row['instance_id']!r} of estimator {row['estimator']!r}; "
            "filter to one template or aggregation first"
        )
    return df.sort(*keys, "relation_id", "instance_id", nulls_last=True)


class _Plans:
    """Resample plans memoised by row layout: groups with the same relations and instance counts
    (every estimator on the same instances) share one set of index matrices."""

    def __init__(self, n_resamples: int, seed: int):
        _check_size(n_resamples)
        self.n_resamples, self.seed, self.plans = n_resamples, seed, {}

    def __call__(self, relation_ids: np.ndarray) -> list[ScopeResamples]:
        names, counts = np.unique(relation_ids, return_counts=True)
        layout = (tuple(names.tolist()), tuple(counts.tolist()))
        if layout not in self.plans:
            self.plans[layout] = resample_plan(relation_ids, self.n_resamples, self.seed)
        return self.plans[layout]


OUTPUT_SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "metric": pl.String,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n_resamples": pl.Int64,
}


class ResampledValues:
    """Each estimator's batched metric values on one scope's resamples of its rows, computed once.

    The intervals of bootstrap_intervals and both sides of paired_differences resample the same
    rows with the same plan whenever an estimator answered the instances its baseline answered
    (nearly always): A's paired values are its interval values, and the baseline's are shared by
    every pair. Pass one object to both (tables.metrics_and_differences does) and each is computed
    once. A value is keyed by (estimator, output kind, model, reduction, split, answer space, the
    exact rows as (relation, instance) ids, scope), never by a hash: one object serves ONE
    estimates table, the rows' confidences being read from it.
    """

    def __init__(self, n_resamples: int = N_RESAMPLES, seed: int = 0):
        self.plans = _Plans(n_resamples, seed)
        self._rows: dict[tuple, int] = {}
        self._values: dict[tuple, dict[str, np.ndarray]] = {}

    def check(self, n_resamples: int, seed: int) -> None:
        """Refuse a caller asking for other resamples than the ones memoised."""
        have = (self.plans.n_resamples, self.plans.seed)
        if (n_resamples, seed) != have:
            raise ValueError(
                f"values: memoised for (n_resamples, seed) = {have}, asked for {(n_resamples, seed)}"
            )

    def rows_id(self, g: pl.DataFrame) -> int:
        """A small id for the exact rows of g (relation and instance ids, in order), so value keys
        hash one int rather than the whole tuple on every look-up."""
        rows = (tuple(g["relation_id"].to_list()), tuple(g["instance_id"].to_list()))
        return self._rows.setdefault(rows, len(self._rows))

    def evaluate(self, requests: list[tuple]) -> list[dict[str, np.ndarray]]:
        """For each request (key, metrics, c, y, resamples), {metric: [B] values}; what is not
        memoised yet is computed in threads, once per key however often it is requested."""
        todo: dict[tuple, tuple] = {}
        for key, metrics, c, y, resamples in requests:
            pending = todo[key][0] if key in todo else ()
            need = [m for m in metrics if m not in self._values.get(key, {}) and m not in pending]
            if need:
                todo[key] = ((*pending, *need), c, y, resamples)
        computed = in_threads(lambda task: batched_metrics(*task), list(todo.values()))
        for key, values in zip(todo, computed, strict=True):
            self._values.setdefault(key, {}).update(values)
        return [{m: self._values[key][m] for m in metrics} for key, metrics, *_ in requests]


def _value_key(estimator: str, output_kind: str, key: dict, row_set: int, sc: ScopeResamples) -> tuple:
    return (
        estimator,
        output_kind,
        *(key[k] for k in _PAIR_ON[:_N_PAIR_GROUP]),
        row_set,
        sc.scope,
        sc.scope_value,
    )


def _memo(values: ResampledValues | None, n_resamples: int, seed: int) -> ResampledValues:
    if values is None:
        return ResampledValues(n_resamples, seed)
    values.check(n_resamples, seed)
    return values


def bootstrap_intervals(
    frame: pl.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """Bias-corrected intervals (bias_corrected_interval) for the metrics of `compute_metrics`'
    table, scopes "all" (relations, then instances, resampled) and "relation" (instances
    resampled); each contains the registered metric on the scope's rows, its point estimate.

    `frame`: what compute_metrics reads, one row per instance per (model, estimator, reduction,
    split, answer space). Probability metrics are left out for score-valued estimators.
    `n_resamples` in the output counts the resamples on which the metric is defined (AUROC is
    not on a resample with one class) and from which the interval is read. `values`: resample
    values shared with paired_differences on the same table (see ResampledValues).
    """
    names = _check_metrics(metrics)
    interval_percentiles(level)  # a bad level fails before any resampling
    memo = _memo(values, n_resamples, seed)
    df = _sorted_estimates(frame, GROUP, "estimates")
    keys, points, requests = [], [], []
    for group, g in df.group_by(GROUP, maintain_order=True):
        key = dict(zip(GROUP, group, strict=True))
        usable = [m for m in names if METRICS[m].applies_to(key["output_kind"])]
        if not usable:
            continue
        c, y = as_arrays(g["confidence"].to_numpy(), g["correct"].to_numpy(), key["output_kind"])
        row_set = memo.rows_id(g)
        for sc in memo.plans(g["relation_id"].to_numpy()):
            keys += [(*(key[k] for k in _KEYS), sc.scope, sc.scope_value, m) for m in usable]
            points += [METRICS[m](c[sc.rows], y[sc.rows], key["output_kind"]) for m in usable]
            value_key = _value_key(key["estimator"], key["output_kind"], key, row_set, sc)
            requests.append((value_key, usable, c, y, sc.resamples))
    results = memo.evaluate(requests)
    stacked = [v[m] for (_, usable, *_), v in zip(requests, results, strict=True) for m in usable]
    if not keys:
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    low, high, used = bias_corrected_interval(np.vstack(stacked), np.array(points, dtype=np.float64), level)
    rows = [
        (*k, lo, hi, u) for k, lo, hi, u in zip(keys, low.tolist(), high.tolist(), used.tolist(), strict=True)
    ]
    return pl.DataFrame(rows, orient="row", schema=OUTPUT_SCHEMA)


def _paired(df: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
    """A's rows joined with B's on the same instance (B's columns suffixed _b), sorted as scopes
    sorts rows, so that resample plans index them the same way."""
    cols = [*_PAIR_ON, "confidence", "correct", "output_kind"]
    side_a, side_b = (df.filter(pl.col("estimator") == e).select(cols) for e in (a, b))
    joined = side_a.join(side_b, on=list(_PAIR_ON), nulls_equal=True, suffix="_b")
    if joined.is_empty():
        raise ValueError(f"pairs: {a!r} and {b!r} share no (model, reduction, split, answer space, instance)")
    return joined.sort(*_PAIR_ON, nulls_last=True)


PAIRED_SCHEMA = {
    "model_id": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
    "estimator_a": pl.String,
    "estimator_b": pl.String,
    "metric": pl.String,
    "difference": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
    "n_resamples": pl.Int64,
}


def paired_differences(
    frame: pl.DataFrame,
    pairs: Sequence[tuple[str, str]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
    values: ResampledValues | None = None,
) -> pl.DataFrame:
    """metric(A) − metric(B) with a bias-corrected interval (containing it), for each (A, B) in
    `pairs`, on the instances both estimators answered (joined on model, reduction, split, answer
    space, relation and instance; so always under the same reduction).

    Both estimators are evaluated on the SAME resample indices, so the interval is of the paired
    difference: an interval excluding 0 says the gap is not resampling noise. `difference` is the
    registered metric on the paired instances; `n` their count; `n_resamples` the resamples where
    both values are defined. Probability metrics only when both estimators give probabilities.
    `values`: resample values shared with bootstrap_intervals on the same table (an estimator on
    the same instances as B reads its interval values; B's are computed once for every pair).
    """
    names = _check_metrics(metrics)
    interval_percentiles(level)  # a bad level fails before any resampling
    memo = _memo(values, n_resamples, seed)
    df = _sorted_estimates(frame, GROUP, "estimates")
    present = set(df["estimator"].unique().to_list())
    keys, points, requests, operands = [], [], [], []  # operands: (request of A, request of B, metric)
    for a, b in pairs:
        missing = [e for e in (a, b) if e not in present]
        if missing:
            raise ValueError(f"pairs: estimator(s) {missing} not in the estimates (have {sorted(present)})")
        joined = _paired(df, a, b)
        by = [*_PAIR_ON[:_N_PAIR_GROUP], "output_kind", "output_kind_b"]
        for group, g in joined.group_by(by, maintain_order=True):
            key = dict(zip(by, group, strict=True))
            kinds = (key["output_kind"], key["output_kind_b"])
            usable = [m for m in names if all(METRICS[m].applies_to(kind) for kind in kinds)]
            if not usable:
                continue
            sides = [
                as_arrays(g[f"confidence{sfx}"].to_numpy(), g[f"correct{sfx}"].to_numpy(), kind)
                for sfx, kind in zip(("", "_b"), kinds, strict=True)
            ]
            row_set = memo.rows_id(g)
            for sc in memo.plans(g["relation_id"].to_numpy()):
                for estimator, kind, (c, y) in zip((a, b), kinds, sides, strict=True):
                    value_key = _value_key(estimator, kind, key, row_set, sc)
                    requests.append((value_key, usable, c, y, sc.resamples))
                (ca, ya), (cb, yb) = ((c[sc.rows], y[sc.rows]) for c, y in sides)
                for m in usable:
                    keys.append(
                        (*(key[k] for k in _PAIR_ON[:_N_PAIR_GROUP]), sc.scope, sc.scope_value, a, b, m)
                    )
                    point = METRICS[m](ca, ya, kinds[0]) - METRICS[m](cb, yb, kinds[1])
                    points.append((point, ca.size))
                    operands.append((len(requests) - 2, len(requests) - 1, m))
    if not keys:
        return pl.DataFrame(schema=PAIRED_SCHEMA)
    results = memo.evaluate(requests)
    stacked = [results[i][m] - results[j][m] for i, j, m in operands]
    point = np.array([d for d, _ in points], dtype=np.float64)
    low, high, used = bias_corrected_interval(np.vstack(stacked), point, level)
    rows = [
        (*k, d, lo, hi, n, u)
        for k, (d, n), lo, hi, u in zip(keys, points, low.tolist(), high.tolist(), used.tolist(), strict=True)
    ]
    return pl.DataFrame(rows, orient="row", schema=PAIRED_SCHEMA)
