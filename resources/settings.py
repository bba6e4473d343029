"""Settings resources: the probe (dataset assets), scoring and generation; changing them changes
the results.

Their fields are those of kcal_pipeline.core.options (defined and validated there once); the
resources add only where state lives.
"""

import hashlib
from collections.abc import Mapping
from pathlib import Path

from dagster import AssetsDefinition, ConfigurableResource, OpDefinition, Out

from kcal_pipeline.core.options import GenerationOptions, ProbeOptions, ScoringOptions
from kcal_pipeline.core.paths import registry_path
from kcal_pipeline.core.storage import existing_partitions, partition_path
from kcal_pipeline.core.versions import stored_version


class ProbeSettings(ConfigurableResource, ProbeOptions):
    """How the probe is built (kcal_pipeline.core.options.ProbeOptions)."""

    home: str = ""


class ScoringSettings(ConfigurableResource, ScoringOptions):
    """How statement_scores scores (kcal_pipeline.core.options.ScoringOptions); part of its
    fingerprint, so changing a field rescores, and leaving them alone never does."""


class GenerationSettings(ConfigurableResource, GenerationOptions):
    """How open answers are drawn (kcal_pipeline.core.options.GenerationOptions); every field is a
    declared read of `generations`, so changing one reruns exactly the generation partitions."""


# An asset declares what it reads besides its inputs in its definition metadata, under this key:
# "probe.<field>" / "scoring.<field>" settings, "catalog" (the whole relation catalog), "relation"
# (the partition's relation spec), "model" (the partition's registry entry), "table:<name>" (an
# unpartitioned table read directly, e.g. generated_templates), "relation_table:<name>" (the
# partition's relation of a relation-keyed table, e.g. wikidata_facts), "relation_tables:<name>"
# (every relation's file of it), "model_tables:<name>" (every file of the partition's model,
# e.g. the generation tables the report shows when they exist). Both the IO manager (recording a
# partition's data version) and the CLI runner (deciding whether it is up to date) resolve it here.
# The code location moves the declaration out of the metadata (hide_declared_reads) into
# _READS_BY_ASSET: it is kcal's bookkeeping, and the UI would list it among the asset's metadata.
READS_KEY = "kcal/reads"
_READS_BY_ASSET: dict[str, list[str]] = {}


def _parse_reads(raw: object) -> list[str]:
    raw = getattr(raw, "value", raw)  # Dagster may wrap definition metadata values
    return [part.strip() for part in str(raw).split(",") if part.strip()]


def hide_declared_reads(assets_def: AssetsDefinition) -> AssetsDefinition:
    """The definition without READS_KEY in its metadata (its specs' and its op outputs', which
    Dagster merges back into the specs), the declaration kept for declared_reads by asset name."""
    declared = {
        key: spec.metadata[READS_KEY]
        for key, spec in assets_def.specs_by_key.items()
        if READS_KEY in spec.metadata
    }
    if not declared or not isinstance(assets_def.node_def, OpDefinition):
        return assets_def
    for key, raw in declared.items():
        _READS_BY_ASSET[key.to_user_string()] = _parse_reads(raw)

    def without(metadata: Mapping | None) -> dict:
        return {k: v for k, v in (metadata or {}).items() if k != READS_KEY}

    op = assets_def.op
    outs = {o.name: Out.from_definition(o)._replace(metadata=without(o.metadata)) for o in op.output_defs}
    return assets_def.__class__.dagster_internal_init(
        **{
            **assets_def.get_attributes_dict(),
            "node_def": op.with_replaced_properties(name=op.name, outs=outs),
            "specs": [spec.replace_attributes(metadata=without(spec.metadata)) for spec in assets_def.specs],
        }
    )


def declared_reads(asset: str, metadata: Mapping | None = None) -> list[str]:
    """What `asset` declared it reads: from its definition metadata when it still carries the
    declaration (an asset definition used directly, as in a test), else as the code location
    recorded it when hiding it."""
    if metadata and READS_KEY in metadata:
        return _parse_reads(metadata[READS_KEY])
    return list(_READS_BY_ASSET.get(asset, []))


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def resolve_reads(
    reads: list[str],
    dims: dict[str, str],
    probe: ProbeOptions,
    scoring: ScoringOptions,
    home: Path,
    generation: GenerationOptions | None = None,
) -> tuple[dict[str, object], list[Path]]:
    """(setting values, extra input files) of one partition's declared reads."""
    from kcal_pipeline.dataset.relations import get_relation, load_catalog
    from kcal_pipeline.scoring.models.registry import Registry

    values: dict[str, object] = {}
    files: list[Path] = []
    for name in reads:
        group, _, field = name.partition(".")
        if group == "probe":
            values[name] = getattr(probe, field)
        elif group == "scoring":
            values[name] = getattr(scoring, field)
        elif group == "generation":
            values[name] = getattr(generation or GenerationOptions(), field)
        elif name == "catalog":
            values[name] = _digest(sorted(load_catalog().items()))
        elif name == "relation":
            spec = get_relation(dims["relation"])
            # An imported relation's facts file is part of it: a re-import that changes only the
            # facts (e.g. a label) must still make them stale.
            values[name] = _digest((spec, stored_version(Path(spec.data)))) if spec.data else _digest(spec)
        elif name == "model":
            entry = Registry(registry_path(home)).get(dims["model"])
            values[name] = _digest(entry)
        elif group.startswith("table:"):
            path = partition_path(home, group.removeprefix("table:"))
            if path.exists():
                files.append(path)
        elif group.startswith("relation_table:"):
            path = partition_path(home, group.removeprefix("relation_table:"), {"relation": dims["relation"]})
            if path.exists():
                files.append(path)
        elif group.startswith("relation_tables:"):
            files += existing_partitions(home, group.removeprefix("relation_tables:"), {})
        elif group.startswith("model_tables:"):
            files += existing_partitions(home, group.removeprefix("model_tables:"), {"model": dims["model"]})
        else:
            raise ValueError(f"unknown declared read {name!r} (see resources/settings.py READS_KEY)")
    return values, files


def reads(*names: str) -> dict[str, str]:
    """Definition metadata declaring what an asset reads besides its inputs (see READS_KEY)."""
    return {READS_KEY: ",".join(names)}


def scoring_reads() -> tuple[str, ...]:
    """Every scoring setting a score depends on (all but chunking), as declared reads."""
    return tuple(f"scoring.{name}" for name in ScoringOptions().fingerprint_values())


def generation_reads() -> tuple[str, ...]:
    """Every generation setting, as declared reads (all of them change the answers drawn)."""
    return tuple(f"generation.{name}" for name in GenerationOptions.model_fields)
