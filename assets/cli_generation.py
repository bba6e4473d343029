"""`kcal generation …`: the open answers' summary (MACE's Table 3 layout) and the LM-judge
comparison with the matching rule (issue 33)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import polars as pl

from kcal_pipeline.core.paths import kcal_home, model_cache_dir, registry_path
from kcal_pipeline.core.storage import partition_path, read_partition


def print_generation_summary(home: Path, entry, out=None) -> bool:
    """MACE's Table 3 layout of one model's open answers; False when it has none."""
    from kcal_pipeline.reporting.generation import format_table3, table3

    if not partition_path(home, "generation_metrics", {"model": entry.key}).exists():
        return False
    metrics = read_partition(home, "generation_metrics", {"model": entry.key})
    table = table3(metrics)
    title = f"Open answers — model {entry.id}: mean confidence by number of gold answers (MACE Table 3)"
    print(
        f"\n{format_table3(table, title=title)}\n{question_counts(metrics, table['split'][0])}",
        file=out or sys.stdout,
    )
    return True


def question_counts(metrics: pl.DataFrame, split: str) -> str:
    """The line under Table 3 that says how many questions each column rests on (all asked, the
    answered share aside), and where the table came from."""
    rows = (
        metrics.filter(
            (pl.col("scope") == "n_gold")
            & (pl.col("metric") == "answered_share")
            & (pl.col("split") == split)
        )
        .group_by("scope_value")
        .agg(pl.col("n").max())
        .sort(pl.col("scope_value").cast(pl.Int64))
    )
    counts = ", ".join(f"{g}a {n}" for g, n in rows.iter_rows())
    return f"n ({split} questions per gold count): {counts}; table generation_metrics (kcal sql)"


def cmd_generation_summary(args) -> int:
    from kcal_pipeline.scoring.models import Registry

    home = kcal_home(args.home)
    shown = [
        print_generation_summary(home, entry)
        for entry in Registry(registry_path(home)).entries()
        if not args.model or entry.key in args.model
    ]
    if not any(shown):
        print(
            "no open answers yet: run e.g. `kcal demo --generate --relation mace-award` first",
            file=sys.stderr,
        )
        return 1
    return 0


def judge_sample(matches: pl.DataFrame, size: int, seed: int) -> pl.DataFrame:
    """`size` distinct (instance, response) pairs drawn with `seed`; every one when there are fewer."""
    distinct = matches.unique(["instance_id", "response"], keep="first").sort("instance_id", "sample")
    return (
        distinct
        if distinct.height <= size
        else distinct.sample(size, seed=seed).sort("instance_id", "sample")
    )


def cmd_generation_judge(args) -> int:
    """Ask a registered model whether each sampled response names a gold answer, and compare its
    verdicts with the matching rule's (agreement, Cohen's κ, where each says yes alone)."""
    from kcal_pipeline.dataset.instances.open_questions import open_questions
    from kcal_pipeline.dataset.relations import get_relation
    from kcal_pipeline.scoring.models import Registry, load_model
    from kcal_pipeline.scoring.prompted import judge_agreement, judge_equivalence

    home = kcal_home(args.home)
    registry = Registry(registry_path(home))
    model = args.model or registry.entries()[0].key
    judge = registry.get(args.judge or model)
    dims = {"model": model, "relation": args.relation}
    if not partition_path(home, "generation_matches", dims).exists():
        raise FileNotFoundError(
            f"no generation_matches for model {model!r}, relation {args.relation!r}: run "
            f"`kcal demo --generate --model {model} --relation {args.relation}` first"
        )
    matches = read_partition(home, "generation_matches", dims)
    instances = read_partition(home, "probe_instances", {"relation": args.relation})
    questions = open_questions(get_relation(args.relation), instances)
    sample = (
        judge_sample(matches, args.sample, args.seed)
        .join(questions, on="instance_id")
        .join(instances.select("instance_id", "gold_labels"), on="instance_id")
    )
    items = [
        (q, r, labels) for q, r, labels in sample.select("question", "response", "gold_labels").iter_rows()
    ]
    print(f"judging {len(items)} responses of {model} × {args.relation} with {judge.id} …", file=sys.stderr)
    verdicts = judge_equivalence(load_model(judge, model_cache_dir(home)), items)
    result = judge_agreement(sample["correct"].to_list(), verdicts, threshold=args.threshold)
    print(
        f"LM judge {judge.id} against the matching rule, {model} × {args.relation}: "
        f"n = {result['n']} responses (seed {args.seed}), judge says yes at p ≥ {args.threshold}"
    )
    for key in ("agreement", "cohen_kappa", "rule_only", "judge_only"):
        value = result[key]
        print(f"  {key:12s} {value:.3f}" if isinstance(value, float) else f"  {key:12s} {value}")
    if args.out:
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["instance_id", "sample", "question", "response", "rule_correct", "judge_p"])
            for row, p in zip(sample.iter_rows(named=True), verdicts, strict=True):
                writer.writerow(
                    [row["instance_id"], row["sample"], row["question"], row["response"], row["correct"], p]
                )
        print(f"each verdict: {args.out}")
    return 0


def add_generation_commands(sub) -> None:
    g = sub.add_parser("generation", help="open answers (kcal demo --generate): summary, LM judge")
    gsub = g.add_subparsers(dest="generation_command", required=True)
    s = gsub.add_parser("summary", help="print MACE's Table 3 layout of every model's open answers")
    s.add_argument("--model", action="append", help="model key (repeatable; default: every model)")
    s.set_defaults(func=cmd_generation_summary)
    j = gsub.add_parser(
        "judge",
        help="compare the matching rule with an LM judge on a sample of responses",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    j.add_argument("--relation", default="mace-award", help="a relation with open answers")
    j.add_argument("--model", help="whose answers (default: the first registered model)")
    j.add_argument("--judge", help="registered model that judges (default: --model itself)")
    j.add_argument("--sample", type=int, default=100, help="distinct responses judged")
    j.add_argument("--seed", type=int, default=0, help="seed of the sample")
    j.add_argument("--threshold", type=float, default=0.5, help="judge says yes at p(Yes) ≥ this")
    j.add_argument("--out", help="also write every verdict to this CSV file")
    j.set_defaults(func=cmd_generation_judge)
