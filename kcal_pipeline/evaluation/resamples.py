"""The bootstrap's resamples, as INDEX matrices (`Resamples`) into a group's rows, drawn once per row
layout: every estimator on the same instances, the paired differences, the curves' bands, the
findings and an outside reference implementation all read the very same resamples.

Resampling is clustered by relation, because instances of one relation share templates and an
answer space and are not independent: scope "all" draws the relations with replacement, then the
instances within each drawn relation with replacement (the two-stage bootstrap for clustered data,
Davison & Hinkley 1997, §3.8); scope "relation" draws only instances (resample_plan).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 1000
PAD = -1  # index of a padding cell in a Resamples matrix


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
    for rows sorted so each relation is one consecutive run (as samples.prepared sorts them)."""
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


class ResamplePlans:
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
