"""Dataset assets: facts from SPARQL, relations, templates, probe instances, statements."""

from datetime import datetime, timezone

import polars as pl
from dagster import AssetExecutionContext, MetadataValue, asset

from assets.partitions import relation_partitions
from kcal_pipeline.probe import build_instances, build_statements, relations_frame, templates_frame
from kcal_pipeline.relations import get_relation, load_catalog
from kcal_pipeline.wikidata import parse_facts, relation_query
from resources import ProbeSettings, SparqlEndpoint

GROUP = "dataset"


@asset(group_name=GROUP, code_version="1")
def relations() -> pl.DataFrame:
    """The relation catalog (kcal_pipeline/data/relations.toml) as a table."""
    return relations_frame(load_catalog())


@asset(group_name=GROUP, code_version="1")
def templates(probe_settings: ProbeSettings) -> pl.DataFrame:
    """Curated templates of every relation; rank 0 is the headline template."""
    return templates_frame(load_catalog(), probe_settings.max_templates or None)


@asset(group_name=GROUP, partitions_def=relation_partitions, code_version="1")
def wikidata_facts(context: AssetExecutionContext, sparql: SparqlEndpoint) -> pl.DataFrame:
    """(subject, object) facts of one relation, with English labels and provenance."""
    spec = get_relation(context.partition_key)
    query = relation_query(spec)
    parsed = parse_facts(sparql.select(query), spec.relation_id)
    if parsed.frame.height == 0:
        raise ValueError(f"relation {spec.relation_id!r} returned no facts from {sparql.source}; "
                         f"dropped rows by reason: {parsed.dropped}")
    retrieved_at = None if sparql.is_local else datetime.now(timezone.utc).isoformat(timespec="seconds")
    for reason, n in parsed.dropped.items():
        if n:
            context.log.warning(f"{spec.relation_id}: dropped {n} rows ({reason})")
    context.add_output_metadata({
        "facts": parsed.frame.height, "subjects": parsed.frame["subject_id"].n_unique(),
        "objects": parsed.frame["object_id"].n_unique(), "source": sparql.source,
        "dropped": MetadataValue.json(parsed.dropped), "query": MetadataValue.md(f"```sparql\n{query}\n```"),
    })
    return parsed.frame.with_columns(
        qualifiers=pl.lit(None, dtype=pl.Utf8), source=pl.lit(sparql.source),
        retrieved_at=pl.lit(retrieved_at, dtype=pl.Utf8))


@asset(group_name=GROUP, partitions_def=relation_partitions, code_version="1")
def probe_instances(context: AssetExecutionContext, wikidata_facts: pl.DataFrame,
                    probe_settings: ProbeSettings) -> pl.DataFrame:
    """One instance per subject: gold objects plus sampled distractors (METHODS §5)."""
    config = probe_settings.probe_config()
    instances = build_instances(wikidata_facts, context.partition_key, config)
    context.add_output_metadata({
        "instances": instances.height, "mean_options": float(instances["n_options"].mean()),
        "dev": int((instances["split"] == "dev").sum()), "seed": config.seed,
        "n_negatives": config.n_negatives,
    })
    return instances


@asset(group_name=GROUP, partitions_def=relation_partitions, code_version="1")
def statements(context: AssetExecutionContext, probe_instances: pl.DataFrame,
               templates: pl.DataFrame) -> pl.DataFrame:
    """Every instance × template × option as a sentence, with subject and object spans."""
    frame = build_statements(probe_instances, templates)
    context.add_output_metadata({"statements": frame.height,
                                 "templates": frame["template_id"].n_unique()})
    return frame
