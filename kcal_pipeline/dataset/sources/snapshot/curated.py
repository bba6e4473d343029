"""Curated facts about people, organisations and works, from TSV files the project writes itself.

No installed package knows where Einstein was born or who makes the PlayStation, so these facts
are curated by hand: well-known, stable facts only (CC0, see SOURCES.md). The files live in
`data/` and share one format:

    # comment lines and blank lines are ignored
    person<TAB>P19<TAB>P27           header: the subject kind, then one property id per column
    Albert Einstein<TAB>Ulm@DE<TAB>DE|CH|US

- Subject kinds: `person` (a human, typed P31 Q5; the id scheme of mace_data.py, so a Nobel
  laureate there is the same entity), `org`, `work` — the first cell is the English label —
  and `country`, whose first cell is an ISO 3166 code of a country from geo.py.
- A cell holds zero or more objects separated by `|`; an empty cell states nothing.
- Objects are written by the kind of their property (OBJECT_KINDS): a city as `Name@ISO`
  (the GeoNames city of that name in that country, so it is geo.py's entity), a country as its
  ISO code, a language as its CLDR code, anything else as its English label.

Every problem (unknown property, missing label, unknown country or language code, wrong number
of cells) raises CuratedDataError naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from kcal_pipeline.dataset.sources.snapshot import geo
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, clean_label, slug

HUMAN = "Q5"
FILES = (
    "people_science.tsv",
    "people_music.tsv",
    "people_sport.tsv",
    "people_culture_politics.tsv",
    "organisations.tsv",
    "software.tsv",
    "products.tsv",
    "television.tsv",
    "memberships.tsv",
)
SUBJECT_KINDS = ("person", "org", "work", "country")

# The kind of each curated property's object. Labelled kinds become `kcal:<kind>-<slug>`, so one
# name is one entity across files (the employer Microsoft is the developer Microsoft).
OBJECT_KINDS = {
    "P19": "city",
    "P20": "city",
    "P159": "city",
    "P27": "country",
    "P495": "country",
    "P103": "language",
    "P1412": "language",
    "P106": "occupation",
    "P101": "field",
    "P1303": "instrument",
    "P136": "genre",
    "P413": "position",
    "P108": "org",
    "P264": "org",
    "P463": "org",
    "P178": "org",
    "P176": "org",
    "P449": "org",
}


class CuratedDataError(ValueError):
    """A curated file is malformed; the message names the file and the line."""


@dataclass(frozen=True)
class Row:
    """One data line: where it came from, its subject cell and its cells by property."""

    where: str
    subject: str
    cells: tuple[tuple[str, str], ...]


def read_rows(name: str, text: str) -> tuple[str, list[Row]]:
    """Parse one file into its subject kind and rows; only the shape is checked here."""
    header, rows = None, []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        cells = [cell.strip() for cell in line.split("\t")]
        if header is None:
            header = _check_header(cells, where)
            continue
        if len(cells) > len(header):
            raise CuratedDataError(f"{where}: {len(cells)} cells but the header has {len(header)}")
        cells += [""] * (len(header) - len(cells))
        if not cells[0]:
            raise CuratedDataError(f"{where}: missing subject label")
        rows.append(Row(where, cells[0], tuple(zip(header[1:], cells[1:], strict=True))))
    if header is None:
        raise CuratedDataError(f"{name}: no header line")
    return header[0], rows


def _check_header(cells: list[str], where: str) -> list[str]:
    if cells[0] not in SUBJECT_KINDS:
        raise CuratedDataError(f"{where}: subject kind {cells[0]!r} is not one of {SUBJECT_KINDS}")
    unknown = [c for c in cells[1:] if c not in OBJECT_KINDS]
    if unknown:
        raise CuratedDataError(
            f"{where}: unknown relation(s) {', '.join(unknown)}; "
            f"curated relations are {', '.join(sorted(OBJECT_KINDS))}"
        )
    return cells


def _country(code: str, where: str) -> str:
    if code not in geo.countries():
        raise CuratedDataError(f"{where}: unknown country code {code!r}")
    return geo.country_id(code)


def _labelled(graph: Graph, kind: str, label: str, where: str) -> str:
    """The entity named by label; two labels that slug alike ('Sony', 'SONY') would silently merge
    two entities, so that is an error."""
    entity = graph.entity(f"kcal:{kind}-{slug(label)}", label)
    if entity is None or not slug(label):
        raise CuratedDataError(f"{where}: unusable {kind} label {label!r}")
    if graph.labels[entity] != clean_label(label):
        raise CuratedDataError(f"{where}: {label!r} has the same id {entity} as {graph.labels[entity]!r}")
    return entity


class _Resolver:
    """Turns a cell's text into an entity id of the graph, declaring the entity with its label."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.languages = geo.language_labels()

    def subject(self, kind: str, text: str, where: str) -> str:
        if kind == "country":
            return _country(text, where)
        entity = _labelled(self.graph, kind, text, where)
        if kind == "person":
            self.graph.add(entity, "P31", HUMAN)
        return entity

    def object(self, prop: str, text: str, where: str) -> str:
        kind = OBJECT_KINDS[prop]
        if kind == "country":
            return _country(text, where)
        if kind == "language":
            return self._language(text, where)
        if kind == "city":
            return self._city(text, where)
        return _labelled(self.graph, kind, text, where)

    def _language(self, code: str, where: str) -> str:
        entity = self.graph.entity(f"kcal:lang-{code}", self.languages.get(code))
        if entity is None:
            raise CuratedDataError(f"{where}: unknown language code {code!r} (expected a CLDR code)")
        return entity

    def _city(self, text: str, where: str) -> str:
        name, _, iso = text.rpartition("@")
        if not name.strip() or clean_label(name) is None:
            raise CuratedDataError(f"{where}: city {text!r} is not written as 'Name@ISO'")
        _country(iso, where)
        return geo.city_entity(self.graph, iso, name.strip())


def add_rows(graph: Graph, kind: str, rows: list[Row]) -> None:
    resolve = _Resolver(graph)
    for row in rows:
        subject = resolve.subject(kind, row.subject, row.where)
        for prop, cell in row.cells:
            for text in filter(None, (part.strip() for part in cell.split("|"))):
                graph.add(subject, prop, resolve.object(prop, text, row.where))


def contribute(graph: Graph) -> None:
    data = resources.files("kcal_pipeline.dataset.sources.snapshot").joinpath("data")
    for name in FILES:
        kind, rows = read_rows(name, data.joinpath(name).read_text("utf-8"))
        add_rows(graph, kind, rows)
