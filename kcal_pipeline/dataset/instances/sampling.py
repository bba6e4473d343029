"""Negative objects for closed-set probes (METHODS §5).

A subject's distractors are drawn without looking at the other subjects: every candidate object gets
a rank that is a hash of (seed, relation, subject, candidate id) alone, and the subject takes the k
best-ranked valid candidates (not a gold, no label already among its options). What other subjects
exist, and in which order the pool lists its objects, therefore do not matter:

- adding facts whose objects are already in the pool, under the same labels (e.g. a new subject
  with a known object), changes no existing subject's distractors (bar one whose own gold set
  the new facts extend);
- adding an object x to the pool (or to the top-up pool) that was not in it changes a subject's
  distractors only where the subject has fewer than k of them, or x ranks above one of them in
  that subject's own order (an object of the relation's own pool ranks above every top-up
  object). Where it does, x comes in and at most one old distractor leaves: the one with x's
  label if there is one, else, if the subject already had k, the lowest-ranked. The others stay.
  An x whose label is a gold's or a better-ranked distractor's changes nothing.

The order of a subject's options (build_instances) is a seeded shuffle of its gold ids and its
sorted distractor ids, so it too depends on the subject and its option set alone.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence

from kcal_pipeline.dataset.instances.labels import label_key


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
    which would make two options indistinguishable to the model, is skipped. Labels are compared
    as a reader would (`label_key`: case and spacing do not count).

    Candidates are taken in the order of `negative_rank` (pool first, then top-up); the picks are
    returned in that order. See the module docstring for what adding facts can and cannot change.
    """
    if k < 0:
        raise ValueError(f"number of negatives must be >= 0, got {k}")
    gold = set(gold_ids)
    taken_labels = {label_key(labels[g]) for g in gold_ids if labels and g in labels}
    chosen: list[str] = []
    for candidates in (pool, topup_pool or {}):
        order = sorted(
            (c for c in candidates if c not in gold and c not in chosen),
            key=lambda c: (negative_rank(seed, relation_id, subject_id, c), c),
        )
        for cand in order:
            if len(chosen) == k:
                return chosen
            label = label_key(candidates[cand])
            if label in taken_labels:
                continue
            chosen.append(cand)
            taken_labels.add(label)
    return chosen


def negative_rank(seed: int, relation_id: str, subject_id: str, candidate_id: str) -> int:
    """Where `candidate_id` stands among a subject's possible distractors (lower is picked first):
    a hash of these four values only, so no other subject or object can move it."""
    return stable_rank(seed, relation_id, subject_id, "negative", candidate_id)
