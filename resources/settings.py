"""Probe settings shared by the dataset assets; changing them changes the probe."""
from __future__ import annotations

from dagster import ConfigurableResource

from kcal_pipeline.probe import ProbeConfig


class ProbeSettings(ConfigurableResource):
    n_negatives: int = 5
    seed: int = 13
    max_instances: int = 100  # 0 = every subject
    max_templates: int = 3    # 0 = every curated template
    dev_fraction: float = 0.2
    home: str = ""

    def probe_config(self) -> ProbeConfig:
        return ProbeConfig(n_negatives=self.n_negatives, seed=self.seed,
                           max_instances=self.max_instances or None, dev_fraction=self.dev_fraction)
