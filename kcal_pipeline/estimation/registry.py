"""The estimator contract: one registry of specs, one vectorised function per estimator.

An estimator spec says what it needs (score columns, template kinds), what it produces (one answer
per template or one per instance over its templates; a probability in [0, 1] or an unbounded score
where higher means more confident) and which reductions it runs under. Its function maps the
option-score cube to predicted option indices and confidences; `compute_estimates` turns those
into rows once, for every estimator alike. An estimator whose inputs a partition lacks is skipped
with one logged reason. This registry is the only list of estimator names in kcal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from kcal_pipeline.estimation.cube import REDUCTIONS, OptionScoreCube

Grain = Literal["template", "instance"]
OutputKind = Literal["probability", "score"]
NO_ANSWER = -1  # predicted option of an estimator that abstains (e.g. a failed vote): wrong, confidence 0


@dataclass(frozen=True)
class Estimate:
    """Predicted option index and confidence: `[I, T]` for template grain, `[I]` for instance grain."""

    predicted: np.ndarray
    confidence: np.ndarray


EstimatorFn = Callable[[OptionScoreCube, str], Estimate]


@dataclass(frozen=True)
class EstimatorSpec:
    """One estimator. `needs` are score columns beyond the reduction's own log-likelihood column."""

    name: str
    label: str
    family: str
    fn: EstimatorFn
    grain: Grain = "template"
    output_kind: OutputKind = "probability"
    reductions: tuple[str, ...] = ("sum",)
    needs: tuple[str, ...] = ()
    template_kinds: tuple[str, ...] = ()
    in_summary: bool = False
    paper: str = ""

    def missing_inputs(self, cube: OptionScoreCube, reduction: str) -> str | None:
        """Why this estimator cannot run on `cube` under `reduction`, or None if it can."""
        columns = [REDUCTIONS[reduction], *self.needs]
        absent = [c for c in columns if c not in cube.scores]
        if absent:
            return f"no {', '.join(absent)} scores"
        kinds = [k for k in self.template_kinds if k not in set(cube.template_kinds.tolist())]
        if kinds:
            return f"no {', '.join(kinds)} templates"
        return None


ESTIMATORS: dict[str, EstimatorSpec] = {}


def register(name: str, *, label: str, family: str, **spec: object) -> Callable[[EstimatorFn], EstimatorFn]:
    """Add an estimator; a second one under the same name is a bug, not an override."""

    def add(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        unknown = [r for r in spec.get("reductions", ()) if r not in REDUCTIONS]
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown reduction(s) {unknown}; known: {list(REDUCTIONS)}")
        ESTIMATORS[name] = EstimatorSpec(name=name, label=label, family=family, fn=fn, **spec)
        return fn

    return add


def summary_estimators() -> list[EstimatorSpec]:
    """The estimators of the demo summary and the report's headline table, in registry order."""
    return [s for s in ESTIMATORS.values() if s.in_summary]


OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "template_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "grain": pl.String,
    "output_kind": pl.String,
    "predicted_index": pl.Int32,
    "predicted_id": pl.String,
    "confidence": pl.Float64,
    "correct": pl.Boolean,
}
SORT_KEYS = ("model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction")
# The headline numbers (demo summary, the report's summary, the headline_estimates view): the test
# split (dev only tunes thresholds and recalibration) on each instance's full answer space (the
# `#k` subsample copies are the options-count study, read beside them, never pooled with them).
HEADLINE_SPLIT = "test"
FULL_ANSWER_SPACE = 0


def headline_template_estimates(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """One answer per instance and estimator, in every split and answer space: template-grain rows
    on each relation's headline template (the curated one of rank 0; variants share their parent's
    rank, so the kind matters), plus every instance-grain row."""
    heads = templates.filter((pl.col("rank") == 0) & (pl.col("kind") == "curated")).select(
        "relation_id", "template_id"
    )
    per_template = estimates.join(heads, on=["relation_id", "template_id"], how="semi")
    if "grain" not in estimates.columns:
        return per_template
    return pl.concat([per_template, estimates.filter(pl.col("grain") == "instance")])


def headline_estimates(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """What the headline numbers are computed on (sql/views/headline_estimates.sql is the same
    selection): headline_template_estimates on the test split and full answer spaces."""
    return headline_template_estimates(estimates, templates).filter(
        (pl.col("split") == HEADLINE_SPLIT) & (pl.col("answer_space_k") == FULL_ANSWER_SPACE)
    )


def curated_template_estimates(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """Template-grain rows on every curated template (not the variants or generated paraphrases):
    what an accuracy averaged over templates reads, as BEAR reports it."""
    curated = templates.filter(pl.col("kind") == "curated").select("relation_id", "template_id")
    return estimates.join(curated, on=["relation_id", "template_id"], how="semi")


def _resolve(estimators: Sequence[str] | None) -> list[EstimatorSpec]:
    names = list(ESTIMATORS) if estimators is None else list(estimators)
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown estimator(s) {unknown}; known: {sorted(ESTIMATORS)}")
    if not names:
        raise ValueError("no estimators requested")
    return [ESTIMATORS[n] for n in names]


def _rows(cube: OptionScoreCube, spec: EstimatorSpec, reduction: str, out: Estimate) -> pl.DataFrame:
    """The estimate rows of one (estimator, reduction): flat arrays, no per-row Python."""
    n_i, n_t, _ = cube.shape
    expected = (n_i, n_t) if spec.grain == "template" else (n_i,)
    if np.shape(out.predicted) != expected or np.shape(out.confidence) != expected:
        raise ValueError(
            f"estimator {spec.name!r}: expected arrays of shape {expected}, got "
            f"{np.shape(out.predicted)} and {np.shape(out.confidence)}"
        )
    if spec.grain == "template":
        ii, tt = np.nonzero(cube.present)
        template_ids = cube.template_ids[tt].tolist()
        predicted, confidence = out.predicted[ii, tt], out.confidence[ii, tt]
    else:
        ii = np.arange(n_i)
        template_ids = [None] * n_i
        predicted, confidence = out.predicted, out.confidence
    answered = predicted != NO_ANSWER
    safe = np.where(answered, predicted, 0)
    n = len(ii)
    return pl.DataFrame(
        {
            "model_id": np.full(n, cube.model_id, dtype=object),
            "relation_id": np.full(n, cube.relation_id, dtype=object),
            "instance_id": cube.instance_ids[ii],
            "split": cube.split[ii].tolist(),
            "answer_space_k": cube.answer_space_k[ii],
            "template_id": template_ids,
            "estimator": np.full(n, spec.name, dtype=object),
            "reduction": np.full(n, reduction, dtype=object),
            "grain": np.full(n, spec.grain, dtype=object),
            "output_kind": np.full(n, spec.output_kind, dtype=object),
            "predicted_index": np.where(answered, predicted, -1).astype(np.int32),
            "predicted_id": np.where(answered, cube.option_ids[ii, safe], None).tolist(),
            "confidence": np.where(answered, confidence, 0.0).astype(np.float64),
            "correct": answered & cube.gold[ii, safe],
        },
        schema=OUTPUT_SCHEMA,
    )


def compute_estimates(
    cubes: OptionScoreCube | Iterable[OptionScoreCube],
    estimators: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> pl.DataFrame:
    """Rows (instance, template or null, estimator, reduction) → prediction, confidence, correctness.

    Sorted by model, relation, instance, template, estimator and reduction, so downstream metrics
    see a deterministic order. Estimators whose inputs are absent are skipped with one log line.
    """
    specs = _resolve(estimators)
    cubes = [cubes] if isinstance(cubes, OptionScoreCube) else list(cubes)
    frames, skipped = [], {}
    for cube in cubes:
        for spec in specs:
            for reduction in spec.reductions:
                reason = spec.missing_inputs(cube, reduction)
                if reason:
                    skipped.setdefault((spec.name, reduction, reason), []).append(cube.relation_id)
                    continue
                frames.append(_rows(cube, spec, reduction, spec.fn(cube, reduction)))
    for (name, reduction, reason), relations in skipped.items():
        log(f"estimator {name} ({reduction}) skipped: {reason} ({', '.join(sorted(set(relations)))})")
    if not frames:
        return pl.DataFrame(schema=OUTPUT_SCHEMA)
    return pl.concat(frames).sort(SORT_KEYS, nulls_last=True)
