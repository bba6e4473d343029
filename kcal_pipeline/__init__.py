"""kcal: do language models know what they know? The domain library (no Dagster imports)."""

__version__ = "0.1.0"
