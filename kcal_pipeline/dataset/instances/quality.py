"""Data-quality checks on facts and probe instances, per relation, in one long table.

A probe is only as good as its answer spaces: two options with the same label cannot be told apart
by a model, a label that is a raw id is no name at all, and an instance with fewer than two options
is no question. The report counts each of these, and the facts each filter dropped, so nothing that
was lost or is suspect goes unseen. MACE relations add the candidate questions each question-level
filter dropped and the questions per gold count.
"""

from __future__ import annotations

import polars as pl

from kcal_pipeline.dataset.instances import mace_questions
from kcal_pipeline.dataset.instances.labels import label_key
from kcal_pipeline.dataset.sources import mace
from kcal_pipeline.dataset.sources.wikidata import DROP_REASONS, looks_like_id

REPORT_SCHEMA = {"relation_id": pl.Utf8, "check": pl.Utf8, "value": pl.Float64}


def dedupe_answer_space(instance: dict) -> tuple[dict, int]:
    """The instance without non-gold options whose label repeats another option's; and how many went.

    Golds are always kept: a distractor named like a gold would be scored as a wrong answer for the
    very string that is right. Two golds sharing a label both stay (either is a correct answer).
    """
    gold = set(instance["gold_ids"])
    gold_keys = {
        label_key(lab)
        for oid, lab in zip(instance["option_ids"], instance["option_labels"], strict=True)
        if oid in gold
    }
    seen: set[str] = set()
    ids, labels = [], []
    for oid, lab in zip(instance["option_ids"], instance["option_labels"], strict=True):
        key = label_key(lab)
        if oid not in gold and (key in gold_keys or key in seen):
            continue
        seen.add(key)
        ids.append(oid)
        labels.append(lab)
    removed = len(instance["option_ids"]) - len(ids)
    return {**instance, "option_ids": ids, "option_labels": labels, "n_options": len(ids)}, removed


def _duplicates_in(labels: list[str]) -> int:
    return len(labels) - len({label_key(lab) for lab in labels})


def _kept(facts: pl.DataFrame) -> pl.DataFrame:
    return facts.filter(pl.col("drop_reason").is_null()) if "drop_reason" in facts.columns else facts


def _fact_checks(facts: pl.DataFrame, known_reasons: tuple[str, ...] = DROP_REASONS) -> dict[str, float]:
    reason = facts["drop_reason"] if "drop_reason" in facts.columns else pl.Series([None] * facts.height)
    kept = facts.filter(reason.is_null())
    reasons = dict.fromkeys(known_reasons, 0) | dict(reason.drop_nulls().value_counts().iter_rows())
    labels = pl.concat([kept["subject_label"], kept["object_label"]]).drop_nulls().unique()
    return {
        "facts": kept.height,
        "subjects": kept["subject_id"].n_unique(),
        "objects": kept["object_id"].n_unique(),
        **{f"dropped:{r}": n for r, n in sorted(reasons.items())},
        "id_like_fact_labels": sum(looks_like_id(lab) for lab in labels),
    }


def _instance_checks(instances: pl.DataFrame) -> dict[str, float | None]:
    n_options = instances["n_options"]
    dup = [_duplicates_in(labels) for labels in instances["option_labels"].to_list()]
    option_labels = [lab for labels in instances["option_labels"].to_list() for lab in labels]
    return {
        "instances": instances.height,
        "options_mean": n_options.mean(),
        "options_min": n_options.min(),
        "options_max": n_options.max(),
        "instances_lt2_options": int((n_options < 2).sum()),
        "duplicate_option_labels": sum(dup),
        "instances_with_duplicate_labels": sum(d > 0 for d in dup),
        "id_like_option_labels": sum(looks_like_id(lab) for lab in option_labels),
    }


def _mace_checks(
    facts: pl.DataFrame, instances: pl.DataFrame, relation_id: str, domain: str
) -> dict[str, float]:
    """Candidate questions dropped per reason (recomputed from the kept facts: they depend on
    nothing else) and questions per gold count; drops only where the relation was probed."""
    drops = (
        mace_questions.question_drops(_kept(facts), relation_id, domain)
        if instances.height
        else dict.fromkeys(mace_questions.QUESTION_DROPS, 0)
    )
    if "parent_instance_id" in instances.columns:  # not the answer-space cuts (answer_space_k)
        instances = instances.filter(pl.col("parent_instance_id").is_null())
    per_gold = dict(instances["n_gold"].value_counts().iter_rows()) if instances.height else {}
    return {
        **{f"dropped_questions:{r}": n for r, n in drops.items()},
        **{f"questions_n_gold:{k}": per_gold.get(k, 0) for k in mace_questions.GOLD_COUNTS},
    }


def quality_report(facts: pl.DataFrame, instances: pl.DataFrame, catalog: dict | None = None) -> pl.DataFrame:
    """Long table (relation_id, check, value), one row per relation and check.

    `facts` holds every relation's fact rows; rows with a non-null `drop_reason` are the dropped
    ones (counted per reason, never as facts). A relation missing from one frame gets zero counts
    and null option statistics rather than vanishing from the report. With the `catalog`, MACE
    relations list every MACE drop reason (sources/mace.py FACT_DROPS, the paper's filters among
    them) and get the question checks of _mace_checks.
    """
    catalog = catalog or {}
    relations = sorted(set(facts["relation_id"].to_list()) | set(instances["relation_id"].to_list()))
    rows = []
    for rid in relations:
        rel_facts = facts.filter(pl.col("relation_id") == rid)
        rel_instances = instances.filter(pl.col("relation_id") == rid)
        spec = catalog.get(rid)
        if spec is not None and spec.domain == "mace":
            checks = _fact_checks(rel_facts, mace.FACT_DROPS) | _instance_checks(rel_instances)
            checks |= _mace_checks(rel_facts, rel_instances, rid, spec.query)
        else:
            checks = _fact_checks(rel_facts) | _instance_checks(rel_instances)
        rows += [(rid, check, None if value is None else float(value)) for check, value in checks.items()]
    return pl.DataFrame(rows, schema=REPORT_SCHEMA, orient="row")
