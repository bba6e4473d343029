"""The data-quality report, checked by hand on tiny frames."""

from __future__ import annotations

import polars as pl
import pytest

from kcal_pipeline.dataset.instances.quality import dedupe_answer_space, quality_report
from kcal_pipeline.dataset.sources.wikidata import DROP_REASONS

FACTS = pl.DataFrame(
    {
        "relation_id": ["P36", "P36", "P36", "P36", "P36", "P30"],
        "subject_id": ["Q142", "Q183", "Q30", "Q999", "Q142", "Q17"],
        "subject_label": ["France", "Germany", "United States", None, "France", "Japan"],
        "object_id": ["Q90", "Q64", "Q61", "Q1", "Q90", "Q48"],
        "object_label": ["Paris", "Berlin", "Q61", "x", "Paris", "Asia"],
        "drop_reason": [None, None, None, "missing_label", "duplicate", None],
    }
)


def instance(rid, sid, gold, options, labels):
    return {
        "instance_id": f"{rid}:{sid}",
        "relation_id": rid,
        "subject_id": sid,
        "subject_label": sid,
        "gold_ids": gold,
        "gold_labels": gold,
        "n_gold": len(gold),
        "option_ids": options,
        "option_labels": labels,
        "n_options": len(options),
        "split": "test",
    }


INSTANCES = pl.DataFrame(
    [
        instance("P36", "Q142", ["Q90"], ["Q90", "Q64", "Q61", "Q7"], ["Paris", "Berlin", "berlin ", "Q7"]),
        instance("P36", "Q183", ["Q64"], ["Q64", "Q90"], ["Berlin", "Paris"]),
        instance("P36", "Q30", ["Q61"], ["Q61"], ["Washington"]),
        instance("P99", "Q1", ["Q2"], ["Q2", "Q3", "Q4"], ["A", "A", "A"]),
    ]
)


@pytest.fixture
def report():
    long = quality_report(FACTS, INSTANCES)
    return {(r, c): v for r, c, v in long.iter_rows()}


def test_fact_counts_and_drops(report):
    assert report[("P36", "facts")] == 3 and report[("P36", "subjects")] == 3
    assert report[("P36", "objects")] == 3
    assert report[("P36", "dropped:missing_label")] == 1 and report[("P36", "dropped:duplicate")] == 1
    assert report[("P36", "dropped:label_is_id")] == 0
    assert report[("P36", "id_like_fact_labels")] == 1  # "Q61" as a label
    assert report[("P30", "facts")] == 1 and report[("P30", "instances")] == 0


def test_option_statistics(report):
    assert report[("P36", "instances")] == 3
    assert report[("P36", "options_mean")] == pytest.approx(7 / 3)
    assert (report[("P36", "options_min")], report[("P36", "options_max")]) == (1, 4)
    assert report[("P36", "instances_lt2_options")] == 1
    assert report[("P30", "options_mean")] is None


def test_duplicate_and_id_like_option_labels(report):
    assert report[("P36", "duplicate_option_labels")] == 1  # Berlin / "berlin "
    assert report[("P36", "instances_with_duplicate_labels")] == 1
    assert report[("P36", "id_like_option_labels")] == 1  # "Q7"
    assert report[("P99", "duplicate_option_labels")] == 2
    assert report[("P99", "facts")] == 0


def test_every_relation_has_every_check():
    long = quality_report(FACTS, INSTANCES)
    assert long.columns == ["relation_id", "check", "value"]
    per_relation = long.group_by("relation_id").agg(pl.col("check").sort()).sort("relation_id")
    checks = per_relation["check"].to_list()
    assert checks[0] == checks[1] == checks[2]
    assert {f"dropped:{r}" for r in DROP_REASONS} <= set(checks[0])


def test_facts_without_a_drop_reason_column_are_all_kept():
    long = quality_report(FACTS.filter(pl.col("drop_reason").is_null()).drop("drop_reason"), INSTANCES)
    report = {(r, c): v for r, c, v in long.iter_rows()}
    assert report[("P36", "facts")] == 3 and report[("P36", "dropped:duplicate")] == 0


def test_dedupe_answer_space_keeps_golds_and_drops_later_twins():
    row = instance(
        "P36", "Q142", ["Q90"], ["Q64", "Q61", "Q91", "Q90"], ["Berlin", "BERLIN", "paris", "Paris"]
    )
    deduped, removed = dedupe_answer_space(row)
    assert deduped["option_ids"] == ["Q64", "Q90"] and deduped["n_options"] == 2 and removed == 2
    assert deduped["option_labels"] == ["Berlin", "Paris"]
    assert row["option_ids"] == ["Q64", "Q61", "Q91", "Q90"]  # the input is not modified


def test_dedupe_keeps_two_golds_with_one_label():
    row = instance("P37", "Q39", ["a", "b"], ["a", "b", "c"], ["German", "german", "French"])
    assert dedupe_answer_space(row) == (row, 0)
