# The old per-row path below is kept verbatim, zip() calls without strict= included.
# ruff: noqa: B905
"""Micro-benchmark: Base and Margin over the option-score cube against the old per-row path.

    .venv/bin/python bench/estimation_cube.py [--rows N] [--repeat R] [--reductions sum,mean]

Builds a synthetic statement_scores frame of at least N rows (default 1,000,000) with realistic
shapes (models × relations, 6–60 options and 3–5 templates per relation, ll_sum and ll_mean), then
times, in one run,

  (i)  the old path: the per-row `compute_estimates` that the cube replaced, copied below verbatim
       from `git show db2f873:kcal_pipeline/estimators.py` (one Python call per (instance,
       template) group), run once per reduction column;
  (ii) the cube path: `partition_cubes` (cube build) and `compute_estimates` (estimation), timed
       separately and together,

checks that both give the same predictions, objects, correctness and confidences (max |Δ| ≤ 1e-12),
and prints rows, seconds, rows/s, the speed-up and each path's peak memory. Each path runs in its own
spawned process on the same (seeded) frame, so the peak resident set of one does not hide in the
other's. If the old path would take longer than --old-budget seconds, it is timed on a random
subsample of whole instances (said in the output) and compared on those; the cube path always runs
on every row.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import multiprocessing
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.estimation.cube import REDUCTIONS

# ------------------------------------------------------------------------------------------------
# The old per-row path, verbatim from `git show db2f873:kcal_pipeline/estimators.py` (the last
# version before the option-score cube, ruff-formatted). Only this comment block is
# new; the names shadow nothing, since the cube path is reached through `kcal_pipeline.estimation`.
# ------------------------------------------------------------------------------------------------

Estimator = Callable[[np.ndarray], tuple[int, float]]
ESTIMATORS: dict[str, Estimator] = {}

GROUP_KEYS = ("model_id", "relation_id", "instance_id", "template_id")
OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "template_id": pl.String,
    "estimator": pl.String,
    "predicted_index": pl.Int32,
    "predicted_id": pl.String,
    "confidence": pl.Float64,
    "correct": pl.Boolean,
}


def register(name: str) -> Callable[[Estimator], Estimator]:
    """Add an estimator to ESTIMATORS; a second function under the same name is a bug, not an override."""

    def add(fn: Estimator) -> Estimator:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = fn
        return fn

    return add


def softmax(ll: np.ndarray) -> np.ndarray:
    """Option distribution of one template; shifting by the max keeps exp() from overflowing."""
    z = np.exp(ll - ll.max())
    return z / z.sum()


def _top(ll: np.ndarray) -> int:
    """Predicted position; np.argmax returns the first maximum, i.e. ties go to the lowest index."""
    return int(np.argmax(ll))


@register("base")
def base(ll: np.ndarray) -> tuple[int, float]:
    """C = max_o p(o)."""
    i = _top(ll)
    return i, float(softmax(ll)[i])


@register("margin")
def margin(ll: np.ndarray) -> tuple[int, float]:
    """C = p_[1] − p_[2]; with one option there is no runner-up, so Margin = Base (= 1)."""
    p = softmax(ll)
    i = _top(ll)
    if p.size == 1:
        return i, float(p[0])
    second, first = np.partition(p, -2)[-2:]
    return i, float(first - second)


def _resolve(estimators: Sequence[str] | None) -> list[str]:
    names = list(ESTIMATORS) if estimators is None else list(estimators)
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown estimator(s) {unknown}; known: {sorted(ESTIMATORS)}")
    if not names:
        raise ValueError("no estimators requested")
    return names


def _validate(scores: pl.DataFrame, reduction: str) -> None:
    """Fail loudly on input that would otherwise yield plausible-looking but wrong confidences."""
    require_columns(scores, [*GROUP_KEYS, "option_index", "object_id", "is_gold", reduction], "scores")
    ll = scores[reduction].cast(pl.Float64).to_numpy()
    if not np.isfinite(ll).all():
        bad = scores.filter(~pl.col(reduction).cast(pl.Float64).is_finite()).row(0, named=True)
        raise ValueError(
            f"scores: column {reduction!r} has a non-finite value {bad[reduction]!r} "
            f"(instance {bad['instance_id']!r}, template {bad['template_id']!r})"
        )
    dup = scores.filter(pl.struct([*GROUP_KEYS, "option_index"]).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"scores: duplicate rows for instance {row['instance_id']!r}, template "
            f"{row['template_id']!r}, option_index {row['option_index']!r}"
        )


def compute_estimates(
    scores: pl.DataFrame, estimators: Sequence[str] | None = None, reduction: str = "ll_sum"
) -> pl.DataFrame:
    """One row per (instance, template, estimator): the predicted option, its confidence and correctness.

    `reduction` names the log-likelihood column (Sum, Mean, Sum(A), …) so the same estimators run
    on every reduction. Output is sorted by (model_id, relation_id, instance_id, template_id,
    estimator) so that downstream metrics see a deterministic order.
    """
    names = _resolve(estimators)
    _validate(scores, reduction)
    groups = (
        scores.sort([*GROUP_KEYS, "option_index"])
        .group_by(GROUP_KEYS, maintain_order=True)
        .agg(pl.col(reduction).cast(pl.Float64), "option_index", "object_id", "is_gold")
    )
    keys = groups.select(pl.col(k).cast(pl.String) for k in GROUP_KEYS)
    lls = [np.asarray(v, dtype=np.float64) for v in groups[reduction].to_list()]
    options, objects, golds = (groups[c].to_list() for c in ("option_index", "object_id", "is_gold"))
    frames = []
    for name in names:
        fn = ESTIMATORS[name]
        picks = [fn(ll) for ll in lls]
        pos = [p for p, _ in picks]
        frames.append(
            keys.with_columns(
                estimator=pl.lit(name, pl.String),
                predicted_index=pl.Series([o[i] for o, i in zip(options, pos)], dtype=pl.Int32),
                predicted_id=pl.Series([str(o[i]) for o, i in zip(objects, pos)], dtype=pl.String),
                confidence=pl.Series([c for _, c in picks], dtype=pl.Float64),
                correct=pl.Series([g[i] for g, i in zip(golds, pos)], dtype=pl.Boolean),
            )
        )
    return (
        pl.concat(frames)
        .sort([*GROUP_KEYS, "estimator"])
        .select(pl.col(c).cast(t) for c, t in OUTPUT_SCHEMA.items())
    )


# ------------------------------------------------------------------------------------------------
# The bench
# ------------------------------------------------------------------------------------------------

NAMES = ("base", "margin")
KEYS = ["model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction"]
TOLERANCE = 1e-12


@dataclasses.dataclass(frozen=True)
class Shape:
    """The synthetic frame's layout, all drawn from one seed."""

    models: int
    n_options: list[int]
    n_templates: list[int]
    instances: int  # per relation (shared by every model, as in a real run)

    @property
    def rows(self) -> int:
        return (
            self.models
            * self.instances
            * sum(o * t for o, t in zip(self.n_options, self.n_templates, strict=True))
        )


def plan(rows: int, models: int, relations: int, seed: int) -> Shape:
    """Options per relation as in BEAR (mostly ~25, a quarter 1:1 relations with 60; 6–60), 3–5
    templates, and as many instances per relation as it takes to reach `rows`."""
    rng = np.random.default_rng(seed)
    n_options = np.clip(np.rint(rng.normal(25, 10, relations)), 6, 60).astype(int)
    n_options[rng.random(relations) < 0.25] = 60
    n_options[0], n_options[-1] = 6, 60  # both ends of the range always occur
    n_templates = rng.integers(3, 6, relations)
    per_instance = models * int((n_options * n_templates).sum())
    return Shape(models, n_options.tolist(), n_templates.tolist(), math.ceil(rows / per_instance))


def synthetic_scores(shape: Shape, seed: int) -> pl.DataFrame:
    """A statement_scores frame: every instance of a relation scored on all its options under all
    its templates, by every model. The gold option gets a small log-likelihood bonus, so accuracy is
    well above chance (realistic, and both outcomes occur); ll_mean divides by a token count."""
    rng = np.random.default_rng(seed + 1)
    parts = []
    for r, (n_o, n_t) in enumerate(zip(shape.n_options, shape.n_templates, strict=True)):
        n_i = shape.instances
        inst, tmpl, opt = (a.ravel() for a in np.indices((n_i, n_t, n_o)))
        gold = rng.integers(0, n_o, n_i)
        option_tokens = rng.integers(1, 5, n_o)  # a relation's answer space: one length per object
        template_tokens = rng.integers(4, 9, n_t)
        tokens = (option_tokens[opt] + template_tokens[tmpl] + 3).astype(np.float64)
        for m in range(shape.models):
            is_gold = opt == gold[inst]
            ll_sum = rng.normal(-30.0, 6.0, inst.size) + 4.0 * is_gold
            parts.append(
                pl.DataFrame(
                    {
                        "model_id": np.full(inst.size, m, dtype=np.int32),
                        "relation_id": np.full(inst.size, r, dtype=np.int32),
                        "instance": inst.astype(np.int32),
                        "template": tmpl.astype(np.int32),
                        "option_index": opt.astype(np.int32),
                        "is_gold": is_gold,
                        "ll_sum": ll_sum,
                        "ll_mean": ll_sum / tokens,
                    }
                )
            )
    relation = pl.format("P{}", pl.col("relation_id") + 100)
    return pl.concat(parts).select(
        pl.format("model-{}", "model_id").alias("model_id"),
        relation.alias("relation_id"),
        pl.format("{}:s{}", relation, "instance").alias("instance_id"),
        pl.format("{}:c{}", relation, "template").alias("template_id"),
        "option_index",
        pl.format("Q{}", (pl.col("relation_id") + 100) * 1000 + pl.col("option_index")).alias("object_id"),
        "is_gold",
        "ll_sum",
        "ll_mean",
    )


def subsample(frame: pl.DataFrame, fraction: float, seed: int) -> pl.DataFrame:
    """Whole instances (all their models, templates and options), a `fraction` of them."""
    if fraction >= 1:
        return frame
    ids = frame["instance_id"].unique().sort()
    keep = ids.sample(fraction=fraction, seed=seed)
    return frame.filter(pl.col("instance_id").is_in(keep.implode()))


@contextmanager
def reductions_for(names: Sequence[str], reductions: Sequence[str]):
    """Run the registered estimators under `reductions` (restored afterwards)."""
    from kcal_pipeline.estimation.registry import ESTIMATORS as REGISTRY

    saved = {n: REGISTRY[n] for n in names}
    try:
        for n in names:
            REGISTRY[n] = dataclasses.replace(saved[n], reductions=tuple(reductions))
        yield
    finally:
        REGISTRY.update(saved)


def _status(field: str) -> int | None:
    """A /proc/self/status memory field in bytes (Linux), else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Reset the process's peak RSS to its current RSS (Linux ≥ 4.0); False where that is unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    hwm = _status("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_path(path: str, shape: Shape, seed: int, fraction: float, reductions: list[str], repeat: int) -> dict:
    """One path in a fresh process: build the frame, then time `repeat` runs; peak memory of the first."""
    from kcal_pipeline.estimation import compute_estimates as cube_estimates
    from kcal_pipeline.estimation import partition_cubes

    frame = synthetic_scores(shape, seed)
    if path == "old":
        frame = subsample(frame, fraction, seed)
    gc.collect()
    rss_before = _status("VmRSS") or 0
    peak_is_own = reset_peak()
    times: list[dict[str, float]] = []
    out, peak, log = None, 0, []
    for rep in range(repeat):
        if path == "old":
            t0 = time.perf_counter()
            result = pl.concat(
                compute_estimates(frame, list(NAMES), reduction=REDUCTIONS[r]).with_columns(
                    reduction=pl.lit(r)
                )
                for r in reductions
            )
            times.append({"total": time.perf_counter() - t0})
        else:
            with reductions_for(NAMES, reductions):
                t0 = time.perf_counter()
                cubes = partition_cubes(frame)
                t1 = time.perf_counter()
                result = cube_estimates(cubes, list(NAMES), log=log.append)
                t2 = time.perf_counter()
            times.append({"build": t1 - t0, "estimate": t2 - t1, "total": t2 - t0})
            del cubes
        if rep == 0:
            peak, out = peak_rss(), result
        del result
        gc.collect()
    return {
        "rows": frame.height,
        "instances": frame["instance_id"].n_unique(),
        "times": times,
        "peak": peak,
        "rise": peak - rss_before if peak_is_own else None,
        "out": out,
        "log": log,
    }


def in_process(*args) -> dict:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(run_path, *args).result()


def best(result: dict, part: str) -> float:
    return min(t[part] for t in result["times"])


def compare(old: pl.DataFrame, new: pl.DataFrame) -> tuple[int, bool, float]:
    """(rows compared, discrete columns equal, max |Δ confidence|) over the old path's rows."""
    joined = old.join(new, on=KEYS, how="left", suffix="_cube")
    matched = joined["confidence_cube"].null_count() == 0
    same = matched and all(
        joined[c].equals(joined[f"{c}_cube"]) for c in ("predicted_index", "predicted_id", "correct")
    )
    delta = (
        float((joined["confidence"] - joined["confidence_cube"]).abs().max() or 0.0) if matched else math.inf
    )
    return joined.height, same, delta


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="score rows, at least (default 1,000,000)"
    )
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--relations", type=int, default=20)
    parser.add_argument("--reductions", default="sum,mean", help="comma-separated (default sum,mean)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per path; the best is reported")
    parser.add_argument(
        "--old-budget", type=float, default=180.0, help="seconds the old path may take in all"
    )
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)

    reductions = [r.strip() for r in args.reductions.split(",") if r.strip()]
    unknown = [r for r in reductions if r not in REDUCTIONS]
    if unknown:
        parser.error(f"unknown reduction(s) {unknown}; known: {list(REDUCTIONS)}")
    started = time.perf_counter()
    shape = plan(args.rows, args.models, args.relations, args.seed)
    frame = synthetic_scores(shape, args.seed)
    print(
        f"bench/estimation_cube.py — polars {pl.__version__}, numpy {np.__version__}, Python "
        f"{platform.python_version()}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"statement_scores: {frame.height:,} rows = {shape.models} models × {len(shape.n_options)} relations "
        f"({min(shape.n_options)}–{max(shape.n_options)} options, mean {np.mean(shape.n_options):.1f}; "
        f"{min(shape.n_templates)}–{max(shape.n_templates)} templates) × {shape.instances} instances per "
        f"relation; columns ll_sum, ll_mean"
    )
    groups = shape.models * shape.instances * sum(shape.n_templates)
    print(
        f"work: estimators {', '.join(NAMES)} × reductions {', '.join(reductions)} on {groups:,} "
        f"(instance, template) groups → {groups * len(NAMES) * len(reductions):,} estimate rows; each path "
        f"runs in its own process, best of {args.repeat}"
    )

    # A pilot on a few instances projects the old path's time and picks its subsample.
    pilot_fraction = min(1.0, 20_000 / frame.height)
    pilot = subsample(frame, pilot_fraction, args.seed)
    t0 = time.perf_counter()
    for r in reductions:
        compute_estimates(pilot, list(NAMES), reduction=REDUCTIONS[r])
    pilot_rate = pilot.height / (time.perf_counter() - t0)
    projected = args.repeat * frame.height / pilot_rate
    fraction = 1.0 if projected <= args.old_budget else args.old_budget / projected
    del frame, pilot
    gc.collect()

    old = in_process("old", shape, args.seed, fraction, reductions, args.repeat)
    cube = in_process("cube", shape, args.seed, 1.0, reductions, args.repeat)
    if fraction < 1:
        print(
            f"old path: projected {projected:.0f} s for {args.repeat} run(s) on all rows (pilot: "
            f"{pilot_rate:,.0f} rows/s) > --old-budget {args.old_budget:g} s, so it is timed on a "
            f"subsample of {old['instances']:,} whole instances = {old['rows']:,} rows ({fraction:.1%})"
        )
    else:
        print(f"old path: timed on all rows (projected {projected:.1f} s from a pilot)")
    for line in cube["log"]:
        print(f"cube path log: {line}")

    def line(name: str, rows: int, seconds: float, peak: str) -> str:
        return f"{name:<36} {rows:>11,} {seconds:>9.3f} {rows / seconds:>13,.0f}  {peak}"

    rise = {
        k: "" if r["rise"] is None else f" (+{mib(r['rise'])})" for k, r in (("old", old), ("cube", cube))
    }
    print()
    print(f"{'path':<36} {'rows':>11} {'seconds':>9} {'rows/s':>13}  peak RSS (rise over the loaded frame)")
    print("-" * 110)
    print(
        line(
            "old: per-row compute_estimates", old["rows"], best(old, "total"), mib(old["peak"]) + rise["old"]
        )
    )
    print(line("cube: partition_cubes (build)", cube["rows"], best(cube, "build"), ""))
    print(line("cube: compute_estimates (estimate)", cube["rows"], best(cube, "estimate"), ""))
    print(line("cube: together", cube["rows"], best(cube, "total"), mib(cube["peak"]) + rise["cube"]))
    old_rate = old["rows"] / best(old, "total")
    cube_rate = cube["rows"] / best(cube, "total")
    print(f"speed-up (rows/s, cube together ÷ old): {cube_rate / old_rate:.1f}×")
    estimate_rate = cube["rows"] / best(cube, "estimate")
    print(f"speed-up (rows/s, cube estimate only ÷ old): {estimate_rate / old_rate:.1f}×")

    n, same, delta = compare(old["out"], cube["out"])
    ok = same and delta <= TOLERANCE
    print(
        f"agreement on the old path's {n:,} estimate rows: predicted_index, predicted_id, correct equal: "
        f"{same}; max |Δ confidence| {delta:.1e} (≤ {TOLERANCE:.0e}: {'ok' if ok else 'FAILED'})"
    )
    if fraction >= 1 and old["out"].height != cube["out"].height:
        print(f"row counts differ: old {old['out'].height:,}, cube {cube['out'].height:,}")
        ok = False
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
