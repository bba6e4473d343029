"""Probe instances (gold set + answer options) and the statements to score.

An instance is (relation, subject, gold objects, options); a statement is one template filled with
the subject and one option. Statements carry the character spans of subject and object so that
the scorer can tell which tokens belong to the answer.

Every instance records how its options were formed, in `answer_space` (with `answer_space_size`):
- "relation": one answer space per relation, built from its facts (relation_answer_space; BEAR's
  setting, the default); size = that space's size (at most the configured cap).
- "sampled": the gold(s) plus up to n_negatives distractors drawn per subject (sampling.py;
  Tinner's setting, and every MACE question); size = null (n_options says what each instance got).
- "fixed": the answer space written into the catalog entry, e.g. by the BEAR import
  (answer_spaces.py); size = that space's size.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.labels import label_key
from kcal_pipeline.dataset.instances.sampling import derived_rng, sample_negatives, stable_rank
from kcal_pipeline.dataset.instances.variants import EXPLICIT_MARKERS, EXPLICIT_MARKERS_TYPE
from kcal_pipeline.dataset.templates import Filled, fill

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
    "answer_space",
    "answer_space_size",
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
    "answer_space": pl.Utf8,
    "answer_space_size": pl.Int32,
}


class EmptyRelationError(ValueError):
    """A relation has no facts (or none survive), so no probe can be built for it."""


def build_instances(
    facts: pl.DataFrame,
    relation_id: str,
    config: ProbeOptions,
    *,
    topup_pool: dict[str, str] | None = None,
    kind: str = "n_to_1",
    answer_space: str | None = None,
) -> pl.DataFrame:
    """One instance per subject (of a stable seeded subset of config.max_instances), options by
    `answer_space` (default config.answer_space; catalog-given spaces:
    answer_spaces.instances_from_fixed_space). `kind` is the catalog kind (one_to_one: 60).

    - "relation": the gold(s) plus the best-ranked other members of the relation's answer space
      (relation_answer_space, capped at config.relation_space_size(kind): 25, or 60 for a
      one_to_one relation), so that every instance has the same number of options where the
      space allows. `topup_pool` is not used: the space is the relation's own objects. A
      one_to_one relation probes at most as many subjects as its space has options, and their
      golds lead the space (BEAR's 1:1 construction), so every probed gold is in it.
      A relation whose space has fewer than two members is sampled instead (recorded as such).
    - "sampled": the gold(s) plus config.n_negatives distractors from the other subjects' objects,
      topped up from `topup_pool` (objects of the same type in other relations) only when the
      relation's own pool runs short (sampling.sample_negatives).

    Either way the option order is a seeded shuffle of the golds and the sorted distractor ids, so
    it depends on the subject and its option set alone.
    """
    facts = facts.filter(pl.col("relation_id") == relation_id)
    if facts.height == 0:
        raise EmptyRelationError(f"relation {relation_id!r} has no facts: cannot build a probe for it")
    object_labels = _object_labels(facts)
    labels = {**(topup_pool or {}), **object_labels}
    per_subject = _subjects_in_seeded_order(facts, relation_id, config)
    mode = answer_space or config.answer_space
    if mode not in ("relation", "sampled"):
        raise ValueError(f"answer_space {mode!r} is not one of 'relation', 'sampled'")
    space = None
    if mode == "relation":
        per_subject, space = _relation_space_and_subjects(facts, per_subject, relation_id, config, kind)
        if space is None:
            mode = "sampled"
    rows = []
    for subject_id, subject_label, gold_ids, _ in per_subject.iter_rows():
        if space is not None:
            negatives = space_distractors(gold_ids, space, labels, len(space))
        else:
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
        rows.append(
            instance_row(
                relation_id,
                subject_id,
                subject_label,
                list(gold_ids),
                _shuffled_options(gold_ids, negatives, config.seed, relation_id, subject_id),
                labels,
                split_seed=config.seed,
                dev_fraction=config.dev_fraction,
                answer_space=mode,
                answer_space_size=None if space is None else len(space),
            )
        )
    return instances_frame(rows)


def _object_labels(facts: pl.DataFrame) -> dict[str, str]:
    """object id -> label of the relation's facts (the first label of each object, by id)."""
    return dict(
        facts.select("object_id", "object_label")
        .unique("object_id", keep="first")
        .sort("object_id")
        .iter_rows()
    )


def _subjects_in_seeded_order(facts: pl.DataFrame, relation_id: str, config: ProbeOptions) -> pl.DataFrame:
    """One row per subject (subject_id, subject_label, its sorted gold object ids, _rank) in a stable
    seeded order, cut to config.instance_limit: the subset that is probed."""
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
    return per_subject


def _relation_space_and_subjects(
    facts: pl.DataFrame, per_subject: pl.DataFrame, relation_id: str, config: ProbeOptions, kind: str
) -> tuple[pl.DataFrame, dict[str, str] | None]:
    """(the subjects to probe, the relation's answer space) for "relation" mode; the space is None
    when it has fewer than two members, and the relation is then sampled instead."""
    size = config.relation_space_size(kind)
    probed = None
    if kind == "one_to_one":
        # BEAR's 1:1 construction: no more subjects than options, and their golds come first
        # in the space, so every probed gold is an option of every instance.
        per_subject = per_subject.head(size)
        probed = set(per_subject["subject_id"].to_list())
    space = relation_answer_space(facts, relation_id, size, config.seed, probed_subjects=probed)
    if len(space) < 2:
        # One object (or one label) is no choice: every instance would be "correct" with
        # confidence 1. Such a relation is sampled instead, and its instances say so.
        return per_subject, None
    return per_subject, space


def _shuffled_options(
    gold_ids: list[str], negatives: list[str], seed: int, relation_id: str, subject_id: str
) -> list[str]:
    """The golds and the distractors in a seeded shuffle of a canonical list, so that the order
    depends on the option set alone (not on the order in which the distractors were picked)."""
    options = list(gold_ids) + sorted(negatives)
    derived_rng(seed, relation_id, subject_id, "order").shuffle(options)
    return options


def relation_answer_space(
    facts: pl.DataFrame,
    relation_id: str,
    size: int,
    seed: int,
    *,
    probed_subjects: set[str] | None = None,
) -> dict[str, str]:
    """The relation's answer space (BEAR): its distinct objects, best-ranked first, at most `size`.

    Rank: objects of `probed_subjects` first when given (one-to-one relations: the probed golds,
    as BEAR builds its 1:1 spaces; the rest tops the space up to `size`), then more subjects
    having the object first (so the space covers as many golds as it can), ties broken by a
    seeded hash of the object id (stable_rank), then the id. An object whose label
    a better-ranked member already has (label_key) is skipped: two options a model cannot tell
    apart are no choice. Built from all the relation's facts, not just the probed subjects, so a
    probe of 20 subjects uses the same space as one of 100; the row order of the facts does not
    matter, and adding facts moves the space only through the subject counts of their objects.
    """
    facts = facts.filter(pl.col("relation_id") == relation_id)
    counts = facts.group_by("object_id").agg(
        pl.col("object_label").first(),
        pl.col("subject_id").n_unique().alias("n_subjects"),
        pl.col("subject_id").is_in(list(probed_subjects or ())).any().alias("probed"),
    )
    ranked = sorted(
        counts.iter_rows(),
        key=lambda r: (not r[3], -r[2], stable_rank(seed, relation_id, "answer-space", r[0]), r[0]),
    )
    space: dict[str, str] = {}
    taken: set[str] = set()
    for object_id, label, _, _ in ranked:
        if len(space) == size:
            break
        if label_key(label) not in taken:
            space[object_id] = label
            taken.add(label_key(label))
    return space


def space_distractors(
    gold_ids: list[str], space: dict[str, str], labels: dict[str, str], size: int
) -> list[str]:
    """An instance's distractors in relation mode: the best-ranked members of `space` (ordered as
    relation_answer_space returns it) that are not a gold and share no gold's label, as many as
    bring the options to `size`. So an instance whose gold lies in the space gets the whole space,
    one whose gold does not gets the gold plus all but the lowest-ranked member(s); more golds than
    `size` get no distractor. Fewer options only where a member shares a gold's label."""
    taken = {label_key(labels[g]) for g in gold_ids}
    picks: list[str] = []
    for object_id, label in space.items():
        if len(gold_ids) + len(picks) >= size:
            break
        if object_id not in gold_ids and label_key(label) not in taken:
            picks.append(object_id)
    return picks


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
    answer_space: str = "sampled",
    answer_space_size: int | None = None,
) -> dict:
    """One probe instance; the dev/test split is a seeded hash of the subject, so it does not move
    when other subjects come or go. Shared by relation-space, sampled, fixed (BEAR) and MACE
    instances; `answer_space`/`answer_space_size` record how the options were formed (module doc)."""
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
        "answer_space": answer_space,
        "answer_space_size": answer_space_size,
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


def capitalized(filled: Filled) -> Filled:
    """lm-pub-quiz's capitalisation, `text[0].upper() + text[1:]`. The spans keep covering the same
    words; they move only where upper-casing changes the length ('ß' -> 'SS'), which lm-pub-quiz
    does not correct for."""
    first = filled.text[:1].upper()
    grow = max(len(first) - 1, 0)
    (s0, s1), (o0, o1) = filled.subject_span, filled.object_span
    moved = [i + grow if i else i for i in (s0, s1, o0, o1)]  # a span opening the text keeps its start
    return Filled(first + filled.text[1:], (moved[0], moved[1]), (moved[2], moved[3]))


def build_statements(
    instances: pl.DataFrame, templates: pl.DataFrame, *, capitalize: bool = False
) -> pl.DataFrame:
    """Every instance × template of its relation × option, with subject/object character spans.

    With `capitalize` the statement's first letter is upper-cased as lm-pub-quiz does (a subject
    or object that opens the sentence changes with it; spans, and so token roles, still mark it);
    `capitalized` says per statement whether that changed the text.
    """
    rows = []
    by_relation = templates.sort("rank").partition_by("relation_id", as_dict=True)
    for inst in instances.iter_rows(named=True):
        rel_templates = by_relation.get((inst["relation_id"],))
        if rel_templates is None:
            raise ValueError(f"relation {inst['relation_id']!r} has no templates")
        gold = set(inst["gold_ids"])
        for template_id, text in rel_templates.select("template_id", "text").iter_rows():
            for idx, (oid, olabel) in enumerate(zip(inst["option_ids"], inst["option_labels"], strict=True)):
                as_templated = fill(text, inst["subject_label"], olabel)
                filled = capitalized(as_templated) if capitalize else as_templated
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
                        "capitalized": filled.text != as_templated.text,
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


# Template kinds of the catalog and their id letters: `<relation>:c0` is the headline template.
CATALOG_TEMPLATE_KINDS = {"curated": ("templates", "c"), "question": ("questions", "q")}


def templates_frame(catalog: dict, max_templates: int | None = None) -> pl.DataFrame:
    """The catalog's templates of every relation: curated (rank 0 is the headline template) and
    question-answer templates (MACE; `<relation>:q<rank>`, the answer last). A catalog entry's
    hand-written marker templates ride on its first curated template (`explicit_markers`,
    [{variant, text}]), where variants.marker_variants turns them into that template's markers."""
    rows = []
    for rid, spec in catalog.items():
        for kind, (field, letter) in CATALOG_TEMPLATE_KINDS.items():
            for rank, text in enumerate(getattr(spec, field)[:max_templates]):
                rows.append(
                    {
                        "relation_id": rid,
                        "template_id": f"{rid}:{letter}{rank}",
                        "text": text,
                        "kind": kind,
                        "source": "relations.toml",
                        "rank": rank,
                        "marked_text": _marked_text(spec, kind, rank),
                        EXPLICIT_MARKERS: _explicit_markers(spec, kind, rank),
                    }
                )
    return pl.DataFrame(
        rows,
        schema_overrides={"rank": pl.Int32, "marked_text": pl.Utf8, EXPLICIT_MARKERS: EXPLICIT_MARKERS_TYPE},
    )


def _explicit_markers(spec, kind: str, rank: int) -> list[dict] | None:
    """The catalog's marker templates of the relation, on its first curated template only."""
    if kind != "curated" or rank != 0 or not spec.marker_templates:
        return None
    return [
        {"variant": v, "text": t} for v, t in zip(spec.marker_variants, spec.marker_templates, strict=True)
    ]


def _marked_text(spec, kind: str, rank: int) -> str | None:
    """A curated template's hand-marked form ([M] where a verbal marker goes), if the catalog has one."""
    if kind == "curated" and spec.marked_templates:
        return spec.marked_templates[rank]
    return None


def relations_frame(catalog: dict) -> pl.DataFrame:
    """The catalog as a table: one row per relation, its domain (closed_set or mace) as the catalog
    says, and its BEAR topic domains (bear_domains, a list: empty for a relation BEAR lacks)."""
    return pl.DataFrame(
        [
            {
                "relation_id": s.relation_id,
                "label": s.label,
                "domain": s.domain,
                "kind": s.kind,
                "property": s.property,
                "subject_type": s.subject_type,
                "object_type": s.object_type,
                "n_templates": len(s.templates),
                "bear_domains": list(s.bear_domains),
            }
            for s in catalog.values()
        ],
        schema_overrides={"bear_domains": pl.List(pl.Utf8)},
    )
