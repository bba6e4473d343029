"""Partitions: relation (static, from the catalog) and model (dynamic, from models.toml)."""

import warnings

from dagster import (
    AssetIn,
    BetaWarning,
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    MultiToSingleDimensionPartitionMapping,
    StaticPartitionsDefinition,
)

from kcal_pipeline.dataset.relations import relation_ids

relation_partitions = StaticPartitionsDefinition(relation_ids())
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
