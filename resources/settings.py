"""Settings resources: the probe (dataset assets) and scoring; changing them changes the results.

Their fields are those of kcal_pipeline.core.options (defined and validated there once); the
resources add only where state lives.
"""

from dagster import ConfigurableResource

from kcal_pipeline.core.options import ProbeOptions, ScoringOptions


class ProbeSettings(ConfigurableResource, ProbeOptions):
    """How the probe is built (kcal_pipeline.core.options.ProbeOptions)."""

    home: str = ""


class ScoringSettings(ConfigurableResource, ScoringOptions):
    """How statement_scores scores (kcal_pipeline.core.options.ScoringOptions); part of its
    fingerprint, so changing a field rescores, and leaving them alone never does."""
