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

from kcal_pipeline.dataset.instances.variants import FULL_ANSWER_SPACE
from kcal_pipeline.estimation.cube import REDUCTIONS, OptionScoreCube

Grain = Literal["template", "instance"]
OutputKind = Literal["probability", "score"]
NO_ANSWER = -1  # predicted option of an estimator that abstains (e.g. a failed vote): wrong, confidence 0


@dataclass(frozen=True)
class Estimate:
    """Predicted option index and confidence: `[I, T]` for template grain, `[I]` for instance grain.

    `rows` (same shape, bool) says which cells become rows: by default every (instance, template)
    with a scored option (template grain) or every instance (instance grain). An estimator defined
    on some templates only (Token on answer-conditional ones, a marker estimator keyed by its
    parent template) or fitted per group (a group without dev data) clears the others.
    `fits` are the parameters an estimator fitted on the dev split (a temperature, a threshold),
    one dict per fitted group: the estimator_fits table, so a tuned number is never hidden.
    """

    predicted: np.ndarray
    confidence: np.ndarray
    rows: np.ndarray | None = None
    fits: tuple[dict, ...] = ()


EstimatorFn = Callable[[OptionScoreCube, str], Estimate]
# A check of the data an estimator needs beyond score columns and template kinds (enough templates
# for a vote, a dev split to fit on): the reason it cannot run, or None.
Requirement = Callable[[OptionScoreCube, str], "str | None"]
LL_PLACEHOLDER = "{ll}"  # in `needs`: the reduction's own column, e.g. "{ll}_masked" → ll_sum_masked
# The seed's estimator: every other estimator's paired difference is taken against it, and the
# leaderboard's accuracy is its. The one spec registered with baseline=True carries this name.
BASELINE = "base"
# Estimator families in the order reports show them: the families of the main estimators (the
# seeds' estimators) first. A family not listed here comes last.
FAMILY_ORDER = (
    "single_template",
    "template_marginal",
    "recalibration",
    "multi_answer",
    "aggregation",
    "markers",
    "selective_lama",
    "null_model",
)


@dataclass(frozen=True)
class EstimatorSpec:
    """One estimator. `needs` are score columns beyond the reduction's own log-likelihood column
    ("{ll}" stands for that column, so "{ll}_dropout" is ll_sum_dropout under 'sum');
    `requires` checks anything else the data must offer."""

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
    requires: Requirement | None = None
    # Report flags (the estimator_catalog table; SQL reports and pages select by them, never by name):
    # `main`: one of the main estimators (reliability panels, `kcal sql --query intervals`);
    # `baseline`: the estimator every other is compared with (BASELINE);
    # `family_line`: its family's one line in a figure of one line per family (option-count sweep).
    main: bool = False
    baseline: bool = False
    family_line: bool = False

    def columns(self, reduction: str) -> list[str]:
        """The score columns this estimator reads under `reduction`."""
        ll = REDUCTIONS[reduction]
        return [ll, *(n.replace(LL_PLACEHOLDER, ll) for n in self.needs)]

    def missing_inputs(self, cube: OptionScoreCube, reduction: str) -> str | None:
        """Why this estimator cannot run on `cube` under `reduction`, or None if it can."""
        absent = [c for c in self.columns(reduction) if c not in cube.scores]
        if absent:
            return f"no {', '.join(absent)} scores"
        kinds = [k for k in self.template_kinds if k not in set(cube.template_kinds.tolist())]
        if kinds:
            return f"no {', '.join(kinds)} templates"
        return self.requires(cube, reduction) if self.requires else None


ESTIMATORS: dict[str, EstimatorSpec] = {}


def register(name: str, *, label: str, family: str, **spec: object) -> Callable[[EstimatorFn], EstimatorFn]:
    """Add an estimator; a second one under the same name is a bug, not an override."""

    def add(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        unknown = [r for r in spec.get("reductions", ()) if r not in REDUCTIONS]
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown reduction(s) {unknown}; known: {list(REDUCTIONS)}")
        if bool(spec.get("baseline")) != (name == BASELINE):
            raise ValueError(
                f"estimator {name!r}: baseline=True goes with the name {BASELINE!r} and only with it"
            )
        ESTIMATORS[name] = EstimatorSpec(name=name, label=label, family=family, fn=fn, **spec)
        return fn

    return add


def family_rank(family: str) -> int:
    """A family's place in FAMILY_ORDER (a family it does not list comes last)."""
    return FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)


def main_estimator_specs() -> list[EstimatorSpec]:
    """The main estimators family by family (FAMILY_ORDER), in registry order within a family."""
    return sorted((s for s in ESTIMATORS.values() if s.main), key=lambda s: family_rank(s.family))


def summary_estimators() -> list[EstimatorSpec]:
    """The estimators of the demo summary and the report's headline table, in registry order."""
    return [s for s in ESTIMATORS.values() if s.in_summary]


OUTPUT_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
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
# `#k<k>d<draw>` subsample copies are the option-count sweep, read beside them, never pooled with
# them; answer_space_draw is 0 exactly where answer_space_k is, so one filter on k selects them).
HEADLINE_SPLIT = "test"
DEV_SPLIT = "dev"  # tunes thresholds and recalibration; where findings pick a comparator


def headline_template_estimates(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """One answer per instance, estimator and reduction, in every split and answer space:
    template-grain rows on each relation's headline template (the curated one of rank 0; variants
    share their parent's rank, so the kind matters), plus every instance-grain row."""
    heads = templates.filter((pl.col("rank") == 0) & (pl.col("kind") == "curated")).select(
        "relation_id", "template_id"
    )
    per_template = estimates.join(heads, on=["relation_id", "template_id"], how="semi")
    if "grain" not in estimates.columns:
        return per_template
    return pl.concat([per_template, estimates.filter(pl.col("grain") == "instance")])


def headline_estimates(estimates: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """What the headline numbers are computed on (sql/views/headline_estimates.sql is the same
    selection): headline_template_estimates on the test split and full answer spaces, one row per
    instance, estimator and reduction (each number is then taken per reduction, or on each
    estimator's headline reduction: headline_reductions)."""
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


def _check_shapes(spec: EstimatorSpec, out: Estimate, expected: tuple[int, ...]) -> None:
    arrays = {"predicted": out.predicted, "confidence": out.confidence}
    if out.rows is not None:
        arrays["rows"] = out.rows
    if any(np.shape(a) != expected for a in arrays.values()):
        shapes = ", ".join(f"{k} {np.shape(a)}" for k, a in arrays.items())
        raise ValueError(f"estimator {spec.name!r}: expected arrays of shape {expected}, got {shapes}")


@dataclass(frozen=True)
class _Part:
    """The rows of one (estimator, reduction) on one cube, as index arrays: instance `ii`, template
    `tt` (−1 for instance grain), predicted option and confidence."""

    label: tuple[str, str, str, str]  # estimator, reduction, grain, output_kind
    ii: np.ndarray
    tt: np.ndarray
    predicted: np.ndarray
    confidence: np.ndarray


def _part(cube: OptionScoreCube, spec: EstimatorSpec, reduction: str, out: Estimate) -> _Part:
    """The cells of `out` that become rows: flat arrays, no per-row Python."""
    n_i, n_t, _ = cube.shape
    expected = (n_i, n_t) if spec.grain == "template" else (n_i,)
    _check_shapes(spec, out, expected)
    if spec.grain == "template":
        keep = cube.present if out.rows is None else out.rows & cube.present
        ii, tt = np.nonzero(keep)
        predicted, confidence = out.predicted[ii, tt], out.confidence[ii, tt]
    else:
        ii = np.arange(n_i) if out.rows is None else np.flatnonzero(out.rows)
        tt = np.full(len(ii), -1)
        predicted, confidence = out.predicted[ii], out.confidence[ii]
    label = (spec.name, reduction, spec.grain, spec.output_kind)
    return _Part(label, ii, tt, np.asarray(predicted), np.asarray(confidence, dtype=np.float64))


def _strings(values, index: np.ndarray) -> pl.Series:
    """values[index] as a string Series; index −1 gives null (gathered by polars, not Python)."""
    table = pl.Series(values=[*values, None], dtype=pl.String)
    return table.gather(np.where(index >= 0, index, len(values)))


def _cube_frame(cube: OptionScoreCube, parts: list[_Part]) -> pl.DataFrame:
    """All rows of one cube in SORT_KEYS order, built once: the sort runs on integer codes (the
    cube's instance and template axes are already sorted; a null template sorts last), so the
    strings are gathered once instead of being made per estimator and sorted as text."""
    labels = [p.label for p in parts]
    label = np.repeat(np.arange(len(parts)), [len(p.ii) for p in parts])
    ii, tt = np.concatenate([p.ii for p in parts]), np.concatenate([p.tt for p in parts])
    predicted = np.concatenate([p.predicted for p in parts]).astype(np.int64)
    confidence = np.concatenate([p.confidence for p in parts])
    by_label = np.array(sorted(range(len(labels)), key=lambda k: labels[k][:2]))
    label_rank = np.empty(len(labels), dtype=np.int64)
    label_rank[by_label] = np.arange(len(labels))
    order = np.lexsort((label_rank[label], np.where(tt >= 0, tt, cube.shape[1]), ii))
    label, ii, tt, predicted, confidence = (
        label[order],
        ii[order],
        tt[order],
        predicted[order],
        confidence[order],
    )
    answered = predicted != NO_ANSWER
    safe = np.where(answered, predicted, 0)
    n_options = cube.shape[2]
    n = len(ii)
    return pl.DataFrame(
        {
            "model_id": pl.Series(values=[cube.model_id], dtype=pl.String).gather(
                np.zeros(n, dtype=np.int64)
            ),
            "relation_id": pl.Series(values=[cube.relation_id], dtype=pl.String).gather(
                np.zeros(n, dtype=np.int64)
            ),
            "instance_id": _strings(cube.instance_ids.tolist(), ii),
            "split": _strings(cube.split.tolist(), ii),
            "answer_space_k": cube.answer_space_k[ii],
            "answer_space_draw": cube.answer_space_draw[ii],
            "template_id": _strings(cube.template_ids.tolist(), tt),
            "estimator": _strings([lab[0] for lab in labels], label),
            "reduction": _strings([lab[1] for lab in labels], label),
            "grain": _strings([lab[2] for lab in labels], label),
            "output_kind": _strings([lab[3] for lab in labels], label),
            "predicted_index": np.where(answered, predicted, -1).astype(np.int32),
            "predicted_id": _strings(
                cube.option_ids.ravel().tolist(), np.where(answered, ii * n_options + safe, -1)
            ),
            "confidence": np.where(answered, confidence, 0.0),
            "correct": answered & cube.gold[ii, safe],
        },
        schema=OUTPUT_SCHEMA,
    )


FITS_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "template_id": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "parameter": pl.String,
    "value": pl.Float64,
    "n_dev": pl.Int64,
    "note": pl.String,
}


def _fit_rows(cube: OptionScoreCube, spec: EstimatorSpec, reduction: str, out: Estimate) -> list[dict]:
    """One estimator_fits row per fitted group: which parameter took which value on how many dev
    instances (`note` says why a group fell back, e.g. one class only)."""
    base = {
        "model_id": cube.model_id,
        "relation_id": cube.relation_id,
        "estimator": spec.name,
        "reduction": reduction,
    }
    rows = []
    for fit in out.fits:
        unknown = set(fit) - set(FITS_SCHEMA)
        if unknown or "parameter" not in fit:
            raise ValueError(
                f"estimator {spec.name!r}: a fit needs 'parameter' and only the columns "
                f"{list(FITS_SCHEMA)}; got {sorted(fit)}"
            )
        rows.append(
            {**dict.fromkeys(FITS_SCHEMA), "answer_space_k": 0, "answer_space_draw": 0, **base, **fit}
        )
    return rows


STATUS_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "estimator": pl.String,
    "family": pl.String,
    "reduction": pl.String,
    "status": pl.String,
    "rows": pl.Int64,
    "reason": pl.String,
}


@dataclass(frozen=True)
class EstimateTables:
    """What the estimation stage writes: the estimates, the parameters fitted on dev data, and
    which (estimator, reduction) ran or was skipped and why (so a missing estimator is explained
    in the data, not only in a log)."""

    estimates: pl.DataFrame
    fits: pl.DataFrame
    status: pl.DataFrame


def _why_no_rows(out: Estimate) -> str:
    """An estimator that gave no rows: its fits' notes say why (e.g. every group had fewer than 2
    dev instances), else it had no cell to estimate."""
    notes = sorted({fit["note"].removesuffix(": no rows") for fit in out.fits if fit.get("note")})
    return "no rows: " + ("; ".join(notes) if notes else "no instance had what it estimates from")


def compute_estimate_tables(
    cubes: OptionScoreCube | Iterable[OptionScoreCube],
    estimators: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> EstimateTables:
    """Rows (instance, template or null, estimator, reduction) → prediction, confidence, correctness,
    and the fitted parameters of the estimators that tune on the dev split.

    Sorted by model, relation, instance, template, estimator and reduction, so downstream metrics
    see a deterministic order. Estimators whose inputs are absent are skipped; one log line per
    reason names them all.
    """
    specs = _resolve(estimators)
    cubes = [cubes] if isinstance(cubes, OptionScoreCube) else list(cubes)
    frames, fits, status, skipped = [], [], [], {}
    for cube in sorted(cubes, key=lambda c: (c.model_id, c.relation_id)):
        parts = []
        for spec in specs:
            for reduction in spec.reductions:
                where = (cube.model_id, cube.relation_id, spec.name, spec.family, reduction)
                reason = spec.missing_inputs(cube, reduction)
                if reason:
                    skipped.setdefault(reason, {}).setdefault(f"{spec.name} ({reduction})", set()).add(
                        cube.relation_id
                    )
                    status.append((*where, "skipped", 0, reason))
                    continue
                out = spec.fn(cube, reduction)
                part = _part(cube, spec, reduction, out)
                fits += _fit_rows(cube, spec, reduction, out)
                if not len(part.ii):  # it ran and had nothing to give: skipped, saying why
                    reason = _why_no_rows(out)
                    skipped.setdefault(reason, {}).setdefault(f"{spec.name} ({reduction})", set()).add(
                        cube.relation_id
                    )
                    status.append((*where, "skipped", 0, reason))
                    continue
                parts.append(part)
                status.append((*where, "ran", len(part.ii), None))
        if parts:
            frames.append(_cube_frame(cube, parts))
    for reason, names in skipped.items():
        relations = sorted(set().union(*names.values()))
        log(f"skipped, {reason} ({', '.join(relations)}): {', '.join(names)}")
    # each cube's frame is in SORT_KEYS order and the cubes are taken in (model, relation) order
    estimates = pl.concat(frames) if frames else pl.DataFrame(schema=OUTPUT_SCHEMA)
    return EstimateTables(
        estimates,
        pl.DataFrame(fits, schema=FITS_SCHEMA),
        pl.DataFrame(status, schema=STATUS_SCHEMA, orient="row"),
    )


def compute_estimates(
    cubes: OptionScoreCube | Iterable[OptionScoreCube],
    estimators: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> pl.DataFrame:
    """The estimates table alone (see compute_estimate_tables)."""
    return compute_estimate_tables(cubes, estimators, log).estimates
