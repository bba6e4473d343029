"""Claims of seed 001, Tinner 2024: precision of the facts asserted above 0.5, paraphrase
aggregation, demonstrations and context."""

from __future__ import annotations

from kcal_pipeline.reporting.findings.core import Paper

TINNER = Paper(
    "001",
    "Tinner 2024 (seed 001)",
    "Tinner 2024",
)
