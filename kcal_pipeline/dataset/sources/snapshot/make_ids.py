"""Write data/wikidata_ids.tsv: the Wikidata QID of every snapshot entity a cited source carries.

Run by a developer, never at build time (the build reads only the committed table):

    .venv/bin/python -m kcal_pipeline.dataset.sources.snapshot.make_ids \\
        --bear ../shared/data/bear --natural-earth /path/to/natural-earth-csv

`--bear` is BEAR's folder (`P*.jsonl`, `metadata_relations.json`); `--natural-earth` holds the
attribute tables of Natural Earth 5 as CSV (`ne_10m_admin_0_countries.csv`,
`ne_10m_admin_1_states_provinces.csv`, `ne_50m_populated_places.csv`, e.g. from the DBF files
of naturalearthdata.com). No QID is ever typed by hand: each comes from a source row, named in the
table's `source` column. The rules, in order (each fills only keys still without a QID):

1. Key-anchored (Natural Earth): a country by its ISO 3166-1 code (`ISO_A2_EH`), a US state or a
   first-level division by its ISO 3166-2 code, a city by its GeoNames id (`GEONAMESID`) or, where
   that differs, by its name in the same country; either way the Natural Earth point must lie
   within MAX_CITY_KM of the GeoNames city.
2. Fact-confirmed (BEAR): for a relation the snapshot shares with BEAR, a BEAR row whose subject
   (object) already has our QID names an object (subject) whose label equals, accent- and
   case-insensitively, the label of one of that entity's objects (subjects) here. Repeated until
   nothing changes. This is how capitals get their ids from BEAR's P36/P1376 rows.
3. Type-aware label match (BEAR): an entity of a kind in BEAR_ROLES takes the QID of the one BEAR
   entity with an equal label that appears in a role fitting that kind (a language only among
   objects of P37/P103/P1412/P364/P6886, a person only among subjects of human relations, …);
   two candidates mean no match. Cities, currencies and countries are never matched by label.
4. ALIASES: reviewed pairs "our key is BEAR's entity labelled X" where the labels differ; the QID
   is still read from BEAR's rows.

Labels: where BEAR carries the QID, its label (Wikidata's English label) becomes the snapshot's,
unless KEEP_LABEL names the key with the reason. Natural Earth's names are not Wikidata labels, so
entities with a Natural Earth id only keep the snapshot's label.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kcal_pipeline.dataset.sources.snapshot import geo
from kcal_pipeline.dataset.sources.snapshot.build import build_keyed_graph
from kcal_pipeline.dataset.sources.snapshot.graph import Graph, clean_label, fold
from kcal_pipeline.dataset.sources.snapshot.ids import COLUMNS, FILE

MAX_CITY_KM = 30.0
NE_COUNTRIES = "ne_10m_admin_0_countries.csv"
NE_ADMIN1 = "ne_10m_admin_1_states_provinces.csv"
NE_PLACES = "ne_50m_populated_places.csv"

HUMAN = ("P19", "P20", "P27", "P26", "P69", "P103", "P108", "P412", "P413", "P463", "P509", "P611")
HUMAN += ("P641", "P1303", "P1412", "P1532", "P2632", "P3373", "P6886", "P185")
CREATOR = ("P6", "P26", "P50", "P57", "P58", "P87", "P98", "P162", "P170", "P175", "P185", "P344")
CREATOR += ("P676", "P3373")
# The BEAR roles ('P37:obj': objects of P37) in which an entity of each kind may be found by label.
BEAR_ROLES: dict[str, tuple[str, ...]] = {
    "continent": ("P30:obj",),
    "lang": tuple(f"{p}:obj" for p in ("P37", "P103", "P1412", "P364", "P6886")),
    "person": tuple(f"{p}:sub" for p in HUMAN) + tuple(f"{p}:obj" for p in CREATOR),
    "org": tuple(f"{p}:obj" for p in ("P108", "P127", "P137", "P176", "P178", "P272", "P449", "P463")),
    "work": tuple(f"{p}:sub" for p in ("P176", "P178", "P179", "P272", "P364", "P449", "P57", "P58")),
    "instrument": ("P1303:obj",),
    "position": ("P413:obj",),
    "river": ("P403:sub", "P177:obj"),
}
# Relations whose BEAR rows mean what the snapshot's facts of the same property mean (rule 2).
# BEAR's P19/P20 objects are countries (ours are cities), its P131 subjects are regions and its
# P463 subjects people (ours: US cities, countries), so those confirm nothing here.
SAME_MEANING = ("P30", "P36", "P37", "P103", "P108", "P1303", "P1376", "P1412", "P176", "P178")
SAME_MEANING += ("P27", "P413", "P449")
# Reviewed: our key -> the label of the BEAR entity it is (same thing, other name). The role
# restriction of rule 3 still applies, and the QID is read from BEAR.
ALIASES: dict[str, str] = {
    "kcal:lang-sl": "Slovene",  # CLDR 'Slovenian'; BEAR's P37 row of Slovenia names Q9063 'Slovene'
}
# Keys whose snapshot label stays although BEAR carries another, with the reason.
KEEP_LABEL: dict[str, str] = {
    "kcal:city-KZ-astana": "BEAR's 'Nur-Sultan' is stale: the city is Astana again since 2022",
    "kcal:city-BE-brussels": "'City of Brussels' is the municipality's formal name; the capital is Brussels",
}
KEEP_LABEL_KINDS: dict[str, str] = {
    "subdivision": "mace_region.tsv's labels, written for the MACE region questions",
}


@dataclass
class Match:
    qid: str
    wikidata_label: str | None
    source: str


class SourceError(ValueError):
    """A source file is missing or not in the expected shape."""


def kind(key: str) -> str | None:
    """'country' for 'kcal:country-FR'; None for an entity that already is a QID."""
    return key.split(":", 1)[1].split("-", 1)[0] if key.startswith("kcal:") else None


# ---- sources ----------------------------------------------------------------------------------


@dataclass
class Bear:
    rows: dict[str, list[dict]]  # relation -> rows
    labels: dict[str, str]  # qid -> label
    roles: dict[str, set[str]]  # qid -> {'P36:obj', …}


def read_bear(folder: Path) -> Bear:
    """BEAR's rows and every (QID, label) in them. A QID's label is its subject label where it is a
    subject anywhere: BEAR writes some objects with an article ('the Netherlands')."""
    meta_path = folder / "metadata_relations.json"
    if not meta_path.is_file():
        raise SourceError(f"{folder}: no metadata_relations.json (expected BEAR's folder)")
    meta = json.loads(meta_path.read_text("utf-8"))
    rows: dict[str, list[dict]] = {}
    roles: dict[str, set[str]] = defaultdict(set)
    sub_labels: dict[str, str] = {}
    other_labels: dict[str, str] = {}
    for pid, entry in sorted(meta.items()):
        path = folder / f"{pid}.jsonl"
        rows[pid] = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        for row in rows[pid]:
            sub_labels.setdefault(row["sub_id"], row["sub_label"])
            other_labels.setdefault(row["obj_id"], row["obj_label"])
            roles[row["sub_id"]].add(f"{pid}:sub")
            roles[row["obj_id"]].add(f"{pid}:obj")
        for qid, label in zip(entry["answer_space_ids"], entry["answer_space_labels"], strict=True):
            other_labels.setdefault(qid, label)
            roles[qid].add(f"{pid}:obj")
    return Bear(rows, {**other_labels, **sub_labels}, dict(roles))


def _csv(folder: Path, name: str) -> list[dict[str, str]]:
    path = folder / name
    if not path.is_file():
        raise SourceError(f"{path}: missing (a Natural Earth attribute table as CSV)")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{k.upper(): (v or "").strip() for k, v in row.items()} for row in rows]


def _km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    )
    return 2 * 6371.0 * math.asin(math.sqrt(min(1.0, a)))


# Kinds that Wikidata may give one item (the state California of geo.py and the division
# California of mace_data.py; the city Berlin and the state Berlin): keys of these kinds with the
# same label merge into one entity. A country never merges with its capital (Singapore, Monaco):
# "the capital of Singapore is Singapore" probes nothing, so the city keeps its key.
MERGEABLE = {frozenset({"state", "subdivision"}), frozenset({"city", "subdivision"})}


def _assign(graph: Graph, out: dict[str, Match], key: str, match: Match) -> None:
    owners = [k for k, m in out.items() if m.qid == match.qid]
    if all(
        frozenset({kind(k), kind(key)}) in MERGEABLE and graph.labels[k] == graph.labels[key] for k in owners
    ):
        out[key] = match
    else:
        print(f"  {key}: {match.qid} is already the id of {owners[0]}; {key} keeps its key", file=sys.stderr)


# ---- rule 1: Natural Earth -----------------------------------------------------------------


def natural_earth_countries(graph: Graph, folder: Path, out: dict[str, Match]) -> None:
    by_iso: dict[str, list[dict]] = defaultdict(list)
    for row in _csv(folder, NE_COUNTRIES):
        if row["WIKIDATAID"].startswith("Q"):
            by_iso[row["ISO_A2_EH"]].append(row)
    for iso in sorted(geo.countries()):
        key = geo.country_id(iso)
        if key not in graph.labels:
            continue
        # A country's main unit, not the islands or leased areas sharing its code (Clipperton: FR).
        rows = by_iso.get(iso, [])
        rows = [r for r in rows if r["ADM0_A3"] == r["ISO_A3_EH"]] or rows
        if len(rows) == 1:
            out[key] = Match(
                rows[0]["WIKIDATAID"], None, f"natural-earth:{NE_COUNTRIES[:-4]}:{rows[0]['ADM0_A3']}"
            )
        elif rows:
            print(f"  ambiguous Natural Earth country {iso}: {[r['ADM0_A3'] for r in rows]}", file=sys.stderr)


def natural_earth_admin1(graph: Graph, folder: Path, out: dict[str, Match]) -> None:
    by_code = defaultdict(list)
    for row in _csv(folder, NE_ADMIN1):
        if row["WIKIDATAID"].startswith("Q"):
            by_code[row["ISO_3166_2"]].append(row)
    for key in sorted(graph.labels):
        if kind(key) == "state":  # kcal:state-US-IL
            code = key.split(":", 1)[1][len("state-") :]
        elif kind(key) == "subdivision":  # kcal:subdivision-US-CA
            code = key.split(":", 1)[1][len("subdivision-") :]
        else:
            continue
        rows = by_code.get(code, [])
        if len(rows) == 1:
            _assign(
                graph, out, key, Match(rows[0]["WIKIDATAID"], None, f"natural-earth:{NE_ADMIN1[:-4]}:{code}")
            )


def _place_names(row: dict[str, str]) -> set[str]:
    return {
        fold(row[f]) for f in ("NAME", "NAME_EN", "NAMEASCII", "NAMEALT", "LS_NAME", "MEGANAME") if row.get(f)
    }


def natural_earth_cities(graph: Graph, folder: Path, out: dict[str, Match]) -> None:
    places = [r for r in _csv(folder, NE_PLACES) if r["WIKIDATAID"].startswith("Q")]
    by_geonames = {r["GEONAMESID"]: r for r in places if r["GEONAMESID"].isdigit()}
    by_name: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in places:
        for name in _place_names(r):
            by_name[(r["ISO_A2"], name)].append(r)
    for key in sorted(graph.labels):
        if kind(key) != "city":
            continue
        iso = key.split(":", 1)[1].split("-")[1]
        record = geo.find_city(iso, graph.labels[key])
        if record is None:
            continue
        candidates = [by_geonames.get(str(record["geonameid"]))]
        candidates += by_name.get((iso, fold(graph.labels[key])), [])
        candidates += by_name.get((iso, fold(record["name"])), [])
        near = {
            r["WIKIDATAID"]: r
            for r in candidates
            if r
            and r["ISO_A2"] == iso
            and _km(float(r["LATITUDE"]), float(r["LONGITUDE"]), record["latitude"], record["longitude"])
            <= MAX_CITY_KM
        }
        if len(near) == 1:
            (row,) = near.values()
            _assign(
                graph,
                out,
                key,
                Match(row["WIKIDATAID"], None, f"natural-earth:{NE_PLACES[:-4]}:{row['NE_ID']}"),
            )
        elif len(near) > 1:
            print(f"  several Natural Earth places near {key}: {sorted(near)}", file=sys.stderr)


# ---- rules 2-4: BEAR -----------------------------------------------------------------------


def wikidata_label(bear: Bear, qid: str) -> str | None:
    """BEAR's label for the QID, unless it is one BEAR gave an article ('the Philippines')."""
    label = clean_label(bear.labels.get(qid))
    return None if label is None or label.startswith("the ") else label


def _bear_match(bear: Bear, qid: str, why: str) -> Match:
    return Match(qid, wikidata_label(bear, qid), f"bear:{why}")


def confirm_by_facts(graph: Graph, bear: Bear, out: dict[str, Match]) -> int:
    """Rule 2, repeated to a fixpoint; returns the number of keys it matched."""
    found = 0
    for _ in range(10):
        by_qid = {m.qid: key for key, m in out.items()}
        new: dict[str, Match] = {}
        for pid in SAME_MEANING:
            objects, subjects = defaultdict(set), defaultdict(set)
            for s, p, o in graph.facts:
                if p == pid:
                    objects[s].add(o)
                    subjects[o].add(s)
            for row in bear.rows.get(pid, []):
                pairs = (
                    (by_qid.get(row["sub_id"]), objects, row["obj_id"], row["obj_label"], "obj"),
                    (by_qid.get(row["obj_id"]), subjects, row["sub_id"], row["sub_label"], "sub"),
                )
                for anchor, linked, qid, label, role in pairs:
                    if anchor is None or qid in by_qid:
                        continue
                    hits = [
                        e
                        for e in linked.get(anchor, ())
                        if e.startswith("kcal:") and fold(graph.labels[e]) == fold(label)
                    ]
                    hits = [e for e in hits if e not in out and e not in new]
                    if len(hits) == 1:
                        new[hits[0]] = _bear_match(bear, qid, f"{pid}:{role}")
        taken = defaultdict(list)
        for key, m in new.items():
            taken[m.qid].append(key)
        new = {k: m for k, m in new.items() if len(taken[m.qid]) == 1}
        if not new:
            break
        out.update(new)
        found += len(new)
    return found


def match_by_label(graph: Graph, bear: Bear, out: dict[str, Match]) -> None:
    """Rules 3 and 4: a unique BEAR entity with the same (or the aliased) label in a fitting role."""
    index: dict[tuple[str, str], set[str]] = defaultdict(set)
    for qid, roles in bear.roles.items():
        for k, allowed in BEAR_ROLES.items():
            if roles & set(allowed):
                index[(k, fold(bear.labels[qid]))].add(qid)
    used = {m.qid for m in out.values()}
    for key in sorted(graph.labels):
        k = kind(key)
        if key in out or k not in BEAR_ROLES:
            continue
        label = ALIASES.get(key, graph.labels[key])
        qids = index.get((k, fold(label)), set()) - used
        if len(qids) == 1:
            (qid,) = qids
            out[key] = _bear_match(bear, qid, f"{sorted(bear.roles[qid] & set(BEAR_ROLES[k]))[0]}:label")
            used.add(qid)
        elif len(qids) > 1:
            print(f"  ambiguous in BEAR: {key} {label!r} -> {sorted(qids)}", file=sys.stderr)


def add_bear_labels(bear: Bear, out: dict[str, Match]) -> None:
    """A QID found in Natural Earth that BEAR also carries gets BEAR's (Wikidata's) label."""
    for m in out.values():
        if m.wikidata_label is None:
            m.wikidata_label = wikidata_label(bear, m.qid)


def check_against_bear(graph: Graph, bear: Bear, out: dict[str, Match]) -> list[str]:
    """Natural Earth and BEAR disagreeing: one of our countries' labels names another QID in BEAR."""
    problems = []
    for key, m in out.items():
        if kind(key) != "country":
            continue
        for qid, label in bear.labels.items():
            if (
                fold(label) == fold(graph.labels[key])
                and qid != m.qid
                and bear.roles[qid] & {"P27:obj", "P1376:obj"}
            ):
                problems.append(f"{key} {graph.labels[key]!r}: Natural Earth {m.qid}, BEAR {qid}")
    return problems


def build_table(graph: Graph, bear: Bear, natural_earth: Path) -> dict[str, Match]:
    out: dict[str, Match] = {}
    natural_earth_countries(graph, natural_earth, out)
    natural_earth_cities(graph, natural_earth, out)
    natural_earth_admin1(graph, natural_earth, out)
    confirm_by_facts(graph, bear, out)
    match_by_label(graph, bear, out)
    confirm_by_facts(graph, bear, out)
    add_bear_labels(bear, out)
    for key, m in out.items():
        if key in KEEP_LABEL or kind(key) in KEEP_LABEL_KINDS:
            m.wikidata_label = None
    return out


def render(out: dict[str, Match]) -> str:
    head = [
        "# Wikidata QIDs of the snapshot's entities, by project key. Written by make_ids.py from",
        "# the sources named in `source` (bear:P36:obj = an object of BEAR's P36 rows;",
        "# natural-earth:<table>:<row id>); wikidata_label: Wikidata's English label as BEAR",
        "# carries it, empty where the snapshot keeps its own.",
        "\t".join(COLUMNS),
    ]
    rows = [f"{k}\t{m.qid}\t{m.wikidata_label or ''}\t{m.source}" for k, m in sorted(out.items())]
    return "\n".join(head + rows) + "\n"


def coverage(graph: Graph, out: dict[str, Match]) -> str:
    total, hit = defaultdict(int), defaultdict(int)
    for key in graph.labels:
        if key.startswith("kcal:"):
            total[kind(key)] += 1
            hit[kind(key)] += key in out
    return "\n".join(f"  {k:12s} {hit[k]:5d} / {total[k]:5d}" for k in sorted(total))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bear", type=Path, default=Path("../shared/data/bear"))
    parser.add_argument("--natural-earth", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / FILE)
    args = parser.parse_args(argv)
    graph = build_keyed_graph()
    bear = read_bear(args.bear)
    out = build_table(graph, bear, args.natural_earth)
    for problem in check_against_bear(graph, bear, out):
        print(f"  conflict: {problem}", file=sys.stderr)
    args.out.write_text(render(out), "utf-8")
    print(f"wrote {len(out)} ids to {args.out}\n{coverage(graph, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
