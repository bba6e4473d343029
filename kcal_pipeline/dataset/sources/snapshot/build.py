"""The embedded Wikidata-shaped snapshot: built from installed packages, loaded into oxigraph.

The snapshot lets the pipeline run offline with the very SPARQL it sends to query.wikidata.org:
properties are `wdt:P…`, labels are `rdfs:label`@en, and entities are `wd:Q…` wherever a cited
source carries the entity's QID (the committed table of ids.py); the rest stay under the reserved
project namespace (keys.PROJECT_ENTITY_IRI), so no Q-number is ever invented. Sources and
licences: SOURCES.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kcal_pipeline.core.storage import write_text_atomic
from kcal_pipeline.dataset.sources.snapshot import curated, geo, ids, mace_data
from kcal_pipeline.dataset.sources.snapshot.graph import Graph
from kcal_pipeline.dataset.sources.sparql import find_oxigraph

# Each contributor adds its relations to the one graph; order does not matter (output is sorted).
CONTRIBUTORS = [geo.contribute, mace_data.contribute, curated.contribute]


@dataclass(frozen=True)
class StoreInfo:
    store_dir: Path
    content_hash: str
    n_triples: int


def build_keyed_graph() -> Graph:
    """The graph under project keys only (`kcal:country-FR`): what make_ids.py matches to Wikidata."""
    graph = Graph()
    for contribute in CONTRIBUTORS:
        contribute(graph)
    return graph


def build_graph() -> Graph:
    """The snapshot graph: project keys with a sourced QID become that QID (ids.py)."""
    return ids.rekey(build_keyed_graph(), ids.table())


def build_ntriples() -> str:
    """The snapshot as sorted N-Triples; identical for identical package data, so hashable."""
    return build_graph().ntriples()


def ensure_store(root: Path) -> StoreInfo:
    """An oxigraph store of the snapshot under root, keyed by content hash; built at most once.

    The store is loaded into a temporary directory and renamed into place only after a completion
    marker is written, so a crash or a concurrent build never leaves a half-loaded store in use.
    """
    root = Path(root)
    text = build_ntriples()
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    info = StoreInfo(root / f"store-{digest[:12]}", digest, text.count("\n"))
    if _is_complete(info):
        return info
    root.mkdir(parents=True, exist_ok=True)
    nt_file = root / f"snapshot-{digest[:12]}.nt"
    write_text_atomic(nt_file, text)
    _load(nt_file, info)
    return info


_MARKER = ".kcal-complete"


def _is_complete(info: StoreInfo) -> bool:
    marker = info.store_dir / _MARKER
    return marker.is_file() and marker.read_text("utf-8").strip() == info.content_hash


def _load(nt_file: Path, info: StoreInfo) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{info.store_dir.name}-", dir=info.store_dir.parent))
    try:
        cmd = [find_oxigraph(), "load", "--location", str(tmp), "--file", str(nt_file)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"oxigraph load of {nt_file} failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        (tmp / _MARKER).write_text(info.content_hash + "\n", "utf-8")
        os.chmod(tmp, 0o755)
        if info.store_dir.exists() and not _is_complete(info):
            shutil.rmtree(info.store_dir)  # unmarked, so not trustworthy (e.g. marker removed by hand)
        try:
            os.rename(tmp, info.store_dir)
        except OSError:
            if not _is_complete(info):  # a concurrent build that won the rename is fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
