"""What a metric reads: estimates with their defaults, checked, sorted and cut into groups (GROUP)
and samples (MetricSamples), one per group × breakdown scope, laid end to end for the batched
metrics. The metric engine (engine.py) and the curves (curves.py) compute on these samples, and the
bootstrap (bootstrap.py) resamples the same groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.evaluation.registry import Needs
from kcal_pipeline.evaluation.scopes import breakdown_members
from kcal_pipeline.evaluation.segments import Segments

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


def check_one_row_per_instance(df: pl.DataFrame, keys: Sequence[str], hint: str) -> None:
    """Refuse two rows of `df` with the same `keys` (one instance counted twice); `hint` says what
    to filter to."""
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
    check_one_row_per_instance(
        df, [*GROUP, "relation_id", "instance_id"], "filter to one template or aggregation first"
    )
    return df.sort(*GROUP, "relation_id", "instance_id", nulls_last=True)


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


def check_values(df: pl.DataFrame) -> None:
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
        check_values(prepared_frame)
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
