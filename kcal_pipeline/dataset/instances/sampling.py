"""Negative objects for closed-set probes (METHODS §5).

Each subject gets its own random stream derived from (seed, relation, subject), so the options of
one subject never change when other subjects are added or removed: the answer space stays stable
across experiments, as the method requires.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence


def derived_rng(seed: int, *parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def stable_rank(seed: int, *parts: str) -> int:
    """A seeded, order-free sort key: used to pick subsets and splits reproducibly."""
    return int.from_bytes(hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).digest()[:8], "big")


def sample_negatives(
    *,
    gold_ids: Sequence[str],
    pool: Mapping[str, str],
    k: int,
    seed: int,
    relation_id: str,
    subject_id: str,
    topup_pool: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Up to k distractor ids: never a gold id, never a label equal to a gold's or another pick's.

    `pool` maps candidate object id -> label (objects of other subjects of the same relation);
    `topup_pool` (same object type, other relations) is used only when `pool` runs short.
    `labels` gives the gold labels (id -> label) so that a distractor sharing a gold's label,
    which would make two options indistinguishable to the model, is skipped.
    """
    if k < 0:
        raise ValueError(f"number of negatives must be >= 0, got {k}")
    gold = set(gold_ids)
    taken_labels = {labels[g].casefold() for g in gold_ids if labels and g in labels}
    rng = derived_rng(seed, relation_id, subject_id)
    chosen: list[str] = []
    for candidates in (pool, topup_pool or {}):
        order = sorted(c for c in candidates if c not in gold and c not in chosen)
        rng.shuffle(order)
        for cand in order:
            if len(chosen) == k:
                return chosen
            label = candidates[cand].casefold()
            if label in taken_labels:
                continue
            chosen.append(cand)
            taken_labels.add(label)
    return chosen
