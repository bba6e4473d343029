"""Dagster resources of kcal: storage, SPARQL endpoint, models, DuckDB, probe settings."""

from resources.model_provider import ModelProvider
from resources.parquet_io import ParquetIOManager
from resources.settings import GenerationResource, ProbeSettings, ScoringSettings
from resources.sparql_endpoint import SparqlEndpoint
from resources.store_lock import StoreLock
from resources.warehouse import DuckDBWarehouse


def default_resources(
    home: str = "", sparql_url: str = "", wait_for_store_lock: bool = True, **settings
) -> dict:
    """The resources of one KCAL_HOME; tests pass a temporary home and small settings (a key that
    is a ScoringSettings or GenerationResource field goes there, every other key to ProbeSettings).
    A run waits for the store lock while another process writes the home, or fails at once with
    wait_for_store_lock false."""
    scoring = {k: settings.pop(k) for k in list(settings) if k in ScoringSettings.model_fields}
    generation = {k: settings.pop(k) for k in list(settings) if k in GenerationResource.model_fields}
    probe_settings, scoring_settings = ProbeSettings(home=home, **settings), ScoringSettings(**scoring)
    generation_settings = GenerationResource(**generation)
    store_lock = StoreLock(home=home, wait=wait_for_store_lock)
    return {
        "io_manager": ParquetIOManager(
            home=home,
            probe_settings=probe_settings,
            scoring_settings=scoring_settings,
            generation_settings=generation_settings,
            store_lock=store_lock,
        ),
        "sparql": SparqlEndpoint(url=sparql_url, home=home),
        "models": ModelProvider(home=home),
        "warehouse": DuckDBWarehouse(home=home),
        "probe_settings": probe_settings,
        "scoring_settings": scoring_settings,
        "generation_settings": generation_settings,
        "store_lock": store_lock,
    }


__all__ = [
    "DuckDBWarehouse",
    "GenerationResource",
    "ModelProvider",
    "ParquetIOManager",
    "ProbeSettings",
    "ScoringSettings",
    "SparqlEndpoint",
    "StoreLock",
    "default_resources",
]
