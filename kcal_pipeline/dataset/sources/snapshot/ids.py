"""Real Wikidata ids for the snapshot's entities, from the committed table `data/wikidata_ids.tsv`.

The contributors (geo.py, curated.py, mace_data.py) name entities by project keys (`kcal:country-FR`,
`kcal:person-albert-einstein`) so that every source naming the same thing reaches one entity. The
table maps each key for which a cited source carries a Wikidata QID to that QID (and, where the
source carries it, Wikidata's English label); `rekey` then rewrites the finished graph, so offline
results join with live Wikidata and with BEAR. Keys without a sourced QID stay under the project
namespace. The table is written by `make_ids.py` (run by a developer, never at build time); how
it matches and where each QID comes from: SOURCES.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from kcal_pipeline.core.keys import (
    PROJECT_ENTITY_IRI,
    PROJECT_PREFIX,
    check_entity_id,
    check_qid,
    entity_iri,
)
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, clean_label

FILE = "wikidata_ids.tsv"
COLUMNS = ("key", "qid", "wikidata_label", "source")


class IdTableError(ValueError):
    """The id table is malformed; the message names the line and the field."""


@dataclass(frozen=True)
class WikidataId:
    key: str  # the project key, e.g. 'kcal:country-FR'
    qid: str  # e.g. 'Q142'
    wikidata_label: str | None  # Wikidata's English label as the source carries it; None: keep ours
    source: str  # where the QID was read, e.g. 'natural-earth:ne_10m_admin_0_countries:FRA'


def parse(text: str, name: str = FILE) -> dict[str, WikidataId]:
    """Rows by key. A QID may name several keys only where Wikidata has one item for both (the
    state California of geo.py and the division California of mace_data.py); rekey checks that
    such keys carry the same label."""
    rows: dict[str, WikidataId] = {}
    header = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        cells = line.split("\t")
        if header is None:
            if tuple(cells) != COLUMNS:
                raise IdTableError(f"{where}: header {cells!r}, expected {list(COLUMNS)!r}")
            header = cells
            continue
        if len(cells) != len(COLUMNS):
            raise IdTableError(f"{where}: {len(cells)} cells, expected {len(COLUMNS)}")
        key, qid, label, source = cells
        if not key.startswith(PROJECT_PREFIX):
            raise IdTableError(f"{where}: key {key!r} is not a project key like 'kcal:country-FR'")
        try:
            check_entity_id(key, "key")
            check_qid(qid, "qid")
        except ValueError as exc:
            raise IdTableError(f"{where}: {exc}") from None
        if label and clean_label(label) != label:
            raise IdTableError(f"{where}: wikidata_label {label!r} is not a clean label")
        if not source.strip():
            raise IdTableError(f"{where}: empty source for {key}")
        if key in rows:
            raise IdTableError(f"{where}: key {key} appears twice")
        rows[key] = WikidataId(key, qid, label or None, source)
    if header is None:
        raise IdTableError(f"{name}: no header line")
    return rows


@lru_cache(maxsize=1)
def table() -> dict[str, WikidataId]:
    data = resources.files("kcal_pipeline.dataset.sources.snapshot").joinpath("data", FILE)
    return parse(data.read_text("utf-8"))


_PROJECT_IRI = re.compile(rf"^<{re.escape(PROJECT_ENTITY_IRI)}([^>]+)>$")


def rekey(graph: Graph, ids: dict[str, WikidataId]) -> Graph:
    """A copy of graph whose project keys with a QID in ids are that QID, labelled with Wikidata's
    label where the table carries one. Keys sharing a QID merge, so they must carry one label; a
    QID the graph already uses (Q5 'human') cannot be a key's."""
    taken = {e for e in graph.labels if not e.startswith(PROJECT_PREFIX)}
    clash = sorted(i.qid for i in ids.values() if i.qid in taken and i.key in graph.labels)
    if clash:
        raise IdTableError(f"{FILE}: {', '.join(clash)} already name other entities of the snapshot")
    merged: dict[str, set[str]] = {}
    for row in ids.values():
        if row.key in graph.labels:
            merged.setdefault(row.qid, set()).add(graph.labels[row.key])
    mixed = {qid: sorted(labels) for qid, labels in merged.items() if len(labels) > 1}
    if mixed:
        raise IdTableError(f"{FILE}: keys with different labels share a QID: {mixed}")

    def new(entity: str) -> str:
        row = ids.get(entity)
        return row.qid if row else entity

    def term(value: str) -> str:
        match = _PROJECT_IRI.match(value)
        return f"<{entity_iri(new(PROJECT_PREFIX + match[1]))}>" if match else value

    wikidata_labels: dict[str, str] = {}
    for row in sorted(ids.values(), key=lambda r: r.key):
        if row.wikidata_label and row.key in graph.labels:
            wikidata_labels.setdefault(row.qid, row.wikidata_label)
    out = Graph()
    for entity, label in graph.labels.items():
        out.labels[new(entity)] = wikidata_labels.get(new(entity), label)
    out.facts = {(new(s), p, new(o)) for s, p, o in graph.facts}
    out.values = {(new(s), p, v) for s, p, v in graph.values}
    out.statements = {
        (new(s), p, new(o), tuple((q, term(v)) for q, v in quals)) for s, p, o, quals in graph.statements
    }
    return out
