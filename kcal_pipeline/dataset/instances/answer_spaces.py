"""Probe instances over a fixed answer space (BEAR's own): every subject gets the relation's whole
answer space as its options.

The space comes from the catalog entry (answer_space_ids / answer_space_labels), as written by the
BEAR import (dataset/sources/bear/). A space built from the facts instead is probe.py's
"relation" mode.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kcal_pipeline.dataset.instances.probe import EmptyRelationError, instance_row, instances_frame
from kcal_pipeline.dataset.instances.quality import dedupe_answer_space
from kcal_pipeline.dataset.instances.sampling import stable_rank
from kcal_pipeline.dataset.relations import RelationSpec


def _fixed_space(spec: RelationSpec) -> dict[str, str]:
    if spec.answer_space != "fixed" or not spec.answer_space_ids:
        raise ValueError(f"relation {spec.relation_id} has no fixed answer space")
    return dict(zip(spec.answer_space_ids, spec.answer_space_labels, strict=True))


def instances_from_fixed_space(
    facts: pl.DataFrame,
    spec: RelationSpec,
    seed: int,
    dev_fraction: float,
    log: Callable[[str], None] = print,
    instance_limit: int | None = None,
) -> pl.DataFrame:
    """One instance per subject whose options are the relation's whole fixed answer space.

    Gold = the subject's object(s). With `instance_limit`, only that many subjects: a stable seeded
    subset, chosen exactly as probe.build_instances chooses it (so a smaller probe lies inside a
    larger one), each still with the whole space. Options with a label that repeats another
    option's are removed (dedupe_answer_space) and counted in the log; the split is a seeded hash
    of the subject, as in probe.build_instances, so it does not move when other subjects come or go.
    Recorded as answer_space "fixed", answer_space_size = the catalog space's size.
    """
    space = _fixed_space(spec)
    rid = spec.relation_id
    facts = facts.filter(pl.col("relation_id") == rid)
    if facts.height == 0:
        raise EmptyRelationError(f"relation {rid!r} has no facts: cannot build a probe for it")
    outside = sorted(set(facts["object_id"].to_list()) - set(space))
    if outside:
        raise ValueError(
            f"relation {rid}: object(s) {', '.join(outside[:5])} are not in its "
            f"fixed answer space ({len(outside)} in all)"
        )
    order = {oid: i for i, oid in enumerate(space)}
    per_subject = (
        facts.group_by("subject_id")
        .agg(pl.col("subject_label").first(), pl.col("object_id"))
        .sort("subject_id")
    )
    if instance_limit is not None:
        chosen = sorted(per_subject["subject_id"], key=lambda s: stable_rank(seed, rid, "subset", s))
        per_subject = per_subject.filter(pl.col("subject_id").is_in(chosen[:instance_limit]))
    rows, removed = [], 0
    for subject_id, subject_label, objects in per_subject.iter_rows():
        gold = sorted(set(objects), key=order.__getitem__)
        row, n = dedupe_answer_space(
            instance_row(
                rid,
                subject_id,
                subject_label,
                gold,
                list(space),
                space,
                split_seed=seed,
                dev_fraction=dev_fraction,
                answer_space="fixed",
                answer_space_size=len(space),
            )
        )
        rows.append(row)
        removed += n
    if removed:
        log(f"relation {rid}: removed {removed} duplicate-label option(s) across {len(rows)} instances")
    return instances_frame(rows)
