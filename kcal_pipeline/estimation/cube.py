"""The option-score cube: one (model, relation) partition's scores as padded arrays.

Every estimator reads the same shape, `[instance, template, option]` (plus a pass axis for dropout
columns), so an estimator is a few array operations instead of a loop over groups of rows, and an
estimator over several templates or several score columns is as easy to write as one over a single
log-likelihood vector. Padding is −inf for log-likelihoods (exp(−inf) = 0, so a padded option has
probability 0 and never wins an argmax); `valid` says which cells hold a real statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns
from kcal_pipeline.dataset.instances.variants import FULL_ANSWER_SPACE

# Reduction name (METHODS §1, Kissling et al. App. B) → the log-likelihood column it reads.
REDUCTIONS: dict[str, str] = {
    "sum": "ll_sum",
    "mean": "ll_mean",
    "answer_sum": "ll_answer_sum",
    "answer_mean": "ll_answer_mean",
}
ALL_REDUCTIONS = tuple(REDUCTIONS)  # what an estimator defined under every reduction declares
# Score columns a cube carries when the scores have them (null columns are left out): one value per
# statement, or a list of one value per stochastic pass.
SCALAR_COLUMNS = (*REDUCTIONS.values(), "ll_sum_masked", "ll_answer_sum_masked")
PASS_COLUMNS = ("ll_sum_dropout", "ll_answer_sum_dropout")
# The template kinds that are paraphrases of one relation, the T templates aggregations run over.
PARAPHRASE_KINDS = ("curated", "generated")
KEY_COLUMNS = (
    "model_id",
    "relation_id",
    "instance_id",
    "template_id",
    "option_index",
    "object_id",
    "is_gold",
)


@dataclass(frozen=True)
class OptionScoreCube:
    """Scores of one (model, relation) partition as `[I, T, O]` arrays.

    I instances (sorted by id), T templates (sorted by id), O = the largest option_index + 1.
    `scores[col]` is float64 `[I, T, O]` (or `[I, T, O, M]` for the M dropout passes) with −inf
    where `valid` is False. Per instance: `gold`, `option_ids` (None where padded), `n_options`,
    `split`, `answer_space_k` (0 = the full answer space, k = a `#k<k>d<draw>` subsample copy) and
    `answer_space_draw` (0 = the full answer space, else the copy's draw); per template:
    `template_kinds`, `template_ranks`.
    """

    model_id: str
    relation_id: str
    instance_ids: np.ndarray
    template_ids: np.ndarray
    template_kinds: np.ndarray
    template_ranks: np.ndarray
    option_ids: np.ndarray
    valid: np.ndarray
    gold: np.ndarray
    n_options: np.ndarray
    split: np.ndarray
    answer_space_k: np.ndarray
    answer_space_draw: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    # Per template, its text when the templates table was given (else None): where the answer slot
    # sits decides what ll_answer_sum is conditioned on (estimation/conditioning.py).
    template_texts: np.ndarray | None = None
    # Per template, the template a variant (marker, perturbation) was derived from and its variant
    # name ("certainly", "numeric-50", "typo"); None for a template that is not a variant, or when
    # the templates table was not given or has no such columns.
    template_parents: np.ndarray | None = None
    template_variants: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.valid.shape

    @property
    def present(self) -> np.ndarray:
        """[I, T]: the (instance, template) pairs that have at least one scored option."""
        return self.valid.any(axis=2)

    def answer_spaces(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """The distinct (answer_space_k, answer_space_draw) pairs, ascending, and each instance's
        index among them: the answer spaces a dev-fitted estimator fits one map per (each draw of a
        sweep is an answer space of its own, never pooled with another)."""
        pairs = np.stack([self.answer_space_k, self.answer_space_draw], axis=1).astype(np.int64)
        keys, inverse = np.unique(pairs.reshape(-1, 2), axis=0, return_inverse=True)
        return [(int(k), int(d)) for k, d in keys.tolist()], inverse.reshape(-1).astype(np.int64)

    def templates_of_kind(self, *kinds: str) -> np.ndarray:
        """Indices (ascending) of the templates of the given kinds."""
        return np.flatnonzero(np.isin(self.template_kinds.astype(str), list(kinds))).astype(np.int64)

    def paraphrase_templates(self) -> np.ndarray:
        """The T templates the aggregations (Vote, Min, Max, the template marginal) run over: the
        curated and generated paraphrases, not their marker or perturbation variants nor the MACE
        question templates. A cube built without the templates table (kinds unknown) has all."""
        if all(k is None for k in self.template_kinds.tolist()):
            return np.arange(self.shape[1], dtype=np.int64)
        return self.templates_of_kind(*PARAPHRASE_KINDS)

    def ll(self, reduction: str) -> np.ndarray:
        """The `[I, T, O]` log-likelihoods of one reduction ('sum', 'mean', 'answer_sum', ...)."""
        return self.scores[REDUCTIONS[reduction]]


def _codes(column: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each row's position among them): a vectorised factorisation."""
    return column.unique().sort().to_numpy(), (column.rank("dense") - 1).to_numpy().astype(np.int64)


def _single(frame: pl.DataFrame, column: str) -> str:
    values = frame[column].unique()
    if values.len() != 1:
        raise ValueError(f"scores: a cube holds one partition, but {column} has {sorted(values.to_list())}")
    return str(values[0])


def _check_unique(frame: pl.DataFrame, flat: np.ndarray) -> None:
    _, first, counts = np.unique(flat, return_index=True, return_counts=True)
    if (counts > 1).any():
        row = frame.row(int(first[np.argmax(counts > 1)]), named=True)
        raise ValueError(
            f"scores: duplicate rows for instance {row['instance_id']!r}, template "
            f"{row['template_id']!r}, option_index {row['option_index']!r}"
        )


def _check_finite(frame: pl.DataFrame, column: str, values: np.ndarray) -> None:
    bad = ~np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if bad.any():
        row = frame.row(int(np.argmax(bad)), named=True)
        raise ValueError(
            f"scores: column {column!r} has a non-finite value {row[column]!r} "
            f"(instance {row['instance_id']!r}, template {row['template_id']!r})"
        )


def _per_instance(instance_ids: np.ndarray, instances: pl.DataFrame | None, counted: np.ndarray):
    """(n_options, split, answer_space_k, answer_space_draw) per instance, from probe_instances
    when given (else the counted options, split null, the full answer space). A frame without the
    answer-space columns (one built by hand) is asked on the full space: metrics keep the full
    space and every (k, draw) apart."""
    if instances is None:
        zeros = np.full(len(instance_ids), FULL_ANSWER_SPACE, np.int32)
        return counted, np.full(len(instance_ids), None, dtype=object), zeros, zeros.copy()
    require_columns(instances, ["instance_id", "n_options", "split"], "probe_instances")
    k, draw = (
        pl.col(c) if c in instances.columns else pl.lit(FULL_ANSWER_SPACE)
        for c in ("answer_space_k", "answer_space_draw")
    )
    ordered = pl.DataFrame({"instance_id": instance_ids}).join(
        instances.select(
            "instance_id",
            "n_options",
            "split",
            k.cast(pl.Int32).alias("k"),
            draw.cast(pl.Int32).alias("draw"),
        ),
        on="instance_id",
        how="left",
        maintain_order="left",
    )
    missing = ordered.filter(pl.col("n_options").is_null())
    if missing.height:
        raise ValueError(f"probe_instances: no row for scored instance {missing['instance_id'][0]!r}")
    for column, name in (("k", "answer_space_k"), ("draw", "answer_space_draw")):
        if ordered[column].null_count():
            bad = ordered.filter(pl.col(column).is_null())["instance_id"][0]
            raise ValueError(f"probe_instances: {name} is null for instance {bad!r} (0 = full answer space)")
    return (
        ordered["n_options"].to_numpy().astype(np.int64),
        ordered["split"].to_numpy(),
        ordered["k"].to_numpy().astype(np.int32),
        ordered["draw"].to_numpy().astype(np.int32),
    )


def _per_template(relation_id: str, template_ids: np.ndarray, templates: pl.DataFrame | None):
    """(kind, rank) per template, from the templates table when given (else null)."""
    if templates is None:
        return np.full(len(template_ids), None, dtype=object), np.full(len(template_ids), -1, dtype=np.int64)
    require_columns(templates, ["relation_id", "template_id", "kind", "rank"], "templates")
    ordered = pl.DataFrame({"template_id": template_ids}).join(
        templates.filter(pl.col("relation_id") == relation_id).select("template_id", "kind", "rank"),
        on="template_id",
        how="left",
        maintain_order="left",
    )
    missing = ordered.filter(pl.col("kind").is_null())
    if missing.height:
        raise ValueError(f"templates: no row for template {missing['template_id'][0]!r} of {relation_id}")
    return ordered["kind"].to_numpy(), ordered["rank"].to_numpy().astype(np.int64)


def _template_column(relation_id: str, template_ids: np.ndarray, templates: pl.DataFrame | None, column: str):
    """One templates-table column per template (its text, parent, variant), or None without a
    templates table or without that column."""
    if templates is None or column not in templates.columns:
        return None
    values = dict(
        templates.filter(pl.col("relation_id") == relation_id).select("template_id", column).iter_rows()
    )
    return np.array([values[t] for t in template_ids], dtype=object)


def build_cube(
    scores: pl.DataFrame, instances: pl.DataFrame | None = None, templates: pl.DataFrame | None = None
) -> OptionScoreCube:
    """The cube of one (model, relation) partition of statement_scores.

    `instances` (probe_instances) adds option counts, splits and answer spaces, `templates` the
    template kinds and ranks; without them the counts are those of the scored options, kinds and
    splits are null and every answer space is full (0).
    Fails on duplicate (instance, template, option) rows and on non-finite scores, naming the row.
    """
    require_columns(scores, [*KEY_COLUMNS, "ll_sum"], "scores")
    if scores.is_empty():
        raise ValueError("scores: no rows to build a cube from")
    model_id, relation_id = _single(scores, "model_id"), _single(scores, "relation_id")
    instance_ids, i = _codes(scores["instance_id"].cast(pl.String))
    template_ids, t = _codes(scores["template_id"].cast(pl.String))
    o = scores["option_index"].cast(pl.Int64).to_numpy()
    if (o < 0).any():
        raise ValueError(f"scores: option_index must be >= 0, got {int(o.min())}")
    shape = (len(instance_ids), len(template_ids), int(o.max()) + 1)
    _check_unique(scores, np.ravel_multi_index((i, t, o), shape))

    valid = np.zeros(shape, dtype=bool)
    valid[i, t, o] = True
    gold = np.zeros(shape[::2], dtype=bool)
    gold[i, o] = scores["is_gold"].cast(pl.Boolean).to_numpy()
    option_ids = np.full(shape[::2], None, dtype=object)
    option_ids[i, o] = scores["object_id"].cast(pl.String).to_numpy()

    cube_scores: dict[str, np.ndarray] = {}
    for column in (c for c in (*SCALAR_COLUMNS, *PASS_COLUMNS) if c in scores.columns):
        series = scores[column]
        if series.null_count() == series.len():
            continue  # not computed for this partition (e.g. no dropout passes)
        if column in PASS_COLUMNS:
            passes = int(series.list.len().max())
            values = series.list.to_array(passes).to_numpy().astype(np.float64)
            target = np.full((*shape, passes), -np.inf)
        else:
            values = series.cast(pl.Float64).to_numpy()
            target = np.full(shape, -np.inf)
        _check_finite(scores, column, values)
        target[i, t, o] = values
        cube_scores[column] = target

    counted = valid.any(axis=1).sum(axis=1)
    n_options, split, answer_space_k, answer_space_draw = _per_instance(instance_ids, instances, counted)
    kinds, ranks = _per_template(relation_id, template_ids, templates)
    return OptionScoreCube(
        model_id=model_id,
        relation_id=relation_id,
        instance_ids=instance_ids,
        template_ids=template_ids,
        template_kinds=kinds,
        template_ranks=ranks,
        template_texts=_template_column(relation_id, template_ids, templates, "text"),
        template_parents=_template_column(relation_id, template_ids, templates, "parent_id"),
        template_variants=_template_column(relation_id, template_ids, templates, "variant"),
        option_ids=option_ids,
        valid=valid,
        gold=gold,
        n_options=n_options,
        split=split,
        answer_space_k=answer_space_k,
        answer_space_draw=answer_space_draw,
        scores=cube_scores,
    )


def partition_cubes(
    scores: pl.DataFrame, instances: pl.DataFrame | None = None, templates: pl.DataFrame | None = None
) -> list[OptionScoreCube]:
    """One cube per (model, relation) present in `scores`, in sorted order."""
    require_columns(scores, ["model_id", "relation_id"], "scores")
    return [
        build_cube(part, instances, templates)
        for _, part in sorted(scores.group_by("model_id", "relation_id"), key=lambda kv: kv[0])
    ]
