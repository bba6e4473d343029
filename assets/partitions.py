"""Partitions: relation (static, from the catalog) and model (dynamic, from models.toml)."""
from dagster import DynamicPartitionsDefinition, MultiPartitionsDefinition, StaticPartitionsDefinition

from kcal_pipeline.relations import relation_ids

relation_partitions = StaticPartitionsDefinition(relation_ids())
model_partitions = DynamicPartitionsDefinition(name="model")
model_relation_partitions = MultiPartitionsDefinition({"model": model_partitions, "relation": relation_partitions})
