"""kcal against lm-pub-quiz 0.3.3 on BEAR's own files: predictions and log-likelihoods per relation.

Both read the same BEAR directory: kcal through its importer (`read_bear`), its fixed answer spaces
and statements (capitalised as lm-pub-quiz does unless --no-capitalize), scored on the fast path;
lm-pub-quiz through its own `Dataset.from_path` and `CausalLMEvaluator.evaluate_relation` (sum
reduction, its default capitalisation). One model object serves both; lm-pub-quiz gets a tokenizer
copy whose BOS is kcal's start token, as in bench/scoring.py. Runs in .bench-venv (`make
bench-install`):

    .bench-venv/bin/python bench/bear_agreement.py ../shared/data/bear --relation P105 --relation P30
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

import polars as pl
import torch

REPO = Path(__file__).resolve().parents[1]


def kcal_scores(bear: Path, rid: str, template: int, capitalize: bool, loaded) -> pl.DataFrame:
    """(subject_id, object_id, ll, capitalized) of every statement of one relation and template."""
    from kcal_pipeline.dataset.instances.answer_spaces import instances_from_fixed_space
    from kcal_pipeline.dataset.instances.probe import build_statements, templates_frame
    from kcal_pipeline.dataset.relations import parse_entry
    from kcal_pipeline.dataset.sources.bear.catalog import catalog_entries
    from kcal_pipeline.dataset.sources.bear.reading import read_bear
    from kcal_pipeline.dataset.sources.bear.tables import facts_frame
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

    ds = read_bear(bear)
    spec = parse_entry(rid, catalog_entries(ds, "facts")[rid], "bear")
    instances = instances_from_fixed_space(facts_frame(ds), spec, seed=13, dev_fraction=0.2)
    templates = templates_frame({rid: spec}).filter(pl.col("rank") == template)
    st = build_statements(instances, templates, capitalize=capitalize)
    scores = score_clm_shared_prefix(
        loaded,
        st["text"].to_list(),
        list(zip(st["subject_start"], st["subject_end"], strict=True)),
        list(zip(st["object_start"], st["object_end"], strict=True)),
    )
    return st.select(
        subject_id=pl.col("instance_id").str.split(":").list.last(),
        object_id="object_id",
        ll=scores["ll_sum"],
        capitalized="capitalized",
    )


def lpq_scores(relation, template: int, capitalize: bool, loaded) -> pl.DataFrame:
    from lm_pub_quiz.evaluators.pll_evaluators import CausalLMEvaluator

    tokenizer = copy.deepcopy(loaded.tokenizer)
    tokenizer.bos_token = tokenizer.convert_ids_to_tokens(loaded.start_token_id)
    evaluator = CausalLMEvaluator(
        model=loaded.model, tokenizer=tokenizer, device=torch.device(loaded.device), capitalize=capitalize
    )
    result = evaluator.evaluate_relation(relation, template_index=template, batch_size=32, reduction="sum")
    options = list(relation.answer_space.index)
    rows = [
        (row["sub_id"], oid, float(ll))
        for _, row in result.instance_table.iterrows()
        for oid, ll in zip(options, row["pll_scores"], strict=True)
    ]
    return pl.DataFrame(rows, schema=["subject_id", "object_id", "ll_lpq"], orient="row")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bear", type=Path, nargs="?", default=REPO.parent / "shared" / "data" / "bear")
    parser.add_argument("--relation", action="append", help="BEAR relation id (repeatable; default P105)")
    parser.add_argument("--template", type=int, default=0, help="template index (lm-pub-quiz's default 0)")
    parser.add_argument("--no-capitalize", action="store_true", help="both sides keep the text as templated")
    args = parser.parse_args()
    capitalize = not args.no_capitalize

    from lm_pub_quiz import Dataset

    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

    cache = Path(os.environ.get("KCAL_MODEL_CACHE", REPO / ".kcal" / "models"))
    loaded = load_model(DEFAULT_MODEL, cache)
    relations = {r.relation_code: r for r in Dataset.from_path(str(args.bear))}
    for rid in args.relation or ["P105"]:
        t0 = time.perf_counter()
        ours = kcal_scores(args.bear, rid, args.template, capitalize, loaded)
        t1 = time.perf_counter()
        theirs = lpq_scores(relations[rid], args.template, capitalize, loaded)
        t2 = time.perf_counter()
        both = ours.join(theirs, on=["subject_id", "object_id"], how="inner", validate="1:1")
        if both.height != ours.height:
            raise SystemExit(f"{rid}: {ours.height - both.height} kcal statements have no lm-pub-quiz score")
        best = both.group_by("subject_id").agg(
            kcal=pl.col("object_id").sort_by("ll").last(), lpq=pl.col("object_id").sort_by("ll_lpq").last()
        )
        same = int((best["kcal"] == best["lpq"]).sum())
        delta = (both["ll"] - both["ll_lpq"]).abs().max()
        print(
            f"{rid} template {args.template}: {best.height} instances, {both.height} statements "
            f"({int(both['capitalized'].sum())} capitalised); same prediction {same}/{best.height}; "
            f"max |Δll| {delta:.1e}; kcal {t1 - t0:.0f} s, lm-pub-quiz {t2 - t1:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
