"""Settings resources: the probe (dataset assets), scoring and generation; changing them changes
the results.

Their fields are those of kcal_pipeline.core.options (defined and validated there once); the
resources add only where state lives.
"""

import hashlib
from collections.abc import Callable
from pathlib import Path

from dagster import AssetsDefinition, ConfigurableResource

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


class GenerationResource(ConfigurableResource, GenerationOptions):
    """How open answers are drawn (kcal_pipeline.core.options.GenerationOptions, whose validation it
    is: the sampler's GenerationSettings, kcal_pipeline/scoring/generation.py, is checked by the
    same); every field is a declared read of `generations`, so changing one reruns exactly the
    generation partitions. The resource `generation_settings`."""


# An asset declares what it reads besides its inputs with @reads(...) above its @asset (or
# @multi_asset: each of its assets): "probe.<field>" / "scoring.<field>" / "generation.<field>"
# settings, "catalog" (the whole relation catalog), "relation" (the partition's relation spec),
# "model" (the partition's registry entry), "table:<name>" (an unpartitioned table read directly,
# e.g. generated_templates), "relation_table:<name>" (the partition's relation of a relation-keyed
# table, e.g. wikidata_facts), "relation_tables:<name>" (every relation's file of it),
# "model_tables:<name>" (every file of the partition's model, e.g. the generation tables the report
# shows when they exist). Both the IO manager (recording a partition's data version) and the CLI
# runner (deciding whether it is up to date) resolve it here. The declaration is kcal's bookkeeping,
# so it lives in this registry by asset name, filled when the asset's module is imported; the asset
# definition is left as it is (its metadata, which the UI lists, never carries it).
DECLARED_READS: dict[str, tuple[str, ...]] = {}


def reads(*names: str) -> Callable[[AssetsDefinition], AssetsDefinition]:
    """Decorator: the decorated asset (each asset of a multi-asset) reads `names` besides its inputs
    (see DECLARED_READS); the definition is returned unchanged."""
    declared = tuple(names)

    def declare(assets_def: AssetsDefinition) -> AssetsDefinition:
        if not isinstance(assets_def, AssetsDefinition):
            raise TypeError(f"@reads goes above @asset or @multi_asset, not below (got {assets_def!r})")
        for key in assets_def.keys:
            asset = key.to_user_string()
            if DECLARED_READS.setdefault(asset, declared) != declared:
                raise ValueError(
                    f"asset {asset!r} declares its reads twice: {DECLARED_READS[asset]} and {declared}"
                )
        return assets_def

    return declare


def declared_reads(asset: str) -> list[str]:
    """What `asset` declared it reads (@reads), in the order declared; none when it declared none."""
    return list(DECLARED_READS.get(asset, ()))


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
            raise ValueError(f"unknown declared read {name!r} (see resources/settings.py DECLARED_READS)")
    return values, files


def scoring_reads() -> tuple[str, ...]:
    """Every scoring setting a score depends on (all but chunking), as declared reads."""
    return tuple(f"scoring.{name}" for name in ScoringOptions().fingerprint_values())


def generation_reads() -> tuple[str, ...]:
    """Every generation setting, as declared reads (all of them change the answers drawn)."""
    return tuple(f"generation.{name}" for name in GenerationOptions.model_fields)
