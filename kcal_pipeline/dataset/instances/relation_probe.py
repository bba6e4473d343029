"""From facts to what gets scored: instances per relation kind, the template set of a run, statements.

One place decides, per catalog entry, how instances are formed (one answer space per relation or
sampled distractors, as the run's answer_space says; a catalog entry's own fixed space, as BEAR
imports have; or MACE questions with 1/2/4/6 answers) and which templates a run uses
(curated, generated, marker, perturbation and context variants; a context template's statements
open with demonstrations drawn from the relation's facts, context.py), so the Dagster assets stay
thin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances import mace_questions
from kcal_pipeline.dataset.instances.answer_spaces import instances_from_fixed_space
from kcal_pipeline.dataset.instances.context import CONTEXT_COLUMN, CONTEXT_KINDS, context_statements
from kcal_pipeline.dataset.instances.probe import (
    build_instances,
    build_statements,
    capitalized,
    topup_pool_for,
)
from kcal_pipeline.dataset.instances.variants import (
    answer_space_sweep,
    context_variants,
    marker_variants,
    perturbation_variants,
    with_full_answer_space,
)
from kcal_pipeline.dataset.relations import RelationSpec


def relation_instances(
    spec: RelationSpec,
    facts: pl.DataFrame,
    pools: pl.DataFrame,
    config: ProbeOptions,
    log: Callable[[str], None] = print,
) -> pl.DataFrame:
    """Probe instances of one relation; with config.answer_space_k (the option-count sweep) also
    their copies cut to each k, answer_space_draws times (variants.answer_space_sweep).

    - MACE domains: question-specific sampled distractors (n_negatives; answer_space "sampled"):
      a question's golds are not one relation's objects, so there is no relation-level space.
    - A catalog entry with its own space (answer_space "fixed" with answer_space_ids, e.g. a BEAR
      import): that space, for a stable seeded subset of max_instances subjects.
    - A catalog entry marked "fixed" without ids: one relation-level space from its facts
      (probe.build_instances in "relation" mode) whatever the run's answer_space.
    - Every other relation: probe.build_instances in the run's answer_space mode.
    """
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
    elif spec.answer_space == "fixed" and spec.answer_space_ids:
        instances = instances_from_fixed_space(
            facts, spec, config.seed, config.dev_fraction, log=log, instance_limit=config.instance_limit
        )
    else:
        topup = topup_pool_for(pools, spec.relation_id, spec.object_type) if pools.height else None
        instances = build_instances(
            facts,
            spec.relation_id,
            config,
            topup_pool=topup,
            kind=spec.kind,
            answer_space="relation" if spec.answer_space == "fixed" else None,
        )
    instances = with_full_answer_space(instances)
    if config.answer_space_k:
        cut = answer_space_sweep(instances, config.answer_space_k, config.answer_space_draws, config.seed)
        instances = pl.concat([instances, cut], how="vertical_relaxed")
    return instances


def curated_and_variants(
    curated: pl.DataFrame, perturbation_seeds: Sequence[int], log: Callable[[str], None] | None = None
) -> pl.DataFrame:
    """The templates table: curated templates (with their marked forms, `marked_text`) plus their
    marker, perturbation (the random ones once per perturbation seed) and context variants."""
    return pl.concat(
        [
            curated,
            marker_variants(curated, log=log),
            perturbation_variants(curated, perturbation_seeds),
            context_variants(curated),
        ],
        how="diagonal_relaxed",
    )


def run_templates(
    templates: pl.DataFrame,
    generated: pl.DataFrame | None,
    kinds: list[str],
    max_templates: int | None,
    perturbation_seeds: Sequence[int],
    log: Callable[[str], None] | None = None,
) -> pl.DataFrame:
    """The templates a run scores: of the first max_templates curated (and, if chosen, generated)
    templates per relation, those whose kind is chosen, plus the chosen variant kinds of them.
    Variants alone (e.g. only "perturbation") still derive from those same parents. Question
    templates (MACE) are limited like curated ones and have no variants (variants.BASE_KINDS)."""
    parents = templates.filter(pl.col("kind").is_in(["curated", "question"]))
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
        [
            marker_variants(parents, log=log),
            perturbation_variants(parents, perturbation_seeds),
            context_variants(parents),
        ],
        how="diagonal_relaxed",
    )
    chosen = pl.concat([parents, variants], how="diagonal_relaxed").filter(pl.col("kind").is_in(kinds))
    return chosen.sort("relation_id", "template_id")


def relation_statements(
    instances: pl.DataFrame,
    templates: pl.DataFrame,
    seed: int,
    *,
    capitalize: bool = False,
    facts: pl.DataFrame | None = None,
    log: Callable[[str], None] | None = None,
) -> pl.DataFrame:
    """Statements of one relation. A context template (context.CONTEXT_KINDS) gets its context per
    instance, drawn from the relation's `facts` (else its instances) with `seed`, before the
    statement proper; `context_end` says where the statement begins (0 for every other template).
    Instances without a valid demonstration get no statement of that template (`log` says how
    many). `capitalize`: build_statements, applied to the statement proper (context.py)."""
    is_context = pl.col("kind").is_in(list(CONTEXT_KINDS))
    plain = templates.filter(~is_context)
    parts = [build_statements(instances, plain, capitalize=capitalize)] if plain.height else []
    parts = [p.with_columns(pl.lit(0, pl.Int32).alias(CONTEXT_COLUMN)) for p in parts]
    contexts = templates.filter(is_context)
    if contexts.height:
        if facts is not None:
            facts = facts.filter(pl.col("relation_id").is_in(contexts["relation_id"].unique().to_list()))
        parts += context_statements(
            instances,
            contexts,
            instances if facts is None or facts.is_empty() else facts,
            seed,
            build=lambda inst, tmpl: build_statements(inst, tmpl, capitalize=capitalize),
            fix_case=capitalized if capitalize else None,
            log=log,
        )
    if not parts:
        why = " (no instance had a valid demonstration for the context templates)" if contexts.height else ""
        raise ValueError(f"no statements: no templates selected{why}")
    return pl.concat(parts, how="diagonal_relaxed").sort("statement_id")
