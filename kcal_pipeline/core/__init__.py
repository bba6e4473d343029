"""Shared by every stage: ids and keys, frame checks, atomic Parquet storage, paths, options, progress,
DuckDB views."""
