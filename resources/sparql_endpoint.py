"""The SPARQL endpoint resource: the live Wikidata service or the embedded snapshot served locally."""

from functools import lru_cache
from pathlib import Path

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.dataset.sources.snapshot import ensure_store
from kcal_pipeline.dataset.sources.sparql import DEFAULT_USER_AGENT, LocalEndpoint, SparqlClient
from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql, snapshot_endpoint_id


@lru_cache(maxsize=8)
def _store(root: Path):
    """Build (or find) the snapshot store once per process, not once per run: a demo makes one run
    per relation, and rebuilding the N-Triples each time costs seconds."""
    return ensure_store(root)


class SparqlEndpoint(ConfigurableResource):
    """url empty (the default) = start `oxigraph serve-read-only` over the embedded snapshot on a
    free 127.0.0.1 port for the run and stop it afterwards; set url to Wikidata's endpoint for the
    live path. The same queries run on both, and every answer goes through a raw-response cache
    under KCAL_HOME/cache/sparql, so re-materializing never asks the endpoint again."""

    url: str = ""
    home: str = ""
    timeout: float = 60.0
    retries: int = 3
    user_agent: str = DEFAULT_USER_AGENT

    _local: LocalEndpoint | None = PrivateAttr(default=None)
    _cached: CachedSparql | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        home = kcal_home(self.home or None)
        url = self.url
        if not url:
            info = _store(home / "snapshot")
            self._local = LocalEndpoint(info.store_dir)
            url = self._local.start()
            endpoint_id = snapshot_endpoint_id(info.content_hash)
        else:
            endpoint_id = url
        client = SparqlClient(url, timeout=self.timeout, retries=self.retries, user_agent=self.user_agent)
        self._cached = CachedSparql(client, home / "cache" / "sparql", endpoint_id)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None

    @property
    def cached(self) -> CachedSparql:
        if self._cached is None:
            raise RuntimeError("SparqlEndpoint used outside a Dagster run (setup_for_execution not called)")
        return self._cached

    @property
    def source(self) -> str:
        """Provenance: the live URL, or the embedded snapshot's content hash (not the local port)."""
        return self.cached.endpoint_id
