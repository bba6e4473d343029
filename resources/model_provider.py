"""The model resource: the registry (models.toml) and loaded models, cached per process."""

from __future__ import annotations

from dagster import ConfigurableResource

from kcal_pipeline.core.paths import kcal_home, model_cache_dir, registry_path
from kcal_pipeline.scoring.models import LoadedModel, ModelEntry, Registry, load_model


class ModelProvider(ConfigurableResource):
    home: str = ""

    def registry(self) -> Registry:
        return Registry(registry_path(kcal_home(self.home or None)))

    def entry(self, key: str) -> ModelEntry:
        return self.registry().get(key)

    def load(self, key: str) -> LoadedModel:
        return load_model(self.entry(key), model_cache_dir(kcal_home(self.home or None)))
