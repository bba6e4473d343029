"""The embedded facts snapshot: built from installed packages, served by a local oxigraph store."""

from kcal_pipeline.dataset.sources.snapshot.build import StoreInfo, build_ntriples, ensure_store

__all__ = ["StoreInfo", "build_ntriples", "ensure_store"]
