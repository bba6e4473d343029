"""MACE-style questions (METHODS §5): multi-answer probe instances with 1, 2, 4 or 6 answers.

Questions come from *constraint relaxation* over the facts of dataset/sources/mace.py: one year →
a year range (Award, Office), an area range (Region), one river / language → up to three joined
with "or" (River, Language), a number range (Math). Only questions whose gold set has exactly the
wanted size are kept. A question's id hashes its constraint, so it is stable across runs; the seed
changes only the distractors and their order. The paper's filters that select subjects (offices,
countries, rivers) run on the facts (sources/mace.py paper_filter); its "one laureate per year"
selects questions and lives here (_year_windows), as does the 20 % dev split (dev_splits).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import polars as pl

from kcal_pipeline.core.keys import check_entity_id
from kcal_pipeline.dataset.instances.probe import instance_row, instances_frame
from kcal_pipeline.dataset.instances.sampling import derived_rng, sample_negatives, stable_rank
from kcal_pipeline.dataset.relations import get_relation
from kcal_pipeline.dataset.sources.mace import label_problem

log = logging.getLogger(__name__)

GOLD_COUNTS = (1, 2, 4, 6)
# Candidate questions dropped: two golds with one label, an area or number range whose bound cannot
# be placed safely, an award year range touching a year whose prize several laureates shared.
QUESTION_DROPS = ("duplicate_gold_label", "ambiguous_bound", "shared_award_year")
MAX_PARTS = 3  # "or"-joined rivers or languages per question, as in the paper
# A region's area range must clear its nearest outside neighbours by this factor, so that an area
# a few per cent off (sources differ) cannot move a division across a bound.
AREA_GAP = 1.05
AREA_MARGIN = 1.02  # and the bound itself keeps 2 % from either neighbour


@dataclass(frozen=True)
class Question:
    """One relaxed constraint and its exact gold set; `base` names the distractor pool it prefers."""

    key: str
    label: str
    gold: frozenset[str]
    base: str | None = None
    parts: int = 1


@dataclass(frozen=True)
class QuestionSet:
    frame: pl.DataFrame
    dropped: dict[str, int] = field(default_factory=dict)
    shortfall: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Item:
    base: str
    base_label: str
    obj: str
    start: float
    end: float


# The qualifier keys each ranged domain relaxes over: (start, end) of the interval a fact covers.
_INTERVAL = {
    "award": ("year", "year"),
    "office": ("start", "end"),
    "region": ("area_km2", "area_km2"),
    "math": ("value", "value"),
}


def _items(facts: pl.DataFrame, domain: str) -> list[_Item]:
    """Facts as (base, object, interval): a year, a term (open end = still in office), an area, a number."""
    first, last = _INTERVAL[domain]
    out = []
    for row in facts.iter_rows(named=True):
        q = json.loads(row["qualifiers"])
        end = q.get(last)
        out.append(
            _Item(
                row["subject_id"],
                row["subject_label"],
                row["object_id"],
                q[first],
                math.inf if end is None else end,
            )
        )
    return out


def _by_base(items: list[_Item]) -> dict[str, list[_Item]]:
    groups: dict[str, list[_Item]] = {}
    for item in sorted(items, key=lambda i: (i.base, i.start, i.end, i.obj)):
        groups.setdefault(item.base, []).append(item)
    return groups


def _year_windows(items: list[_Item], domain: str, counts: set[int], drops: Counter) -> Iterator[Question]:
    """Year ranges over one award or position; each distinct gold set once, by its tightest range.

    Awards: both ends are award years of the data, and (the paper's "one laureate per year") no
    year in the range may have several laureates, so a range over n award years has n answers; a
    question only such a range could ask is counted as dropped (shared_award_year). The shared
    years' facts stay: their laureates remain near-miss distractors, and a range can never skip
    a year silently. Offices: only years strictly inside the span the data covers (first and last
    start year), because a predecessor or successor missing from the data would otherwise make
    the gold set silently incomplete.
    """
    starts = [i.start for i in items]
    years = sorted(set(starts)) if domain == "award" else list(range(int(min(starts)) + 1, int(max(starts))))
    name = items[0].base_label
    phrase = f"the {name}" if domain == "award" else name
    laureates: dict[float, set[str]] = {}
    for i in items:
        laureates.setdefault(i.start, set()).add(i.obj)
    shared = {y for y, objs in laureates.items() if len(objs) > 1} if domain == "award" else set()
    unfiltered: dict[frozenset[str], tuple[int, int]] = {}
    tightest: dict[frozenset[str], tuple[int, int]] = {}
    for a, y1 in enumerate(years):
        for y2 in years[a:]:
            gold = frozenset(i.obj for i in items if i.start <= y2 and i.end >= y1)
            if len(gold) > max(counts):
                break
            if len(gold) in counts:
                _keep_tightest(unfiltered, gold, y1, y2)
                if not any(y1 <= y <= y2 for y in shared):
                    _keep_tightest(tightest, gold, y1, y2)
    drops["shared_award_year"] += len(unfiltered.keys() - tightest.keys())
    for gold, (y1, y2) in sorted(tightest.items(), key=lambda kv: kv[1]):
        span = f"in {y1}" if y1 == y2 else f"between {y1} and {y2}"
        yield Question(f"{items[0].base}|{y1}|{y2}", f"{phrase} {span}", gold, items[0].base)


def _keep_tightest(tightest: dict, gold: frozenset[str], y1: int, y2: int) -> None:
    if (y2 - y1, y1) < _span(tightest.get(gold)):
        tightest[gold] = (y1, y2)


def _span(window: tuple[int, int] | None) -> tuple[float, float]:
    return (math.inf, math.inf) if window is None else (window[1] - window[0], window[0])


def _round_between(lo: float, hi: float) -> float | None:
    """The roundest number near the geometric mean of lo and hi that keeps AREA_MARGIN from both."""
    mid = math.sqrt(lo * hi)
    for digits in range(1, 6):
        scale = 10 ** (math.floor(math.log10(mid)) - digits + 1)
        value = round(mid / scale) * scale
        if lo * AREA_MARGIN <= value <= hi / AREA_MARGIN:
            return value
    return None


def _fmt(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:,.1f}"


_THE = re.compile(r"^(United |Czech |Dominican |Central African |Netherlands$|Philippines$|Bahamas$|Gambia$)")


def _country_phrase(label: str) -> str:
    return f"the {label}" if _THE.match(label) else label


def _area_windows(items: list[_Item], counts: set[int], drops: Counter) -> Iterator[Question]:
    """Area ranges over one country's divisions: each run of k consecutive areas gives one range."""
    items = sorted(items, key=lambda i: (i.start, i.obj))
    areas = [i.start for i in items]
    country = _country_phrase(items[0].base_label)
    for k in sorted(counts):
        for a in range(len(items) - k + 1):
            b = a + k - 1
            lo = None if a == 0 else _bound(areas[a - 1], areas[a])
            hi = None if b == len(items) - 1 else _bound(areas[b], areas[b + 1])
            if (a and lo is None) or (b < len(items) - 1 and hi is None):
                drops["ambiguous_bound"] += 1
                continue
            if lo is None and hi is None:
                continue
            if lo is None:
                span = f"an area of less than {_fmt(hi)} km²"
            elif hi is None:
                span = f"an area of more than {_fmt(lo)} km²"
            else:
                span = f"an area between {_fmt(lo)} and {_fmt(hi)} km²"
            yield Question(
                f"{items[0].base}|{lo}|{hi}",
                f"a first-level administrative division of {country} with {span}",
                frozenset(i.obj for i in items[a : b + 1]),
                items[0].base,
            )


def _bound(below: float, above: float) -> float | None:
    return _round_between(below, above) if above >= below * AREA_GAP else None


def _number_bound(below: int, above: int) -> int | None:
    """An integer strictly between two members, preferring multiples of 10, then of 5."""
    inside = range(below + 1, above)
    for step in (10, 5, 1):
        hits = [n for n in inside if n % step == 0]
        if hits:
            return hits[len(hits) // 2]
    return None


def _number_windows(items: list[_Item], counts: set[int], drops: Counter) -> Iterator[Question]:
    """Ranges over one number class; the first and last members are never range ends, so that
    neither 0 nor a member beyond the generated limit can belong to a range unseen."""
    items = sorted(items, key=lambda i: i.start)
    values = [int(i.start) for i in items]
    for k in sorted(counts):
        for a in range(1, len(items) - k):
            b = a + k - 1
            lo, hi = _number_bound(values[a - 1], values[a]), _number_bound(values[b], values[b + 1])
            if lo is None or hi is None:
                drops["ambiguous_bound"] += 1
                continue
            yield Question(
                f"{items[0].base}|{lo}|{hi}",
                f"a {items[0].base_label} between {lo} and {hi}",
                frozenset(i.obj for i in items[a : b + 1]),
                items[0].base,
            )


def _or_questions(facts: pl.DataFrame, domain: str, counts: set[int], max_parts: int) -> Iterator[Question]:
    """One subject (river, language) or up to max_parts joined with 'or' ("A, B or C"): the gold
    set is the union. Every subject must add an answer of its own, so each 'or' really relaxes the
    question ("the Loire or the Seine" would ask "the Loire" again); a combination that breaks
    this, or whose union already exceeds the largest count, is not extended. Gold sets are bit
    masks while combining: three parts make tens of thousands of combinations."""
    golds = {s: frozenset(objs) for s, objs in facts.group_by("subject_id").agg("object_id").iter_rows()}
    labels = dict(facts.select("subject_id", "subject_label").unique("subject_id").iter_rows())
    most = max(counts)
    subjects = [s for s in sorted(golds, key=lambda s: (labels[s], s)) if len(golds[s]) <= most]
    bit = {o: 1 << n for n, o in enumerate(sorted(frozenset().union(*golds.values())))}
    masks = [sum(bit[o] for o in golds[s]) for s in subjects]
    # (subject indices, union of their masks, each part's answers that no other part has)
    combos: list[tuple[tuple[int, ...], int, tuple[int, ...]]] = [((), 0, ())]
    for n in range(1, max_parts + 1):
        grown = []
        for combo, union, own in combos:
            for k in range(combo[-1] + 1 if combo else 0, len(subjects)):
                mask = masks[k]
                kept = tuple(o & ~mask for o in own)
                if (union | mask).bit_count() <= most and mask & ~union and all(kept):
                    grown.append(((*combo, k), union | mask, (*kept, mask & ~union)))
        combos = grown
        for combo, union, _ in combos:
            if union.bit_count() in counts:
                names = [
                    f"the {labels[subjects[k]]}" if domain == "river" else labels[subjects[k]] for k in combo
                ]
                phrase = names[0] if n == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
                gold = frozenset().union(*(golds[subjects[k]] for k in combo))
                yield Question("|".join(subjects[k] for k in combo), phrase, gold, parts=n)


def candidate_questions(
    facts: pl.DataFrame,
    domain: str,
    counts: Sequence[int] = GOLD_COUNTS,
    drops: Counter | None = None,
    max_parts: int = MAX_PARTS,
) -> list[Question]:
    """Every question of the domain whose gold set size is one of `counts`."""
    counts, drops = set(counts), drops if drops is not None else Counter()
    if domain in ("river", "language"):
        return list(_or_questions(facts, domain, counts, max_parts))
    out: list[Question] = []
    for items in _by_base(_items(facts, domain)).values():
        if domain in ("award", "office"):
            out += _year_windows(items, domain, counts, drops)
        elif domain == "region":
            out += _area_windows(items, counts, drops)
        elif domain == "math":
            out += _number_windows(items, counts, drops)
        else:
            raise ValueError(f"unknown MACE domain {domain!r}")
    return out


def clean_facts(facts: pl.DataFrame, relation_id: str, domain: str, drops: Counter) -> pl.DataFrame:
    """Validity filter on any facts frame: labels present and not raw ids, qualifiers present."""
    facts = facts.filter(pl.col("relation_id") == relation_id)
    keep = []
    for row in facts.iter_rows(named=True):
        why = label_problem(row["subject_label"], row["subject_id"]) or label_problem(
            row["object_label"], row["object_id"]
        )
        if (
            why is None
            and domain in _INTERVAL
            and _INTERVAL[domain][0] not in json.loads(row["qualifiers"] or "{}")
        ):
            why = "missing_qualifier"
        if why:
            drops[why] += 1
        keep.append(why is None)
    return facts.filter(pl.Series(keep, dtype=pl.Boolean))


def question_id(relation_id: str, key: str) -> str:
    """A stable, valid entity id for a question: the hash of its relation and constraint."""
    return check_entity_id(f"kcal:q-{hashlib.sha1(f'{relation_id}|{key}'.encode()).hexdigest()[:16]}")


def _pick(cands: list[Question], relation_id: str, count: int, per_count: int) -> list[Question]:
    """Tightest relaxation first (fewest 'or' parts), then a seed-free hash order: stable sets."""
    pool = [q for q in cands if len(q.gold) == count]
    pool.sort(key=lambda q: (q.parts, stable_rank(0, relation_id, q.key)))
    return pool[:per_count]


def build_question_set(
    facts: pl.DataFrame,
    relation_id: str,
    *,
    seed: int,
    per_count: int = 50,
    gold_counts: Sequence[int] = GOLD_COUNTS,
    n_negatives: int = 5,
    domain: str | None = None,
    dev_fraction: float = 0.2,
) -> QuestionSet:
    """Probe instances (probe.INSTANCE_COLUMNS) for one MACE relation, with drops and shortfalls.

    Per gold count, exactly ⌊per_count · dev_fraction⌋ questions are dev (dev_splits), so the dev
    split that tunes thresholds mixes cardinalities as the test split does."""
    domain = domain or get_relation(relation_id).query
    drops = Counter(dict.fromkeys(("missing_label", "label_is_id", "missing_qualifier", *QUESTION_DROPS), 0))
    facts, labels, cands = _candidates(facts, relation_id, domain, gold_counts, drops)
    pools: dict[str, dict[str, str]] = {}
    for base, obj in facts.select("subject_id", "object_id").iter_rows():
        pools.setdefault(base, {})[obj] = labels[obj]
    rows, shortfall = [], {}
    for count in gold_counts:
        chosen = _pick(cands, relation_id, count, per_count)
        if len(chosen) < per_count:
            shortfall[count] = per_count - len(chosen)
        rows += [
            {**_instance(q, relation_id, labels, pools, seed, n_negatives), "split": split}
            for q, split in zip(chosen, dev_splits(len(chosen), dev_fraction), strict=True)
        ]
    if shortfall:
        log.warning("%s: fewer questions than asked per gold count (missing): %s", relation_id, shortfall)
    log.info("%s: %d questions; dropped %s", relation_id, len(rows), dict(drops))
    frame = instances_frame(rows)
    return QuestionSet(frame=frame, dropped=dict(drops), shortfall=shortfall)


def _candidates(
    facts: pl.DataFrame, relation_id: str, domain: str, gold_counts: Sequence[int], drops: Counter
) -> tuple[pl.DataFrame, dict[str, str], list[Question]]:
    """(valid facts, object labels, candidate questions): every question of a wanted gold count
    whose golds have distinct labels; what was dropped is counted in `drops`."""
    facts = clean_facts(facts, relation_id, domain, drops)
    labels = dict(facts.select("object_id", "object_label").unique("object_id", keep="first").iter_rows())
    cands = []
    for q in candidate_questions(facts, domain, gold_counts, drops):
        if len({labels[g].casefold() for g in q.gold}) < len(q.gold):
            drops["duplicate_gold_label"] += 1
        else:
            cands.append(q)
    return facts, labels, cands


def question_drops(
    facts: pl.DataFrame, relation_id: str, domain: str, gold_counts: Sequence[int] = GOLD_COUNTS
) -> dict[str, int]:
    """Candidate questions dropped per reason (QUESTION_DROPS), for the data-quality table: they
    depend on the facts alone (not on the seed or the number of questions asked for)."""
    drops = Counter(dict.fromkeys(QUESTION_DROPS, 0))
    _candidates(facts, relation_id, domain, gold_counts, drops)
    return {reason: drops[reason] for reason in QUESTION_DROPS}


def dev_splits(n: int, dev_fraction: float) -> list[str]:
    """Splits of n questions in pick order: the i-th is dev when ⌊(i+1)·f⌋ > ⌊i·f⌋, i.e. every
    fifth for f = 0.2. Exactly ⌊n·f⌋ are dev, and picking more questions (a longer prefix of the
    same order) never moves one that was already picked."""
    f = Fraction(dev_fraction).limit_denominator(10_000)
    return ["dev" if math.floor((i + 1) * f) > math.floor(i * f) else "test" for i in range(n)]


def _instance(
    q: Question,
    relation_id: str,
    labels: dict[str, str],
    pools: dict[str, dict[str, str]],
    seed: int,
    n_negatives: int,
) -> dict:
    """Distractors: answers of the same award/position/country/class first (near misses), then
    of the whole domain; never a gold, never a repeated label; seeded per question."""
    subject_id = question_id(relation_id, q.key)
    gold = sorted(q.gold, key=lambda g: (labels[g], g))
    negatives = sample_negatives(
        gold_ids=gold,
        pool=pools.get(q.base, {}) if q.base else labels,
        k=n_negatives,
        seed=seed,
        relation_id=relation_id,
        subject_id=subject_id,
        topup_pool=labels,
        labels=labels,
    )
    options = gold + negatives
    derived_rng(seed, relation_id, subject_id, "order").shuffle(options)
    # The split is set by the caller (dev_splits): it does not depend on the distractor seed.
    return instance_row(
        relation_id, subject_id, q.label, gold, options, labels, split_seed=0, dev_fraction=0.0
    )


def build_questions(
    facts: pl.DataFrame,
    relation_id: str,
    *,
    seed: int,
    per_count: int = 50,
    gold_counts: Sequence[int] = GOLD_COUNTS,
    n_negatives: int = 5,
) -> pl.DataFrame:
    """Probe instances for one MACE relation; drops and shortfalls are logged (see build_question_set)."""
    return build_question_set(
        facts, relation_id, seed=seed, per_count=per_count, gold_counts=gold_counts, n_negatives=n_negatives
    ).frame
