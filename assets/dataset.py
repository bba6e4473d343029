"""The dataset stages: `dataset` (relations, templates, object pools, the data-quality table),
`facts` (from SPARQL, rules or an imported BEAR set, per catalog relation), `probe` (instances and
statements, per probe relation) and `paraphrases` (LM-written templates, on demand)."""

import polars as pl
from dagster import (
    AllPartitionMapping,
    AssetExecutionContext,
    AssetIn,
    AssetOut,
    IdentityPartitionMapping,
    MetadataValue,
    Output,
    asset,
    multi_asset,
)

from assets.partitions import catalog_relation_partitions, relation_partitions
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.instances.paraphrases import (
    filter_candidates,
    generate_paraphrases,
    paraphrase_rows,
    reason_counts,
)
from kcal_pipeline.dataset.instances.probe import object_pools as pools_of
from kcal_pipeline.dataset.instances.probe import relations_frame, templates_frame
from kcal_pipeline.dataset.instances.quality import quality_report
from kcal_pipeline.dataset.instances.relation_probe import (
    curated_and_variants,
    relation_instances,
    relation_statements,
    run_templates,
)
from kcal_pipeline.dataset.instances.variants import FULL_ANSWER_SPACE
from kcal_pipeline.dataset.relations import get_relation, load_catalog
from kcal_pipeline.dataset.sources.facts import kept_counts, relation_facts
from resources import ModelProvider, ProbeSettings, SparqlEndpoint
from resources.settings import reads

GROUP = "dataset"
FACT_READS = reads("relation", "probe.page_size", "probe.min_sitelinks")
EVERY_RELATION = AllPartitionMapping()
# A probe relation reads the facts of the same relation (facts are partitioned by the catalog).
SAME_RELATION = IdentityPartitionMapping()


@reads("catalog")
@asset(group_name=GROUP, code_version="4")  # 4: bear_domains
def relations() -> pl.DataFrame:
    """The relation catalog (closed-set relations, MACE domains, imported sets) as a table."""
    return relations_frame(load_catalog())


# 5: explicit_markers, the catalog's hand-written markers (a BEAR import with --templates)
# 6: context variants (context_1shot/3shot/wrong/fixed); the one-shot perturbation is context_1shot
@reads("catalog", "probe.perturbation_seeds")
@asset(group_name=GROUP, code_version="6")
def templates(context: AssetExecutionContext, probe_settings: ProbeSettings) -> pl.DataFrame:
    """Curated templates of every relation (rank 0 = headline; marked_text = the hand-marked form)
    and their marker, perturbation (extra space and typo once per perturbation seed) and context
    variants; a run picks kinds with probe_settings.template_kinds."""
    return curated_and_variants(
        templates_frame(load_catalog()), probe_settings.perturbation_seeds, log=context.log.info
    )


@FACT_READS
@multi_asset(
    group_name="facts",
    partitions_def=catalog_relation_partitions,
    code_version="3",
    outs={
        "wikidata_facts": AssetOut(description="Facts of one relation with English labels and provenance."),
        "dropped_facts": AssetOut(
            description="Rows the validity filters (and MACE's paper filters) dropped, with the reason.",
        ),
    },
)
def wikidata_facts(context: AssetExecutionContext, sparql: SparqlEndpoint, probe_settings: ProbeSettings):
    spec = get_relation(context.partition_key)
    cached = sparql.cached if spec.source == "sparql" else None
    result = relation_facts(
        spec,
        cached,
        page_size=probe_settings.page_size or None,
        min_sitelinks=probe_settings.min_sitelinks or None,
        log=context.log.info,
    )
    if result.facts.height == 0:
        raise ValueError(
            f"relation {spec.relation_id!r} returned no facts from "
            f"{cached.endpoint_id if cached else spec.source}; dropped by reason: {result.drop_counts}"
        )
    for reason, n in result.drop_counts.items():
        if n:
            context.log.warning(f"{spec.relation_id}: dropped {n} rows ({reason})")
    meta = {**kept_counts(result), "drop_counts": MetadataValue.json(result.drop_counts)}
    yield Output(result.facts, output_name="wikidata_facts", metadata=meta)
    yield Output(result.dropped, output_name="dropped_facts", metadata={"rows": result.dropped.height})


@reads("catalog")
@asset(
    group_name=GROUP,
    code_version="1",
    ins={"wikidata_facts": AssetIn(partition_mapping=EVERY_RELATION)},
)
def object_pools(wikidata_facts: pl.DataFrame) -> pl.DataFrame:
    """Every object with its relation's object type: distractor top-up for short answer spaces."""
    return pools_of(wikidata_facts, load_catalog())


def sweep_copies(instances: pl.DataFrame) -> dict[str, int]:
    """Copies per k of the option-count sweep, all draws together ({} without the sweep)."""
    copies = instances.filter(pl.col("answer_space_k") != FULL_ANSWER_SPACE)
    counts = copies.group_by("answer_space_k").len().sort("answer_space_k")
    return {str(k): n for k, n in counts.iter_rows()}


@reads(
    "relation", "probe.answer_space", "probe.answer_space_size", "probe.answer_space_size_one_to_one",
    "probe.n_negatives", "probe.seed", "probe.max_instances", "probe.dev_fraction",
    "probe.answer_space_k", "probe.answer_space_draws",
)  # fmt: skip
@asset(
    group_name="probe",
    partitions_def=relation_partitions,
    code_version="4",  # 4: the option-count sweep (`#k<k>d<draw>` copies); see core/store_upgrades.py
    ins={"wikidata_facts": AssetIn(partition_mapping=SAME_RELATION)},
)
def probe_instances(
    context: AssetExecutionContext,
    wikidata_facts: pl.DataFrame,
    object_pools: pl.DataFrame,
    probe_settings: ProbeSettings,
) -> pl.DataFrame:
    """Instances of one relation: gold objects plus the relation's answer space (BEAR) or sampled
    distractors (METHODS §5), an imported fixed answer space, or MACE questions with exactly 1, 2,
    4 or 6 answers; the answer_space column says which."""
    spec = get_relation(context.partition_key)
    instances = relation_instances(spec, wikidata_facts, object_pools, probe_settings, log=context.log.info)
    context.add_output_metadata(
        {
            "instances": instances.height,
            "mean_options": float(instances["n_options"].mean()),
            "n_gold": MetadataValue.json(dict(instances.group_by("n_gold").len().sort("n_gold").iter_rows())),
            "dev": int((instances["split"] == "dev").sum()),
            "sweep_copies": MetadataValue.json(sweep_copies(instances)),
            # settings, not measurements: text, so the UI's Plots toggle does not chart them
            "seed": MetadataValue.text(str(probe_settings.seed)),
            "n_negatives": MetadataValue.text(str(probe_settings.n_negatives)),
            "answer_space": MetadataValue.json(
                dict(instances.group_by("answer_space").len().sort("answer_space").iter_rows())
            ),
            "answer_space_size": MetadataValue.json(
                dict(
                    instances.group_by("answer_space_size")
                    .len()
                    .drop_nulls()
                    .sort("answer_space_size")
                    .iter_rows()
                )
            ),
        }
    )
    return instances


@reads(
    "probe.template_kinds", "probe.max_templates", "probe.seed", "probe.perturbation_seeds",
    "probe.capitalize_statements", "table:generated_templates",
)  # fmt: skip
@asset(
    group_name="probe",
    partitions_def=relation_partitions,
    code_version="5",  # 5: context_end, context templates (demonstrations from the relation's facts)
    ins={"wikidata_facts": AssetIn(partition_mapping=SAME_RELATION)},
)
def statements(
    context: AssetExecutionContext,
    probe_instances: pl.DataFrame,
    templates: pl.DataFrame,
    wikidata_facts: pl.DataFrame,
    probe_settings: ProbeSettings,
) -> pl.DataFrame:
    """Every instance × chosen template × option as a sentence, with subject and object spans; a
    context template's statements open with demonstrations drawn from the relation's facts
    (context_end: where the statement proper begins)."""
    # generated_templates is optional (materialized on demand), so it is read from its table when
    # present rather than declared as an input that every run would have to materialize first.
    home = kcal_home(probe_settings.home or None)
    generated_path = partition_path(home, "generated_templates")
    generated = pl.read_parquet(generated_path) if generated_path.exists() else None
    chosen = run_templates(
        templates.filter(pl.col("relation_id") == context.partition_key),
        generated,
        probe_settings.template_kinds,
        probe_settings.template_limit,
        probe_settings.perturbation_seeds,
        log=context.log.info,
    )
    frame = relation_statements(
        probe_instances,
        chosen,
        probe_settings.seed,
        capitalize=probe_settings.capitalize_statements,
        facts=wikidata_facts,
        log=context.log.info,
    )
    context.add_output_metadata(
        {
            "statements": frame.height,
            "templates": frame["template_id"].n_unique(),
            "template_kinds": ", ".join(probe_settings.template_kinds),
        }
    )
    return frame


@reads("catalog")
@asset(
    group_name=GROUP,
    code_version="2",
    ins={
        "wikidata_facts": AssetIn(partition_mapping=EVERY_RELATION),
        "dropped_facts": AssetIn(partition_mapping=EVERY_RELATION),
        "probe_instances": AssetIn(partition_mapping=EVERY_RELATION),
    },
)
def data_quality(
    wikidata_facts: pl.DataFrame, dropped_facts: pl.DataFrame, probe_instances: pl.DataFrame
) -> pl.DataFrame:
    """Per relation: facts, drops by reason, options per instance, duplicate and id-like labels;
    MACE relations also the candidate questions each filter dropped and questions per gold count."""
    facts = pl.concat([wikidata_facts, dropped_facts], how="diagonal_relaxed")
    return quality_report(facts, probe_instances, load_catalog())


@reads("catalog", "probe.seed", "probe.paraphrase_model", "probe.paraphrase_relations")
@asset(
    group_name="paraphrases",  # on demand only: a stage of its own (assets/jobs.py)
    code_version="1",
)
def generated_templates(
    context: AssetExecutionContext, models: ModelProvider, probe_settings: ProbeSettings
) -> pl.DataFrame:
    """Paraphrases of the curated templates written by an instruct LM, kept only if well-formed
    (one [X], one [Y], sane length, new); generator and prompt recorded per row.

    Optional, on demand: "Never materialized" is its normal state. Neither `kcal demo` nor the
    sensors run it; `kcal dataset paraphrase` (or the `paraphrases` job) does, and the statements
    use it only with `--template-kinds curated,generated`."""
    key = probe_settings.paraphrase_model or models.registry().entries()[0].key
    entry, loaded = models.entry(key), models.load(key)
    kept_all, reasons, per_relation = [], {}, {}
    wanted = set(probe_settings.paraphrase_relations)
    for spec in load_catalog().values():
        if wanted and spec.relation_id not in wanted:
            continue
        candidates = generate_paraphrases(
            loaded,
            spec.relation_id,
            spec.label,
            list(spec.templates),
            model_id=entry.id,
            seed=probe_settings.seed,
        )
        kept, rejected = filter_candidates(candidates, list(spec.templates))
        kept_all += kept
        for reason, n in reason_counts(rejected).items():
            reasons[reason] = reasons.get(reason, 0) + n
        per_relation[spec.relation_id] = {"candidates": len(candidates), "kept": len(kept)}
        context.log.info(f"{spec.relation_id}: kept {len(kept)} of {len(candidates)} paraphrases")
    context.add_output_metadata(
        {
            "kept": len(kept_all),
            "rejected": MetadataValue.json(reasons),
            "per_relation": MetadataValue.json(per_relation),
            "generator": entry.id,
        }
    )
    return paraphrase_rows(kept_all)
