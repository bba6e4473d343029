"""Benchmark: kcal's whole evaluation stage against a straightforward pandas implementation.

    .venv/bin/python bench/evaluation.py [--statements N] [--seed S] [--pandas-budget SECONDS]

Builds bench/estimators.py's seeded synthetic statement_scores (at least N rows, default 2,000,000),
runs kcal's estimator stage on them once, untimed (partition_cubes + compute_estimate_tables, and the
template marginal's option_estimates), and caches the estimates, option estimates, templates, a
relations table (domain "mace" for the MACE-like relation, "closed_set" otherwise) and
probe_instances (n_options, gold_ids, n_gold, from the synthetic data) as Parquet. Then, each in its
own spawned process on those files, per model as the evaluation assets call them:

  (i)  kcal: evaluation/tables.py's metrics_table (every registered metric on every breakdown, with
       B = 1,000 bootstrap intervals) and differences_table (paired intervals against Base) sharing
       one ResampledValues, as the metrics multi-asset runs them (metrics_and_differences),
       curves_table, thresholds_table and consistency_table, timed, with its peak memory;
  (ii) pandas: the same definitions (METHODS §3–4, the kcal modules' docstrings) written the way a
       researcher would: groupby, a loop over the groups, numpy per group; the bootstrap (intervals,
       paired differences, the reliability band) evaluates each resample in a Python loop with this
       file's metric code, on the SAME resample index matrices (kcal's resample_plan). Nothing here
       calls kcal's metric, curve, bootstrap, threshold or consistency functions.

Every table is joined on its keys; numbers must agree to 1e-9 (NaN = NaN, ±inf equal), flags and
counts exactly. Per part it prints kcal seconds, pandas seconds, the ratio and the rows, the total
ratio against the target ≥ 30×, and kcal's peak memory. Exit status 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import platform
import re
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` and kcal from this checkout
from bench.estimators import counted_warnings, in_process, make_dataset, maxrss, mib
from kcal_pipeline.evaluation.scopes import TEMPLATE_KIND_GROUPS

TOLERANCE = 1e-9
TARGET = 30.0
N_RESAMPLES = 1000  # the B
BOOTSTRAP_SEED = 0  # what the assets use (tables.metrics_table's default)
PARTS = ("metrics", "intervals", "differences", "curves", "thresholds", "consistency")
MACE_DOMAIN, CLOSED_SET = "mace", "closed_set"

# ------------------------------------------------------------------------------------------------
# Inputs: the estimator stage's output on the synthetic data, built once, untimed
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Inputs:
    estimates: pl.DataFrame
    option_estimates: pl.DataFrame
    templates: pl.DataFrame
    relations: pl.DataFrame
    probe_instances: pl.DataFrame
    statements: int
    left_out: dict  # estimator → why its rows are not evaluated

    def model(self, model_id: str) -> Inputs:
        """The rows one model's evaluation assets read (they are partitioned by model)."""
        return dataclasses.replace(
            self,
            estimates=self.estimates.filter(pl.col("model_id") == model_id),
            option_estimates=self.option_estimates.filter(pl.col("model_id") == model_id),
        )

    def subset(self, relations: list[str] | None) -> Inputs:
        """Only these relations' rows (None: all)."""
        if relations is None:
            return self
        keep = pl.col("relation_id").is_in(relations)
        return dataclasses.replace(
            self, estimates=self.estimates.filter(keep), option_estimates=self.option_estimates.filter(keep)
        )

    @property
    def models(self) -> list[str]:
        return sorted(self.estimates["model_id"].unique().to_list())


def build_inputs(statements: int, seed: int, models: int | None = None) -> Inputs:
    """make_dataset → kcal's estimates and option estimates, plus relations and probe_instances.

    Estimators that declare probabilities but give confidences outside [0, 1] on this data are left
    out (SCA: a sum of absolute answer probabilities, uncapped; the synthetic answer log-likelihoods
    sum to more than 1): kcal's probability metrics refuse them, so the stage cannot run on them.
    """
    from kcal_pipeline.estimation import partition_cubes
    from kcal_pipeline.estimation.marginal import option_estimates
    from kcal_pipeline.estimation.registry import compute_estimate_tables

    data = make_dataset(statements, seed) if models is None else make_dataset(statements, seed, models)
    cubes = partition_cubes(data.scores, data.instances, data.templates)
    estimates = compute_estimate_tables(cubes, None, log=lambda _: None).estimates
    options = option_estimates(cubes)
    outside = (
        estimates.filter(
            (pl.col("output_kind") == "probability") & ~pl.col("confidence").is_between(0.0, 1.0)
        )
        .group_by("estimator")
        .agg(pl.len(), pl.col("confidence").max())
        .sort("estimator")
    )
    left_out = {
        name: f"declares probabilities, {n:,} confidences outside [0, 1] (max {top:.3g})"
        for name, n, top in outside.iter_rows()
    }
    estimates = estimates.filter(~pl.col("estimator").is_in(list(left_out)))
    gold = (
        data.scores.filter(pl.col("is_gold"))
        .group_by("relation_id", "instance_id")
        .agg(pl.col("object_id").unique().sort().alias("gold_ids"))
    )
    probe = data.instances.join(gold, on=["relation_id", "instance_id"], how="left").with_columns(
        n_gold=pl.col("gold_ids").list.len().cast(pl.Int32)
    )
    relations = pl.DataFrame(
        {
            "relation_id": [p.relation_id for p in data.plans],
            "domain": [MACE_DOMAIN if p.mace else CLOSED_SET for p in data.plans],
            # BEAR topic domains, several or none per relation (scope bear_domain)
            "bear_domains": [BEAR_DOMAINS[i % len(BEAR_DOMAINS)] for i in range(len(data.plans))],
        },
        schema_overrides={"bear_domains": pl.List(pl.String)},
    )
    return Inputs(estimates, options, data.templates, relations, probe, data.scores.height, left_out)


_FILES = ("estimates", "option_estimates", "templates", "relations", "probe_instances")
BEAR_DOMAINS = (["Geographic"], ["Geographic", "Political"], [])


def save(inputs: Inputs, folder: Path) -> None:
    for name in _FILES:
        getattr(inputs, name).write_parquet(folder / f"{name}.parquet")


def load(folder: Path) -> Inputs:
    frames = {name: pl.read_parquet(folder / f"{name}.parquet") for name in _FILES}
    return Inputs(**frames, statements=0, left_out={})


# ------------------------------------------------------------------------------------------------
# kcal's path: the table functions the assets call, per model
# ------------------------------------------------------------------------------------------------


def kcal_stage(inputs: Inputs, models: list[str], n_resamples: int, seed: int) -> tuple[dict, dict]:
    """The five tables of every model in `models` and the seconds per part. metrics_table and
    differences_table share one ResampledValues, as metrics_and_differences (the asset) runs them:
    `differences` is what the differences cost beyond the intervals' resample values. `metrics`
    is metrics_table less the seconds of a bootstrap_intervals call timed on its own, on fresh
    values (`intervals`)."""
    from kcal_pipeline.estimation.registry import HEADLINE_SPLIT
    from kcal_pipeline.evaluation.bootstrap import INTERVAL_METRICS, ResampledValues, bootstrap_intervals
    from kcal_pipeline.evaluation.intervals import LEVEL
    from kcal_pipeline.evaluation.tables import (
        consistency_table,
        curves_table,
        differences_table,
        headline_frame,
        metrics_table,
        thresholds_table,
    )

    out = {p: [] for p in ("metrics", "differences", "curves", "thresholds", "consistency")}
    seconds = dict.fromkeys(PARTS, 0.0)
    for model in models:
        m = inputs.model(model)
        shared = ResampledValues(n_resamples, 0)
        t0 = time.perf_counter()
        out["metrics"].append(
            metrics_table(
                m.estimates,
                m.templates,
                m.relations,
                m.probe_instances,
                m.option_estimates,
                n_resamples,
                0,
                shared,
            )
        )
        t1 = time.perf_counter()
        out["differences"].append(differences_table(m.estimates, m.templates, n_resamples, 0, shared))
        t2 = time.perf_counter()
        del shared  # the values of one model: freed before the next parts
        out["curves"].append(curves_table(m.estimates, m.templates, n_resamples, 0))
        t3 = time.perf_counter()
        out["thresholds"].append(thresholds_table(m.estimates, m.templates, m.option_estimates))
        t4 = time.perf_counter()
        out["consistency"].append(consistency_table(m.estimates, m.templates, seed=seed))
        t5 = time.perf_counter()
        test = headline_frame(m.estimates, m.templates, m.relations, m.probe_instances).filter(
            pl.col("split") == HEADLINE_SPLIT
        )
        t6 = time.perf_counter()
        bootstrap_intervals(test, INTERVAL_METRICS, n_resamples=n_resamples, seed=0, level=LEVEL)
        intervals = time.perf_counter() - t6
        seconds["metrics"] += (t1 - t0) - intervals
        seconds["intervals"] += intervals
        spans = ((t1, t2), (t2, t3), (t3, t4), (t4, t5))
        for part, (a, b) in zip(("differences", "curves", "thresholds", "consistency"), spans, strict=True):
            seconds[part] += b - a
    return {p: pl.concat(f) for p, f in out.items()}, seconds


# ------------------------------------------------------------------------------------------------
# The pandas path: every definition written out again, on numpy arrays per group
# ------------------------------------------------------------------------------------------------

GROUP = ["model_id", "estimator", "reduction", "output_kind", "split", "answer_space_k"]
KEYS5 = ["model_id", "estimator", "reduction", "split", "answer_space_k"]
TUNING = ["model_id", "estimator", "reduction", "output_kind", "answer_space_k"]
BINS = 20
SWEEP = (5, 10, 15, 30, 40, 50)
FIXED_TAU = 0.5
DEGENERATE = 0.95
TOP_OBJECTS = 5
MIXTURES = ((1,), (1, 2), (1, 2, 4), (1, 2, 4, 6))
KIND_GROUPS = TEMPLATE_KIND_GROUPS  # the breakdown's grouping of template kinds: data, not a definition
DIFFERENCED = ("accuracy", "ace", "brier", "auroc", "aurc")  # the paired differences' metrics
BOOTSTRAPPED = (*DIFFERENCED, "confidence_gap")  # the metrics table's intervals
LEVEL = 0.95  # the intervals' level


# --- metrics over (c, y) -----------------------------------------------------------------------


def quantile_bins(c, bins):
    """The bin of each confidence: sklearn's calibration_curve quantile bins (edges at np.percentile,
    searchsorted on the inner edges)."""
    edges = np.percentile(c, np.linspace(0, 1, bins + 1) * 100)
    return np.searchsorted(edges[1:-1], c)


def bin_stats(c, y, bins, strategy):
    """Non-empty bins: (bin, mean confidence, accuracy, count). quantile: sklearn's
    calibration_curve bins (edges at np.percentile, searchsorted on the inner edges); uniform:
    floor(B·c), the last bin closed at 1."""
    if strategy == "quantile":
        ids = quantile_bins(c, bins)
    else:
        ids = np.minimum(np.floor(c * bins).astype(int), bins - 1)
    n = np.bincount(ids, minlength=bins)
    conf = np.bincount(ids, weights=c, minlength=bins)
    acc = np.bincount(ids, weights=y.astype(float), minlength=bins)
    k = np.flatnonzero(n)
    return k, conf[k] / n[k], acc[k] / n[k], n[k]


def ace_at(bins):
    def fn(c, y):
        _, conf, acc, _ = bin_stats(c, y, bins, "quantile")
        return np.abs(acc - conf).mean()

    return fn


def ece_at(bins):
    def fn(c, y):
        _, conf, acc, n = bin_stats(c, y, bins, "uniform")
        return (n * np.abs(acc - conf)).sum() / n.sum()

    return fn


def brier(c, y):
    return np.mean((c - y) ** 2)


def multihot_brier(c, y, instance, option):
    """Over an instance's options Σ_o (p_o − y_o)², every gold a 1; the mean over instances."""
    per_instance = {}
    for i, p, gold in zip(instance, c, y, strict=True):
        per_instance[i] = per_instance.get(i, 0.0) + (p - gold) ** 2
    return np.mean(list(per_instance.values()))


def classwise_ece(c, y, instance, option):
    """Kull et al.: per class (an option object of one relation), the 20-bin ECE over the rows
    offering it; the unweighted mean over classes."""
    return np.mean([ece_at(BINS)(c[option == k], y[option == k]) for k in sorted(set(option))])


SMECE_M = 10_000  # grid intervals on [0, 1], as kcal's: the grid is part of the number at 1e-9


def smooth_ece(c, y):
    """smECE (Błasiok & Nakkiran 2023): the residuals c − y split linearly onto a 10,000-interval
    grid, mirrored at 0 onto the circle [−1, 1), convolved with a Gaussian SAMPLED IN SPACE (its
    images two apart), trapezoid over [0, 1]; σ* with smECE_σ* = σ* by brentq on [0.001, 1]."""
    from scipy.optimize import brentq

    m = SMECE_M
    pos = c * m
    lo = np.minimum(np.floor(pos).astype(int), m - 1)
    frac = pos - lo
    r = c - y
    grid = np.zeros(m + 1)
    np.add.at(grid, lo, (1 - frac) * r)
    np.add.at(grid, lo + 1, frac * r)
    circle = np.zeros(2 * m)
    circle[: m + 1] += grid
    np.add.at(circle, (2 * m - np.arange(m + 1)) % (2 * m), grid)  # node j's mirror image is −j
    spectrum = np.fft.rfft(circle)
    offsets = np.arange(2 * m) / m
    offsets = np.where(offsets >= 1, offsets - 2, offsets)  # distance on the circle, in [−1, 1)

    def at(sigma):
        # images 2k away (the circle's length is 2), as many as reach within 9σ (e^−40 beyond)
        reach = math.ceil((9 * sigma + 1) / 2)
        images = offsets[None, :] + 2 * np.arange(-reach, reach + 1)[:, None]
        kernel = (np.exp(-0.5 * (images / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))).sum(axis=0)
        smoothed = np.fft.irfft(spectrum * np.fft.rfft(kernel), n=2 * m)
        return np.abs(smoothed).sum() / (2 * m) / len(c)

    if at(1e-3) - 1e-3 <= 0:
        return at(1e-3)
    if at(1.0) - 1.0 >= 0:
        return at(1.0)
    sigma = brentq(lambda s: at(s) - s, 1e-3, 1.0, xtol=1e-12, rtol=4 * np.finfo(float).eps)
    return at(sigma)


def h_score(c, y):
    acc, good = y.mean(), 1 - ace_at(BINS)(c, y)
    return 0.0 if acc + good == 0 else 2 * acc * good / (acc + good)


def auroc(c, y):
    from scipy.stats import rankdata

    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    return (rankdata(c)[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def by_confidence(c, y):
    """Correctness, most confident first; ties keep the rows' order (a stable sort)."""
    return y[np.argsort(-c, kind="stable")]


def aurc(c, y):
    errors = np.cumsum(~by_confidence(c, y))
    return np.mean(errors / np.arange(1, len(c) + 1))


def aupc(c, y):
    return np.mean(np.cumsum(by_confidence(c, y)) / np.arange(1, len(c) + 1))


def selective_accuracy(percent):
    return lambda c, y: by_confidence(c, y)[: math.ceil(percent * len(c) / 100)].mean()


def coverage_at_risk(percent):
    def fn(c, y):
        errors = np.cumsum(~by_confidence(c, y))
        k = np.arange(1, len(c) + 1)
        ok = np.flatnonzero(100 * errors <= percent * k)
        return 0.0 if len(ok) == 0 else (ok[-1] + 1) / len(c)

    return fn


def prr(c, y):
    n_pos = int(y.sum())
    if n_pos in (0, len(y)):
        return math.nan
    k = np.arange(1, len(y) + 1)
    pra = np.mean(np.cumsum(by_confidence(c, y)) / k)
    oracle = np.mean(np.minimum(k, n_pos) / k)
    random = n_pos / len(y)
    return (pra - random) / (oracle - random)


def decision(measure, strict=False):
    """Precision, recall, F1 or FPR of accept = C ≥ τ (statements: asserted = P > τ), positive =
    correct; NaN on an empty denominator or a NaN τ."""

    def fn(c, y, tau):
        if math.isnan(tau):
            return math.nan
        accept = c > tau if strict else c >= tau
        tp, fp = int((accept & y).sum()), int((accept & ~y).sum())
        fn_, tn = int((~accept & y).sum()), int((~accept & ~y).sum())
        num, den = {
            "precision": (tp, tp + fp),
            "recall": (tp, tp + fn_),
            "f1": (2 * tp, 2 * tp + fp + fn_),
            "fpr": (fp, fp + tn),
        }[measure]
        return num / den if den else math.nan

    return fn


def top_predicted(predicted):
    counts = {}
    for p in predicted:
        if p is not None:
            counts[p] = counts.get(p, 0) + 1
    return {p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OBJECTS]}


def accuracy_among_golds(predicted, gold):
    """Per relation the share of predictions that are a gold id; "all" is the mean over relations."""
    return np.mean([p is not None and p in golds for p, golds in zip(predicted, gold, strict=True)])


def prediction_coverage(predicted, gold):
    top = top_predicted(predicted)
    return np.mean([p is not None and p in top for p in predicted])


def answer_coverage(predicted, gold):
    top = top_predicted(predicted)
    return np.mean([np.mean([g in top for g in golds]) for golds in gold])


@dataclasses.dataclass(frozen=True)
class Metric:
    needs: str  # probability | any
    input: str  # confidence | threshold | statements | options | predictions
    higher: bool | None
    fn: Callable
    tau: float | str | None = None  # a fixed τ, or "tuned"


def metric_table() -> dict[str, Metric]:
    t = {"accuracy": Metric("any", "confidence", True, lambda c, y: y.mean())}
    t["accuracy_macro"] = Metric("any", "predictions", True, accuracy_among_golds)
    t["ace"] = Metric("probability", "confidence", False, ace_at(BINS))
    t["ece"] = Metric("probability", "confidence", False, ece_at(BINS))
    t["brier"] = Metric("probability", "confidence", False, brier)
    t["smooth_ece"] = Metric("probability", "confidence", False, smooth_ece)
    t["h_score"] = Metric("probability", "confidence", True, h_score)
    t["mean_confidence"] = Metric("probability", "confidence", None, lambda c, y: c.mean())
    t["confidence_gap"] = Metric("probability", "confidence", None, lambda c, y: c.mean() - y.mean())
    t["multihot_brier"] = Metric("probability", "options", False, multihot_brier)
    t["classwise_ece"] = Metric("probability", "options", False, classwise_ece)
    t |= {f"ace_b{b}": Metric("probability", "confidence", False, ace_at(b)) for b in SWEEP}
    t |= {f"ece_b{b}": Metric("probability", "confidence", False, ece_at(b)) for b in SWEEP}
    t["auroc"] = Metric("any", "confidence", True, auroc)
    t["aurc"] = Metric("any", "confidence", False, aurc)
    t |= {
        f"selective_accuracy_c{p}": Metric("any", "confidence", True, selective_accuracy(p))
        for p in (50, 80, 90)
    }
    t |= {
        f"coverage_at_risk_r{p:02d}": Metric("any", "confidence", True, coverage_at_risk(p))
        for p in (5, 10, 20)
    }
    t["prr"] = Metric("any", "confidence", True, prr)
    t["aupc"] = Metric("any", "confidence", True, aupc)
    for prefix, input_ in (("", "threshold"), ("statement_", "statements")):
        for measure in ("precision", "recall", "f1", "fpr"):
            higher = measure != "fpr"
            strict = input_ == "statements"
            fn = decision(measure, strict)
            t[f"{prefix}{measure}_t050"] = Metric("probability", input_, higher, fn, FIXED_TAU)
            needs = "probability" if strict else "any"
            t[f"{prefix}{measure}_tuned"] = Metric(needs, input_, higher, fn, "tuned")
    t["prediction_coverage"] = Metric("any", "predictions", None, prediction_coverage)
    t["answer_coverage"] = Metric("any", "predictions", None, answer_coverage)
    return t


METRIC_DEFS = metric_table()


def tune_f1(c, y, kind, strict=False):
    """τ maximising dev F1 over the distinct dev confidences (ties: the largest; accepting C ≥ τ,
    or, strict, C > τ as statements are asserted); 0.5 for
    probabilities (NaN for scores) with no dev rows, no correct dev row, or a τ accepting or
    rejecting ≥ 95 % of the dev rows. → (τ, fallback, reason, n_dev)."""
    default = FIXED_TAU if kind == "probability" else math.nan
    n = len(c)
    if n == 0:
        return default, True, "no dev rows", 0
    n_pos = int(y.sum())
    if n_pos == 0:
        return default, True, "no correct dev row", n
    order = np.argsort(c, kind="stable")
    cs, ys = c[order], y[order]
    right_from = np.concatenate([np.cumsum(ys[::-1])[::-1], [0]])  # correct among rows i..n−1
    best, best_f1, best_accepted = None, -1.0, 0
    for v in np.unique(c):
        i = np.searchsorted(cs, v, side="right" if strict else "left")
        accepted, tp = n - i, right_from[i]
        score = 2 * tp / (accepted + n_pos)
        if score >= best_f1:
            best, best_f1, best_accepted = v, score, accepted
    share = best_accepted / n
    if share >= DEGENERATE or 1 - share >= DEGENERATE:
        return default, True, f"degenerate: the best τ {best:.6g} accepts {share:.1%} of {n} dev rows", n
    return float(best), False, None, n


# --- frames ------------------------------------------------------------------------------------


def pd_with_defaults(df):
    df = df.copy()
    if "output_kind" not in df.columns:
        df["output_kind"] = "probability"
    df["answer_space_k"] = df["answer_space_k"].astype("int64")
    return df


def pd_headline(est, templates):
    """Each relation's headline template (curated, rank 0) plus every instance-grain row."""
    heads = templates[(templates["rank"] == 0) & (templates["kind"] == "curated")][
        ["relation_id", "template_id"]
    ]
    per_template = est[est["template_id"].notna()].merge(heads, on=["relation_id", "template_id"])
    return pd_with_defaults(pd_concat([per_template, est[est["grain"] == "instance"]]))


def pd_concat(frames):
    import pandas as pd

    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def pd_attach(frame, relations, probe):
    attributes = ["relation_id", "domain", *(["bear_domains"] if "bear_domains" in relations else [])]
    out = frame.merge(relations[attributes], on="relation_id", how="left")
    cols = ["relation_id", "instance_id", "n_gold", "n_options", "gold_ids"]
    return out.merge(probe[cols], on=["relation_id", "instance_id"], how="left")


def sort_rows(df, extra=("relation_id", "instance_id")):
    return df.sort_values([*GROUP, *extra], kind="stable", na_position="last").reset_index(drop=True)


def groups(df, keys):
    """(key dict, group) in the frame's order; null keys kept."""
    for values, g in df.groupby(keys, sort=False, dropna=False):
        yield dict(zip(keys, values, strict=True)), g


def pd_scopes(g, attributes: bool):
    """(scope, value, row positions) of one group: all, each relation, and with attributes each
    domain, gold count, MACE mixture per MACE relation and option count."""
    n = len(g)
    yield "all", "all", np.arange(n)
    rel = g["relation_id"].to_numpy()
    for r in sorted(set(rel)):
        yield "relation", r, np.flatnonzero(rel == r)
    if not attributes:
        return
    domain, golds, options = (g[c].to_numpy() for c in ("domain", "n_gold", "n_options"))
    for d in sorted(set(domain)):
        yield "domain", str(d), np.flatnonzero(domain == d)
    for k in sorted(set(golds)):
        yield "n_gold", str(k), np.flatnonzero(golds == k)
    mace_relations = sorted(set(rel[domain == MACE_DOMAIN]))
    for counts in MIXTURES:
        for r in mace_relations:
            rows = np.flatnonzero((domain == MACE_DOMAIN) & np.isin(golds, counts) & (rel == r))
            if len(rows):
                yield "mixture_domain", f"{','.join(map(str, counts))}|{r}", rows
    for k in sorted(set(options)):
        yield "n_options", str(k), np.flatnonzero(options == k)
    if "bear_domains" in g:  # a row counts in each of its relation's domains
        lists = [list(v) for v in g["bear_domains"]]
        for d in sorted({d for v in lists for d in v}):
            yield "bear_domain", d, np.array([i for i, v in enumerate(lists) if d in v], dtype=np.int64)


def pd_taus(df, strict=False):
    """tune_f1 per TUNING group, on its dev rows (none: the fallback)."""
    out = {}
    for key, g in groups(df, TUNING):
        dev = g[g["split"] == "dev"]
        out[tuple(key.values())] = tune_f1(
            dev["confidence"].to_numpy(float), dev["correct"].to_numpy(bool), key["output_kind"], strict
        )
    return out


def pd_metric_rows(df, names, attributes):
    """Rows (KEYS5…, scope, value, metric, value, n, higher) of every applicable metric in
    `names` per GROUP and scope; `df` sorted by GROUP, relation, instance."""
    strict = any(METRIC_DEFS[m].input == "statements" for m in names)
    taus = pd_taus(df, strict) if any(METRIC_DEFS[m].tau == "tuned" for m in names) else {}
    rows = []
    for key, g in groups(df, GROUP):
        kind = key["output_kind"]
        applicable = [m for m in names if METRIC_DEFS[m].needs == "any" or kind == "probability"]
        c, y = g["confidence"].to_numpy(float), g["correct"].to_numpy(bool)
        if any(METRIC_DEFS[m].input == "options" for m in applicable):  # labels: relation + id
            instance = (g["relation_id"] + "|" + g["instance_id"]).to_numpy(object)
            option = (g["relation_id"] + "|" + g["option_id"]).to_numpy(object)
        per_relation = {}
        if any(METRIC_DEFS[m].input == "predictions" for m in applicable):
            pred = g["predicted_id"].to_numpy(object)
            gold = g["gold_ids"].to_numpy(object)
            rel = g["relation_id"].to_numpy()
            for r in sorted(set(rel)):
                inside = rel == r
                per_relation[r] = {
                    m: METRIC_DEFS[m].fn(list(pred[inside]), [list(x) for x in gold[inside]])
                    for m in applicable
                    if METRIC_DEFS[m].input == "predictions"
                }
        head = [key[k] for k in KEYS5]
        tau = taus.get(tuple(key[k] for k in TUNING), (math.nan,))[0]
        for scope, value, rows_ in pd_scopes(g, attributes):
            cs, ys = c[rows_], y[rows_]
            for m in applicable:
                spec = METRIC_DEFS[m]
                if spec.input == "predictions":
                    if scope == "relation":
                        v = per_relation[value][m]
                    elif scope == "all":
                        v = np.mean([per_relation[r][m] for r in per_relation])
                    else:
                        continue
                elif spec.input == "confidence":
                    v = spec.fn(cs, ys)
                elif spec.input == "options":
                    v = spec.fn(cs, ys, instance[rows_], option[rows_])
                else:
                    v = spec.fn(cs, ys, tau if spec.tau == "tuned" else spec.tau)
                rows.append((*head, scope, value, m, float(v), len(rows_), spec.higher))
    return rows


METRIC_COLUMNS = ["model_id", "estimator", "reduction", "split", "answer_space_k", "scope", "scope_value",
                  "metric", "value", "n", "higher_is_better"]  # fmt: skip


def pd_compute_metrics(frame, statements=None, attributes=True):
    """compute_metrics' definition: every metric per group and breakdown; statement metrics on the
    option estimates; MACE mixtures = the mean over their domains' values."""
    import pandas as pd

    on_options = ("statements", "options")
    names = [m for m, d in METRIC_DEFS.items() if d.input not in on_options]
    if "gold_ids" not in frame.columns:
        names = [m for m in names if METRIC_DEFS[m].input != "predictions"]
    rows = pd_metric_rows(sort_rows(frame), names, attributes)
    if statements is not None and len(statements):
        st = pd_with_defaults(statements.rename(columns={"probability": "confidence", "is_gold": "correct"}))
        st = sort_rows(st, ("relation_id", "instance_id", "option_index"))
        rows += pd_metric_rows(st, [m for m, d in METRIC_DEFS.items() if d.input in on_options], attributes)
    out = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    parts = out[out["scope"] == "mixture_domain"].copy()
    if len(parts):
        parts["mixture"] = parts["scope_value"].str.split("|").str[0]
        keys = ["model_id", "estimator", "reduction", "split", "answer_space_k", "metric", "higher_is_better"]
        mix = []
        for (key, mixture), g in parts.groupby([tuple_col(parts, keys), "mixture"], sort=False):
            mix.append(
                (*key[:5], "mixture", mixture, key[5], g["value"].to_numpy().mean(), g["n"].sum(), key[6])
            )
        out = pd_concat([out, pd.DataFrame(mix, columns=METRIC_COLUMNS)])
    return out


def tuple_col(df, keys):
    """One column of key tuples (None kept), so a groupby keeps null keys together."""
    import pandas as pd

    return pd.Series(list(zip(*(df[k] for k in keys), strict=True)), index=df.index)


def pd_template_kind_metrics(est, templates):
    """Per template kind: the metrics (scope all) over every (instance, template) pair of templates
    of that kind, a pair counted once."""
    frames = []
    for kind, g in pd_kind_pairs(est, templates):
        names = [m for m, d in METRIC_DEFS.items() if d.input in ("confidence", "threshold")]
        rows = pd_metric_rows(sort_rows(g), names, attributes=False)
        df = pd_frame(rows, METRIC_COLUMNS)
        df = df[df["scope"] == "all"].copy()
        df["scope"], df["scope_value"] = "template_kind", kind
        frames.append(df)
    return pd_concat(frames)


def pd_frame(rows, columns):
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


def pd_template_metrics(est, templates):
    """Per curated template; per relation the plain mean over its templates; overall the relations'
    means weighted by their instances."""
    curated = templates[templates["kind"] == "curated"][["relation_id", "template_id"]]
    df = pd_with_defaults(est[est["template_id"].notna()].merge(curated, on=["relation_id", "template_id"]))
    df = sort_rows(df, ("relation_id", "template_id", "instance_id"))
    names = [
        m
        for m, d in METRIC_DEFS.items()
        if d.input == "confidence" or (d.input == "threshold" and d.tau != "tuned")
    ]
    rows = []
    for key, g in groups(df, [*GROUP, "relation_id", "template_id"]):
        c, y = g["confidence"].to_numpy(float), g["correct"].to_numpy(bool)
        for m in names:
            spec = METRIC_DEFS[m]
            if spec.needs == "probability" and key["output_kind"] != "probability":
                continue
            v = spec.fn(c, y) if spec.input == "confidence" else spec.fn(c, y, spec.tau)
            rows.append(
                (
                    *(key[k] for k in KEYS5),
                    key["relation_id"],
                    key["template_id"],
                    m,
                    float(v),
                    len(g),
                    spec.higher,
                )
            )
    per = pd_frame(rows, [*KEYS5, "relation_id", "template_id", "metric", "value", "n", "higher_is_better"])
    out = []
    for r in per.itertuples(index=False):
        out.append((*r[:5], "template", r.template_id, r.metric, r.value, r.n, r.higher_is_better))
    instances = {
        k: g["instance_id"].nunique()
        for k, g in df.groupby([*KEYS5, "relation_id"], sort=False, dropna=False)
    }
    means = {}
    for key, g in per.groupby([*KEYS5, "relation_id", "metric"], sort=False, dropna=False):
        n = instances[key[:6]]
        value = g["value"].to_numpy().mean()
        out.append(
            (*key[:5], "relation_template_mean", key[5], key[6], value, n, g["higher_is_better"].iloc[0])
        )
        means.setdefault((*key[:5], key[6]), []).append((value, n, g["higher_is_better"].iloc[0]))
    for key, vals in means.items():
        v = np.array([a for a, _, _ in vals])
        n = np.array([b for _, b, _ in vals])
        out.append(
            (*key[:5], "all_template_mean", "all", key[5], (v * n).sum() / n.sum(), int(n.sum()), vals[0][2])
        )
    return pd_frame(out, METRIC_COLUMNS)


# --- the bootstrap -----------------------------------------------------------------------------


class PlanCache:
    """kcal's resample index matrices (resample_plan), fetched once per row layout."""

    def __init__(self, n_resamples, seed):
        self.n_resamples, self.seed, self.cache = n_resamples, seed, {}

    def __call__(self, relation_ids):
        from kcal_pipeline.evaluation.resamples import resample_plan

        names, counts = np.unique(relation_ids, return_counts=True)
        layout = (tuple(names), tuple(counts))
        if layout not in self.cache:
            self.cache[layout] = resample_plan(relation_ids, self.n_resamples, self.seed)
        return self.cache[layout]


def resample_values(fn, c, y, resamples):
    """fn on every resample, one at a time."""
    return np.array(
        [fn(c[rows], y[rows]) for rows in (resamples.rows(b) for b in range(resamples.n_resamples))]
    )


def bc_interval(values, point):
    """The bias-corrected percentile interval, widened to contain its point: z0 = Φ⁻¹(share of
    resamples below the point, ties (within 1e-12) half), the bounds np.percentile at 100·Φ(2·z0 ∓ z_(1−α/2)),
    then min/max with the point; z0 = 0 for a NaN point. NaN resamples are left out."""
    finite = values[~np.isnan(values)]
    if len(finite) == 0:
        return math.nan, math.nan, 0
    normal = NormalDist()
    if math.isnan(point):
        z0 = 0.0
    else:
        tie = np.abs(finite - point) <= 1e-12 * max(1.0, abs(point))  # equal but for summation order
        share = (np.sum((finite < point) & ~tie) + 0.5 * np.sum(tie)) / len(finite)
        z0 = -math.inf if share == 0 else math.inf if share == 1 else normal.inv_cdf(share)
    z = normal.inv_cdf((1 - LEVEL) / 2)
    low, high = np.percentile(finite, [100 * normal.cdf(z0 + (z0 + z)), 100 * normal.cdf(z0 + (z0 - z))])
    if not math.isnan(point):
        low, high = min(low, point), max(high, point)
    return float(low), float(high), len(finite)


def pd_intervals(test, plans):
    rows = []
    for key, g in groups(sort_rows(test), GROUP):
        usable = [
            m for m in BOOTSTRAPPED if METRIC_DEFS[m].needs == "any" or key["output_kind"] == "probability"
        ]
        c, y = g["confidence"].to_numpy(float), g["correct"].to_numpy(bool)
        for sc in plans(g["relation_id"].to_numpy()):
            for m in usable:
                fn, own = METRIC_DEFS[m].fn, sc.rows
                values = resample_values(fn, c, y, sc.resamples)
                low, high, used = bc_interval(values, float(fn(c[own], y[own])))
                rows.append((*(key[k] for k in KEYS5), sc.scope, sc.scope_value, m, low, high, used))
    return pd_frame(rows, [*KEYS5, "scope", "scope_value", "metric", "ci_low", "ci_high", "n_resamples"])


def pd_differences(test, plans, estimator_order):
    """metric(A) − metric(Base) on the instances both answered, and its interval over the same
    resamples for both."""
    present = set(test["estimator"])
    if "base" not in present or present == {"base"}:
        return pd_frame([], DIFFERENCE_COLUMNS)
    on = ["model_id", "reduction", "split", "answer_space_k", "relation_id", "instance_id"]
    cols = [*on, "confidence", "correct", "output_kind"]
    side_b = test[test["estimator"] == "base"][cols]
    rows = []
    for a in [e for e in estimator_order if e in present and e != "base"]:
        joined = test[test["estimator"] == a][cols].merge(side_b, on=on, suffixes=("", "_b"))
        joined = joined.sort_values(on, kind="stable").reset_index(drop=True)
        for key, g in groups(joined, [*on[:4], "output_kind", "output_kind_b"]):
            kinds = (key["output_kind"], key["output_kind_b"])
            usable = [
                m for m in DIFFERENCED if METRIC_DEFS[m].needs == "any" or kinds == ("probability",) * 2
            ]
            sides = [
                (g[f"confidence{s}"].to_numpy(float), g[f"correct{s}"].to_numpy(bool)) for s in ("", "_b")
            ]
            for sc in plans(g["relation_id"].to_numpy()):
                (ca, ya), (cb, yb) = ((c[sc.rows], y[sc.rows]) for c, y in sides)
                for m in usable:
                    fn = METRIC_DEFS[m].fn
                    va = resample_values(fn, *sides[0], sc.resamples)
                    vb = resample_values(fn, *sides[1], sc.resamples)
                    point = fn(ca, ya) - fn(cb, yb)
                    low, high, used = bc_interval(va - vb, float(point))
                    head = [key[k] for k in on[:4]]
                    rows.append(
                        (
                            *head,
                            sc.scope,
                            sc.scope_value,
                            a,
                            "base",
                            m,
                            float(point),
                            low,
                            high,
                            len(ca),
                            used,
                        )
                    )
    return pd_frame(rows, DIFFERENCE_COLUMNS)


DIFFERENCE_COLUMNS = ["model_id", "reduction", "split", "answer_space_k", "scope", "scope_value",
                      "estimator_a", "estimator_b", "metric", "difference", "ci_low", "ci_high", "n",
                      "n_resamples"]  # fmt: skip


# --- curves ------------------------------------------------------------------------------------

BAND = ["y_low", "y_high"]  # the reliability rows' per-bin interval; null on the other curves
NO_BAND = (None, None)
CURVE_COLUMNS = [*KEYS5, "scope", "scope_value", "curve", "x", "y", "n", "bin", "threshold", *BAND]


def pd_band(bin_of, y, resamples):
    """Each bin's accuracy on every resample [B, BINS], one resample at a time: a resampled row keeps
    the bin of the point sample; NaN where a resample has no row of the bin."""
    accuracy = np.full((resamples.n_resamples, BINS), np.nan)
    for b in range(resamples.n_resamples):
        rows = resamples.rows(b)
        n = np.bincount(bin_of[rows], minlength=BINS)
        right = np.bincount(bin_of[rows], weights=y[rows].astype(float), minlength=BINS)
        accuracy[b, n > 0] = right[n > 0] / n[n > 0]
    return accuracy


def pd_curves(headline, plans):
    rows = []
    for key, g in groups(sort_rows(headline), GROUP):
        prob = key["output_kind"] == "probability"
        c_all, y_all = g["confidence"].to_numpy(float), g["correct"].to_numpy(bool)
        plan = (
            {(s.scope, s.scope_value): s.resamples for s in plans(g["relation_id"].to_numpy())}
            if prob
            else {}
        )
        for scope, value, idx in pd_scopes(g, attributes=False):
            c, y = c_all[idx], y_all[idx]
            head = (*(key[k] for k in KEYS5), scope, value)
            n = len(c)
            if prob:
                bin_of = np.zeros(len(g), dtype=np.int64)
                bin_of[idx] = quantile_bins(c, BINS)
                band = pd_band(bin_of, y_all, plan[(scope, value)])
                for b, conf, acc, count in zip(*bin_stats(c, y, BINS, "quantile"), strict=True):
                    low, high, _ = bc_interval(band[:, b], acc)
                    rows.append((*head, "calibration", conf, acc, count, b, None, low, high))
                for k in range(1, 10):
                    tau = k / 10
                    kept = c >= tau
                    right = int((kept & y).sum())
                    acc = right / kept.sum() if kept.sum() else math.nan
                    rows.append(
                        (*head, "rejection", (n - kept.sum()) / n, acc, int(kept.sum()), None, tau, *NO_BAND)
                    )
            errors = np.cumsum(~by_confidence(c, y))
            for k in sorted({math.ceil(q * n / 100) for q in range(1, 101)}):
                rows.append((*head, "risk_coverage", k / n, errors[k - 1] / k, k, None, None, *NO_BAND))
            n_pos, n_neg = int(y.sum()), int((~y).sum())
            rows.append(
                (
                    *head,
                    "roc",
                    0.0 if n_neg else math.nan,
                    0.0 if n_pos else math.nan,
                    0,
                    None,
                    math.inf,
                    *NO_BAND,
                )
            )
            for t in np.unique(c)[::-1]:
                accept = c >= t
                tp, fp = int((accept & y).sum()), int((accept & ~y).sum())
                fpr = fp / n_neg if n_neg else math.nan
                tpr = tp / n_pos if n_pos else math.nan
                rows.append((*head, "roc", fpr, tpr, int(accept.sum()), None, float(t), *NO_BAND))
    return pd_frame(rows, CURVE_COLUMNS)


# --- thresholds --------------------------------------------------------------------------------

THRESHOLD_COLUMNS = ["model_id", "estimator", "reduction", "answer_space_k", "unit", "rule", "threshold",
                     "fallback", "reason", "n_dev", "template_kind"]  # fmt: skip


def pd_kind_pairs(est, templates):
    """(kind, its (instance, template) pairs, instance_id = "instance|template") per template kind."""
    t = templates[["relation_id", "template_id", "kind"]]
    pairs = est[est["template_id"].notna()].merge(t, on=["relation_id", "template_id"])
    pairs = pd_with_defaults(pairs)
    pairs["template_kind"] = pairs["kind"].map(KIND_GROUPS)
    pairs["instance_id"] = pairs["instance_id"] + "|" + pairs["template_id"]
    return list(pairs.groupby("template_kind", sort=False))


def pd_thresholds(headline, statements, est, templates):
    """The tuned τ of the instances (headline), the statements and each template kind's pairs."""
    rows = []
    inputs = [("instances", None, headline)]
    if statements is not None and len(statements):
        st = pd_with_defaults(statements.rename(columns={"probability": "confidence", "is_gold": "correct"}))
        inputs.append(("statements", None, st))
    inputs += [("pairs", kind, sort_rows(g)) for kind, g in pd_kind_pairs(est, templates)]
    for unit, kind, df in inputs:
        for key, (tau, fallback, reason, n_dev) in pd_taus(df, unit == "statements").items():
            k = dict(zip(TUNING, key, strict=True))
            if unit == "statements" and k["output_kind"] != "probability":
                continue
            rows.append(
                (
                    k["model_id"],
                    k["estimator"],
                    k["reduction"],
                    k["answer_space_k"],
                    unit,
                    "tune_f1_strict" if unit == "statements" else "tune_f1",
                    tau,
                    fallback,
                    reason,
                    n_dev,
                    kind,
                )
            )
    return pd_frame(rows, THRESHOLD_COLUMNS)


# --- consistency (Zhao et al. 2025) -------------------------------------------------------------

RANDOM_SETUPS = ("extra-space", "typo", "context-1shot", "context-3shot", "context-wrong")
NO_SEED = -1  # the seed key of a setup that is not a seeded draw (seeds are non-negative)
CONSISTENCY_COLUMNS = ["model_id", "kind", "setup_a", "setup_b", "estimator_a", "estimator_b", "reduction",
                       "relation_id", "seed", "statistic", "n_seeds", "threshold_a", "threshold_b",
                       "fallback_a", "fallback_b", "n", "iou_acc", "iou_rej", "iou_cons", "dec_cons",
                       "agreement"]  # fmt: skip


def setup_of(row, roles):
    """The row's setup: original (headline template or instance grain, full answer space), the
    answer-space subsample, a variant of the headline, a paraphrase, or None (no part)."""
    role = roles.get((row.relation_id, row.template_id))
    head = roles.get(row.relation_id)
    k = (
        0
        if row.answer_space_k is None or row.answer_space_k != row.answer_space_k
        else int(row.answer_space_k)
    )
    if row.template_id is None or (head is not None and row.template_id == head):
        return "original" if k == 0 else f"answer_space_k={k}"
    if k != 0 or role is None:
        return None
    kind, parent, variant, _ = role
    if parent is not None and parent == head:
        return variant
    if parent is None and kind in ("curated", "generated") and head is not None:
        return "paraphrase"
    return None


def dev_threshold(c, y):
    """Max dev decision accuracy over the splits between distinct dev confidences (τ = the midpoint;
    the lowest value for accept-all), ties to the lowest τ; degenerate (≥ 95 % accepted or
    rejected) → 0.5."""
    n = len(c)
    values = np.unique(c)
    best = None
    for j, v in enumerate(values):
        accept = c >= v
        accuracy = (int((accept & y).sum()) + int((~accept & ~y).sum())) / n
        if best is None or accuracy > best[0]:
            tau = v if j == 0 else (values[j - 1] + v) / 2
            best = (accuracy, tau, int(accept.sum()))
    share = best[2] / n
    if share >= DEGENERATE or 1 - share >= DEGENERATE:
        return FIXED_TAU, True
    return float(best[1]), False


def measures(aa, rr, ar, ra, agree):
    def ratio(a, b):
        return a / b if b > 0 else math.nan

    acc, rej = ratio(aa, aa + ar + ra), ratio(rr, rr + ar + ra)
    total = acc + rej
    cons = 0.0 if total == 0 else ratio(2 * acc * rej, total) if not math.isnan(total) else math.nan
    return acc, rej, cons, ratio(aa + rr, aa + rr + ar + ra), ratio(agree, aa)


def pd_consistency(est, templates, seed, marker_estimators):
    import pandas as pd

    t = templates.astype(object).where(templates.notna(), None)
    if "perturbation_seed" not in t.columns:
        t["perturbation_seed"] = None
    roles = {
        (r.relation_id, r.template_id): (r.kind, r.parent_id, r.variant, r.perturbation_seed)
        for r in t.itertuples()
    }
    for r in t.itertuples():
        if r.rank == 0 and r.kind == "curated":
            roles[r.relation_id] = r.template_id
    df = est.astype(object).where(est.notna(), None)
    df["setup"] = [setup_of(r, roles) for r in df.itertuples()]
    df = df[df["setup"].notna()].copy()
    # a seeded perturbation's draw: its own setup (threshold, pairs), keyed by its seed (NO_SEED: none)
    seeds = [
        None if s in ("original", "paraphrase") or s.startswith("answer_space_k=") else roles[(rel, tid)][3]
        for s, rel, tid in zip(df["setup"], df["relation_id"], df["template_id"], strict=True)
    ]
    df["seed"] = [NO_SEED if v is None or v != v else int(v) for v in seeds]
    df["instance"] = [
        i if not k else re.sub(r"#k\d+$", "", i)
        for i, k in zip(df["instance_id"], df["answer_space_k"], strict=True)
    ]
    df["anchor"] = [
        None if tid is None else roles.get(rel)
        for tid, rel in zip(df["template_id"], df["relation_id"], strict=True)
    ]
    df["anchor"] = df["anchor"].fillna("<instance grain>")
    thresholds = {}
    for key, g in df.groupby(
        ["model_id", "estimator", "reduction", "setup", "seed"], sort=False, dropna=False
    ):
        dev = g[g["split"] == "dev"]
        c, y = dev["confidence"].to_numpy(float), dev["correct"].to_numpy(bool)
        thresholds[key] = dev_threshold(c, y) if len(dev) else (FIXED_TAU, True)
    test = df[df["split"] == "test"].copy()
    keyed = tuple_col(test, ["model_id", "estimator", "reduction", "setup", "seed"])
    test["tau"] = [thresholds[k][0] for k in keyed]
    test["fallback"] = [thresholds[k][1] for k in keyed]
    test["accept"] = test["confidence"].astype(float) >= test["tau"]
    item = ["model_id", "relation_id", "instance", "reduction", "anchor"]
    counts = {}  # (pair keys, relation) → [aa, rr, ar, ra, agree]

    def add(key, accept_a, accept_b, pred_a, pred_b):
        same = np.array([p is not None and p == q for p, q in zip(pred_a, pred_b, strict=True)], dtype=bool)
        c = counts.setdefault(key, [0, 0, 0, 0, 0])
        c[0] += int((accept_a & accept_b).sum())
        c[1] += int((~accept_a & ~accept_b).sum())
        c[2] += int((accept_a & ~accept_b).sum())
        c[3] += int((~accept_a & accept_b).sum())
        c[4] += int((accept_a & accept_b & same).sum())

    cols = [*item, "estimator", "setup", "seed", "tau", "fallback", "accept", "predicted_id"]
    a = test[test["setup"] == "original"][cols]
    b = test[test["setup"] != "original"][cols]
    intra = a.merge(b, on=[*item, "estimator"], suffixes=("", "_b"))
    for (m, rel, red, e, sb, seed_b, ta, tb, fa, fb), g in intra.groupby(
        [
            "model_id",
            "relation_id",
            "reduction",
            "estimator",
            "setup_b",
            "seed_b",
            "tau",
            "tau_b",
            "fallback",
            "fallback_b",
        ],
        sort=False,
    ):
        seed_b = None if seed_b == NO_SEED else int(seed_b)
        add((m, "intra", "original", sb, e, e, red, seed_b, ta, tb, fa, fb, rel), g["accept"].to_numpy(bool),
            g["accept_b"].to_numpy(bool), g["predicted_id"].to_numpy(object),
            g["predicted_id_b"].to_numpy(object))  # fmt: skip
    cross = a[~a["estimator"].isin(marker_estimators)].copy()
    cross["grain"] = cross["anchor"] == "<instance grain>"
    for (m, rel, red, _), g in cross.groupby(["model_id", "relation_id", "reduction", "grain"], sort=False):
        pairs = g.merge(g, on=["instance", "anchor"], suffixes=("", "_b"))
        pairs = pairs[pairs["estimator"] < pairs["estimator_b"]]
        for (ea, eb), p in pairs.groupby(["estimator", "estimator_b"], sort=False):
            key = (m, "cross", "original", "original", ea, eb, red, None, p["tau"].iloc[0],
                   p["tau_b"].iloc[0], p["fallback"].iloc[0], p["fallback_b"].iloc[0], rel)  # fmt: skip
            add(key, p["accept"].to_numpy(bool), p["accept_b"].to_numpy(bool),
                p["predicted_id"].to_numpy(object), p["predicted_id_b"].to_numpy(object))  # fmt: skip
    pooled = {}
    for key, c in counts.items():
        total = pooled.setdefault((*key[:-1], None), [0, 0, 0, 0, 0])
        for i in range(5):
            total[i] += c[i]
    rows, seeded = [], {}
    for key, c in [*counts.items(), *pooled.items()]:
        n = sum(c[:4])
        if n == 0:
            continue
        m, kind, sa, sb, ea, eb, red, seed_b, ta, tb, fa, fb, rel = key
        random = kind == "intra" and (sb in RANDOM_SETUPS or sb.startswith("answer_space_k="))
        seed_b = seed_b if seed_b is not None else seed if random else None
        row = (m, kind, sa, sb, ea, eb, red, rel, seed_b, "value", None, ta, tb, fa, fb, n, *measures(*c))
        rows.append(row)
        if seed_b is not None:
            seeded.setdefault((m, kind, sa, sb, ea, eb, red, rel), []).append(row)
    for pair, group in seeded.items():  # the mean and sample std over the seeds, NaN left out
        fa, fb = any(r[13] for r in group), any(r[14] for r in group)
        columns = {i: [r[i] for r in group if not math.isnan(r[i])] for i in (11, 12, *range(16, 21))}
        mean = {i: sum(v) / len(v) if v else math.nan for i, v in columns.items()}
        std = {
            i: math.sqrt(sum((x - mean[i]) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else math.nan
            for i, v in columns.items()
        }
        n_seeds = len({r[8] for r in group})
        for name, values in (("mean", mean), ("std", std)):
            rows.append((*pair, None, name, n_seeds, values[11], values[12], fa, fb, None,
                         *(values[i] for i in range(16, 21))))  # fmt: skip
    return pd.DataFrame(rows, columns=CONSISTENCY_COLUMNS)


# --- the stage ---------------------------------------------------------------------------------


@dataclasses.dataclass
class PandasInputs:
    estimates: object
    option_estimates: object
    templates: object
    relations: object
    probe: object


def to_pandas(inputs: Inputs) -> PandasInputs:
    return PandasInputs(*(getattr(inputs, n).to_pandas() for n in _FILES))


def pandas_stage(p: PandasInputs, models, n_resamples, seed, estimator_order, marker_estimators):
    """The six parts of every model in `models`: tables (pandas) and seconds."""
    out = {part: [] for part in PARTS}
    seconds = dict.fromkeys(PARTS, 0.0)
    plans = PlanCache(n_resamples, BOOTSTRAP_SEED)
    for model in models:
        est = p.estimates[p.estimates["model_id"] == model]
        est = est.astype(object).where(est.notna(), None).astype({"confidence": float, "correct": bool})
        options = p.option_estimates[p.option_estimates["model_id"] == model]
        t0 = time.perf_counter()
        headline = pd_headline(est, p.templates)
        frame = pd_attach(headline, p.relations, p.probe)
        out["metrics"] += [
            pd_compute_metrics(frame, pd_attach(options, p.relations, p.probe)),
            pd_template_kind_metrics(est, p.templates),
            pd_template_metrics(est, p.templates),
        ]
        t1 = time.perf_counter()
        out["intervals"].append(pd_intervals(frame[frame["split"] == "test"], plans))
        t2 = time.perf_counter()
        out["differences"].append(
            pd_differences(headline[headline["split"] == "test"], plans, estimator_order)
        )
        t3 = time.perf_counter()
        out["curves"].append(pd_curves(headline, plans))
        t4 = time.perf_counter()
        out["thresholds"].append(pd_thresholds(headline, options, est, p.templates))
        t5 = time.perf_counter()
        out["consistency"].append(pd_consistency(est, p.templates, seed, marker_estimators))
        t6 = time.perf_counter()
        for part, (a, b) in zip(
            PARTS, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6)), strict=True
        ):
            seconds[part] += b - a
    return {part: as_polars(pd_concat(frames), part) for part, frames in out.items()}, seconds


def as_polars(df, part) -> pl.DataFrame:
    columns = {
        "metrics": METRIC_COLUMNS,
        "intervals": [*KEYS5, "scope", "scope_value", "metric", "ci_low", "ci_high", "n_resamples"],
        "differences": DIFFERENCE_COLUMNS,
        "curves": CURVE_COLUMNS,
        "thresholds": THRESHOLD_COLUMNS,
        "consistency": CONSISTENCY_COLUMNS,
    }[part]
    if not len(df):
        return pl.DataFrame(schema=columns)

    def cell(v):  # pandas writes a missing string or flag as NaN
        return None if isinstance(v, float) and math.isnan(v) else v

    return pl.DataFrame(
        {c: df[c].tolist() if df[c].dtype.kind == "f" else [cell(v) for v in df[c]] for c in columns},
        strict=False,
    )


def registry_facts():
    """What the pandas path reads from kcal's registries: names and order only, no functions."""
    from kcal_pipeline.estimation import ESTIMATORS
    from kcal_pipeline.evaluation import METRICS

    markers = [n for n, s in ESTIMATORS.items() if s.template_kinds]
    return list(ESTIMATORS), markers, list(METRICS)


# ------------------------------------------------------------------------------------------------
# Comparison: every table joined on its keys
# ------------------------------------------------------------------------------------------------

INTERVAL_KEYS = [*KEYS5, "scope", "scope_value", "metric"]
TABLES = {  # part → (keys, compared columns)
    "metrics": (INTERVAL_KEYS, ["value", "n", "higher_is_better"]),
    "intervals": (INTERVAL_KEYS, ["ci_low", "ci_high"]),
    "differences": (
        ["model_id", "reduction", "split", "answer_space_k", "scope", "scope_value", "estimator_a",
         "estimator_b", "metric"],
        ["difference", "ci_low", "ci_high", "n", "n_resamples"],
    ),
    "curves": (
        [*KEYS5, "scope", "scope_value", "curve", "point"], ["x", "y", "n", "bin", "threshold", *BAND]
    ),
    "thresholds": ([*THRESHOLD_COLUMNS[:6], "template_kind"], ["threshold", "fallback", "reason", "n_dev"]),
    "consistency": (
        ["model_id", "kind", "setup_a", "setup_b", "estimator_a", "estimator_b", "reduction", "relation_id",
         "seed", "statistic"],
        ["n_seeds", "threshold_a", "threshold_b", "fallback_a", "fallback_b", "n", "iou_acc", "iou_rej",
         "iou_cons", "dec_cons", "agreement"],
    ),
}  # fmt: skip


@dataclasses.dataclass
class PartAgreement:
    part: str
    rows: int
    only_kcal: pl.DataFrame
    only_pandas: pl.DataFrame
    mismatches: pl.DataFrame
    max_delta: float
    duplicates: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.only_kcal.is_empty()
            and self.only_pandas.is_empty()
            and self.mismatches.is_empty()
            and self.duplicates == 0
        )


def kcal_parts(tables: dict) -> dict[str, pl.DataFrame]:
    """kcal's five tables as the six compared parts (metrics_table holds metrics and intervals;
    the test rows of scopes all and relation of the bootstrapped metrics are the intervals)."""
    metrics = tables["metrics"]
    return {
        "metrics": metrics.drop("ci_low", "ci_high"),
        "intervals": metrics.filter(pl.col("ci_low").is_not_null() | pl.col("ci_high").is_not_null()).select(
            *INTERVAL_KEYS, "ci_low", "ci_high"
        ),
        **{p: tables[p] for p in ("differences", "curves", "thresholds", "consistency")},
    }


def _with_points(frame: pl.DataFrame) -> pl.DataFrame:
    keys = [*KEYS5, "scope", "scope_value", "curve"]
    return frame.with_columns(point=pl.int_range(pl.len()).over(keys))


def _numeric(dtype) -> bool:
    return dtype.is_numeric()


def compare_part(part: str, kcal: pl.DataFrame, pandas: pl.DataFrame) -> PartAgreement:
    keys, values = TABLES[part]
    if part == "curves":
        kcal, pandas = _with_points(kcal), _with_points(pandas)
    if part == "intervals":  # pandas computes intervals for every bootstrapped row; kcal's table keeps
        pandas = pandas.join(kcal.select(keys), on=keys, how="semi", nulls_equal=True)  # those it has
        pandas = pandas.filter(pl.col("ci_low").is_not_null() | pl.col("ci_high").is_not_null())
    schema = {c: kcal.schema[c] for c in [*keys, *values]}
    a = kcal.select(*keys, *values)
    b = pandas.select(
        (
            pl.col(c).fill_nan(None)
            if pandas.schema[c].is_float() and not schema[c].is_float()
            else pl.col(c)
        ).cast(schema[c])
        for c in [*keys, *values]
    )
    duplicates = sum(f.select(pl.struct(keys).is_duplicated().sum()).item() for f in (a, b))
    joined = a.join(b, on=keys, how="inner", suffix="_pd", nulls_equal=True)
    bad = pl.lit(False)
    deltas = []
    for col in values:
        x, y = pl.col(col), pl.col(f"{col}_pd")
        if schema[col].is_float():  # NaN and null alike: pandas has no null float
            x, y = x.fill_nan(None), y.fill_nan(None)
            same_inf = (x == y) & x.is_infinite()
            delta = (
                pl.when(x.is_null() & y.is_null()).then(0.0).when(same_inf).then(0.0).otherwise((x - y).abs())
            )
            delta = delta.fill_null(math.inf).fill_nan(math.inf)
            deltas.append(delta)
            bad = bad | (delta > TOLERANCE)
        else:
            bad = bad | ~x.eq_missing(y)
    joined = joined.with_columns(delta=pl.max_horizontal(deltas) if deltas else pl.lit(0.0))
    return PartAgreement(
        part,
        joined.height,
        a.join(b, on=keys, how="anti", nulls_equal=True),
        b.join(a, on=keys, how="anti", nulls_equal=True),
        joined.filter(bad),
        float(joined["delta"].max() or 0.0) if joined.height else 0.0,
        duplicates,
    )


def compare(kcal_tables: dict, pandas_tables: dict, models: list[str]) -> dict[str, PartAgreement]:
    kcal = {p: f.filter(pl.col("model_id").is_in(models)) for p, f in kcal_parts(kcal_tables).items()}
    return {p: compare_part(p, kcal[p], pandas_tables[p]) for p in PARTS}


def disagreement_lines(agreements: dict[str, PartAgreement], limit: int = 5) -> list[str]:
    lines = []
    for part, ag in agreements.items():
        if ag.duplicates:
            lines.append(f"  {part}: {ag.duplicates} duplicated key rows")
        for label, frame in (
            ("only in kcal", ag.only_kcal),
            ("only in pandas", ag.only_pandas),
            ("differ", ag.mismatches),
        ):
            if frame.height:
                lines.append(f"  {part}: {frame.height:,} rows {label}, e.g.")
                lines += [f"    {row}" for row in frame.head(limit).iter_rows(named=True)]
    return lines


# ------------------------------------------------------------------------------------------------
# The run: each path in its own spawned process, on the same Parquet files
# ------------------------------------------------------------------------------------------------


def kcal_child(folder: str, models: list[str], relations, n_resamples: int, seed: int, memory: bool) -> dict:
    """kcal's stage on `models` (and `relations`, None = all), timed; with `memory`, its ru_maxrss rise
    and an untimed tracemalloc pass on the first model for the Python heap's peak."""
    inputs = load(Path(folder)).subset(relations)
    gc.collect()
    before = maxrss()
    with counted_warnings() as raised:
        tables, seconds = kcal_stage(inputs, models, n_resamples, seed)
    rise = maxrss() - before
    tag = "kcal" if memory else "kcal_subset"
    for part, frame in tables.items():
        frame.write_parquet(Path(folder) / f"{tag}_{part}.parquet")
    rows = {p: f.height for p, f in kcal_parts(tables).items()}
    del tables
    gc.collect()
    traced = 0
    if memory:
        tracemalloc.start()
        with counted_warnings():
            kcal_stage(inputs, models[:1], n_resamples, seed)
        _, traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "seconds": seconds,
        "maxrss_rise": rise,
        "traced_peak": traced,
        "rows": rows,
        "warnings": dict(raised),
        "tag": tag,
    }


def pandas_child(folder: str, models: list[str], relations, n_resamples: int, seed: int) -> dict:
    inputs = to_pandas(load(Path(folder)).subset(relations))
    order, markers, _ = registry_facts()
    gc.collect()
    before = maxrss()
    with counted_warnings() as raised:
        tables, seconds = pandas_stage(inputs, models, n_resamples, seed, order, markers)
    for part, frame in tables.items():
        frame.write_parquet(Path(folder) / f"pandas_{part}.parquet")
    return {"seconds": seconds, "maxrss_rise": maxrss() - before, "warnings": dict(raised)}


def pilot(
    inputs: Inputs, n_resamples: int, seed: int, budget: float
) -> tuple[list[str], list[str] | None, str]:
    """(models, relations or None = all, a sentence): everything if a pilot (the pandas stage on two
    relations of the first model, the MACE-like one among them) projects the pandas path within
    `budget` seconds; else as many whole models as fit; else, on the first model, the MACE-like
    relation and as many BEAR-like ones (in order) as fit, at least one. kcal runs on the same subset
    for the comparison and the ratios, and on everything apart."""
    models = inputs.models
    mace = inputs.relations.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].to_list()
    bear = sorted(set(inputs.estimates["relation_id"].unique().to_list()) - set(mace))
    few = [*mace[:1], bear[0]]
    first = inputs.model(models[0])
    sub = first.subset(few)
    order, markers, _ = registry_facts()
    t0 = time.perf_counter()
    with counted_warnings():
        pandas_stage(to_pandas(sub), models[:1], n_resamples, seed, order, markers)
    rate = sub.estimates.height / (time.perf_counter() - t0)  # estimate rows per second
    projected = inputs.estimates.height / rate
    per_model = first.estimates.height / rate
    said = f"a pilot on {len(few)} relations projected {projected:.0f} s for all"
    if projected <= budget:
        return models, None, f"pandas path on everything ({said})"
    if per_model <= budget:
        k = int(budget // per_model)
        return (
            models[:k],
            None,
            (
                f"pandas path on {k} of {len(models)} models ({', '.join(models[:k])}; {said} > "
                f"--pandas-budget {budget:g} s); the comparison and the seconds below cover them, kcal on "
                "everything is printed apart"
            ),
        )
    sizes = dict(first.estimates.group_by("relation_id").len().iter_rows())
    chosen = list(mace[:1])
    spent = sum(sizes.get(r, 0) for r in chosen) / rate
    for r in bear:
        if spent + sizes[r] / rate > budget and len(chosen) > len(mace[:1]):
            break
        chosen.append(r)
        spent += sizes[r] / rate
    return (
        models[:1],
        sorted(chosen),
        (
            f"pandas path on {models[0]} and {len(chosen)} of {inputs.relations.height} relations "
            f"({', '.join(sorted(chosen))}; {said} > --pandas-budget {budget:g} s): the comparison and the "
            "seconds below are both paths on that subset (scope 'all' = those relations); kcal on everything "
            "is printed apart"
        ),
    )


def table_row(name, kcal_s, pandas_s, rows) -> str:
    ratio = f"{pandas_s / kcal_s:.1f}×" if kcal_s > 0 else "–"
    return f"{name:<14} {kcal_s:>9.2f} {pandas_s:>10.2f} {ratio:>8} {rows:>12,}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=2_000_000, help="statement rows, at least")
    parser.add_argument("--seed", type=int, default=13, help="the synthetic data's (and probe) seed")
    parser.add_argument(
        "--pandas-budget",
        type=float,
        default=900.0,
        help="seconds the pandas path may take; above that it runs on a stated subset of models",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import pandas as pd

    print(
        f"bench/evaluation.py — polars {pl.__version__}, pandas {pd.__version__}, numpy {np.__version__}, "
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    t0 = time.perf_counter()
    inputs = build_inputs(args.statements, args.seed)
    print(
        f"statement_scores: {inputs.statements:,} rows (bench/estimators.py's make_dataset, seed "
        f"{args.seed}) → kcal's estimator stage, untimed ({time.perf_counter() - t0:.0f} s): "
        f"{inputs.estimates.height:,} estimate rows of {inputs.estimates['estimator'].n_unique()} "
        f"estimators, {inputs.option_estimates.height:,} option estimates; {len(inputs.models)} models, "
        f"{inputs.relations.height} relations; B = {N_RESAMPLES:,} resamples"
    )
    for name, why in inputs.left_out.items():
        print(f"left out of both paths: {name}: {why}")
    _, _, registered = registry_facts()
    missing = sorted(set(registered) - set(METRIC_DEFS))
    extra = sorted(set(METRIC_DEFS) - set(registered))
    print(f"metric registry: {len(registered)} metrics; implemented here: {len(METRIC_DEFS)}")
    if missing or extra:
        print(f"not compared: registered, not implemented here: {missing}; here, not registered: {extra}")
    with tempfile.TemporaryDirectory(prefix="kcal-bench-eval-") as folder:
        save(inputs, Path(folder))
        models, relations, how = pilot(inputs, N_RESAMPLES, args.seed, args.pandas_budget)
        all_models = inputs.models
        del inputs
        gc.collect()
        kcal_all = in_process(kcal_child, folder, all_models, None, N_RESAMPLES, args.seed, True)
        subset = models != all_models or relations is not None
        kcal = (
            in_process(kcal_child, folder, models, relations, N_RESAMPLES, args.seed, False)
            if subset
            else kcal_all
        )
        pandas = in_process(pandas_child, folder, models, relations, N_RESAMPLES, args.seed)
        kcal_tables = {
            p: pl.read_parquet(Path(folder) / f"{kcal['tag']}_{p}.parquet")
            for p in ("metrics", "differences", "curves", "thresholds", "consistency")
        }
        pandas_tables = {p: pl.read_parquet(Path(folder) / f"pandas_{p}.parquet") for p in PARTS}
    print(how)
    agreements = compare(kcal_tables, pandas_tables, models)
    print()
    print(f"{'part':<14} {'kcal s':>9} {'pandas s':>10} {'ratio':>8} {'rows':>12}")
    print("-" * 57)
    for part in PARTS:
        print(table_row(part, kcal["seconds"][part], pandas["seconds"][part], kcal["rows"][part]))
    print("-" * 57)
    k_total, p_total = sum(kcal["seconds"].values()), sum(pandas["seconds"].values())
    print(table_row("total", k_total, p_total, sum(kcal["rows"].values())))
    print(
        "(kcal: the five evaluation/tables.py functions per model as the assets call them; 'metrics' is "
        "metrics_table less its bootstrap_intervals call, which is timed on its own as 'intervals'. rows: "
        f"kcal's, on the models compared: {', '.join(models)})"
    )
    if subset:
        full = kcal_all["seconds"]
        print(
            f"kcal stage on everything ({len(all_models)} models, all relations): {sum(full.values()):.2f} s "
            f"({', '.join(f'{p} {v:.2f}' for p, v in full.items())}), {sum(kcal_all['rows'].values()):,} rows"
        )
    print(
        f"kcal stage peak memory: tracemalloc peak {mib(kcal_all['traced_peak'])} (Python heap, numpy arrays "
        "included, polars' own allocations not; one model); ru_maxrss rise "
        f"{mib(kcal_all['maxrss_rise'])} (getrusage: the whole process's high-water mark over the one with "
        f"the inputs loaded; all models). pandas path: ru_maxrss rise {mib(pandas['maxrss_rise'])}"
    )
    ratio = p_total / k_total
    print(f"target ≥ {TARGET:g}× in total: {ratio:.1f}× ({'met' if ratio >= TARGET else 'NOT met'})")
    ok = all(a.ok for a in agreements.values())
    for part, ag in agreements.items():
        print(
            f"agreement {part}: {ag.rows:,} rows on both sides, max |Δ| {ag.max_delta:.1e} ≤ {TOLERANCE:.0e} "
            f"(NaN = NaN), flags, counts and strings equal; only in kcal {ag.only_kcal.height:,}, "
            "only in pandas "
            f"{ag.only_pandas.height:,}, differing {ag.mismatches.height:,}: {'ok' if ag.ok else 'FAILED'}"
        )
    for path, raised in (("kcal", kcal_all["warnings"]), ("pandas", pandas["warnings"])):
        for message, n in sorted(raised.items()):
            print(f"warnings in the {path} path: {n:,} × {message}")
    for line in disagreement_lines(agreements):
        print(line)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
