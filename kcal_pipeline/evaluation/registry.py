"""The metric contract: one registry of metric specs, most of them over (confidence, correct) pairs.

A metric spec says whether it needs probabilities (calibration: ACE, ECE, Brier) or accepts any
real-valued score where higher means more confident (ranking: AUROC, AURC, accuracy), and whether
higher values are better. `compute_metrics` applies every applicable metric per (model, estimator,
reduction, split, answer space) to all instances and to each relation, `compute_template_metrics`
per template and averaged over templates (BEAR's relation accuracy). A probability metric is never
computed on a score-valued estimator, and calling one directly on scores is an error that says
which metrics would apply. This registry is the only list of metric names in kcal.

A spec's `input` says what its function reads (INPUT_KINDS):
  - "confidence": fn(c, y) over the instances in scope;
  - "threshold": fn(c, y, τ) over the instances, accept = C ≥ τ; the spec's `threshold` is either a
    fixed τ or a tuning rule that compute_metrics applies to the dev split of the same group;
  - "statements": fn(c, y, τ) as "threshold", but over asserted statements: c = the template
    marginal P(o | r, s) of each (instance, option) from `option_estimates`, y = the option is gold;
  - "options": fn(c, y, instance, option) over the same (instance, option) rows, no τ, for the
    metrics of the whole option distribution (multi-hot Brier, classwise ECE): `instance` and
    `option` are integer codes (equal codes = the same instance; the same class, i.e. the same
    option object within its relation), so a metric can sum within an instance or bin per class;
  - "predictions": fn(predicted ids, gold id lists) on ONE relation; scope "all" is the unweighted
    mean of the relations' values (template bias is a property of a relation's answer distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.evaluation.scopes import breakdown_members, macro_average_mixtures
from kcal_pipeline.evaluation.segments import Segments

Needs = Literal["probability", "any"]
InputKind = Literal["confidence", "threshold", "statements", "options", "predictions"]
INPUT_KINDS = ("confidence", "threshold", "statements", "options", "predictions")
# The inputs read from option_estimates (one row per instance × option) rather than the estimates.
OPTION_INPUTS = ("statements", "options")
MetricFn = Callable[..., float]
# The split whose rows tune a "threshold"/"statements" spec's τ; metrics on it are in-sample.
TUNING_SPLIT = "dev"


@dataclass(frozen=True)
class TunedThreshold:
    """What a tuning rule chose on one group's dev rows: τ, whether it fell back to a default (and
    why), and how many dev rows it saw."""

    threshold: float
    fallback: bool
    reason: str | None
    n_dev: int


# A tuning rule: (dev confidences, dev correctness, output kind) -> TunedThreshold. It gets empty
# arrays when the group has no dev rows, and must then fall back.
TuningRule = Callable[[np.ndarray, np.ndarray, str], TunedThreshold]


def as_arrays(confidence, correct, output_kind: str = "probability") -> tuple[np.ndarray, np.ndarray]:
    """Validate once at the metric boundary: a probability outside [0, 1], or a non-finite score,
    is an estimator bug."""
    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct)
    if c.ndim != 1 or c.shape != y.shape:
        raise ValueError(f"confidence and correct must be 1-D of equal length, got {c.shape} and {y.shape}")
    if c.size == 0:
        raise ValueError("no predictions: confidence is empty")
    if output_kind == "probability":
        bad = c[~((c >= 0.0) & (c <= 1.0))]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is outside [0, 1]")
    else:
        bad = c[~np.isfinite(c)]
        if bad.size:
            raise ValueError(f"confidence {bad[0].item()!r} is not a finite score")
    if y.dtype != np.bool_:
        odd = y[~np.isin(y, (0, 1))]
        if odd.size:
            raise ValueError(f"correct must be boolean or 0/1, got value {odd[0].item()!r}")
        y = y.astype(np.bool_)
    return c, y


def as_predictions(predicted, gold) -> tuple[pl.Series, pl.Series]:
    """Validate a "predictions" metric's inputs: predicted ids (null = no answer) and, per instance,
    a non-empty list of gold ids."""
    p = pl.Series("predicted_id", predicted, dtype=pl.String)
    g = pl.Series("gold_ids", gold, dtype=pl.List(pl.String))
    if p.len() != g.len():
        raise ValueError(f"predicted_id and gold_ids must be of equal length, got {p.len()} and {g.len()}")
    if p.len() == 0:
        raise ValueError("no predictions: predicted_id is empty")
    empty = (g.is_null() | (g.list.len() == 0)).arg_true()
    if empty.len():
        raise ValueError(f"gold_ids of instance {empty[0]} (0-based) is empty; every instance needs one")
    return p, g


@dataclass(frozen=True)
class MetricSpec:
    """One metric; calling it validates the inputs for its needs, then computes.

    `higher_is_better` is None for a descriptive number with no better direction (template bias).
    `threshold` (inputs "threshold" and "statements" only): a fixed τ, or a TuningRule.
    """

    name: str
    label: str
    family: str
    fn: MetricFn
    needs: Needs
    higher_is_better: bool | None
    in_summary: bool = False
    input: InputKind = "confidence"
    threshold: float | TuningRule | None = None
    # All samples at once (evaluation/segments.py): (Segments) -> [S] for input "confidence",
    # (Segments, τ [S]) -> [S] for "threshold"/"statements", (Segments, instance, option: codes
    # per row) -> [S] for "options", (frame with columns segment, predicted_id, gold_ids; S) -> [S]
    # for "predictions". Must equal fn sample by sample.
    batched: Callable[..., np.ndarray] | None = None
    # Where every defined value lies (NaN = undefined is allowed): the metrics asset's blocking
    # check refuses a table with a value outside it, which only a bug can produce.
    value_range: tuple[float, float] = (0.0, 1.0)
    # Report flags (the metric_catalog table; SQL reports and pages select by them, never by name):
    # `role`: the part the metric plays in the reports (one of REPORT_ROLES, held by one metric);
    # `headline`: a column of the headline comparisons (estimator_comparison, families).
    role: str | None = None
    headline: bool = False

    @property
    def tuned(self) -> bool:
        return callable(self.threshold)

    def applies_to(self, output_kind: str) -> bool:
        return self.needs == "any" or output_kind == "probability"

    def __call__(
        self,
        confidence,
        correct,
        output_kind: str = "probability",
        *,
        tau: float | None = None,
        instance=None,
        option=None,
    ) -> float:
        """fn on validated inputs. A "predictions" metric takes (predicted ids, gold id lists) in
        place of (confidence, correct); a tuned threshold metric needs `tau`; an "options" metric
        the `instance` and `option` of every row (any hashable labels)."""
        if self.input == "predictions":
            return float(self.fn(*as_predictions(confidence, correct)))
        if not self.applies_to(output_kind):
            usable = [m.name for m in METRICS.values() if m.applies_to(output_kind) and m.input == self.input]
            raise ValueError(
                f"metric {self.name!r} needs probabilities in [0, 1], but the estimator's output is an "
                f"unbounded {output_kind}; metrics that accept it: {', '.join(usable)}"
            )
        c, y = as_arrays(confidence, correct, output_kind)
        if self.input == "confidence":
            return float(self.fn(c, y))
        if self.input == "options":
            return float(self.fn(c, y, *option_codes(self.name, c.size, instance, option)))
        if tau is None:
            if self.tuned:
                raise ValueError(f"metric {self.name!r} uses a threshold tuned on the dev split: pass tau")
            tau = self.threshold
        return float(self.fn(c, y, float(tau)))


def option_codes(metric: str, n: int, instance, option) -> tuple[np.ndarray, np.ndarray]:
    """An "options" metric's row labels as integer codes (np.unique's inverse), one per row."""
    codes = []
    for name, labels in (("instance", instance), ("option", option)):
        if labels is None:
            raise ValueError(f"metric {metric!r} reads options: pass {name}, one label per row")
        values = np.asarray(labels)
        if values.shape != (n,):
            raise ValueError(f"metric {metric!r}: {name} must be 1-D of length {n}, got shape {values.shape}")
        codes.append(np.unique(values, return_inverse=True)[1].astype(np.int64))
    return codes[0], codes[1]


METRICS: dict[str, MetricSpec] = {}
# The roles a metric can play in the reports, in the order of their columns there (metric_catalog's
# report_order): the accuracy a report leads with, the calibration error it ranks estimators by,
# the proper score, the ranking quality, the risk–coverage area, and the mean confidence read
# against the accuracy.
REPORT_ROLES = ("correctness", "calibration", "proper_score", "ranking", "risk_coverage", "confidence_level")


def register(
    name: str,
    *,
    label: str,
    family: str,
    needs: Needs,
    higher_is_better: bool | None,
    in_summary: bool = False,
    input: InputKind = "confidence",
    threshold: float | TuningRule | None = None,
    batched: Callable[..., np.ndarray] | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
    role: str | None = None,
    headline: bool = False,
) -> Callable[[MetricFn], MetricFn]:
    """Add a metric; a second one under the same name is a bug, not an override. Returns the
    function unchanged, as the estimator registry does; METRICS[name] is the spec, whose call
    validates the inputs."""

    def add(fn: MetricFn) -> MetricFn:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        if needs not in ("probability", "any"):
            raise ValueError(f"metric {name!r}: needs must be 'probability' or 'any', got {needs!r}")
        if input not in INPUT_KINDS:
            raise ValueError(f"metric {name!r}: input must be one of {list(INPUT_KINDS)}, got {input!r}")
        takes_threshold = input in ("threshold", "statements")
        if takes_threshold != (threshold is not None):
            raise ValueError(
                f"metric {name!r}: a threshold (fixed τ or tuning rule) goes with input 'threshold' or "
                f"'statements' and only with them; got input {input!r}, threshold {threshold!r}"
            )
        if batched is None:
            raise ValueError(f"metric {name!r}: needs a batched implementation (evaluation/segments.py)")
        if role is not None and role not in REPORT_ROLES:
            raise ValueError(f"metric {name!r}: role must be one of {list(REPORT_ROLES)}, got {role!r}")
        taken = [m.name for m in METRICS.values() if role is not None and m.role == role]
        if taken:
            raise ValueError(f"metric {name!r}: role {role!r} is already {taken[0]!r}'s")
        spec = MetricSpec(
            name,
            label,
            family,
            fn,
            needs,
            higher_is_better,
            in_summary,
            input,
            threshold,
            batched,
            value_range,
            role,
            headline,
        )
        METRICS[name] = spec
        return fn

    return add


def metric_for(role: str) -> str:
    """The name of the metric that plays `role` (REPORT_ROLES) in the reports."""
    for m in METRICS.values():
        if m.role == role:
            return m.name
    raise ValueError(f"no metric has the report role {role!r}; roles: {list(REPORT_ROLES)}")


def summary_metrics() -> list[MetricSpec]:
    """The metrics of the demo summary and the report's headline table, in registry order."""
    return [m for m in METRICS.values() if m.in_summary]


_EST_COLUMNS = ("model_id", "estimator", "relation_id", "instance_id", "confidence", "correct")
# A metric is computed within one of these groups, never across two: an estimator's reduction, its
# kind of output, the probe split (metrics are reported on test; dev only tunes) and the answer
# space (k 0, draw 0 = each instance's full answer space; k, draw = its `#k<k>d<draw>` copy of the
# option-count sweep, each draw apart so the sweep reports the spread over draws).
ANSWER_SPACE_KEYS = ("answer_space_k", "answer_space_draw")
GROUP = ("model_id", "estimator", "reduction", "output_kind", "split", *ANSWER_SPACE_KEYS)


def with_defaults(estimates: pl.DataFrame) -> pl.DataFrame:
    """Estimates as metrics read them: reduction (null if absent), output_kind (probability),
    split (null: unknown), answer_space_k and answer_space_draw (0: full answer spaces; a copy
    without a draw column is draw 1)."""
    require_columns(estimates, _EST_COLUMNS, "estimates")
    defaults = {
        "reduction": pl.lit(None, pl.String),
        "output_kind": pl.lit("probability", pl.String),
        "split": pl.lit(None, pl.String),
        "answer_space_k": pl.lit(0, pl.Int32),
        "answer_space_draw": pl.when(pl.col("answer_space_k") == 0).then(0).otherwise(1),
    }
    missing = {name: value for name, value in defaults.items() if name not in estimates.columns}
    if "answer_space_k" in missing:
        estimates = estimates.with_columns(answer_space_k=missing.pop("answer_space_k"))
    return estimates.with_columns(**missing).with_columns(pl.col(ANSWER_SPACE_KEYS).cast(pl.Int32))


def _check_one_row_per_instance(df: pl.DataFrame, keys: Sequence[str], hint: str) -> None:
    dup = df.filter(pl.struct(keys).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"estimates: several rows for instance {row['instance_id']!r} of estimator "
            f"{row['estimator']!r}; {hint}"
        )


def prepared(estimates: pl.DataFrame) -> pl.DataFrame:
    """with_defaults, one row per instance checked, sorted by GROUP then (relation_id, instance_id)."""
    df = with_defaults(estimates)
    _check_one_row_per_instance(
        df, [*GROUP, "relation_id", "instance_id"], "filter to one template or aggregation first"
    )
    return df.sort(*GROUP, "relation_id", "instance_id", nulls_last=True)


# The key columns every evaluation table shares (metrics, intervals, curves).
SCOPE_KEY_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
}
OUTPUT_SCHEMA = {
    **SCOPE_KEY_SCHEMA,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
    "higher_is_better": pl.Boolean,
}
_KEYS = ("model_id", "estimator", "reduction", "split", *ANSWER_SPACE_KEYS)


def _specs(metrics: Sequence[str] | None) -> list[MetricSpec]:
    names = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    return [METRICS[m] for m in names]


PREDICTION_COLUMNS = ("predicted_id", "gold_ids")
# τ is tuned once per estimator output on the dev split of its answer space, over all relations.
TUNING_KEYS = ("model_id", "estimator", "reduction", "output_kind", *ANSWER_SPACE_KEYS)


def _available(
    specs: list[MetricSpec], estimates: pl.DataFrame, option_estimates: pl.DataFrame | None, asked: bool
) -> list[MetricSpec]:
    """Drop the specs whose inputs were not given; if the caller asked for them by name, say what
    is missing instead."""
    lacking = {
        "predictions": [c for c in PREDICTION_COLUMNS if c not in estimates.columns],
        "statements": [] if option_estimates is not None else ["option_estimates"],
        "options": [] if option_estimates is not None else ["option_estimates"],
    }
    kept = []
    for m in specs:
        missing = lacking.get(m.input, [])
        if not missing:
            kept.append(m)
        elif asked:
            what = "argument option_estimates" if m.input in OPTION_INPUTS else f"estimates columns {missing}"
            raise ValueError(
                f"metric {m.name!r} reads {m.input}; missing {what} (gold ids: evaluation.bias."
                "attach_gold_ids; option estimates: estimation.marginal.option_estimates)"
            )
    return kept


def statement_frame(option_estimates: pl.DataFrame) -> pl.DataFrame:
    """option_estimates (OPTION_ESTIMATES_SCHEMA) as the statement-level decision metrics read it:
    one row per (instance, option), confidence = P(o | r, s), correct = the option is gold, sorted
    by GROUP, relation, instance and option."""
    require_columns(option_estimates, ("option_index", "probability", "is_gold"), "option_estimates")
    bad = option_estimates.filter(~pl.col("probability").is_between(0.0, 1.0))
    if not bad.is_empty():
        row = bad.row(0, named=True)
        raise ValueError(
            f"option_estimates: probability {row['probability']!r} of option {row['option_index']} of "
            f"instance {row['instance_id']!r} is outside [0, 1]"
        )
    df = with_defaults(option_estimates.rename({"probability": "confidence", "is_gold": "correct"}))
    keys = [*GROUP, "relation_id", "instance_id", "option_index"]
    dup = df.filter(pl.struct(keys).is_duplicated())
    if not dup.is_empty():
        row = dup.row(0, named=True)
        raise ValueError(
            f"option_estimates: several rows for option {row['option_index']} of instance "
            f"{row['instance_id']!r} of estimator {row['estimator']!r} and reduction {row['reduction']!r}"
        )
    return df.sort(keys, nulls_last=True)


def _tuned(
    df: pl.DataFrame, rule: TuningRule, keys: Sequence[str] = TUNING_KEYS
) -> dict[tuple, TunedThreshold]:
    """rule applied to the TUNING_SPLIT rows of every `keys` group of `df` (prepared: sorted),
    and to empty arrays for a group with no dev rows. keys[3] is the output kind."""
    out = {}
    for values, g in df.filter(pl.col("split") == TUNING_SPLIT).group_by(keys, maintain_order=True):
        out[values] = rule(g["confidence"].to_numpy(), g["correct"].to_numpy(), values[3])
    for values in df.select(keys).unique(maintain_order=True).iter_rows():
        if values not in out:
            out[values] = rule(np.empty(0), np.empty(0, dtype=np.bool_), values[3])
    return out


def _check_values(df: pl.DataFrame) -> None:
    """as_arrays' checks on every row at once: probabilities in [0, 1], scores finite, correct
    boolean or 0/1."""
    probability = pl.col("output_kind") == "probability"
    c = pl.col("confidence")
    bad = df.filter(
        pl.when(probability).then(~c.is_between(0.0, 1.0)).otherwise(~c.is_finite()) | c.is_null()
    )
    if not bad.is_empty():
        row = bad.row(0, named=True)
        what = "is outside [0, 1]" if row["output_kind"] == "probability" else "is not a finite score"
        raise ValueError(f"confidence {row['confidence']!r} {what}")
    if df.schema["correct"] != pl.Boolean:
        odd = df.filter(~pl.col("correct").is_in([0, 1]) | pl.col("correct").is_null())
        if not odd.is_empty():
            raise ValueError(f"correct must be boolean or 0/1, got value {odd['correct'][0]!r}")


_VALUES_SCHEMA = {"segment": pl.Int64, "rank": pl.Int64, "value": pl.Float64}


class MetricSamples:
    """The samples a metrics or curves table is computed on, laid end to end (Segments): one per
    segment of `members` (row, group, segment, scope, scope_value, …; ascending segments, each a
    run of rows of `frame`). `frame` is prepared (sorted by GROUP first) and checked."""

    def __init__(self, frame: pl.DataFrame, members: pl.DataFrame):
        self.frame, self.members = frame, members
        rows = members["row"].to_numpy()
        sizes = np.bincount(members["segment"].to_numpy())
        self.segment_group = members["group"].to_numpy()[np.cumsum(sizes) - sizes]
        self.groups = frame.select("group", *GROUP).unique("group", keep="first", maintain_order=True)
        self.everything = Segments(
            frame["confidence"].to_numpy()[rows], frame["correct"].to_numpy()[rows], sizes
        )
        self.probability = (self.groups["output_kind"] == "probability").to_numpy()[self.segment_group]

    @classmethod
    def of(cls, prepared_frame: pl.DataFrame, scopes: Sequence[str] | None = None) -> MetricSamples:
        """One sample per GROUP × breakdown scope (scopes.breakdown_members)."""
        _check_values(prepared_frame)
        frame = with_group_numbers(prepared_frame)
        return cls(frame, breakdown_members(frame, "group", scopes))

    def view(self, needs: Needs) -> tuple[np.ndarray | None, Segments | None]:
        """(segment numbers, their Segments) of the samples a metric or curve that `needs` this
        applies to; (None, None) if none: probabilities only from probability-valued groups."""
        if needs == "any":
            return np.arange(self.everything.count), self.everything
        chosen = np.flatnonzero(self.probability)
        if chosen.size == 0:
            return None, None
        return chosen, self.everything if chosen.size == self.everything.count else self._probability_view

    @cached_property
    def _probability_view(self) -> Segments:
        return self.everything.take(np.flatnonzero(self.probability))

    def option_codes(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What an "options" metric reads beside the view of the `chosen` samples: per row, the
        code of its instance and of its class, an option object within its relation (the same
        object in two relations is two classes: two answer spaces)."""
        instance, option = self._option_codes
        if chosen.size < self.everything.count:
            keep = np.isin(self.members["segment"].to_numpy(), chosen)
            return instance[keep], option[keep]
        return instance, option

    @cached_property
    def _option_codes(self) -> tuple[np.ndarray, np.ndarray]:
        if "option_id" not in self.frame.columns:
            raise ValueError(f"option_estimates: missing column 'option_id' (have {self.frame.columns})")
        no_id = self.frame.filter(pl.col("option_id").is_null())
        if not no_id.is_empty():
            row = no_id.row(0, named=True)
            raise ValueError(
                f"option_estimates: option {row['option_index']} of instance {row['instance_id']!r} has "
                "no option_id; classwise metrics need one"
            )
        codes = self.frame.select(
            instance=pl.struct("group", "relation_id", "instance_id").rank("dense").cast(pl.Int64),
            option=pl.struct("relation_id", "option_id").rank("dense").cast(pl.Int64),
        )
        rows = self.members["row"].to_numpy()
        return codes["instance"].to_numpy()[rows], codes["option"].to_numpy()[rows]

    def keys(self, carry: Sequence[str] = ()) -> pl.DataFrame:
        """Per segment: its GROUP keys, scope, scope_value, n (rows) and `carry` columns of members."""
        segments = self.members.group_by("segment", maintain_order=True).agg(
            pl.col("group", "scope", "scope_value", *carry).first(), pl.len().alias("n")
        )
        return segments.join(self.groups, on="group", maintain_order="left")


def with_group_numbers(df: pl.DataFrame) -> pl.DataFrame:
    """df (sorted by GROUP first, so every group is one run) with a `group` column numbering them."""
    return df.with_columns(group=pl.struct(GROUP).rle_id().cast(pl.Int64))


def _values(samples: MetricSamples, specs: list[MetricSpec], tuning_keys: Sequence[str]) -> pl.DataFrame:
    """Every applicable metric of `specs` but the "predictions" ones on every sample: (segment,
    metric rank, value); one batched call per metric over all samples (evaluation/segments.py)."""
    taus = {
        rule: _tuned(samples.frame, rule, tuning_keys)
        for rule in dict.fromkeys(m.threshold for m in specs if m.tuned)
    }
    group_tuning = list(
        samples.frame.unique("group", keep="first", maintain_order=True).select(tuning_keys).iter_rows()
    )
    parts = []
    for rank, m in enumerate(specs):
        if m.input == "predictions":
            continue  # per relation only: _prediction_values
        chosen, seg = samples.view(m.needs)
        if chosen is None:
            continue  # a probability metric and no probability-valued group
        if m.input == "confidence":
            value = m.batched(seg)
        elif m.input == "options":
            value = m.batched(seg, *samples.option_codes(chosen))
        else:
            if m.tuned:
                per_group = np.array([taus[m.threshold][key].threshold for key in group_tuning])
                tau = per_group[samples.segment_group[chosen]]
            else:
                tau = np.full(chosen.size, float(m.threshold))
            value = m.batched(seg, tau)
        parts.append(pl.DataFrame({"segment": chosen, "rank": np.full(chosen.size, rank), "value": value}))
    return pl.concat(parts).cast(_VALUES_SCHEMA) if parts else pl.DataFrame(schema=_VALUES_SCHEMA)


def _prediction_values(samples: MetricSamples, specs: list[MetricSpec]) -> pl.DataFrame:
    """The "predictions" metrics: on each relation sample (batched over all of them), and on each
    "all" sample the unweighted mean of its group's relation values."""
    chosen = [(rank, m) for rank, m in enumerate(specs) if m.input == "predictions"]
    members = samples.members
    relation = members.filter(pl.col("scope") == "relation")
    if not chosen or relation.is_empty():
        return pl.DataFrame(schema=_VALUES_SCHEMA)
    frame = relation.select("segment", "group").with_columns(
        samples.frame.select("predicted_id", "gold_ids")[relation["row"]],
        local=pl.col("segment").rle_id().cast(pl.Int64),  # the relation samples numbered 0 … R−1
    )
    firsts = frame.unique("local", keep="first", maintain_order=True).select("local", "segment", "group")
    alls = members.filter(pl.col("scope") == "all").unique("segment", keep="first").select("segment", "group")
    parts = []
    for rank, m in chosen:
        values = m.batched(frame.drop("segment").rename({"local": "segment"}), firsts.height)
        per_relation = firsts.with_columns(value=pl.Series(values, dtype=pl.Float64), rank=pl.lit(rank))
        means = per_relation.group_by("group").agg(pl.col("value").mean())
        parts.append(per_relation.select(list(_VALUES_SCHEMA)))
        parts.append(
            alls.join(means, on="group").with_columns(rank=pl.lit(rank)).select(list(_VALUES_SCHEMA))
        )
    return pl.concat([p.cast(_VALUES_SCHEMA) for p in parts])


def _metric_rows(
    df: pl.DataFrame,
    specs: list[MetricSpec],
    scopes: Sequence[str] | None = None,
    tuning_keys: Sequence[str] = TUNING_KEYS,
) -> pl.DataFrame:
    """OUTPUT_SCHEMA rows for `df` (prepared) per GROUP × breakdown scope (evaluation/scopes.py:
    all and each relation always; domain, gold count, MACE mixture per domain, option count,
    template kind where `df` has the attribute columns attach_attributes adds), in the order group,
    scope, value, metric (registry order)."""
    samples = MetricSamples.of(df, scopes)
    values = pl.concat([_values(samples, specs, tuning_keys), _prediction_values(samples, specs)])
    return _with_keys(values, samples, specs).select(list(OUTPUT_SCHEMA)).cast(OUTPUT_SCHEMA)


def _with_keys(
    values: pl.DataFrame, samples: MetricSamples, specs: list[MetricSpec], carry: Sequence[str] = ()
) -> pl.DataFrame:
    """(segment, rank, value) rows with their sample's keys (MetricSamples.keys) and the metric's
    name and direction; by segment, then metric."""
    names = pl.DataFrame(
        {
            "rank": range(len(specs)),
            "metric": [m.name for m in specs],
            "higher_is_better": [m.higher_is_better for m in specs],
        },
        schema={"rank": pl.Int64, "metric": pl.String, "higher_is_better": pl.Boolean},
    )
    joined = values.join(samples.keys(carry), on="segment").join(names, on="rank")
    return joined.sort("segment", "rank")


def compute_metrics(
    estimates: pl.DataFrame,
    metrics: Sequence[str] | None = None,
    option_estimates: pl.DataFrame | None = None,
    scopes: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Long table (model_id, estimator, reduction, split, answer_space_k, answer_space_draw, scope,
    scope_value, metric, value, n, higher_is_better) for the scopes all and relation, within each
    split and answer space (k and draw) separately.

    Expects one row per instance per (model_id, estimator, reduction): the caller filters to one
    template or one aggregation, since pooling templates would count an instance several times.
    Metrics that need probabilities are left out for score-valued estimators. "predictions"
    metrics need the columns predicted_id and gold_ids; "statements" and "options" metrics read
    `option_estimates` (their rows come after the instance rows, n = statements; scopes as its
    attribute columns allow). Without those inputs such metrics are left out, or, when asked for
    by name, an error. A tuned threshold
    metric uses the τ its rule picks on the dev split of the same (model, estimator, reduction,
    output kind, answer space) — see tuned_thresholds — in every split and scope.
    """
    specs = _specs(metrics)
    if estimates.is_empty():
        raise ValueError("estimates: no rows to compute metrics on")
    specs = _available(specs, estimates, option_estimates, asked=metrics is not None)
    if any(m.input == "predictions" for m in specs):
        no_gold = estimates.filter(pl.col("gold_ids").is_null() | (pl.col("gold_ids").list.len() == 0))
        if not no_gold.is_empty():
            row = no_gold.row(0, named=True)
            raise ValueError(
                f"estimates: no gold_ids for instance {row['instance_id']!r} of relation "
                f"{row['relation_id']!r}"
            )
    frames = [_metric_rows(prepared(estimates), [m for m in specs if m.input not in OPTION_INPUTS], scopes)]
    statement_specs = [m for m in specs if m.input in OPTION_INPUTS]
    if statement_specs and not option_estimates.is_empty():
        frames.append(_metric_rows(statement_frame(option_estimates), statement_specs))
    out = pl.concat(frames)
    return pl.concat([out, macro_average_mixtures(out).select(out.columns).cast(OUTPUT_SCHEMA)])


THRESHOLDS_SCHEMA = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "unit": pl.String,
    "rule": pl.String,
    "threshold": pl.Float64,
    "fallback": pl.Boolean,
    "reason": pl.String,
    "n_dev": pl.Int64,
}


def tuned_thresholds(
    estimates: pl.DataFrame,
    option_estimates: pl.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
) -> pl.DataFrame:
    """The τ behind every tuned threshold metric of compute_metrics, one row per (model, estimator,
    reduction, answer space, unit, rule): unit "instances" (estimates) or "statements"
    (option_estimates); `fallback` and `reason` say when the rule fell back to its default."""
    specs = [m for m in _specs(metrics) if m.tuned]
    inputs = [("instances", "threshold", prepared(estimates))]
    if option_estimates is not None and not option_estimates.is_empty():
        inputs.append(("statements", "statements", statement_frame(option_estimates)))
    rows = []
    for unit, kind, df in inputs:
        rules = {m.threshold: None for m in specs if m.input == kind}  # distinct, in registry order
        for rule in rules:
            for values, t in _tuned(df, rule).items():
                key = dict(zip(TUNING_KEYS, values, strict=True))
                if not any(m.applies_to(key["output_kind"]) for m in specs if m.threshold is rule):
                    continue
                rows.append(
                    (key["model_id"], key["estimator"], key["reduction"], key["answer_space_k"],
                     key["answer_space_draw"], unit, rule.__name__, t.threshold, t.fallback, t.reason,
                     t.n_dev)
                )  # fmt: skip
    return pl.DataFrame(rows, orient="row", schema=THRESHOLDS_SCHEMA)


def _per_template(specs: list[MetricSpec], asked: bool) -> list[MetricSpec]:
    """Per template: the (confidence, correct) metrics and fixed-threshold ones; a tuned τ, a
    relation's prediction distribution or option estimates have no per-template meaning here."""
    kept = [m for m in specs if m.input == "confidence" or (m.input == "threshold" and not m.tuned)]
    if asked and len(kept) < len(specs):
        odd = [m.name for m in specs if m not in kept]
        usable = [m.name for m in kept]
        raise ValueError(f"metric(s) {odd} are not computed per template; per template: {usable}")
    return kept


def compute_template_metrics(estimates: pl.DataFrame, metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Metrics per template, and their mean over templates, in the schema of compute_metrics.

    `estimates`: template-grain rows on the templates to average (the curated ones), one row per
    (instance, template). Within each group (split and answer space included), per relation:
      - scope "template", scope_value = template_id: every applicable metric on that template alone;
      - scope "relation_template_mean", scope_value = relation_id: the unweighted mean of those
        values over the relation's templates (NaN if one is NaN); n = the relation's instances;
      - scope "all_template_mean", scope_value "all": the relations' template means weighted by
        their instances (as "all" weighs the relations' headline values); n = their sum.
    With every template covering every instance, the accuracy means equal the share of correct
    (instance, template) pairs.
    """
    specs = _per_template(_specs(metrics), asked=metrics is not None)
    if "template_id" not in estimates.columns:
        raise ValueError(f"estimates: missing column 'template_id' (have {estimates.columns})")
    if estimates.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    df = with_defaults(estimates).drop_nulls("template_id")  # instance-grain rows have no template
    if df.is_empty():
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    per = [*GROUP, "relation_id", "template_id"]
    _check_one_row_per_instance(df, [*per, "instance_id"], "expected one per template")
    df = df.sort(*per, "instance_id", nulls_last=True)
    _check_values(df)
    df = with_group_numbers(df)
    members = df.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
        "group",
        pl.struct(per).rle_id().cast(pl.Int64).alias("segment"),
        pl.lit("template").alias("scope"),
        pl.col("template_id").alias("scope_value"),
        "relation_id",
        "template_id",
    )
    samples = MetricSamples(df, members)
    templates = _with_keys(
        _values(samples, specs, TUNING_KEYS), samples, specs, ["relation_id", "template_id"]
    )
    instances = df.group_by(*_KEYS, "relation_id").agg(pl.col("instance_id").n_unique().alias("n"))
    relation_mean = (
        templates.group_by(*_KEYS, "relation_id", "metric", "higher_is_better", maintain_order=True)
        .agg(pl.col("value").mean())
        .join(instances, on=[*_KEYS, "relation_id"], nulls_equal=True, maintain_order="left")
    )
    all_mean = relation_mean.group_by(*_KEYS, "metric", "higher_is_better", maintain_order=True).agg(
        ((pl.col("value") * pl.col("n")).sum() / pl.col("n").sum()).alias("value"), pl.col("n").sum()
    )
    frames = [
        templates.with_columns(scope=pl.lit("template"), scope_value=pl.col("template_id")),
        relation_mean.with_columns(scope=pl.lit("relation_template_mean"), scope_value=pl.col("relation_id")),
        all_mean.with_columns(scope=pl.lit("all_template_mean"), scope_value=pl.lit("all")),
    ]
    return pl.concat([f.select(list(OUTPUT_SCHEMA)).cast(OUTPUT_SCHEMA) for f in frames])
