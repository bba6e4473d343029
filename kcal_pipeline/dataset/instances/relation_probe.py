"""From facts to what gets scored: instances per relation kind, the template set of a run, statements.

One place decides, per catalog entry, how instances are formed (sampled distractors, a fixed
BEAR-style answer space, or MACE questions with 1/2/4/6 answers) and which templates a run uses
(curated, generated, marker and perturbation variants), so the Dagster assets stay thin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances import mace_questions
from kcal_pipeline.dataset.instances.answer_spaces import instances_from_fixed_space
from kcal_pipeline.dataset.instances.probe import (
    build_instances,
    build_statements,
    topup_pool_for,
)
from kcal_pipeline.dataset.instances.sampling import stable_rank
from kcal_pipeline.dataset.instances.variants import (
    DEMO_SLOT,
    demonstration_for,
    expand_demo,
    marker_variants,
    perturbation_variants,
    subsample_answer_space,
)
from kcal_pipeline.dataset.relations import RelationSpec


def relation_instances(
    spec: RelationSpec,
    facts: pl.DataFrame,
    pools: pl.DataFrame,
    config: ProbeOptions,
    log: Callable[[str], None] = print,
) -> pl.DataFrame:
    """Probe instances of one relation; with config.answer_space_k > 0 also each instance cut to k options."""
    if spec.domain == "mace":
        per_count = max(1, (config.max_instances or 200) // len(mace_questions.GOLD_COUNTS))
        built = mace_questions.build_question_set(
            facts,
            spec.relation_id,
            seed=config.seed,
            per_count=per_count,
            n_negatives=config.n_negatives,
            dev_fraction=config.dev_fraction,
        )
        log(
            f"{spec.relation_id}: {built.frame.height} questions; dropped {built.dropped}; "
            f"shortfall per gold count {built.shortfall or 'none'}"
        )
        instances = built.frame
    elif spec.answer_space == "fixed":
        if not spec.answer_space_ids:
            facts, spec = _bear_style_space(facts, spec, config)
        instances = instances_from_fixed_space(facts, spec, config.seed, config.dev_fraction, log=log)
    else:
        topup = topup_pool_for(pools, spec.relation_id, spec.object_type) if pools.height else None
        instances = build_instances(facts, spec.relation_id, config, topup_pool=topup)
    if config.answer_space_k > 0:
        cut = subsample_answer_space(instances, config.answer_space_k, config.seed)
        instances = pl.concat([instances, cut], how="diagonal_relaxed")
    return instances


def _bear_style_space(facts: pl.DataFrame, spec: RelationSpec, config: ProbeOptions):
    """BEAR's 1:1 answer space: the gold objects of the probed subjects (a stable seeded subset
    of max_instances), shared by all of them."""
    subjects = sorted(
        facts["subject_id"].unique(), key=lambda s: stable_rank(config.seed, spec.relation_id, "subset", s)
    )
    chosen = facts.filter(pl.col("subject_id").is_in(subjects[: config.instance_limit]))
    space = chosen.select("object_id", "object_label").unique("object_id").sort("object_id")
    return chosen, replace(
        spec, answer_space_ids=tuple(space["object_id"]), answer_space_labels=tuple(space["object_label"])
    )


def curated_and_variants(curated: pl.DataFrame, seed: int) -> pl.DataFrame:
    """The templates table: curated templates plus their marker and perturbation variants."""
    return pl.concat(
        [curated, marker_variants(curated), perturbation_variants(curated, seed)], how="diagonal_relaxed"
    )


def run_templates(
    templates: pl.DataFrame,
    generated: pl.DataFrame | None,
    kinds: list[str],
    max_templates: int | None,
    seed: int,
) -> pl.DataFrame:
    """The templates a run scores: of the first max_templates curated (and, if chosen, generated)
    templates per relation, those whose kind is chosen, plus the chosen variant kinds of them.
    Variants alone (e.g. only "perturbation") still derive from those same parents."""
    parents = templates.filter(pl.col("kind") == "curated")
    if "generated" in kinds:
        if generated is None or generated.is_empty():
            raise ValueError(
                "template_kinds includes 'generated' but generated_templates is empty or "
                "not materialized: materialize it first (kcal dataset paraphrase)"
            )
        parents = pl.concat([parents, generated], how="diagonal_relaxed")
    if max_templates:
        parents = parents.filter(pl.col("rank") < max_templates)
    variants = pl.concat(
        [marker_variants(parents), perturbation_variants(parents, seed)], how="diagonal_relaxed"
    )
    chosen = pl.concat([parents, variants], how="diagonal_relaxed").filter(pl.col("kind").is_in(kinds))
    return chosen.sort("relation_id", "template_id")


def relation_statements(instances: pl.DataFrame, templates: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Statements of one relation; a one-shot template gets its demonstration per instance
    (another subject of the same relation) before filling, so spans stay exact."""
    plain = templates.filter(~pl.col("text").str.contains(DEMO_SLOT, literal=True))
    demo = templates.filter(pl.col("text").str.contains(DEMO_SLOT, literal=True))
    parts = [build_statements(instances, plain)] if plain.height else []
    base_instances = instances.filter(~pl.col("instance_id").str.contains("#", literal=True))
    for row in demo.iter_rows(named=True):
        for inst in instances.iter_rows(named=True):
            text = expand_demo(
                row["text"], demonstration_for(inst["subject_id"], base_instances, row["text"], seed)
            )
            one = pl.DataFrame([inst], schema=instances.schema)
            parts.append(build_statements(one, pl.DataFrame([{**row, "text": text}])))
    if not parts:
        raise ValueError("no statements: no templates selected")
    return pl.concat(parts, how="diagonal_relaxed").sort("statement_id")
