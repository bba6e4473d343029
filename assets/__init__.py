"""Dagster assets of kcal: thin wrappers over kcal_pipeline, one module per stage."""
