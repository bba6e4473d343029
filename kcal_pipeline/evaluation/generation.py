"""Metrics of the generation estimates (issue 33, MACE's setting) and of knowledge coverage, in the
metrics table's schema (registry.OUTPUT_SCHEMA) so the same readers and views take them.

The evaluation stage is reused as it is: compute_metrics on the answered rows (probability-only
metrics left out for score-valued estimators), the breakdowns of scopes.py and MACE's macro
mixtures. The rows carry reduction GENERATED and the full answer space (answer_space_k = draw = 0).
Scopes:
  - all, relation, n_gold (gold counts pooled over relations), mixture_domain and mixture (MACE's
    {1}, {1,2}, {1,2,4}, {1,2,4,6}, macro-averaged over MACE's domains), as for the closed-set metrics;
  - GOLD_DOMAIN ("n_gold_domain", value "2|mace-award"): one gold count within one MACE relation,
    and GOLD_MACRO ("n_gold_macro", value "2"): those macro-averaged over the MACE relations having
    that gold count, every domain counting equally as in the mixtures. MACE's Table 3 columns
    1a/2a/4a/6a read GOLD_MACRO (reporting/generation.py).

A refused instance (confidence null: no number parsed, no answer, …) has no value to score: it is
left out of every metric and counted instead, in ANSWERED_SHARE = answered / all instances of the
scope (n = all of them; descriptive, higher_is_better null), so a reader sees what a value rests on.
A score-valued estimator has no mean confidence (not a probability): MEAN_SCORE holds its mean
score, descriptive, for the Table 3 layout.

Intervals (ci_low, ci_high: the project's rule that every number says its n and its interval) are
the closed-set metrics' bias-corrected 95 % bootstrap intervals (evaluation/bootstrap.py: the same
resample plans, B = N_RESAMPLES, seeded; each contains its point), on the test split
(HEADLINE_SPLIT), null elsewhere:
  - scopes all (clustered by relation) and relation: INTERVAL_METRICS, by bootstrap_intervals;
  - the means (mean confidence, MEAN_SCORE, knowledge coverage) in those scopes, and the Table 3
    cells (GOLD_INTERVAL_METRICS per gold count): the same resample_plan run on the rows of each
    gold count, its relations renamed "2|mace-award" so that the plan's "all" is scope n_gold
    (clustered by relation), its "relation" scopes are GOLD_DOMAIN, and GOLD_MACRO is read on the
    mean of those domains' resampled values (each domain resampled on its own: the stratified
    bootstrap of a macro average). A mean is bootstrap's batched confidence_gap on rows marked
    wrong (mean C − 0), so no second resampling code exists;
  - no interval (null) from fewer than MIN_INTERVAL_N rows (every resample is the one row: a zero
    width would claim certainty), nor for a macro with such a domain.
Not covered: ECE, the mixtures and ANSWERED_SHARE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from kcal_pipeline.estimation.registry import HEADLINE_SPLIT
from kcal_pipeline.evaluation.bootstrap import bootstrap_intervals
from kcal_pipeline.evaluation.engine import compute_metrics
from kcal_pipeline.evaluation.intervals import LEVEL, bias_corrected_interval
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA, SCOPE_KEY_SCHEMA
from kcal_pipeline.evaluation.resampled_metrics import batched_metrics
from kcal_pipeline.evaluation.resamples import N_RESAMPLES, ScopeResamples, resample_plan
from kcal_pipeline.evaluation.samples import GROUP, with_group_numbers
from kcal_pipeline.evaluation.scopes import (
    MACE_DOMAIN,
    attach_attributes,
    breakdown_members,
    macro_average_mixtures,
)
from kcal_pipeline.evaluation.tables import _containing

GENERATION_METRICS = ("accuracy", "mean_confidence", "auroc", "ece", "ace", "brier")
GENERATED = "generated"  # the reduction of every generation metric row
SCOPES = ("all", "relation", "n_gold", "mixture_domain")
GOLD_DOMAIN = "n_gold_domain"
GOLD_MACRO = "n_gold_macro"
ANSWERED_SHARE = "answered_share"
MEAN_SCORE = "mean_score"
COVERAGE_ESTIMATOR = "knowledge_coverage"
COVERAGE_TAU = 0.1
REQUIRED_COLUMNS = (
    "model_id",
    "relation_id",
    "instance_id",
    "estimator",
    "output_kind",
    "correct",
    "confidence",
)

# generation_metrics' and coverage_metrics' output: the metrics table's schema with its interval.
GENERATION_SCHEMA = {**OUTPUT_SCHEMA, "ci_low": pl.Float64, "ci_high": pl.Float64}
INTERVAL_METRICS = ("accuracy", "ace", "brier", "auroc")  # scopes all and relation, as closed-set
MEAN = "mean"  # a mean of the confidences: mean_confidence, MEAN_SCORE or coverage by output kind
GOLD_INTERVAL_METRICS = ("accuracy", MEAN)  # MACE's Table 3 cells, per gold count
MIN_INTERVAL_N = 2
_CI_KEYS = (*SCOPE_KEY_SCHEMA, "metric")
_CI_SCHEMA = {**SCOPE_KEY_SCHEMA, "metric": pl.String, "ci_low": pl.Float64, "ci_high": pl.Float64}

RowsFn = Callable[[pl.DataFrame, Sequence[str]], pl.DataFrame]


def coverage_metric(tau: float = COVERAGE_TAU) -> str:
    """The metric name of knowledge coverage at τ: "coverage_tau0.1"."""
    return f"coverage_tau{tau:g}"


def _with_attributes(
    frame: pl.DataFrame, instances: pl.DataFrame, relations: pl.DataFrame | None
) -> pl.DataFrame:
    """`frame` (relation_id, instance_id, …) as the breakdowns read it: the generated reduction,
    the full answer space, split (from probe_instances where the frame has none), n_gold and domain
    (without a relations table every relation counts as a MACE domain: the generation setting runs
    on MACE relations only)."""
    keys = ["relation_id", "instance_id"]
    attributes = instances.select(
        *keys,
        "n_gold",
        pl.col("n_options") if "n_options" in instances.columns else pl.lit(0, pl.Int64).alias("n_options"),
    )
    out = frame.drop([c for c in ("n_gold", "domain") if c in frame.columns])
    if "split" not in out.columns:
        out = out.join(instances.select(*keys, "split"), on=keys, how="left", maintain_order="left")
    domains = (
        relations
        if relations is not None
        else out.select("relation_id").unique().with_columns(domain=pl.lit(MACE_DOMAIN))
    )
    out = attach_attributes(
        out, relations=domains.select("relation_id", "domain"), instances=attributes
    ).drop("n_options")
    return out.with_columns(
        reduction=pl.lit(GENERATED),
        answer_space_k=pl.lit(0, pl.Int32),
        answer_space_draw=pl.lit(0, pl.Int32),
        split=pl.col("split").cast(pl.String),
    )


def _scope_means(frame: pl.DataFrame, value: str, metric: str, scopes: Sequence[str]) -> pl.DataFrame:
    """OUTPUT_SCHEMA rows of a descriptive metric: per metrics group and breakdown, the mean of
    `value` over the rows (n = the rows), higher_is_better null."""
    if frame.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    df = with_group_numbers(frame.sort(*GROUP, "relation_id", "instance_id", nulls_last=True))
    members = breakdown_members(df, "group", scopes)
    values = df.select(pl.col(value).cast(pl.Float64).alias("value"), *GROUP).with_row_index("row")
    rows = (
        members.join(values.with_columns(pl.col("row").cast(members.schema["row"])), on="row")
        .group_by("segment", maintain_order=True)
        .agg(pl.col(*GROUP, "scope", "scope_value").first(), pl.col("value").mean(), pl.len().alias("n"))
    )
    return (
        rows.with_columns(metric=pl.lit(metric), higher_is_better=pl.lit(None, pl.Boolean))
        .select(list(OUTPUT_SCHEMA))
        .cast(OUTPUT_SCHEMA)
    )


def _descriptive(frame: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
    """ANSWERED_SHARE of every estimator (over all rows) and MEAN_SCORE of the score-valued ones
    (over the answered rows)."""
    answered = frame.with_columns(answered=pl.col("confidence").is_not_null())
    scores = frame.filter((pl.col("output_kind") == "score") & pl.col("confidence").is_not_null())
    return pl.concat(
        [
            _scope_means(answered, "answered", ANSWERED_SHARE, scopes),
            _scope_means(scores, "confidence", MEAN_SCORE, scopes),
        ]
    )


def _metric_rows(frame: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
    """compute_metrics' GENERATION_METRICS on the answered rows, plus the descriptive rows; the
    mixtures are left to _with_macros, which averages every metric's domains at once."""
    answered = frame.filter(pl.col("confidence").is_not_null())
    computed = (
        compute_metrics(answered, list(GENERATION_METRICS), scopes=scopes).filter(
            pl.col("scope") != "mixture"
        )
        if not answered.is_empty()
        else pl.DataFrame(schema=OUTPUT_SCHEMA)
    )
    return pl.concat([computed, _descriptive(frame, scopes)])


def _with_macros(rows: pl.DataFrame, frame: pl.DataFrame, rows_fn: RowsFn) -> pl.DataFrame:
    """`rows` (scopes SCOPES) with the mixtures, then GOLD_DOMAIN (rows_fn per MACE relation on its
    n_gold breakdown) and GOLD_MACRO rows, each macro-averaged over domains (macro_average_mixtures:
    a GOLD_DOMAIN value "2|mace-award" is read as a one-count mixture of that domain)."""
    per_domain = [
        rows_fn(g, ["n_gold"]).with_columns(
            scope=pl.lit(GOLD_DOMAIN), scope_value=pl.col("scope_value") + "|" + pl.lit(relation)
        )
        for (relation,), g in frame.filter(pl.col("domain") == MACE_DOMAIN).group_by(
            "relation_id", maintain_order=True
        )
    ]
    domain_rows = pl.concat(per_domain) if per_domain else pl.DataFrame(schema=OUTPUT_SCHEMA)
    gold_macro = macro_average_mixtures(
        domain_rows.with_columns(scope=pl.lit("mixture_domain"))
    ).with_columns(scope=pl.lit(GOLD_MACRO))
    return pl.concat([rows, macro_average_mixtures(rows), domain_rows, gold_macro]).cast(OUTPUT_SCHEMA)


class _Plans:
    """resample_plan memoised by row layout (rows sorted by relation: its relations and their row
    counts), so every estimator that answered the same instances reads the same resamples."""

    def __init__(self, n_resamples: int, seed: int):
        self.n_resamples, self.seed, self._plans = n_resamples, seed, {}

    def __call__(self, relation_ids: np.ndarray) -> list[ScopeResamples]:
        names, counts = np.unique(relation_ids, return_counts=True)
        layout = (tuple(names.tolist()), tuple(counts.tolist()))
        if layout not in self._plans:
            self._plans[layout] = resample_plan(relation_ids, self.n_resamples, self.seed)
        return self._plans[layout]


def _resampled(
    c: np.ndarray, y: np.ndarray, sc: ScopeResamples, metric: str
) -> tuple[int, float, np.ndarray]:
    """(n, point, [B] resampled values) of accuracy or MEAN on one scope of a plan over the rows
    (c, y). MEAN is the batched confidence_gap with every row wrong: mean C − 0."""
    rows = sc.rows
    if metric == MEAN:
        wrong = np.zeros(c.size, dtype=bool)
        values = batched_metrics(["confidence_gap"], c, wrong, sc.resamples)["confidence_gap"]
        return c[rows].size, float(np.mean(c[rows])), values
    return c[rows].size, float(np.mean(y[rows])), batched_metrics([metric], c, y, sc.resamples)[metric]


def _plan_cells(
    g: pl.DataFrame, value: str, metrics: Sequence[str], plans: _Plans
) -> list[tuple[str, str, str, int, float, np.ndarray]]:
    """(plan scope, scope value, metric, n, point, values) for each scope of the plan of `g`'s rows
    (sorted here by relation, then instance) and each metric."""
    g = g.sort("relation_id", "instance_id")
    c = g[value].cast(pl.Float64).to_numpy()
    y = g["correct"].to_numpy().astype(bool) if "correct" in g.columns else np.zeros(c.size, dtype=bool)
    return [
        (sc.scope, sc.scope_value, m, *_resampled(c, y, sc, m))
        for sc in plans(g["relation_id"].to_numpy())
        for m in metrics
    ]


def _mean_and_gold_intervals(
    test: pl.DataFrame,
    value: str,
    mean_name: Callable[[str], str],
    gold_metrics: Sequence[str],
    plans: _Plans,
    level: float,
) -> pl.DataFrame:
    """_CI_SCHEMA rows of MEAN in scopes all and relation, and of `gold_metrics` in n_gold,
    GOLD_DOMAIN and GOLD_MACRO (module docstring), per metrics group of `test`. `mean_name`: the
    metric name of MEAN for an output kind."""
    mace = set(test.filter(pl.col("domain") == MACE_DOMAIN)["relation_id"].unique().to_list())
    keys, cells = [], []  # keys: _CI_KEYS values; cells: (n, point, values)
    for group, g in test.group_by(GROUP, maintain_order=True):
        key = dict(zip(GROUP, group, strict=True))
        fixed = tuple(key[k] for k in SCOPE_KEY_SCHEMA if k not in ("scope", "scope_value"))

        def name(metric: str, kind: str = key["output_kind"]) -> str:
            return mean_name(kind) if metric == MEAN else metric

        for scope, scope_value, m, *cell in _plan_cells(g, value, [MEAN], plans):
            keys.append((*fixed, scope, scope_value, name(m)))
            cells.append(cell)
        with_gold = g.filter(pl.col("n_gold").is_not_null())
        for (n_gold,), rows in with_gold.group_by("n_gold", maintain_order=True):
            domains: dict[str, list] = {}
            renamed = rows.with_columns(relation_id=pl.lit(f"{n_gold}|") + pl.col("relation_id"))
            for scope, scope_value, m, *cell in _plan_cells(renamed, value, gold_metrics, plans):
                if scope == "all":
                    keys.append((*fixed, "n_gold", str(n_gold), name(m)))
                    cells.append(cell)
                elif scope_value.split("|", 1)[1] in mace:
                    keys.append((*fixed, GOLD_DOMAIN, scope_value, name(m)))
                    cells.append(cell)
                    domains.setdefault(m, []).append(cell)
            for m, parts in domains.items():
                if all(n >= MIN_INTERVAL_N for n, _, _ in parts):  # else no macro interval
                    keys.append((*fixed, GOLD_MACRO, str(n_gold), name(m)))
                    cells.append(
                        (
                            sum(n for n, _, _ in parts),
                            float(np.mean([p for _, p, _ in parts])),
                            np.mean([v for _, _, v in parts], axis=0),
                        )
                    )
    kept = [(k, cell) for k, cell in zip(keys, cells, strict=True) if cell[0] >= MIN_INTERVAL_N]
    if not kept:
        return pl.DataFrame(schema=_CI_SCHEMA)
    low, high, _ = bias_corrected_interval(
        np.vstack([v for _, (_, _, v) in kept]), np.array([p for _, (_, p, _) in kept]), level
    )
    rows = [(*k, lo, hi) for (k, _), lo, hi in zip(kept, low.tolist(), high.tolist(), strict=True)]
    return pl.DataFrame(rows, schema=_CI_SCHEMA, orient="row")


def _with_intervals(points: pl.DataFrame, intervals: pl.DataFrame) -> pl.DataFrame:
    """`points` (OUTPUT_SCHEMA) with ci_low, ci_high joined on their keys: null where none was
    computed or the scope has fewer than MIN_INTERVAL_N rows; moved onto the point where it lies
    outside by a last bit (tables._containing)."""
    intervals = intervals.with_columns(pl.col("ci_low", "ci_high").fill_nan(None))
    joined = points.join(
        intervals.select(*_CI_KEYS, "ci_low", "ci_high"),
        on=list(_CI_KEYS),
        how="left",
        nulls_equal=True,
        maintain_order="left",
    ).with_columns(_containing("value"))
    too_few = pl.col("n") < MIN_INTERVAL_N
    return joined.with_columns(
        pl.when(too_few).then(None).otherwise(pl.col(c)).alias(c) for c in ("ci_low", "ci_high")
    ).cast(GENERATION_SCHEMA)


def _mean_name(output_kind: str) -> str:
    return "mean_confidence" if output_kind == "probability" else MEAN_SCORE


def generation_metrics(
    estimates: pl.DataFrame,
    instances: pl.DataFrame,
    relations: pl.DataFrame,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> pl.DataFrame:
    """Metrics of one model's generation_estimates (several relations): GENERATION_METRICS on the
    answered rows, ANSWERED_SHARE and MEAN_SCORE, per split and scope (module docstring), in
    GENERATION_SCHEMA, with intervals on the test split (module docstring). `instances`:
    probe_instances (relation_id, instance_id, n_gold, split); `relations`: the relations table
    (relation_id, domain)."""
    if estimates.is_empty():
        return pl.DataFrame(schema=GENERATION_SCHEMA)
    missing = [c for c in REQUIRED_COLUMNS if c not in estimates.columns]
    if missing:
        raise ValueError(f"generation_estimates: missing column(s) {missing} (have {estimates.columns})")
    frame = _with_attributes(
        estimates.select(*REQUIRED_COLUMNS, *(["split"] if "split" in estimates.columns else [])),
        instances,
        relations,
    )
    frame = frame.with_columns(pl.col("correct").fill_null(False))  # a refusal is never correct
    points = _with_macros(_metric_rows(frame, SCOPES), frame, _metric_rows)
    test = frame.filter(pl.col("confidence").is_not_null() & (pl.col("split") == HEADLINE_SPLIT))
    if test.is_empty():
        return _with_intervals(points, pl.DataFrame(schema=_CI_SCHEMA))
    plans = _Plans(n_resamples, seed)
    intervals = pl.concat(
        [
            bootstrap_intervals(test, INTERVAL_METRICS, n_resamples, seed, level).select(list(_CI_SCHEMA)),
            _mean_and_gold_intervals(test, "confidence", _mean_name, GOLD_INTERVAL_METRICS, plans, level),
        ]
    )
    return _with_intervals(points, intervals)


def coverage_metrics(
    coverage: pl.DataFrame,
    instances: pl.DataFrame,
    relations: pl.DataFrame | None = None,
    tau: float = COVERAGE_TAU,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> pl.DataFrame:
    """Knowledge coverage (MACE §5.3: per instance, the share of its gold answers whose cluster's
    mean sampled probability exceeds τ; estimation.generation.knowledge_coverage) as OUTPUT_SCHEMA
    rows: estimator COVERAGE_ESTIMATOR, metric coverage_metric(τ), the mean over the instances of
    every scope (as generation_metrics), higher_is_better null (a property of the model, not of an
    estimator), in GENERATION_SCHEMA with the interval of each mean on the test split (as
    generation_metrics' means). `coverage`: model_id, instance_id, coverage, and relation_id (else
    joined from `instances` by instance_id, which must then name one relation)."""
    if coverage.is_empty():
        return pl.DataFrame(schema=GENERATION_SCHEMA)
    for column in ("model_id", "instance_id", "coverage"):
        if column not in coverage.columns:
            raise ValueError(f"coverage: missing column {column!r} (have {coverage.columns})")
    frame = coverage.select(
        "model_id", *(["relation_id"] if "relation_id" in coverage.columns else []), "instance_id", "coverage"
    )
    if "relation_id" not in frame.columns:
        owners = instances.select("instance_id", "relation_id").unique()
        if owners["instance_id"].is_duplicated().any():
            raise ValueError("coverage: has no relation_id, and instance ids repeat across relations")
        frame = frame.join(owners, on="instance_id", how="left", maintain_order="left")
    frame = _with_attributes(
        frame.with_columns(
            estimator=pl.lit(COVERAGE_ESTIMATOR),
            output_kind=pl.lit("probability"),  # a metrics group key; coverage is a share
        ),
        instances,
        relations,
    )
    metric = coverage_metric(tau)

    def means(g: pl.DataFrame, scopes: Sequence[str]) -> pl.DataFrame:
        return _scope_means(g, "coverage", metric, scopes)

    points = _with_macros(means(frame, SCOPES), frame, means)
    test = frame.filter(pl.col("coverage").is_not_null() & (pl.col("split") == HEADLINE_SPLIT))
    intervals = _mean_and_gold_intervals(
        test, "coverage", lambda _kind: metric, (MEAN,), _Plans(n_resamples, seed), level
    )
    return _with_intervals(points, intervals)
