"""Dagster resources of kcal: storage, SPARQL endpoint, models, DuckDB, probe settings."""
from resources.model_provider import ModelProvider
from resources.parquet_io import ParquetIOManager
from resources.settings import ProbeSettings
from resources.sparql_endpoint import SparqlEndpoint
from resources.warehouse import DuckDBWarehouse


def default_resources(home: str = "", sparql_url: str = "", **settings) -> dict:
    """The resources of one KCAL_HOME; tests pass a temporary home and small settings."""
    return {
        "io_manager": ParquetIOManager(home=home),
        "sparql": SparqlEndpoint(url=sparql_url, home=home),
        "models": ModelProvider(home=home),
        "warehouse": DuckDBWarehouse(home=home),
        "probe_settings": ProbeSettings(home=home, **settings),
    }


__all__ = ["DuckDBWarehouse", "ModelProvider", "ParquetIOManager", "ProbeSettings", "SparqlEndpoint",
           "default_resources"]
