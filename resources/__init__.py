"""Dagster resources of kcal: storage, SPARQL endpoint, models, DuckDB, probe settings."""

from resources.model_provider import ModelProvider
from resources.parquet_io import ParquetIOManager
from resources.settings import ProbeSettings, ScoringSettings
from resources.sparql_endpoint import SparqlEndpoint
from resources.warehouse import DuckDBWarehouse


def default_resources(home: str = "", sparql_url: str = "", **settings) -> dict:
    """The resources of one KCAL_HOME; tests pass a temporary home and small settings (a key that
    is a ScoringSettings field goes there, every other key to ProbeSettings)."""
    scoring = {k: settings.pop(k) for k in list(settings) if k in ScoringSettings.model_fields}
    return {
        "io_manager": ParquetIOManager(home=home),
        "sparql": SparqlEndpoint(url=sparql_url, home=home),
        "models": ModelProvider(home=home),
        "warehouse": DuckDBWarehouse(home=home),
        "probe_settings": ProbeSettings(home=home, **settings),
        "scoring_settings": ScoringSettings(**scoring),
    }


__all__ = [
    "DuckDBWarehouse",
    "ModelProvider",
    "ParquetIOManager",
    "ProbeSettings",
    "ScoringSettings",
    "SparqlEndpoint",
    "default_resources",
]
