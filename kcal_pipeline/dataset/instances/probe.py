"""Probe instances (gold set + answer options) and the statements to score.

An instance is (relation, subject, gold objects, options); a statement is one template filled with
the subject and one option. Statements carry the character spans of subject and object so that
the scorer can tell which tokens belong to the answer.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.sampling import derived_rng, sample_negatives, stable_rank
from kcal_pipeline.dataset.templates import fill

INSTANCE_COLUMNS = [
    "instance_id",
    "relation_id",
    "subject_id",
    "subject_label",
    "gold_ids",
    "gold_labels",
    "n_gold",
    "option_ids",
    "option_labels",
    "n_options",
    "split",
]
INSTANCE_SCHEMA = {
    "instance_id": pl.Utf8,
    "relation_id": pl.Utf8,
    "subject_id": pl.Utf8,
    "subject_label": pl.Utf8,
    "gold_ids": pl.List(pl.Utf8),
    "gold_labels": pl.List(pl.Utf8),
    "n_gold": pl.Int32,
    "option_ids": pl.List(pl.Utf8),
    "option_labels": pl.List(pl.Utf8),
    "n_options": pl.Int32,
    "split": pl.Utf8,
}


class EmptyRelationError(ValueError):
    """A relation has no facts (or none survive), so no probe can be built for it."""


def build_instances(
    facts: pl.DataFrame, relation_id: str, config: ProbeOptions, *, topup_pool: dict[str, str] | None = None
) -> pl.DataFrame:
    """One instance per subject (fixed BEAR-style answer spaces: answer_spaces.instances_from_fixed_space).

    Options are the subject's gold objects plus distractors from the other subjects' objects,
    topped up from `topup_pool` (objects of the same type in other relations) only when the
    relation's own pool runs short.
    """
    facts = facts.filter(pl.col("relation_id") == relation_id)
    if facts.height == 0:
        raise EmptyRelationError(f"relation {relation_id!r} has no facts: cannot build a probe for it")
    object_labels = dict(
        facts.select("object_id", "object_label")
        .unique("object_id", keep="first")
        .sort("object_id")
        .iter_rows()
    )
    labels = {**(topup_pool or {}), **object_labels}
    per_subject = (
        facts.group_by("subject_id")
        .agg(pl.col("subject_label").first(), pl.col("object_id").unique().sort())
        .with_columns(
            _rank=pl.col("subject_id").map_elements(
                lambda s: stable_rank(config.seed, relation_id, "subset", s), return_dtype=pl.UInt64
            )
        )
        .sort("_rank")
    )
    if config.instance_limit is not None:
        per_subject = per_subject.head(config.instance_limit)
    rows = []
    for subject_id, subject_label, gold_ids, _ in per_subject.iter_rows():
        negatives = sample_negatives(
            gold_ids=gold_ids,
            pool=object_labels,
            k=config.n_negatives,
            seed=config.seed,
            relation_id=relation_id,
            subject_id=subject_id,
            topup_pool=topup_pool,
            labels=labels,
        )
        # Shuffle a canonical list, so that the order depends on the option set alone (not on
        # the order in which the distractors were picked).
        options = list(gold_ids) + sorted(negatives)
        derived_rng(config.seed, relation_id, subject_id, "order").shuffle(options)
        rows.append(
            instance_row(
                relation_id,
                subject_id,
                subject_label,
                list(gold_ids),
                options,
                labels,
                split_seed=config.seed,
                dev_fraction=config.dev_fraction,
            )
        )
    return instances_frame(rows)


def instance_row(
    relation_id: str,
    subject_id: str,
    subject_label: str,
    gold_ids: list[str],
    options: list[str],
    labels: dict[str, str],
    *,
    split_seed: int,
    dev_fraction: float,
) -> dict:
    """One probe instance; the dev/test split is a seeded hash of the subject, so it does not move
    when other subjects come or go. Shared by sampled, fixed (BEAR) and MACE instances."""
    dev = stable_rank(split_seed, relation_id, "split", subject_id) / 2**64 < dev_fraction
    return {
        "instance_id": f"{relation_id}:{subject_id}",
        "relation_id": relation_id,
        "subject_id": subject_id,
        "subject_label": subject_label,
        "gold_ids": gold_ids,
        "gold_labels": [labels[g] for g in gold_ids],
        "n_gold": len(gold_ids),
        "option_ids": options,
        "option_labels": [labels[o] for o in options],
        "n_options": len(options),
        "split": "dev" if dev else "test",
    }


def instances_frame(rows: list[dict]) -> pl.DataFrame:
    """Probe instances in the table's column order and types, sorted by id (stable Parquet bytes)."""
    return pl.DataFrame(rows, schema=INSTANCE_SCHEMA).sort("instance_id")


def object_pools(facts: pl.DataFrame, catalog: dict) -> pl.DataFrame:
    """Every object with its relation's object type: the top-up pool for short answer spaces."""
    types = pl.DataFrame(
        {"relation_id": list(catalog), "object_type": [s.object_type for s in catalog.values()]}
    )
    return (
        facts.select("relation_id", "object_id", "object_label")
        .unique()
        .join(types, on="relation_id", how="inner")
        .select("object_type", "relation_id", "object_id", "object_label")
        .sort("object_type", "relation_id", "object_id")
    )


def topup_pool_for(pools: pl.DataFrame, relation_id: str, object_type: str) -> dict[str, str]:
    """Objects of the same type from *other* relations (METHODS §5)."""
    same = pools.filter((pl.col("object_type") == object_type) & (pl.col("relation_id") != relation_id))
    return dict(
        same.select("object_id", "object_label")
        .unique("object_id", keep="first")
        .sort("object_id")
        .iter_rows()
    )


def build_statements(instances: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Every instance × template of its relation × option, with subject/object character spans."""
    rows = []
    by_relation = templates.sort("rank").partition_by("relation_id", as_dict=True)
    for inst in instances.iter_rows(named=True):
        rel_templates = by_relation.get((inst["relation_id"],))
        if rel_templates is None:
            raise ValueError(f"relation {inst['relation_id']!r} has no templates")
        gold = set(inst["gold_ids"])
        for template_id, text in rel_templates.select("template_id", "text").iter_rows():
            for idx, (oid, olabel) in enumerate(zip(inst["option_ids"], inst["option_labels"], strict=True)):
                filled = fill(text, inst["subject_label"], olabel)
                rows.append(
                    {
                        "statement_id": f"{inst['instance_id']}|{template_id}|{idx}",
                        "instance_id": inst["instance_id"],
                        "relation_id": inst["relation_id"],
                        "template_id": template_id,
                        "option_index": idx,
                        "object_id": oid,
                        "object_label": olabel,
                        "is_gold": oid in gold,
                        "text": filled.text,
                        "subject_start": filled.subject_span[0],
                        "subject_end": filled.subject_span[1],
                        "object_start": filled.object_span[0],
                        "object_end": filled.object_span[1],
                    }
                )
    if not rows:
        raise ValueError("no statements: instances or templates are empty")
    return pl.DataFrame(
        rows,
        schema_overrides=dict.fromkeys(
            ("option_index", "subject_start", "subject_end", "object_start", "object_end"), pl.Int32
        ),
    )


def templates_frame(catalog: dict, max_templates: int | None = None) -> pl.DataFrame:
    """The curated templates of every relation; rank 0 is the headline template."""
    rows = []
    for rid, spec in catalog.items():
        for rank, text in enumerate(spec.templates[:max_templates]):
            rows.append(
                {
                    "relation_id": rid,
                    "template_id": f"{rid}:c{rank}",
                    "text": text,
                    "kind": "curated",
                    "source": "relations.toml",
                    "rank": rank,
                }
            )
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int32})


def relations_frame(catalog: dict) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "relation_id": s.relation_id,
                "label": s.label,
                "domain": "closed_set",
                "kind": s.kind,
                "property": s.property,
                "subject_type": s.subject_type,
                "object_type": s.object_type,
                "n_templates": len(s.templates),
            }
            for s in catalog.values()
        ]
    )
