"""The SPARQL endpoint resource: the live Wikidata service or the embedded snapshot served locally."""
from __future__ import annotations

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from kcal_pipeline.config import kcal_home
from kcal_pipeline.snapshot import ensure_store
from kcal_pipeline.sparql import DEFAULT_USER_AGENT, LocalEndpoint, SparqlClient

WIKIDATA_URL = "https://query.wikidata.org/sparql"


class SparqlEndpoint(ConfigurableResource):
    """url empty (the default) = start `oxigraph serve-read-only` over the embedded snapshot on a
    free 127.0.0.1 port for the run and stop it afterwards; set url to Wikidata's endpoint for the
    live path. The same queries run on both."""

    url: str = ""
    home: str = ""
    timeout: float = 60.0
    retries: int = 3
    user_agent: str = DEFAULT_USER_AGENT

    _local: LocalEndpoint | None = PrivateAttr(default=None)
    _source: str = PrivateAttr(default="")
    _client: SparqlClient | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        url = self.url
        if not url:
            info = ensure_store(kcal_home(self.home or None) / "snapshot")
            self._local = LocalEndpoint(info.store_dir)
            url = self._local.start()
            self._source = f"embedded-snapshot:{info.content_hash[:12]}"
        else:
            self._source = url
        self._client = SparqlClient(url, timeout=self.timeout, retries=self.retries, user_agent=self.user_agent)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None

    @property
    def is_local(self) -> bool:
        return not self.url

    @property
    def source(self) -> str:
        """Provenance for fact rows: the live URL, or the embedded snapshot's content hash
        (not the random local port, so re-materializing gives identical rows)."""
        return self._source

    def select(self, query: str) -> dict:
        if self._client is None:
            raise RuntimeError("SparqlEndpoint used outside a Dagster run (setup_for_execution not called)")
        return self._client.select(query)
