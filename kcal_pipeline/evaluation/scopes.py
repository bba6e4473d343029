"""Breakdowns: which rows of an estimates frame each metrics scope covers.

A scope is a subset of the rows metrics are computed on: every row ("all"), one relation, one
dataset domain, one gold count, one MACE mixture, one option count, one template kind, one BEAR
topic domain. This module only says *which rows*: `breakdown_scopes` yields (scope, scope_value,
row indices), so the metrics and the bootstrap read the same subsets and compute nothing twice.
The attributes a scope splits on live in other tables; `attach_attributes` joins them on, once:

| column         | table and column                         | join key                    |
|----------------|------------------------------------------|-----------------------------|
| domain         | relations.domain (closed_set, mace)      | relation_id                 |
| n_gold         | probe_instances.n_gold (= len(gold_ids)) | relation_id, instance_id    |
| n_options      | probe_instances.n_options                | relation_id, instance_id    |
| template_kind  | templates.kind, grouped (TEMPLATE_KIND_GROUPS) | relation_id, template_id    |
| bear_domain    | relations.bear_domains (a list)          | relation_id                 |

BEAR's topic domains (Geographic, Biographical, …; relation_info.json) are several per relation:
a row counts in each of its relation's domains, as lm-pub-quiz groups them, so the bear_domain
values overlap and do not partition the rows; a relation without one is in none.

MACE mixtures (Wang et al., METHODS §5) pool the questions with 1, {1, 2}, {1, 2, 4} or
{1, 2, 4, 6} answers and average over MACE's domains. In kcal each MACE domain is one relation
(mace-award, mace-office, …: the catalog's `query` names the domain), so a mixture is computed per
relation of domain "mace" (scope "mixture_domain") and then macro-averaged (`macro_average`,
`macro_average_mixtures`): every domain counts equally however many questions it has.

Causal and masked models are compared on pairs of similar overall accuracy in families.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from kcal_pipeline.core.frames import require_columns

SCOPES = (
    "all",
    "relation",
    "domain",
    "n_gold",
    "mixture_domain",
    "n_options",
    "template_kind",
    "bear_domain",
)
# The column each scope splits on ("all" splits on nothing).
SCOPE_COLUMNS = {
    "relation": "relation_id",
    "domain": "domain",
    "n_gold": "n_gold",
    "mixture_domain": "n_gold",
    "n_options": "n_options",
    "template_kind": "template_kind",
    "bear_domain": "bear_domain",  # a list per row: the row is in each of its values
}
# MACE's evaluation settings: cumulative sets of gold counts (Wang et al.).
MACE_MIXTURES = ((1,), (1, 2), (1, 2, 4), (1, 2, 4, 6))
# The relations.domain whose relations are MACE's domains (one relation per domain).
MACE_DOMAIN = "mace"
# templates.kind → the template kind a breakdown reports; model-written paraphrases are "generated"
# in the templates table, the kinds of marker are one "marker" kind. Dict order = report order.
TEMPLATE_KIND_GROUPS = {
    "curated": "curated",
    "question": "question",
    "generated": "paraphrase",
    "marker_verbal": "marker",
    "marker_numeric": "marker",
    "perturbation": "perturbation",
    # each context its own kind: true, wrong and knowledge-free demonstrations differ in kind
    "context_1shot": "context_1shot",
    "context_3shot": "context_3shot",
    "context_wrong": "context_wrong",
    "context_fixed": "context_fixed",
}


class ScopeRows(NamedTuple):
    """One breakdown: its scope, its value (a string, as in the metrics table) and the indices of
    its rows in the frame, ascending, so a metric reads them in the frame's order (AURC's ties)."""

    scope: str
    scope_value: str
    rows: np.ndarray


def mixture_value(counts: Sequence[int]) -> str:
    """A mixture's scope_value: its gold counts joined by commas, e.g. "1,2,4"."""
    return ",".join(str(c) for c in counts)


def mixture_domain_value(counts: Sequence[int], relation_id: str) -> str:
    """scope_value of one MACE domain within a mixture: "1,2|mace-award" (relation ids have no '|')."""
    return f"{mixture_value(counts)}|{relation_id}"


# --- attributes ---------------------------------------------------------------------------------


def attach_attributes(
    frame: pl.DataFrame,
    *,
    relations: pl.DataFrame | None = None,
    instances: pl.DataFrame | None = None,
    templates: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The frame with the columns breakdowns split on, joined from the tables that hold them:
    `domain` (and the list `bear_domain`, where it has bear_domains) from relations, `n_gold` and
    `n_options` from probe_instances, `template_kind` from templates (null on instance-grain rows,
    which have no template). Rows and their order are kept; a row whose relation, instance or
    template is missing from a given table is an error naming it.
    """
    require_columns(frame, ["relation_id", "instance_id"], "estimates")
    out = frame
    if relations is not None:
        # bear_domains only where the relations table has it (a hand-built table may not)
        cols = {"domain": "domain"} | (
            {"bear_domains": "bear_domain"} if "bear_domains" in relations.columns else {}
        )
        out = _join(out, relations, ["relation_id"], cols, "relations")
    if instances is not None:
        cols = {"n_gold": "n_gold", "n_options": "n_options"}
        out = _join(out, instances, ["relation_id", "instance_id"], cols, "probe_instances")
    if templates is not None:
        if "template_id" not in out.columns:
            raise ValueError(f"estimates: missing column 'template_id' (have {out.columns})")
        unknown = templates.filter(~pl.col("kind").is_in(list(TEMPLATE_KIND_GROUPS)))
        if not unknown.is_empty():
            row = unknown.row(0, named=True)
            raise ValueError(
                f"templates: template {row['template_id']!r} has kind {row['kind']!r}, "
                f"not one of {list(TEMPLATE_KIND_GROUPS)}"
            )
        kinds = templates.with_columns(
            pl.col("kind").replace_strict(TEMPLATE_KIND_GROUPS, return_dtype=pl.String)
        )
        out = _join(out, kinds, ["relation_id", "template_id"], {"kind": "template_kind"}, "templates")
    return out


def _join(frame: pl.DataFrame, table: pl.DataFrame, on: list[str], columns: dict, what: str) -> pl.DataFrame:
    """Left join `columns` (table name → frame name) of `table` on `on`; every row with a non-null
    key must find exactly one match."""
    require_columns(table, [*on, *columns], what)
    clash = [name for name in columns.values() if name in frame.columns]
    if clash:
        raise ValueError(f"estimates: already has column {clash[0]!r}; attach it once")
    right = table.select(*on, *(pl.col(k).alias(v) for k, v in columns.items()))
    dup = right.filter(pl.struct(on).is_duplicated())
    if not dup.is_empty():
        raise ValueError(f"{what}: several rows for {dict(zip(on, dup.row(0), strict=False))}")
    out = frame.join(right, on=on, how="left", maintain_order="left")
    keyed = pl.all_horizontal(pl.col(k).is_not_null() for k in on)
    missing = out.filter(keyed & pl.col(next(iter(columns.values()))).is_null())
    if not missing.is_empty():
        key = {k: missing[k][0] for k in on}
        raise ValueError(f"{what}: no row for {key}")
    return out


# --- scopes -------------------------------------------------------------------------------------


def breakdown_scopes(frame: pl.DataFrame, scopes: Sequence[str] | None = None) -> Iterator[ScopeRows]:
    """Every breakdown of the frame's rows, scope by scope in SCOPES order, values ascending
    (template kinds in TEMPLATE_KIND_GROUPS order, mixtures in MACE_MIXTURES order).

    Call it on one metrics group (one model, estimator, reduction, split and answer space): scopes
    never pool what the group keys keep apart. `scopes=None` yields every scope whose column the
    frame has (attach_attributes adds them); naming a scope whose column is missing is an error.
    A row whose attribute is null (the template kind of an instance-grain row) is in no value of
    that scope. Scopes:
      - all: every row; relation, domain, n_gold, n_options, template_kind: one value each;
      - bear_domain: each of the row's relation's BEAR domains (a row may be in several);
      - mixture_domain: per MACE mixture (MACE_MIXTURES) and relation of domain "mace", the rows
        whose gold count is in the mixture; value mixture_domain_value(counts, relation). The
        mixture's own figure is the macro-average of these (macro_average_mixtures).
    With template-grain rows of several templates (template_kind), a row is an (instance,
    template) pair and every pair counts once.
    """
    wanted = _wanted(frame, scopes)
    for scope in wanted:
        if scope == "all":
            yield ScopeRows("all", "all", np.arange(frame.height, dtype=np.int64))
        elif scope == "mixture_domain":
            yield from _mixture_domains(frame)
        elif scope == "template_kind":
            order = {kind: i for i, kind in enumerate(dict.fromkeys(TEMPLATE_KIND_GROUPS.values()))}
            groups = _groups(frame, "template_kind")
            for value, rows in sorted(groups, key=lambda g: order.get(g[0], len(order))):
                yield ScopeRows(scope, str(value), rows)
        else:
            for value, rows in _groups(frame, SCOPE_COLUMNS[scope]):
                yield ScopeRows(scope, str(value), rows)


def breakdown_members(frame: pl.DataFrame, group: str, scopes: Sequence[str] | None = None) -> pl.DataFrame:
    """breakdown_scopes of every group of `frame` at once, as one long frame: (row, group, scope,
    scope_value, segment), one row per (frame row, breakdown holding it), sorted by group, then
    scope and value in breakdown_scopes' order, then row; `segment` numbers the breakdowns 0, 1, …
    in that order. `group` names an integer column of `frame` numbering its metrics groups (scopes
    never pool two groups). What the vectorised metrics read instead of one call per breakdown."""
    wanted = _wanted(frame, scopes)
    rows = frame.select(pl.col(group).cast(pl.Int64).alias("group")).with_row_index("row")
    parts = []
    for rank, scope in enumerate(wanted):
        tagged = rows.with_columns(scope_rank=pl.lit(rank, pl.Int64), scope=pl.lit(scope))
        if scope == "all":
            parts.append(tagged.with_columns(value_rank=pl.lit(0, pl.Int64), scope_value=pl.lit("all")))
        elif scope == "mixture_domain":
            parts.append(_mixture_members(frame, tagged))
        else:
            value = frame[SCOPE_COLUMNS[scope]]
            if isinstance(value.dtype, pl.List):  # several values per row (bear_domain): one member each
                one = tagged.with_columns(scope_value=value.cast(pl.List(pl.String))).explode("scope_value")
                one = one.filter(pl.col("scope_value").is_not_null())
                parts.append(one.with_columns(value_rank=pl.col("scope_value").rank("dense").cast(pl.Int64)))
                continue
            if scope == "template_kind":  # report order, then any other kind by name
                order = {kind: i for i, kind in enumerate(dict.fromkeys(TEMPLATE_KIND_GROUPS.values()))}
                lookup = pl.DataFrame({"value": list(order), "rank": list(order.values())})
                known = value.to_frame("value").join(lookup, on="value", how="left", maintain_order="left")
                value_rank = known["rank"].fill_null(len(order) + value.rank("dense").cast(pl.Int64))
            else:  # ascending in the column's own type (gold count 2 before 10)
                value_rank = value.rank("dense").cast(pl.Int64)
            parts.append(
                tagged.with_columns(value_rank=value_rank, scope_value=value.cast(pl.String)).filter(
                    value.is_not_null()
                )
            )
    members = pl.concat(
        [p.select("row", "group", "scope_rank", "value_rank", "scope", "scope_value") for p in parts]
    )
    members = members.sort("group", "scope_rank", "value_rank", "row")
    return members.with_columns(
        segment=pl.struct("group", "scope_rank", "value_rank").rle_id().cast(pl.Int64)
    ).drop("scope_rank", "value_rank")


def _mixture_members(frame: pl.DataFrame, tagged: pl.DataFrame) -> pl.DataFrame:
    """The mixture_domain rows: per MACE mixture and relation of domain "mace", the rows whose gold
    count is in the mixture; value_rank = mixture, then relation ascending."""
    mace = tagged.with_columns(frame.select("relation_id", "n_gold", "domain")).filter(
        pl.col("domain") == MACE_DOMAIN
    )
    relations = sorted(mace["relation_id"].drop_nulls().unique().to_list())
    if not relations:  # no MACE domain among these rows
        return tagged.clear().with_columns(value_rank=pl.lit(0, pl.Int64), scope_value=pl.lit(""))
    rank = {r: i for i, r in enumerate(relations)}
    parts = [
        mace.filter(pl.col("n_gold").is_in(list(counts)) & pl.col("relation_id").is_not_null()).with_columns(
            value_rank=j * len(relations) + pl.col("relation_id").replace_strict(rank, return_dtype=pl.Int64),
            scope_value=pl.lit(mixture_value(counts) + "|") + pl.col("relation_id"),
        )
        for j, counts in enumerate(MACE_MIXTURES)
    ]
    return pl.concat(parts)


def _wanted(frame: pl.DataFrame, scopes: Sequence[str] | None) -> list[str]:
    if scopes is None:
        present = [s for s in SCOPES if s == "all" or SCOPE_COLUMNS[s] in frame.columns]
        if "mixture_domain" in present and "domain" not in frame.columns:
            present.remove("mixture_domain")
        return present
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {unknown}; known: {list(SCOPES)}")
    for scope in scopes:
        needed = [SCOPE_COLUMNS[scope]] if scope != "all" else []
        needed += ["domain", "relation_id"] if scope == "mixture_domain" else []
        for col in needed:
            if col not in frame.columns:
                raise ValueError(
                    f"scope {scope!r} needs column {col!r}, which the frame lacks (have {frame.columns}); "
                    "add it with attach_attributes"
                )
    return [s for s in SCOPES if s in scopes]


def _groups(frame: pl.DataFrame, column: str) -> list[tuple[object, np.ndarray]]:
    """(value, ascending row indices) per non-null value of `column`, values ascending; one
    group_by for all values, so millions of rows cost one pass, not one filter per value."""
    values = frame.select(pl.col(column).alias("value")).with_row_index("row")
    if isinstance(values.schema["value"], pl.List):  # a row in each of its values (bear_domain)
        values = values.explode("value")
    grouped = values.drop_nulls("value").group_by("value").agg("row").sort("value")
    # polars keeps the rows' order within each group, so the indices come out ascending
    return [
        (value, rows.to_numpy().astype(np.int64, copy=False))
        for value, rows in zip(grouped["value"].to_list(), grouped["row"], strict=True)
    ]


def _mixture_domains(frame: pl.DataFrame) -> Iterator[ScopeRows]:
    mace = frame.select("relation_id", "n_gold", "domain").with_row_index("row")
    mace = mace.filter(pl.col("domain") == MACE_DOMAIN)
    relations = sorted(mace["relation_id"].unique().drop_nulls().to_list())
    for counts in MACE_MIXTURES:
        inside = mace.filter(pl.col("n_gold").is_in(list(counts)))
        for relation in relations:
            rows = inside.filter(pl.col("relation_id") == relation)["row"].to_numpy().astype(np.int64)
            if rows.size:
                yield ScopeRows("mixture_domain", mixture_domain_value(counts, relation), rows)


# --- the macro-average over MACE domains --------------------------------------------------------


def macro_average(values, axis: int = -1) -> np.ndarray | float:
    """MACE's macro-average: the unweighted mean of a metric computed per domain. NaN when one
    domain's value is NaN (an undefined metric there makes the average undefined, as the
    template means do). Over `axis`, so a [resamples, domains] array averages per resample."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("macro_average: no domain values to average")
    out = v.mean(axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def macro_average_mixtures(metrics: pl.DataFrame) -> pl.DataFrame:
    """Scope "mixture" rows from a metrics table's "mixture_domain" rows: per mixture (and every
    other column but scope, scope_value, value and n), value = macro_average over its domains,
    n = the questions of all of them. Same columns as the input; empty without mixture rows."""
    require_columns(metrics, ["scope", "scope_value", "metric", "value", "n"], "metrics")
    if {"ci_low", "ci_high"} & set(metrics.columns):
        raise ValueError(
            "metrics: has ci_low/ci_high; a mixture's interval is not the mean of its domains' "
            "intervals: macro-average the point values, and take intervals from the bootstrap"
        )
    parts = metrics.filter(pl.col("scope") == "mixture_domain")
    keys = [c for c in metrics.columns if c not in ("scope", "scope_value", "value", "n")]
    mixture = pl.col("scope_value").str.split("|").list.first().alias("mixture")
    averaged = (
        parts.with_columns(mixture)
        .group_by(*keys, "mixture", maintain_order=True)
        .agg(pl.col("value").mean(), pl.col("n").sum())
        .with_columns(scope=pl.lit("mixture"), scope_value=pl.col("mixture"))
    )
    return averaged.select(metrics.columns).cast(metrics.schema)
