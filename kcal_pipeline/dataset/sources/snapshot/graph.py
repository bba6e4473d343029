"""The snapshot's graph: entities with English labels, direct facts and qualified statements.

Serialised in Wikidata's own shape, so the same SPARQL runs here and on query.wikidata.org:
`wdt:P…` for direct facts, `p:P…`/`ps:P…`/`pq:P…` for statements with qualifiers (e.g. an award
with its year), `rdfs:label`@en for names. Contributors (geo.py, curated.py, mace_data.py) each add
their part; the serialisation is sorted, so equal content gives an equal hash.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from kcal_pipeline.core.keys import entity_iri
from kcal_pipeline.dataset.sources.wikidata import looks_like_id

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
P = "http://www.wikidata.org/prop/"
PS = "http://www.wikidata.org/prop/statement/"
PQ = "http://www.wikidata.org/prop/qualifier/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
XSD = "http://www.w3.org/2001/XMLSchema#"
STATEMENT_IRI = "https://kcal.invalid/statement/"

_ECHAR = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def fold(text: str) -> str:
    """Accent- and case-insensitive form, to match GeoNames' ASCII capitals to accented city names."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().strip().casefold()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", fold(text)).strip("-")


def clean_label(text: str | None) -> str | None:
    """A usable English label, or None: sources carry stray spaces and some ids instead of names."""
    label = " ".join((text or "").split())
    return label if label and not looks_like_id(label) else None


def literal(label: str) -> str:
    """An @en N-Triples literal; only quotes, backslashes and controls are escaped, unicode stays UTF-8."""
    out = "".join(
        _ECHAR.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch) for ch in label
    )
    return f'"{out}"@en'


def typed_literal(value: int | float | str) -> str:
    """A typed literal as Wikidata stores it: a year as xsd:dateTime ('1995-01-01T00:00:00Z'),
    a number as xsd:decimal; str values must already be ISO dates ('1995-06-30')."""
    if isinstance(value, bool):
        raise TypeError(f"no literal form for a bool ({value!r})")
    if isinstance(value, int):
        return f'"{value:04d}-01-01T00:00:00Z"^^<{XSD}dateTime>'
    if isinstance(value, float):
        return f'"{value!r}"^^<{XSD}decimal>'
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return f'"{value}T00:00:00Z"^^<{XSD}dateTime>'
    raise ValueError(f"no literal form for {value!r}: use an int year, a float or an ISO date")


class Graph:
    """Facts between entity ids plus one label per entity; entities without a label are refused."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.facts: set[tuple[str, str, str]] = set()
        self.values: set[tuple[str, str, str]] = set()  # (subject, property, serialised literal)
        self.statements: set[tuple[str, str, str, tuple[tuple[str, str], ...]]] = set()

    def entity(self, entity_id: str, label: str | None) -> str | None:
        """Declare an entity with its English label; returns the id, or None if the label is unusable."""
        label = clean_label(label)
        if label is None:
            return None
        self.labels.setdefault(entity_id, label)
        return entity_id

    def add(self, subject: str | None, prop: str, obj: str | None) -> None:
        """A direct fact `subject wdt:prop obj` between two entities."""
        if subject and obj:
            self.facts.add((subject, prop, obj))

    def add_value(self, subject: str | None, prop: str, value: int | float | str) -> None:
        """A direct literal fact, e.g. area (P2046) as a decimal."""
        if subject:
            self.values.add((subject, prop, typed_literal(value)))

    def add_qualified(
        self,
        subject: str | None,
        prop: str,
        obj: str | None,
        qualifiers: dict[str, int | float | str | None],
        direct: bool = True,
    ) -> None:
        """A statement with qualifiers (`p:`/`ps:`/`pq:`), plus the direct `wdt:` fact unless
        direct=False. Qualifier values: int year, float, ISO date, or an entity id ('kcal:…')."""
        if not (subject and obj):
            return
        quals = tuple(sorted((q, self._qualifier_term(v)) for q, v in qualifiers.items() if v is not None))
        self.statements.add((subject, prop, obj, quals))
        if direct:
            self.add(subject, prop, obj)

    @staticmethod
    def _qualifier_term(value) -> str:
        if isinstance(value, str) and (value.startswith("kcal:") or re.fullmatch(r"Q[1-9]\d*", value)):
            return f"<{entity_iri(value)}>"
        return typed_literal(value)

    def ntriples(self) -> str:
        lines = {f"<{entity_iri(s)}> <{WDT}{p}> <{entity_iri(o)}> ." for s, p, o in self.facts}
        lines |= {f"<{entity_iri(s)}> <{WDT}{p}> {v} ." for s, p, v in self.values}
        lines |= {f"<{entity_iri(e)}> <{RDFS_LABEL}> {literal(lab)} ." for e, lab in self.labels.items()}
        for s, p, o, quals in self.statements:
            node = STATEMENT_IRI + hashlib.sha256(repr((s, p, o, quals)).encode()).hexdigest()[:20]
            lines.add(f"<{entity_iri(s)}> <{P}{p}> <{node}> .")
            lines.add(f"<{node}> <{PS}{p}> <{entity_iri(o)}> .")
            lines |= {f"<{node}> <{PQ}{q}> {term} ." for q, term in quals}
        return "".join(f"{line}\n" for line in sorted(lines))
