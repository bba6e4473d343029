"""Partitions: the catalog's relations (for the facts), the probe's relations and the models, all
dynamic and kept in step by the runner and the registry sensor.

Facts are fetched for every relation of the catalog, but a probe covers the relations a user chose
(`kcal demo --relation`, four by default). The `relation` partitions are those probe relations, so
a per-model summary depends on exactly the relations that were probed (not on the 28 the probe left
out), and the UI's model × relation grid shows the probe, not the whole catalog. The catalog's
relations (`catalog_relation`) are dynamic too, equal to the catalog: a probe relation reads its
facts through an identity mapping, which Dagster accepts between two dynamic definitions only, and
an imported relation set appears without reloading the code location."""

import warnings

from dagster import (
    AssetIn,
    BetaWarning,
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    MultiToSingleDimensionPartitionMapping,
)

from kcal_pipeline.core.storage import partition_path
from kcal_pipeline.dataset.relations import relation_ids

catalog_relation_partitions = DynamicPartitionsDefinition(name="catalog_relation")  # = the catalog
relation_partitions = DynamicPartitionsDefinition(name="relation")  # the probe's relations
model_partitions = DynamicPartitionsDefinition(name="model")
model_relation_partitions = MultiPartitionsDefinition(
    {"model": model_partitions, "relation": relation_partitions}
)


def one_dimension_of(asset: str, dimension: str) -> dict[str, AssetIn]:
    """Input `asset` partitioned by `dimension` only ('relation' or 'model') into a model × relation
    step, or the reverse: every relation of one model into a per-model step."""
    with warnings.catch_warnings():
        # The mapping is marked beta, yet it is the documented way to join these partition sets.
        warnings.simplefilter("ignore", BetaWarning)
        return {asset: AssetIn(partition_mapping=MultiToSingleDimensionPartitionMapping(dimension))}


def partition_changes(current, keys: list[str]) -> tuple[list[str], list[str]]:
    """(to add, to delete) that make the `model` partitions equal the registry's keys."""
    current = set(current)
    return [k for k in keys if k not in current], sorted(current - set(keys))


def relation_partition_changes(current_of, probe) -> list[tuple[str, list[str], list[str]]]:
    """(name, to add, to delete) for the facts' `catalog_relation` partitions (made equal to the
    catalog) and the probe's `relation` partitions (joined by `probe`); `current_of(name)` gives a
    definition's current keys. The runner applies them, the registry sensor requests them."""
    known = relation_ids()
    wanted = ((catalog_relation_partitions, known), (relation_partitions, probe))
    return [(pdef.name, *relation_changes(current_of(pdef.name), keys, known)) for pdef, keys in wanted]


def relation_changes(current, wanted, known) -> tuple[list[str], list[str]]:
    """(to add, to delete) for the probe's `relation` partitions: the wanted relations (a run's, or
    those with a probe on disk) join the probe; a relation no longer in the catalog leaves it. A
    probed relation is never dropped otherwise: its tables stay part of every model's summary."""
    current, known = set(current), set(known)
    added = [r for r in dict.fromkeys(wanted) if r not in current and r in known]
    return added, sorted(current - known)


def probed_relations(home) -> list[str]:
    """Catalog relations with a probe on disk (their probe_instances): they belong to the probe even
    where the instance does not know them yet (a store made before relations were partitions)."""
    return [r for r in relation_ids() if partition_path(home, "probe_instances", {"relation": r}).exists()]
