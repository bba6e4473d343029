"""The embedded snapshot against BEAR's real files: the same Wikidata ids, the same labels, no
contradicting facts.

BEAR (Wiland, Ploner and Akbik 2024) lives beside the repository as ../shared/data/bear, not in
it; without it these tests skip and say so. A *shared subject* is a (relation, QID) that is a
subject of that relation both in BEAR's rows and in the snapshot. A *wrong fact* is a BEAR row
(s, o) of a shared subject whose object o is not among the snapshot's objects of s for that
relation; an object without a QID here counts as o when its label is BEAR's label. BEAR's P19
and P20 objects are countries where ours are cities, so there the city's country is compared.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from kcal_pipeline.dataset.sources.snapshot import ids
from kcal_pipeline.dataset.sources.snapshot.build import build_graph, build_keyed_graph
from kcal_pipeline.dataset.sources.snapshot.graph import fold

BEAR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bear"
pytestmark = pytest.mark.skipif(
    not (BEAR / "metadata_relations.json").is_file(),
    reason=f"BEAR's files are not at {BEAR} (a clone without ../shared/data/bear beside it)",
)
MIN_LABEL_AGREEMENT = 0.98
# BEAR's objects of these relations are countries; ours are cities (compared through the city).
BORN_DIED = ("P19", "P20")


@pytest.fixture(scope="module")
def bear() -> dict[str, list[dict]]:
    meta = json.loads((BEAR / "metadata_relations.json").read_text("utf-8"))
    return {
        pid: [json.loads(line) for line in (BEAR / f"{pid}.jsonl").read_text("utf-8").splitlines() if line]
        for pid in meta
    }


@pytest.fixture(scope="module")
def snapshot():
    graph = build_graph()
    objects: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s, p, o in graph.facts:
        objects[(p, s)].add(o)
    return graph, objects


@pytest.fixture(scope="module")
def city_country() -> dict[str, str]:
    """Each city's country, from the city's key (`kcal:city-DE-ulm` is in `kcal:country-DE`)."""
    table, keyed = ids.table(), build_keyed_graph()

    def final(key: str) -> str:
        return table[key].qid if key in table else key

    return {
        final(key): final(f"kcal:country-{key.split('-')[1]}")
        for key in keyed.labels
        if key.startswith("kcal:city-")
    }


def shared_subjects(bear, snapshot) -> dict[tuple[str, str], str]:
    """(relation, QID) -> BEAR's subject label, for subjects of the relation in both."""
    _, objects = snapshot
    return {
        (pid, row["sub_id"]): row["sub_label"]
        for pid, rows in bear.items()
        for row in rows
        if (pid, row["sub_id"]) in objects
    }


def wrong_facts(bear, snapshot, city_country) -> list[str]:
    graph, objects = snapshot
    wrong = []
    for pid, rows in bear.items():
        for row in rows:
            ours = objects.get((pid, row["sub_id"]))
            if not ours:
                continue
            if pid in BORN_DIED:
                ours = {city_country.get(o, o) for o in ours}
            labels = {fold(graph.labels[o]) for o in ours if not o.startswith("Q")}
            if row["obj_id"] not in ours and fold(row["obj_label"]) not in labels:
                found = sorted(graph.labels.get(o, o) for o in ours)
                wrong.append(
                    f"{pid} {row['sub_label']} ({row['sub_id']}): BEAR {row['obj_label']}, ours {found}"
                )
    return wrong


def test_the_snapshot_shares_subjects_with_bear(bear, snapshot):
    shared = shared_subjects(bear, snapshot)
    relations = {pid for pid, _ in shared}
    print(f"\nshared subjects: {len(shared)} over {len(relations)} relations: {sorted(relations)}")
    assert len(shared) >= 150
    assert {"P30", "P36", "P37", "P1376"} <= relations


def test_labels_of_shared_subjects_agree_with_bear(bear, snapshot):
    graph, _ = snapshot
    shared = shared_subjects(bear, snapshot)
    differ = sorted(
        {(label, graph.labels[qid]) for (_, qid), label in shared.items() if graph.labels[qid] != label}
    )
    agree = sum(graph.labels[qid] == label for (_, qid), label in shared.items())
    print(f"\nlabel agreement: {agree}/{len(shared)}; differing (BEAR, ours): {differ}")
    assert agree / len(shared) >= MIN_LABEL_AGREEMENT


def test_labels_of_every_entity_bear_has_as_a_subject_agree(bear, snapshot):
    """Entity-level: any BEAR subject QID that is an entity of the snapshot, in any relation."""
    graph, _ = snapshot
    subjects = {row["sub_id"]: row["sub_label"] for rows in bear.values() for row in rows}
    shared = {qid: label for qid, label in subjects.items() if qid in graph.labels}
    agree = sum(graph.labels[qid] == label for qid, label in shared.items())
    print(f"\nentity label agreement: {agree}/{len(shared)}")
    assert len(shared) >= 250
    assert agree / len(shared) >= MIN_LABEL_AGREEMENT


def test_no_snapshot_fact_contradicts_bear(bear, snapshot, city_country):
    assert wrong_facts(bear, snapshot, city_country) == []


def test_montenegro_speaks_montenegrin(snapshot):
    """BEAR has no P37 row for Montenegro; its constitution (2007, art. 13) makes Montenegrin the
    official language, where CLDR says Serbian. Q236 is Montenegro's id in BEAR's rows."""
    graph, objects = snapshot
    assert graph.labels["Q236"] == "Montenegro"
    assert sorted(graph.labels[o] for o in objects[("P37", "Q236")]) == ["Montenegrin"]
