"""Benchmark: kcal's whole estimator stage against a straightforward pandas row-wise implementation.

    .venv/bin/python bench/estimators.py [--statements N] [--seed S] [--pandas-budget SECONDS]

Builds a seeded synthetic statement_scores frame of at least N rows (default 2,000,000) with the
shapes of a real run: 3 models, BEAR-like relations (mostly 25 options, some 60, some 6), 5 curated
templates each (some answer-conditional), marker variants (certainly, possibly, numeric-0 … 100,
keyed to their parent by the templates table's parent_id / variant) on some relations, a MACE-like
relation with question templates and 1/2/4/6 gold answers per instance, all four reductions, the
subject-masked columns on most relations, M = 30 dropout passes on one relation, and
probe_instances with a 20 % dev split. Then, in one run, each in its own spawned process:

  (i)  kcal: `partition_cubes` + `compute_estimate_tables` over every registered estimator, timed
       (and per family), with its peak memory (tracemalloc peak of the Python heap, numpy buffers
       included; and the rise of the process's maximum resident set, getrusage ru_maxrss, which
       also counts polars' own allocations);
  (ii) pandas: the same definitions (METHODS.md §2) written the way a researcher would without
       the cube: groupby (instance, template) or instance, a loop over the groups, numpy on each
       group. Nothing here calls kcal's estimators.

It checks that both give the same rows and numbers (join on model, relation, instance, template,
estimator, reduction; predicted_index, predicted_id and correct equal; |Δ confidence| ≤ 1e-9, +inf
equal to +inf), and prints per family and in total kcal seconds, pandas seconds and the ratio.
Estimators in the registry that this file does not implement, or the other way round, are listed as
"not compared". Exit status 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import multiprocessing
import os
import platform
import re
import resource
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl

from kcal_pipeline.dataset.instances.variants import NUMERIC_LEVELS, VERBAL_MARKERS, marker_variants

TOLERANCE = 1e-9
# Rows of estimators fitted by an iterative optimiser (temperature: scipy's bounded Brent search to
# 1e-12 here, kcal's Newton; Platt: scikit-learn's newton-cholesky, stopped at its gradient tolerance
# 1e-10, kcal's Newton to the last bits): both fit the same objective, but an optimiser places a
# flat optimum only to about √ε and scikit-learn stops early (measured: Platt confidences agree to
# 4e-8). Their confidences are compared to this bound and their largest difference is printed
# apart. Isotonic regression (exact PAV) is not among them.
ITERATIVE_FITS = ("_temperature", "_platt")
FITTED_TOLERANCE = 1e-7
DEFAULT_STATEMENTS = 2_000_000
MODELS = 3
DEV_FRACTION = 0.2
DROPOUT_PASSES = 30
MIN_INSTANCES = 10  # per relation: enough for a dev split of ≥ 2 to fit on
KEYS = ["model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction"]

# ------------------------------------------------------------------------------------------------
# Synthetic data
# ------------------------------------------------------------------------------------------------

BEAR_TEXTS = (  # c0, c2, c4 put the subject first: their ll_answer_sum is conditioned on it (Token, SCA)
    "[X] is located in [Y].",
    "[Y] is where [X] is located.",
    "The location of [X] is [Y].",
    "[Y] contains [X].",
    "[X] can be found in [Y].",
)
MACE_TEXTS = (  # as in dataset/data/mace.toml: the answer comes first in every curated template
    "[Y] received [X].",
    "[Y] was awarded [X].",
    "[Y] won [X].",
    "One of the laureates of [X] is [Y].",
    "Among the winners of [X] was [Y].",
)
MACE_QUESTIONS = (
    "Question: Name one person who received [X].\nAnswer: [Y]",
    "Question: Who won [X]?\nAnswer: [Y]",
)
MACE_GOLD_COUNTS = (1, 2, 4, 6)
DROPPABLE_TEMPLATES = ("c2", "c3", "c4")  # no marker variants hang off these, so dropping one is clean
DROP_RATE = 0.01  # share of (instance, droppable template) pairs never scored: T_i < T
TIE_RATE = 0.02  # share of BEAR instances whose options 0 and 1 get identical scores everywhere


@dataclasses.dataclass(frozen=True)
class RelationPlan:
    relation_id: str
    n_options: int  # MACE: distractors per question (plus its 1, 2, 4 or 6 golds)
    marker_parents: int = 0  # curated templates c0, c1, … that get the 7 marker variants
    dropout: bool = False
    masked: bool = True
    mace: bool = False


def relation_plans(statements: int) -> list[RelationPlan]:
    """BEAR-like relations (options 6–60, mostly 25) plus one MACE-like one. Below 100,000 statements
    a compact set with the same features, so that a quick run still has ≥ MIN_INSTANCES each."""
    if statements < 100_000:
        return [
            RelationPlan("P100", 6, marker_parents=1),
            RelationPlan("P101", 25, dropout=True),
            RelationPlan("P102", 30, masked=False),
            RelationPlan("mace-award", 6, mace=True),
        ]
    options = [6, 6, 13, *[25] * 12, *[60] * 5]
    markers = {0: 2, 3: 2, 10: 2, 16: 2}
    return [
        *(
            RelationPlan(
                f"P{100 + r}", n, marker_parents=markers.get(r, 0), dropout=r == 4, masked=r % 5 != 2
            )
            for r, n in enumerate(options)
        ),
        RelationPlan("mace-award", 20, mace=True),
    ]


def templates_table(plans: list[RelationPlan]) -> pl.DataFrame:
    """The templates table: curated (and MACE question) templates, plus the marker variants kcal's
    own dataset code derives from c0, c1, … (template ids `<parent>:<variant>`, parent_id, variant)."""
    rows = []
    for plan in plans:
        texts = MACE_TEXTS if plan.mace else BEAR_TEXTS
        rows += [
            dict(
                relation_id=plan.relation_id,
                template_id=f"{plan.relation_id}:c{k}",
                text=text,
                kind="curated",
            )
            | dict(source="bench", rank=k)
            for k, text in enumerate(texts)
        ]
        if plan.mace:
            rows += [
                dict(relation_id=plan.relation_id, template_id=f"{plan.relation_id}:q{k}", text=text)
                | dict(kind="question", source="bench", rank=k)
                for k, text in enumerate(MACE_QUESTIONS)
            ]
    base = pl.DataFrame(rows, schema_overrides={"rank": pl.Int32})
    parents = pl.concat(
        [base.filter(pl.col("template_id").is_in([f"{p.relation_id}:c{k}" for k in range(p.marker_parents)]))
         for p in plans]
    )  # fmt: skip
    variants = marker_variants(parents)
    return pl.concat([base, variants], how="diagonal_relaxed").sort("relation_id", "template_id")


@dataclasses.dataclass(frozen=True)
class Dataset:
    scores: pl.DataFrame
    instances: pl.DataFrame
    templates: pl.DataFrame
    plans: list[RelationPlan]
    instances_per_relation: int


def _relation_instances(plan: RelationPlan, n: int, rng: np.random.Generator):
    """Per instance: option count, gold option indices, object ids, dev split."""
    ids = [f"{plan.relation_id}:s{k:05d}" for k in range(n)]
    if plan.mace:
        golds_n = np.array([MACE_GOLD_COUNTS[k % 4] for k in range(n)])
        n_options = golds_n + plan.n_options
        gold_sets = [rng.choice(m, size=g, replace=False) for m, g in zip(n_options, golds_n, strict=True)]
        objects = [[f"Q{9_000_000 + 100 * k + o}" for o in range(m)] for k, m in enumerate(n_options)]
    else:
        n_options = np.full(n, plan.n_options)
        gold_sets = [np.array([g]) for g in rng.integers(0, plan.n_options, n)]
        space = [f"Q{int(plan.relation_id[1:]) * 1000 + o}" for o in range(plan.n_options)]
        objects = [space] * n
    dev = np.zeros(n, dtype=bool)
    dev[rng.permutation(n)[: round(DEV_FRACTION * n)]] = True
    return ids, n_options, gold_sets, objects, dev


def _partition_scores(
    plan: RelationPlan,
    model: int,
    template_ids: list[str],
    ids: list[str],
    n_options: np.ndarray,
    gold_sets: list[np.ndarray],
    objects: list[list[str]],
    ties: np.ndarray,
    dropped: set[tuple[int, int]],
    rng: np.random.Generator,
) -> pl.DataFrame:
    """One (model, relation) partition: every kept (instance, template) scored on all its options.
    Log-likelihoods: an answer part (object popularity + a model-specific bonus for gold + noise),
    a context part per (instance, template), token counts for the means; the masked scores keep
    the popularity but lose most of the knowledge."""
    n_t = len(template_ids)
    inst, tmpl, opt = [], [], []
    for i, m in enumerate(n_options):
        for t in range(n_t):
            if (i, t) not in dropped:
                inst.append(np.full(m, i))
                tmpl.append(np.full(m, t))
                opt.append(np.arange(m))
    i_, t_, o_ = (np.concatenate(a) for a in (inst, tmpl, opt))
    n = i_.size
    gold_matrix = np.zeros((len(ids), int(n_options.max())), dtype=bool)
    object_matrix = np.full(gold_matrix.shape, None, dtype=object)
    for i, (golds, names) in enumerate(zip(gold_sets, objects, strict=True)):
        gold_matrix[i, golds] = True
        object_matrix[i, : len(names)] = names
    gold = gold_matrix[i_, o_]
    offsets = np.concatenate([[0], np.cumsum(n_options)])
    flat_option = offsets[i_] + o_  # one id per (instance, option)
    answer_tokens = rng.integers(1, 5, offsets[-1])[flat_option]
    popularity = rng.normal(0.0, 0.8, offsets[-1])[flat_option]
    template_tokens = rng.integers(4, 10, n_t)[t_]
    subject_tokens = rng.integers(1, 5, len(ids))[i_]
    bonus = (1.5 + model) * gold
    ll_answer_sum = np.minimum(
        -1.2 * answer_tokens + popularity + bonus + rng.normal(0.0, 0.8, n) + 1.0, -0.02
    )
    context = -2.2 * (template_tokens + subject_tokens) + rng.normal(0.0, 1.0, (len(ids), n_t))[i_, t_]
    ll_sum = ll_answer_sum + context + rng.normal(0.0, 0.3, n)
    columns = {
        "ll_sum": ll_sum,
        "ll_mean": ll_sum / (answer_tokens + template_tokens + subject_tokens + 1),
        "ll_answer_sum": ll_answer_sum,
        "ll_answer_mean": ll_answer_sum / answer_tokens,
    }
    if plan.masked:
        masked = np.minimum(0.5 * (ll_answer_sum - bonus) + popularity + rng.normal(0, 0.5, n), -0.02)
        columns["ll_answer_sum_masked"] = masked
        columns["ll_sum_masked"] = masked + context - 1.0 + rng.normal(0.0, 0.3, n)
    if plan.dropout:
        columns["ll_sum_dropout"] = ll_sum[:, None] + rng.normal(0.0, 0.7, (n, DROPOUT_PASSES))
        columns["ll_answer_sum_dropout"] = ll_answer_sum[:, None] + rng.normal(0.0, 0.5, (n, DROPOUT_PASSES))
    # Exact ties: option 1 takes option 0's scores, in every template and column.
    tied_one = ties[i_] & (o_ == 1)
    source = np.flatnonzero(tied_one) - 1  # option 0 of the same (instance, template) is the row before
    for values in columns.values():
        values[tied_one] = values[source]
    frame = {
        "model_id": np.full(n, f"model-{model}", dtype=object),
        "relation_id": np.full(n, plan.relation_id, dtype=object),
        "instance_id": np.asarray(ids, dtype=object)[i_],
        "template_id": np.asarray(template_ids, dtype=object)[t_],
        "option_index": o_.astype(np.int32),
        "object_id": object_matrix[i_, o_],
        "is_gold": gold,
    }
    out = pl.DataFrame(frame)
    for name, values in columns.items():
        out = out.with_columns(
            pl.Series(name, values, dtype=pl.Array(pl.Float64, DROPOUT_PASSES) if values.ndim == 2 else None)
        )
    return out.with_columns(pl.col(c).cast(pl.List(pl.Float64)) for c in out.columns if c.endswith("dropout"))


def make_dataset(statements: int = DEFAULT_STATEMENTS, seed: int = 13, models: int = MODELS) -> Dataset:
    """A statement_scores frame of at least `statements` rows, with probe_instances and templates."""
    plans = relation_plans(statements)
    templates = templates_table(plans)
    per_relation = {
        p.relation_id: templates.filter(pl.col("relation_id") == p.relation_id)["template_id"].to_list()
        for p in plans
    }
    mean_options = {p.relation_id: p.n_options + (np.mean(MACE_GOLD_COUNTS) if p.mace else 0) for p in plans}
    per_instance = models * sum(mean_options[r] * len(t) for r, t in per_relation.items())
    n = max(MIN_INSTANCES, math.ceil(statements / per_instance / (1 - DROP_RATE * 0.2)))
    rng = np.random.default_rng(seed)
    parts, instance_rows = [], []
    for plan in plans:
        template_ids = per_relation[plan.relation_id]
        ids, n_options, gold_sets, objects, dev = _relation_instances(plan, n, rng)
        ties = (rng.random(n) < TIE_RATE) & (n_options >= 2) & (not plan.mace)
        droppable = [t for t, tid in enumerate(template_ids) if tid.rsplit(":", 1)[-1] in DROPPABLE_TEMPLATES]
        dropped = {(i, t) for i in range(n) for t in droppable if not plan.mace and rng.random() < DROP_RATE}
        instance_rows += [
            (rid, plan.relation_id, int(m), "dev" if d else "test")
            for rid, m, d in zip(ids, n_options, dev, strict=True)
        ]
        for model in range(models):
            parts.append(
                _partition_scores(
                    plan, model, template_ids, ids, n_options, gold_sets, objects, ties, dropped, rng
                )
            )
    scores = pl.concat(parts, how="diagonal")
    instances = pl.DataFrame(
        instance_rows, schema=["instance_id", "relation_id", "n_options", "split"], orient="row"
    ).with_columns(
        pl.col("n_options").cast(pl.Int32),
        answer_space_k=pl.lit(0, pl.Int32),
        answer_space_draw=pl.lit(0, pl.Int32),
    )
    return Dataset(scores, instances, templates, plans, n)


# ------------------------------------------------------------------------------------------------
# kcal's path
# ------------------------------------------------------------------------------------------------


def registry() -> dict:
    """kcal's registry as it is when the bench runs (every family module registers on import)."""
    from kcal_pipeline.estimation import ESTIMATORS

    return ESTIMATORS


def kcal_stage(
    data: Dataset, names: list[str] | None, log: Callable[[str], None]
) -> tuple[pl.DataFrame, dict]:
    """partition_cubes + compute_estimate_tables: the estimates and the seconds of each step."""
    from kcal_pipeline.estimation import partition_cubes
    from kcal_pipeline.estimation.registry import compute_estimate_tables

    t0 = time.perf_counter()
    cubes = partition_cubes(data.scores, data.instances, data.templates)
    t1 = time.perf_counter()
    tables = compute_estimate_tables(cubes, names, log=log)
    t2 = time.perf_counter()
    return tables.estimates, {"build": t1 - t0, "estimate": t2 - t1, "total": t2 - t0}


def kcal_per_family(data: Dataset, families: dict[str, list[str]]) -> dict[str, float]:
    """Seconds of compute_estimate_tables per family, on cubes built once."""
    from kcal_pipeline.estimation import partition_cubes
    from kcal_pipeline.estimation.registry import compute_estimate_tables

    cubes = partition_cubes(data.scores, data.instances, data.templates)
    seconds = {}
    for family, names in families.items():
        t0 = time.perf_counter()
        compute_estimate_tables(cubes, names, log=lambda _: None)
        seconds[family] = time.perf_counter() - t0
    return seconds


# ------------------------------------------------------------------------------------------------
# The pandas path: the spec's definitions, row-wise, without the cube. Written out again on purpose
# (reduction columns, template kinds, the answer-conditional rule), so that a slip in kcal is not
# copied here.
# ------------------------------------------------------------------------------------------------

LL = {"sum": "ll_sum", "mean": "ll_mean", "answer_sum": "ll_answer_sum", "answer_mean": "ll_answer_mean"}
ALL_FOUR = tuple(LL)
SECOND_RULE = {"sum": "mean", "mean": "sum", "answer_sum": "answer_mean", "answer_mean": "answer_sum"}
MASKED = {"sum": "ll_sum_masked", "answer_sum": "ll_answer_sum_masked"}
DROPOUT = {"sum": "ll_sum_dropout", "answer_sum": "ll_answer_sum_dropout"}
MAX_VOTE_K = 12
TAU_GRID = (0.0, 1e-4, 1e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
MARKER_VARIANTS = {
    **{f"marker_{m}": m for m in VERBAL_MARKERS},
    **{f"marker_numeric_{p}": f"numeric-{p}" for p in NUMERIC_LEVELS},
}
RECALIBRATED = ("base", "margin", "template_marginal")
RECALIBRATIONS = ("temperature", "platt", "isotonic")


@dataclasses.dataclass(frozen=True)
class Spec:
    family: str
    reductions: tuple[str, ...] = ALL_FOUR
    needs: Callable[[str], list[str]] = lambda reduction: []


def _spec_table() -> dict[str, Spec]:
    """Every estimator of the spec: its family, reductions and the columns it reads beyond ll."""
    specs = {n: Spec("single_template") for n in ("base", "margin", "entropy")}
    for k in range(2, MAX_VOTE_K + 1):
        specs |= {f"vote{k}_average": Spec("aggregation"), f"vote{k}_consistency": Spec("aggregation")}
    specs |= {f"{a}_{c}": Spec("aggregation") for a in ("min", "max") for c in ("average", "consistency")}
    specs["template_marginal"] = Spec("template_marginal")
    specs |= {
        "token": Spec("selective_lama", needs=lambda r: ["ll_answer_sum"]),
        "sent": Spec("selective_lama", needs=lambda r: ["ll_mean"]),
        "gap": Spec("selective_lama"),
        "reranking": Spec("selective_lama", needs=lambda r: [LL[SECOND_RULE[r]]]),
        "template_diff": Spec("selective_lama", ("sum", "answer_sum"), lambda r: [MASKED[r]]),
        "dropout_mean": Spec("selective_lama", ("sum", "answer_sum"), lambda r: [DROPOUT[r]]),
        "dropout_var": Spec("selective_lama", ("sum", "answer_sum"), lambda r: [DROPOUT[r]]),
    }
    specs |= {name: Spec("markers") for name in MARKER_VARIANTS}
    specs["answer_prior"] = Spec("null_model", ("sum", "answer_sum"), lambda r: [MASKED[r]])
    specs |= {
        f"{c}_{t}": Spec("multi_answer", ("answer_sum",))
        for c in ("sca", "snca", "sfca")
        for t in ("tau0", "tuned")
    }
    specs |= {f"{e}_{m}": Spec("recalibration") for e in RECALIBRATED for m in RECALIBRATIONS}
    return specs


SPECS = _spec_table()
FAMILIES = list(dict.fromkeys(s.family for s in SPECS.values()))


@dataclasses.dataclass
class Partition:
    """What a researcher would look up once per (model, relation): its templates in sorted order,
    which are paraphrases and which answer-conditional, which score columns it has."""

    templates: list[str]
    kind: dict[str, str | None]
    parent: dict[str, str | None]
    variant: dict[str, str | None]
    paraphrases: list[str]
    answer_conditional: list[str]
    columns: set[str]
    has_dev: bool


@dataclasses.dataclass
class PandasInput:
    frame: object  # pandas.DataFrame, sorted by model, relation, instance, template, option
    parts: dict[tuple[str, str], Partition]
    wanted: dict[str, tuple[str, ...]]  # estimator → the reductions to compute


def pandas_prepare(data: Dataset, wanted: dict[str, tuple[str, ...]]) -> PandasInput:
    """One pandas frame with the instance and template columns joined on, plus per-partition facts."""
    import pandas as pd

    df = data.scores.to_pandas()
    inst = data.instances.to_pandas()[["instance_id", "n_options", "split", "answer_space_k"]]
    df = df.merge(inst, on="instance_id", how="left")
    df = df.sort_values(["model_id", "relation_id", "instance_id", "template_id", "option_index"])
    df = df.reset_index(drop=True)
    tmpl = data.templates.to_pandas().set_index(["relation_id", "template_id"])
    parts = {}
    for (m, r), part in df.groupby(["model_id", "relation_id"], sort=True):
        templates = sorted(part["template_id"].unique())
        row = {t: tmpl.loc[(r, t)] for t in templates}
        kind = {t: row[t]["kind"] for t in templates}
        text = {t: row[t]["text"] for t in templates}
        questions = [t for t in templates if kind[t] == "question"]
        curated_subject_first = [
            t for t in templates if kind[t] == "curated" and text[t].index("[X]") < text[t].index("[Y]")
        ]
        parts[(m, r)] = Partition(
            templates=templates,
            kind=kind,
            parent={t: None if pd.isna(row[t]["parent_id"]) else row[t]["parent_id"] for t in templates},
            variant={t: None if pd.isna(row[t]["variant"]) else row[t]["variant"] for t in templates},
            paraphrases=[t for t in templates if kind[t] in ("curated", "generated")],
            answer_conditional=questions or curated_subject_first,
            columns={c for c in part.columns if c.startswith("ll_") and part[c].notna().any()},
            has_dev=bool((part["split"] == "dev").any()),
        )
    return PandasInput(df, parts, wanted)


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _runs(data: PandasInput, names: Iterable[str], part: Partition) -> list[tuple[str, str]]:
    """(estimator, reduction) pairs wanted whose columns the partition has."""
    return [
        (n, r)
        for n in names
        if n in data.wanted
        for r in data.wanted[n]
        if LL[r] in part.columns and all(c in part.columns for c in SPECS[n].needs(r))
    ]


Row = tuple


def _row(key, template, name, reduction, options, objects, gold, k, confidence) -> Row:
    """One estimate row; k = position of the predicted option in the group."""
    m, r, i = key[:3]
    return (m, r, i, template, name, reduction, int(options[k]), objects[k], float(confidence), bool(gold[k]))


def pd_single_template(data: PandasInput) -> list[Row]:
    rows = []
    names = [n for n in ("base", "margin", "entropy") if n in data.wanted]
    df = data.frame
    for key, g in df.groupby(["model_id", "relation_id", "instance_id", "template_id"], sort=False):
        runs = _runs(data, names, data.parts[key[:2]])
        if not runs:
            continue
        options, objects, gold = (
            g["option_index"].to_numpy(),
            g["object_id"].to_numpy(),
            g["is_gold"].to_numpy(),
        )
        for name, red in runs:
            ll = g[LL[red]].to_numpy()
            p = softmax(ll)
            k = int(np.argmax(ll))
            if name == "base":
                c = p[k]
            elif name == "margin":
                c = p[k] if len(p) == 1 else np.sort(p)[-1] - np.sort(p)[-2]
            else:  # entropy: 1 − H / log |O|
                nz = p[p > 0]
                c = 1.0 if len(p) == 1 else 1.0 - (-(nz * np.log(nz)).sum()) / math.log(len(p))
            rows.append(_row(key, key[3], name, red, options, objects, gold, k, c))
    return rows


def _template_summary(data: PandasInput, reductions_of: Callable, templates_of: Callable) -> list[dict]:
    """Per (instance, template) of the chosen templates and each reduction: the template's answer
    ỹ_t = argmax ll (option, object, gold) and Base_t = max p_t."""
    out = []
    for key, g in data.frame.groupby(["model_id", "relation_id", "instance_id", "template_id"], sort=False):
        part = data.parts[key[:2]]
        if key[3] not in templates_of(part):
            continue
        options, objects, gold = (
            g["option_index"].to_numpy(),
            g["object_id"].to_numpy(),
            g["is_gold"].to_numpy(),
        )
        for red in reductions_of(part):
            ll = g[LL[red]].to_numpy()
            k = int(np.argmax(ll))
            out.append(
                dict(model_id=key[0], relation_id=key[1], instance_id=key[2], reduction=red)
                | dict(
                    option=int(options[k]), object=objects[k], gold=bool(gold[k]), base=float(softmax(ll)[k])
                )
            )
    return out


def pd_aggregation(data: PandasInput) -> list[Row]:
    import pandas as pd

    names = [n for n, s in SPECS.items() if s.family == "aggregation" and n in data.wanted]
    if not names:
        return []
    reductions = sorted({r for n in names for r in data.wanted[n]})

    def reds(part):
        return [r for r in reductions if LL[r] in part.columns]

    records = _template_summary(data, reds, lambda part: part.paraphrases)
    if not records:
        return []
    summary = pd.DataFrame(records)
    rows = []
    for (m, r, i, red), s in summary.groupby(
        ["model_id", "relation_id", "instance_id", "reduction"], sort=False
    ):
        n_templates = len(data.parts[(m, r)].paraphrases)  # T of the relation; T_i = len(s) of this instance
        answers, base = s["option"].tolist(), s["base"].to_numpy()
        lookup = dict(zip(answers, zip(s["object"], s["gold"], strict=True), strict=True))

        counts = Counter(answers)
        top = max(counts.values())
        leaders = [a for a, c in counts.items() if c == top]
        picks = {}  # estimator → ŷ (None: no answer)
        for k in range(2, min(MAX_VOTE_K, n_templates) + 1):
            vote = leaders[0] if top >= k and len(leaders) == 1 else None
            picks |= {f"vote{k}_average": vote, f"vote{k}_consistency": vote}
        for which, t in (("min", int(np.argmin(base))), ("max", int(np.argmax(base)))):
            picks |= {f"{which}_average": answers[t], f"{which}_consistency": answers[t]}
        for name, answer in picks.items():
            if name not in data.wanted or red not in data.wanted[name]:
                continue
            if answer is None:
                rows.append((m, r, i, None, name, red, -1, None, 0.0, False))
                continue
            hits = np.array([a == answer for a in answers])  # 1[ỹ_t = ŷ] over the T_i templates
            confidence = hits.mean() if name.endswith("_consistency") else (hits * base).sum() / len(hits)
            obj, gold = lookup[answer]
            rows.append((m, r, i, None, name, red, answer, obj, float(confidence), bool(gold)))
    return rows


def _marginal(g, templates: list[str], column: str, temperature: float = 1.0):
    """P(o) = (1/T_i) Σ_t p_t(o) over the instance's templates of `templates` (option → P), or None."""
    total, n = {}, 0
    for t, gt in g.groupby("template_id", sort=True):
        if t not in templates:
            continue
        p = softmax(gt[column].to_numpy() / temperature)
        for o, pv in zip(gt["option_index"].tolist(), p, strict=True):
            total[o] = total.get(o, 0.0) + pv
        n += 1
    if n == 0:
        return None
    return {o: v / n for o, v in sorted(total.items())}


def _instance_objects(g) -> tuple[dict, dict]:
    first = g.drop_duplicates("option_index")
    return dict(zip(first["option_index"], first["object_id"], strict=True)), dict(
        zip(first["option_index"], first["is_gold"], strict=True)
    )


def pd_template_marginal(data: PandasInput) -> list[Row]:
    if "template_marginal" not in data.wanted:
        return []
    rows = []
    for key, g in data.frame.groupby(["model_id", "relation_id", "instance_id"], sort=False):
        part = data.parts[key[:2]]
        objects, golds = _instance_objects(g)
        for name, red in _runs(data, ["template_marginal"], part):
            marginal = _marginal(g, part.paraphrases, LL[red])
            if marginal is None:
                continue
            options, values = list(marginal), np.array(list(marginal.values()))
            k = int(np.argmax(values))
            rows.append(
                (
                    *key,
                    None,
                    name,
                    red,
                    options[k],
                    objects[options[k]],
                    float(values[k]),
                    bool(golds[options[k]]),
                )
            )
    return rows


def pd_selective_lama(data: PandasInput) -> list[Row]:
    names = [n for n, s in SPECS.items() if s.family == "selective_lama" and n in data.wanted]
    rows = []
    for key, g in data.frame.groupby(["model_id", "relation_id", "instance_id", "template_id"], sort=False):
        part = data.parts[key[:2]]
        runs = _runs(data, names, part)
        if not runs:
            continue
        options, objects, gold = (
            g["option_index"].to_numpy(),
            g["object_id"].to_numpy(),
            g["is_gold"].to_numpy(),
        )
        for name, red in runs:
            ll = g[LL[red]].to_numpy()
            k = int(np.argmax(ll))
            if name == "token":
                if key[3] not in part.answer_conditional:
                    continue
                c = g["ll_answer_sum"].to_numpy()[k]
            elif name == "sent":
                c = g["ll_mean"].to_numpy()[k]
            elif name == "gap":
                c = math.inf if len(ll) == 1 else ll[k] - np.sort(ll)[-2]
            elif name == "reranking":
                second = g[LL[SECOND_RULE[red]]].to_numpy()
                rank = 1 + int((second > second[k]).sum())
                c = math.log2(g["n_options"].iloc[0] / rank)
            elif name == "template_diff":
                c = softmax(ll)[k] - softmax(g[MASKED[red]].to_numpy())[k]
            else:  # dropout_mean / dropout_var: p_m over the options of pass m
                passes = np.stack(g[DROPOUT[red]].to_list())  # [options, M]
                p_m = softmax(passes.T)[:, k]  # [M]
                c = p_m.mean() if name == "dropout_mean" else -p_m.var()
            rows.append(_row(key, key[3], name, red, options, objects, gold, k, c))
    return rows


def pd_markers(data: PandasInput) -> list[Row]:
    names = [n for n in MARKER_VARIANTS if n in data.wanted]
    if not names:
        return []
    by_variant = {MARKER_VARIANTS[n]: n for n in names}
    present = set(
        zip(
            data.frame["model_id"],
            data.frame["relation_id"],
            data.frame["instance_id"],
            data.frame["template_id"],
            strict=True,
        )
    )
    rows = []
    for key, g in data.frame.groupby(["model_id", "relation_id", "instance_id", "template_id"], sort=False):
        part = data.parts[key[:2]]
        name = by_variant.get(part.variant[key[3]])
        parent = part.parent[key[3]]
        if name is None or (*key[:3], parent) not in present:
            continue
        options, objects, gold = (
            g["option_index"].to_numpy(),
            g["object_id"].to_numpy(),
            g["is_gold"].to_numpy(),
        )
        for _, red in _runs(data, [name], part):
            ll = g[LL[red]].to_numpy()
            k = int(np.argmax(ll))
            rows.append(_row(key, parent, name, red, options, objects, gold, k, softmax(ll)[k]))
    return rows


def pd_null_model(data: PandasInput) -> list[Row]:
    rows = []
    for key, g in data.frame.groupby(["model_id", "relation_id", "instance_id", "template_id"], sort=False):
        runs = _runs(data, ["answer_prior"], data.parts[key[:2]])
        if not runs:
            continue
        options, objects, gold = (
            g["option_index"].to_numpy(),
            g["object_id"].to_numpy(),
            g["is_gold"].to_numpy(),
        )
        for name, red in runs:
            masked = g[MASKED[red]].to_numpy()
            k = int(np.argmax(masked))
            rows.append(_row(key, key[3], name, red, options, objects, gold, k, softmax(masked)[k]))
    return rows


def _multi_answer_confidences(g, questions: list[str]):
    """(ŷ, {estimator: {τ: C}}) of one instance over its answer-conditional templates, or None."""
    sums = {tau: {} for tau in TAU_GRID}  # τ → option → Σ_t a_t(o)·1[a_t(o) > τ]
    firsts, a_first, n = [], [], 0
    for t, gt in g.groupby("template_id", sort=True):
        if t not in questions:
            continue
        n += 1
        a = np.exp(gt["ll_answer_sum"].to_numpy())
        options = gt["option_index"].tolist()
        firsts.append(options[int(np.argmax(a))])
        a_first.append(dict(zip(options, a, strict=True)))
        for tau in TAU_GRID:
            for o, v in zip(options, a, strict=True):
                sums[tau][o] = sums[tau].get(o, 0.0) + (v if v > tau else 0.0)
    if n == 0:
        return None
    sca = {tau: {o: v / n for o, v in sorted(s.items())} for tau, s in sums.items()}
    options = list(sca[0.0])
    answer = options[int(np.argmax([sca[0.0][o] for o in options]))]
    out = {"sca": {}, "snca": {}, "sfca": {}}
    for tau in TAU_GRID:
        total = sum(sca[tau].values())
        out["sca"][tau] = min(total, 1.0)  # capped at 1, as kcal defines SCA's confidence
        out["snca"][tau] = sca[tau][answer] / total if total > 0 else 0.0
        out["sfca"][tau] = (
            sum(f == answer and a[answer] > tau for f, a in zip(firsts, a_first, strict=True)) / n
        )
    return answer, out


def pd_multi_answer(data: PandasInput) -> list[Row]:
    names = [n for n, s in SPECS.items() if s.family == "multi_answer" and n in data.wanted]
    rows = []
    for (m, r), part_frame in data.frame.groupby(["model_id", "relation_id"], sort=False):
        part = data.parts[(m, r)]
        runs = [(n, red) for n, red in _runs(data, names, part) if part.answer_conditional]
        if not runs:
            continue
        per_instance = []  # (instance, split, k, answer, object, correct, confidences)
        for i, g in part_frame.groupby("instance_id", sort=False):
            got = _multi_answer_confidences(g, part.answer_conditional)
            if got is None:
                continue
            objects, golds = _instance_objects(g)
            answer, conf = got
            per_instance.append(
                (
                    i,
                    g["split"].iloc[0],
                    g["answer_space_k"].iloc[0],
                    answer,
                    objects[answer],
                    bool(golds[answer]),
                    conf,
                )
            )
        for name, red in runs:
            family, mode = name.split("_")
            if mode == "tau0":
                for i, _, _, answer, obj, correct, conf in per_instance:
                    rows.append((m, r, i, None, name, red, answer, obj, float(conf[family][0.0]), correct))
                continue
            if not part.has_dev:
                continue
            for k in sorted({x[2] for x in per_instance}):
                group = [x for x in per_instance if x[2] == k]
                dev = [x for x in group if x[1] == "dev"]
                if not dev:
                    continue
                brier = [np.mean([(x[6][family][tau] - x[5]) ** 2 for x in dev]) for tau in TAU_GRID]
                tau = TAU_GRID[int(np.argmin(brier))]
                for i, _, _, answer, obj, correct, conf in group:
                    rows.append((m, r, i, None, name, red, answer, obj, float(conf[family][tau]), correct))
    return rows


def _fit_temperature(log_gold_mass: Callable[[float], list[float]], informative: bool) -> float:
    """T minimising the mean dev NLL −log Σ_{g∈G} p_T(g) over log T ∈ [log 0.05, log 20]: the NLL on
    13 evenly spaced points, then scipy's bounded Brent search (to 1e-12) between the best point's
    neighbours, the bound itself where the best point is a bound and no worse (of equal grid values
    the smallest T). 1 when no dev instance has a gold option scored (an empty list) or no usable
    one is informative (the NLL does not depend on T)."""
    from scipy.optimize import minimize_scalar

    if not log_gold_mass(1.0) or not informative:
        return 1.0

    def nll(log_t: float) -> float:
        return -float(np.mean(log_gold_mass(math.exp(log_t))))

    grid = np.linspace(math.log(0.05), math.log(20.0), 13)
    values = [nll(g) for g in grid]
    best = int(np.argmin(values))
    bracket = (grid[max(best - 1, 0)], grid[min(best + 1, 12)])
    found = minimize_scalar(nll, bounds=bracket, method="bounded", options={"xatol": 1e-12}).x
    if best in (0, 12) and values[best] <= nll(found):
        found = grid[best]
    return math.exp(found)


def _informative(ll: np.ndarray, gold: np.ndarray) -> bool:
    """Whether one template's gold mass can depend on T: a gold option, a wrong one, two different scores."""
    return bool(gold.any() and not gold.all() and ll.max() > ll.min())


def _calibrator(
    method: str, x_dev: np.ndarray, y_dev: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """Platt or isotonic map fitted on (raw confidence, correct) of a group's dev instances, as
    kcal's recalibration module defines them: no dev rows → no rows (None); isotonic also needs ≥ 2;
    all right or all wrong → identity. Platt is an unpenalised logistic regression on Platt's
    smoothed targets (N₊+1)/(N₊+2) and 1/(N₋+2) (each row once as right, once as wrong, weighted)."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    if len(x_dev) < (1 if method == "platt" else 2):
        return None
    if len(set(y_dev.tolist())) < 2:
        return lambda x: x
    if method == "platt":
        n_right = int(y_dev.sum())
        target = np.where(y_dev, (n_right + 1) / (n_right + 2), 1 / (len(y_dev) - n_right + 2))
        if len(set(x_dev.tolist())) == 1:  # slope not identified: 0, and σ(intercept) = mean target
            intercept = math.log(target.mean() / (1 - target.mean()))
            return lambda x: np.full(len(x), 1 / (1 + math.exp(-intercept)))
        model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=1000).fit(
            np.concatenate([x_dev, x_dev]).reshape(-1, 1),
            np.concatenate([np.ones(len(y_dev)), np.zeros(len(y_dev))]),
            sample_weight=np.concatenate([target, 1 - target]),
        )
        return lambda x: model.predict_proba(x.reshape(-1, 1))[:, 1]
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip", increasing=True)
    return iso.fit(x_dev, y_dev.astype(np.float64)).predict


def _recalibrated(
    method: str,
    raw: np.ndarray,
    correct: np.ndarray,
    dev: np.ndarray,
    scaled: Callable[[float], np.ndarray],
    log_gold_mass: Callable[[float], list[float]],
    informative: bool,
) -> np.ndarray | None:
    """One group's recalibrated confidences (None: the group gets no rows). `scaled(T)`: the
    estimator on softmax(ll/T); `log_gold_mass(T)`: log Σ_g p_T(g) of the usable dev instances."""
    if method == "temperature":
        return scaled(_fit_temperature(log_gold_mass, informative)) if dev.any() else None
    fitted = _calibrator(method, raw[dev], correct[dev])
    return None if fitted is None else fitted(raw)


def _one_template_confidence(estimator: str, p: np.ndarray, k: int) -> float:
    if estimator == "base" or len(p) == 1:
        return p[k]
    top = np.sort(p)
    return top[-1] - top[-2]


def _log_mass(ll: np.ndarray, gold: np.ndarray, temperature: float) -> float:
    """log Σ_{g∈G} softmax(ll/T)(g), in log space so that a far-off gold does not underflow."""
    from scipy.special import logsumexp

    return logsumexp(ll[gold] / temperature) - logsumexp(ll / temperature)


def _recalibrate_templates(estimator, method, red, part, cells, info) -> Iterable[tuple]:
    """Base/Margin, one group per (paraphrase template, answer_space_k): (instance, template, option, C)."""
    instances = list(info)
    for t in part.paraphrases:
        for k in sorted({info[i][1] for i in instances}):
            group = [(i, cells[(i, t)]) for i in instances if (i, t) in cells and info[i][1] == k]
            if not group:
                continue
            lls = [c[2][red] for _, c in group]
            golds = [c[1] for _, c in group]
            picks = [int(np.argmax(ll)) for ll in lls]
            correct = np.array([bool(g[k]) for g, k in zip(golds, picks, strict=True)])
            raw = np.array(
                [
                    _one_template_confidence(estimator, softmax(ll), k)
                    for ll, k in zip(lls, picks, strict=True)
                ]
            )
            dev = np.array([info[i][0] == "dev" for i, _ in group])
            usable = [(ll, g) for ll, g, d in zip(lls, golds, dev, strict=True) if d and g.any()]

            def scaled(temperature, lls=lls, picks=picks):
                return [
                    _one_template_confidence(estimator, softmax(ll / temperature), k)
                    for ll, k in zip(lls, picks, strict=True)
                ]

            def log_gold_mass(temperature, usable=usable):
                return [_log_mass(ll, g, temperature) for ll, g in usable]

            informative = any(_informative(ll, g) for ll, g in usable)
            confidence = _recalibrated(method, raw, correct, dev, scaled, log_gold_mass, informative)
            if confidence is None:
                continue
            for (i, c), k, conf in zip(group, picks, confidence, strict=True):
                yield i, t, int(c[0][k]), conf


def _marginal_of(templates: list, red: str, temperature: float = 1.0) -> dict:
    """P_T(o) = mean over the instance's templates of softmax(ll_t/T)(o), option → P in option order."""
    total = {}
    for options, _, lls in templates:
        for o, v in zip(options.tolist(), softmax(lls[red] / temperature), strict=True):
            total[o] = total.get(o, 0.0) + v
    return {o: v / len(templates) for o, v in sorted(total.items())}


def _recalibrate_marginal(method, red, part, cells, info) -> Iterable[tuple]:
    """The template marginal, one group per answer_space_k: (instance, None, option, C)."""
    from scipy.special import logsumexp

    per_instance = {}
    for i in info:
        templates = [cells[(i, t)] for t in part.paraphrases if (i, t) in cells]
        if templates:
            per_instance[i] = templates
    for k in sorted({info[i][1] for i in per_instance}):
        group = [i for i in per_instance if info[i][1] == k]
        plain = [_marginal_of(per_instance[i], red) for i in group]
        picks = [max(p, key=p.get) for p in plain]  # the first maximum: the lowest option
        correct = np.array([bool(info[i][3][o]) for i, o in zip(group, picks, strict=True)])
        raw = np.array([p[o] for p, o in zip(plain, picks, strict=True)])
        dev = np.array([info[i][0] == "dev" for i in group])
        usable = [per_instance[i] for i, d in zip(group, dev, strict=True) if d]
        usable = [ts for ts in usable if any(g.any() for _, g, _ in ts)]

        def scaled(temperature, group=group, picks=picks):
            return [
                _marginal_of(per_instance[i], red, temperature)[o] for i, o in zip(group, picks, strict=True)
            ]

        def log_gold_mass(temperature, usable=usable):
            # log (1/T_i) Σ_t Σ_{g∈G} p_t(g) = logsumexp over (t, g) of log p_t(g) − log T_i
            out = []
            for templates in usable:
                logs = [
                    ll[red][g] / temperature - logsumexp(ll[red] / temperature)
                    for _, g, ll in templates
                    if g.any()
                ]
                out.append(logsumexp(np.concatenate(logs)) - math.log(len(templates)))
            return out

        informative = any(_informative(ll[red], g) for ts in usable for _, g, ll in ts)
        confidence = _recalibrated(method, raw, correct, dev, scaled, log_gold_mass, informative)
        if confidence is None:
            continue
        for i, o, conf in zip(group, picks, confidence, strict=True):
            yield i, None, o, conf


def pd_recalibration(data: PandasInput) -> list[Row]:
    names = [n for n, s in SPECS.items() if s.family == "recalibration" and n in data.wanted]
    rows = []
    for (m, r), part_frame in data.frame.groupby(["model_id", "relation_id"], sort=False):
        part = data.parts[(m, r)]
        runs = _runs(data, names, part)
        if not runs or not part.has_dev:
            continue
        cells, info = {}, {}  # (instance, template) → (options, gold, {reduction: ll}); instance → facts
        for i, g in part_frame.groupby("instance_id", sort=False):
            objects, golds = _instance_objects(g)
            info[i] = (g["split"].iloc[0], g["answer_space_k"].iloc[0], objects, golds)
            for t, gt in g.groupby("template_id", sort=False):
                lls = {red: gt[LL[red]].to_numpy() for red in LL if LL[red] in part.columns}
                cells[(i, t)] = (gt["option_index"].to_numpy(), gt["is_gold"].to_numpy(), lls)
        for name, red in runs:
            estimator, method = name.rsplit("_", 1)
            if estimator == "template_marginal":
                out = _recalibrate_marginal(method, red, part, cells, info)
            else:
                out = _recalibrate_templates(estimator, method, red, part, cells, info)
            for i, t, option, conf in out:
                objects, golds = info[i][2], info[i][3]
                rows.append(
                    (m, r, i, t, name, red, option, objects[option], float(conf), bool(golds[option]))
                )
    return rows


PANDAS_FAMILIES: dict[str, Callable[[PandasInput], list[Row]]] = {
    "single_template": pd_single_template,
    "aggregation": pd_aggregation,
    "template_marginal": pd_template_marginal,
    "selective_lama": pd_selective_lama,
    "markers": pd_markers,
    "null_model": pd_null_model,
    "multi_answer": pd_multi_answer,
    "recalibration": pd_recalibration,
}
ROW_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "template_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "predicted_index": pl.Int64,
    "predicted_id": pl.String,
    "confidence": pl.Float64,
    "correct": pl.Boolean,
}


def pandas_stage(data: Dataset, wanted: dict[str, tuple[str, ...]]) -> tuple[pl.DataFrame, dict]:
    """Every wanted estimator the pandas way: the rows and the seconds of each family."""
    seconds = {}
    t0 = time.perf_counter()
    prepared = pandas_prepare(data, wanted)
    seconds["prepare"] = time.perf_counter() - t0
    frames = []
    for family, fn in PANDAS_FAMILIES.items():
        if not any(SPECS[n].family == family for n in wanted):
            continue
        t0 = time.perf_counter()
        rows = fn(prepared)
        frames.append(pl.DataFrame(rows, schema=ROW_SCHEMA, orient="row"))
        seconds[family] = time.perf_counter() - t0
    return pl.concat(frames) if frames else pl.DataFrame(schema=ROW_SCHEMA), seconds


# ------------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which (estimator, reduction) pairs both sides compute, and what is left out and why."""

    wanted: dict[str, tuple[str, ...]]  # compared: estimator → reductions
    kcal_only: list[str]  # in the registry, not implemented here
    pandas_only: list[str]  # implemented here, not in the registry
    notes: list[str]  # registry and spec disagree on family or reductions


def comparison_plan(registered: dict) -> Plan:
    wanted, notes = {}, []
    for name, spec in registered.items():
        if name not in SPECS:
            continue
        ours = SPECS[name]
        if spec.family != ours.family:
            notes.append(f"{name}: registry family {spec.family!r}, spec {ours.family!r}")
        if tuple(spec.reductions) != ours.reductions:
            notes.append(f"{name}: registry reductions {tuple(spec.reductions)}, spec {ours.reductions}")
        reductions = tuple(r for r in spec.reductions if r in ours.reductions)
        if reductions:
            wanted[name] = reductions
    return Plan(
        wanted,
        [n for n in registered if n not in SPECS],
        [n for n in SPECS if n not in registered],
        notes,
    )


@dataclasses.dataclass(frozen=True)
class Agreement:
    rows: int  # rows on both sides
    only_kcal: pl.DataFrame
    only_pandas: pl.DataFrame
    mismatches: pl.DataFrame  # rows on both sides that differ
    max_delta: float  # over the rows compared to TOLERANCE
    max_delta_fitted: float  # over the rows of ITERATIVE_FITS (FITTED_TOLERANCE)

    @property
    def ok(self) -> bool:
        return self.only_kcal.is_empty() and self.only_pandas.is_empty() and self.mismatches.is_empty()


def compare(kcal: pl.DataFrame, pandas: pl.DataFrame, wanted: dict[str, tuple[str, ...]]) -> Agreement:
    """Join both on KEYS (template null for instance grain) over the compared (estimator, reduction)
    pairs; a row differs when predicted_index, predicted_id or correct differ or |Δ confidence| >
    TOLERANCE (+inf = +inf; FITTED_TOLERANCE for the estimators of ITERATIVE_FITS)."""
    pairs = pl.DataFrame(
        [(n, r) for n, rs in wanted.items() for r in rs], schema=["estimator", "reduction"], orient="row"
    )

    def norm(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.join(pairs, on=["estimator", "reduction"], how="semi").select(
            *(pl.col(k).cast(pl.String) for k in KEYS[:3]),
            pl.col("template_id").cast(pl.String).fill_null(""),
            *(pl.col(k).cast(pl.String) for k in KEYS[4:]),
            pl.col("predicted_index").cast(pl.Int64),
            pl.col("predicted_id").cast(pl.String),
            pl.col("confidence").cast(pl.Float64),
            pl.col("correct").cast(pl.Boolean),
        )

    a, b = norm(kcal), norm(pandas)
    for side, frame in (("kcal", a), ("pandas", b)):
        dup = frame.filter(pl.struct(KEYS).is_duplicated())
        if dup.height:
            raise ValueError(f"{side}: duplicate estimate rows, e.g. {dup.row(0, named=True)}")
    joined = a.join(b, on=KEYS, how="inner", suffix="_pd")
    delta = (pl.col("confidence") - pl.col("confidence_pd")).abs()
    same_inf = (pl.col("confidence") == pl.col("confidence_pd")) & pl.col("confidence").is_infinite()
    joined = joined.with_columns(
        delta=pl.when(same_inf).then(0.0).otherwise(delta).fill_nan(math.inf),
        fitted=pl.any_horizontal(pl.col("estimator").str.ends_with(e) for e in ITERATIVE_FITS),
    )
    tolerance = pl.when(pl.col("fitted")).then(FITTED_TOLERANCE).otherwise(TOLERANCE)
    bad = joined.filter(
        (pl.col("predicted_index") != pl.col("predicted_index_pd"))
        | ~pl.col("predicted_id").eq_missing(pl.col("predicted_id_pd"))
        | (pl.col("correct") != pl.col("correct_pd"))
        | (pl.col("delta") > tolerance)
    )
    return Agreement(
        rows=joined.height,
        only_kcal=a.join(b, on=KEYS, how="anti"),
        only_pandas=b.join(a, on=KEYS, how="anti"),
        mismatches=bad,
        max_delta=float(joined.filter(~pl.col("fitted"))["delta"].max() or 0.0),
        max_delta_fitted=float(joined.filter(pl.col("fitted"))["delta"].max() or 0.0),
    )


def disagreement_lines(agreement: Agreement) -> list[str]:
    """Per estimator: rows on one side only, rows that differ, the largest |Δ confidence|."""
    lines = []
    for label, frame in (("only in kcal", agreement.only_kcal), ("only in pandas", agreement.only_pandas)):
        for (name, red), part in sorted(frame.group_by("estimator", "reduction"), key=lambda kv: kv[0]):
            lines.append(f"  {name} ({red}): {part.height:,} rows {label}, e.g. {part.row(0, named=True)}")
    for (name, red), part in sorted(
        agreement.mismatches.group_by("estimator", "reduction"), key=lambda kv: kv[0]
    ):
        lines.append(
            f"  {name} ({red}): {part.height:,} rows differ (max |Δ confidence| {part['delta'].max():.2e}), "
            f"e.g. {part.row(0, named=True)}"
        )
    return lines


# ------------------------------------------------------------------------------------------------
# The run: each path in its own spawned process, on the same frames (Parquet in a temp directory)
# ------------------------------------------------------------------------------------------------

PARTITION = ["model_id", "relation_id"]


def save(data: Dataset, folder: Path) -> None:
    data.scores.write_parquet(folder / "scores.parquet")
    data.instances.write_parquet(folder / "instances.parquet")
    data.templates.write_parquet(folder / "templates.parquet")


def load(folder: Path, partitions: pl.DataFrame | None = None) -> Dataset:
    scores = pl.read_parquet(folder / "scores.parquet")
    if partitions is not None:
        scores = scores.join(partitions, on=PARTITION, how="semi")
    instances = pl.read_parquet(folder / "instances.parquet")
    return Dataset(scores, instances, pl.read_parquet(folder / "templates.parquet"), [], 0)


def maxrss() -> int:
    """The process's maximum resident set so far, in bytes (getrusage; KiB on Linux, bytes on macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


@contextmanager
def counted_warnings() -> Iterator[Counter]:
    """Count the warnings raised inside (by category and message, numbers masked) instead of
    printing each: thousands of per-group fits may warn."""
    counts: Counter = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield counts
    for w in caught:
        counts[f"{w.category.__name__}: {re.sub(r'[0-9]+', '#', str(w.message).splitlines()[0])}"] += 1


def kcal_child(folder: str, compared: list[str], families: dict[str, list[str]]) -> dict:
    """Timed stage over every registered estimator (and its maxrss rise), the stage over the
    compared ones, per-family seconds, then an untimed tracemalloc pass for the Python-heap peak."""
    data = load(Path(folder))
    registered = list(registry())
    log: list[str] = []
    gc.collect()
    before = maxrss()
    with counted_warnings() as raised:
        estimates, full = kcal_stage(data, None, log.append)
    rise = maxrss() - before
    estimates.write_parquet(Path(folder) / "kcal.parquet")
    rows = estimates.group_by("estimator").len().rows()
    del estimates
    gc.collect()
    if sorted(compared) == sorted(registered):
        on_compared = full
    else:
        _, on_compared = (
            kcal_stage(data, compared, lambda _: None)
            if compared
            else (None, {"total": 0.0, "build": 0.0, "estimate": 0.0})
        )
    with counted_warnings():  # the same warnings again: counted once, above
        per_family = kcal_per_family(data, families)
        gc.collect()
        tracemalloc.start()
        kcal_stage(data, None, lambda _: None)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "full": full,
        "compared": on_compared,
        "per_family": per_family,
        "maxrss_rise": rise,
        "traced_peak": traced_peak,
        "log": log,
        "rows": dict(rows),
        "registered": registered,
        "warnings": dict(raised),
    }


def pandas_child(folder: str, wanted: dict, partitions: pl.DataFrame | None) -> dict:
    data = load(Path(folder), partitions)
    gc.collect()
    before = maxrss()
    t0 = time.perf_counter()
    with counted_warnings() as raised:
        estimates, seconds = pandas_stage(data, wanted)
    seconds["total"] = time.perf_counter() - t0
    estimates.write_parquet(Path(folder) / "pandas.parquet")
    return {
        "seconds": seconds,
        "maxrss_rise": maxrss() - before,
        "rows": data.scores.height,
        "warnings": dict(raised),
    }


def in_process(fn, *args):
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def pandas_subset(data: Dataset, wanted: dict, budget: float, seed: int) -> tuple[pl.DataFrame | None, str]:
    """All partitions if a pilot projects the pandas path within `budget` seconds; else a random
    subset of whole (model, relation) partitions sized to fit, and a sentence saying so."""
    sizes = data.scores.group_by(PARTITION).len().sort(PARTITION)
    order = sizes.sample(fraction=1.0, shuffle=True, seed=seed)
    # whole partitions in shuffled order until ≥ 1 % of the rows (at least one partition)
    pilot = order.filter(pl.col("len").cum_sum() - pl.col("len") < 0.01 * data.scores.height)
    pilot_data = dataclasses.replace(data, scores=data.scores.join(pilot, on=PARTITION, how="semi"))
    t0 = time.perf_counter()
    with counted_warnings():
        pandas_stage(pilot_data, wanted)
    rate = pilot_data.scores.height / (time.perf_counter() - t0)
    projected = data.scores.height / rate
    if projected <= budget:
        return (
            None,
            f"pandas path on all {data.scores.height:,} statements (a pilot projected {projected:.0f} s)",
        )
    chosen = order.filter(pl.col("len").cum_sum() - pl.col("len") < budget * rate)
    share = chosen["len"].sum() / data.scores.height
    return chosen.select(PARTITION), (
        f"pandas path on a random subset of {chosen.height} of {sizes.height} (model, relation) partitions = "
        f"{chosen['len'].sum():,} of {data.scores.height:,} statements ({share:.1%}; a pilot projected "
        f"{projected:.0f} s for all > --pandas-budget {budget:g} s); its seconds below are scaled by "
        f"{1 / share:.2f} to all statements, and the comparison covers that subset"
    )


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def table_row(name, count, kcal_s, pandas_s, ratio, rows) -> str:
    """A row of the ratio table (numbers formatted; the ratio is computed when None)."""
    if isinstance(kcal_s, float):
        ratio = f"{pandas_s / kcal_s:.1f}×" if ratio is None else ratio
        kcal_s, pandas_s = f"{kcal_s:.2f}", f"{pandas_s:.2f}"
    rows = "" if rows is None else f"{rows:,}" if isinstance(rows, int) else rows
    return f"{name:<20} {count:>10} {kcal_s:>9} {pandas_s:>10} {ratio or '':>8} {rows:>14}"


def describe(data: Dataset, seed: int) -> str:
    sizes = data.scores.group_by("relation_id").agg(
        pl.col("template_id").n_unique(), pl.col("option_index").max() + 1
    )
    features = {
        "marker variants": sum(p.marker_parents > 0 for p in data.plans),
        "masked scores": sum(p.masked for p in data.plans),
        f"{DROPOUT_PASSES} dropout passes": sum(p.dropout for p in data.plans),
        "MACE-like (question templates, 1/2/4/6 golds)": sum(p.mace for p in data.plans),
    }
    return (
        f"statement_scores: {data.scores.height:,} rows = {data.scores['model_id'].n_unique()} models × "
        f"{len(data.plans)} relations × "
        f"{data.instances_per_relation} instances ({DEV_FRACTION:.0%} dev); options "
        f"{sizes['option_index'].min()}–{sizes['option_index'].max()}, templates "
        f"{sizes['template_id'].min()}–{sizes['template_id'].max()} per relation; relations with "
        + ", ".join(f"{what}: {n}" for what, n in features.items())
        + f"; seed {seed}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=DEFAULT_STATEMENTS, help="statement rows, at least")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--pandas-budget",
        type=float,
        default=900.0,
        help="seconds the pandas path may take; above that it runs on a stated subset of partitions",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import pandas as pd

    print(
        f"bench/estimators.py — polars {pl.__version__}, pandas {pd.__version__}, numpy {np.__version__}, "
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    data = make_dataset(args.statements, args.seed)
    print(describe(data, args.seed))
    registered = registry()
    plan = comparison_plan(registered)
    families = {f: [n for n in plan.wanted if SPECS[n].family == f] for f in FAMILIES}
    families = {f: names for f, names in families.items() if names}
    print(
        f"registry: {len(registered)} estimators; compared: {len(plan.wanted)} "
        f"({sum(len(r) for r in plan.wanted.values())} (estimator, reduction) pairs)"
    )
    if plan.kcal_only:
        print(f"not compared, in the registry but not implemented here: {', '.join(plan.kcal_only)}")
    if plan.pandas_only:
        print(f"not compared, implemented here but not in the registry: {', '.join(plan.pandas_only)}")
    for note in plan.notes:
        print(f"spec vs registry: {note} (compared on the reductions both have)")

    with tempfile.TemporaryDirectory(prefix="kcal-bench-") as folder:
        save(data, Path(folder))
        partitions, how = pandas_subset(data, plan.wanted, args.pandas_budget, args.seed)
        total_rows = data.scores.height
        del data
        gc.collect()
        kcal = in_process(kcal_child, folder, list(plan.wanted), families)
        pandas = in_process(pandas_child, folder, plan.wanted, partitions)
        kcal_rows = pl.read_parquet(Path(folder) / "kcal.parquet")
        pandas_rows = pl.read_parquet(Path(folder) / "pandas.parquet")
    print(how)
    for line in kcal["log"]:
        print(f"kcal log: {line}")
    scale = total_rows / pandas["rows"]
    if partitions is not None:
        kcal_rows = kcal_rows.join(partitions, on=PARTITION, how="semi")
    agreement = compare(kcal_rows, pandas_rows, plan.wanted)

    ps = pandas["seconds"]
    k_total, p_total = kcal["compared"]["total"], ps["total"] * scale
    print()
    print(table_row("family", "estimators", "kcal s", "pandas s", "ratio", "estimate rows"))
    print("-" * 78)
    print(table_row("cube build / prepare", "", kcal["compared"]["build"], ps["prepare"] * scale, None, None))
    for family, names in families.items():
        rows = sum(kcal["rows"].get(n, 0) for n in names)
        print(
            table_row(family, len(names), kcal["per_family"][family], ps.get(family, 0.0) * scale, None, rows)
        )
    print("-" * 78)
    rows = sum(kcal["rows"].get(n, 0) for n in plan.wanted)
    print(table_row("total (one stage)", len(plan.wanted), k_total, p_total, None, rows))
    print(
        "(kcal total: partition_cubes + compute_estimate_tables on the compared estimators in one call; "
        "per family: compute_estimate_tables on that family alone, cubes built once. pandas: prepare + "
        f"its family functions{', scaled as said above' if partitions is not None else ''}.)"
    )
    full = kcal["full"]
    print(
        f"kcal stage on all {len(kcal['registered'])} registered estimators: {full['total']:.2f} s "
        f"(build {full['build']:.2f} s, estimate {full['estimate']:.2f} s), "
        f"{sum(kcal['rows'].values()):,} estimate rows"
    )
    print(
        f"kcal stage peak memory: tracemalloc peak {mib(kcal['traced_peak'])} (Python heap, numpy arrays "
        f"included; polars' own allocations are not traced); ru_maxrss rise {mib(kcal['maxrss_rise'])} "
        "(getrusage: the whole process's high-water mark over the one with the frames loaded). pandas "
        f"path: ru_maxrss rise {mib(pandas['maxrss_rise'])}"
    )
    target = "met" if p_total / k_total >= 50 else "NOT met"
    print(f"target ≥ 50× in total: {p_total / k_total:.1f}× ({target})")
    status = "ok" if agreement.ok else "FAILED"
    print(
        f"agreement on {agreement.rows:,} rows on both sides: predicted_index, predicted_id, correct "
        f"equal; max |Δ confidence| {agreement.max_delta:.1e} ≤ {TOLERANCE:.0e} (+inf = +inf), on the "
        f"rows fitted by an optimiser (*_temperature, *_platt) {agreement.max_delta_fitted:.1e} ≤ "
        f"{FITTED_TOLERANCE:.0e}; "
        f"rows only in kcal {agreement.only_kcal.height:,}, only in pandas "
        f"{agreement.only_pandas.height:,}: {status}"
    )
    for path, raised in (("kcal", kcal["warnings"]), ("pandas", pandas["warnings"])):
        for message, n in sorted(raised.items()):
            print(f"warnings in the {path} path: {n:,} × {message}")
    for text in disagreement_lines(agreement):
        print(text)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0 if agreement.ok else 1


if __name__ == "__main__":
    sys.exit(main())
