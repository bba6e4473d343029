"""A slow, obviously-correct reference for the Selective-LAMA, marker and answer-prior estimators.

One (instance, template) group at a time, in plain Python: the group's statements sorted by
option_index, lists of floats, `math`, no cube, no padding. What it guards against is what the
vectorised path can get wrong and small examples miss: a padded option ranked or counted, a pass
axis confused with the option axis, a marker's row paired with the wrong parent, a second rule
paired with the wrong reduction, Token written on a template whose answer comes first. Every
definition is written out again here (ESTIMATORS_SPEC / METHODS §2), not imported. Never make
it fast.
"""

from __future__ import annotations

import math

import polars as pl

from tests.estimation.reference import COLUMNS, SORT_KEYS, answer_space

COLUMN_OF = {
    "sum": "ll_sum",
    "mean": "ll_mean",
    "answer_sum": "ll_answer_sum",
    "answer_mean": "ll_answer_mean",
}
RERANK_WITH = {
    "sum": "ll_mean",
    "mean": "ll_sum",
    "answer_sum": "ll_answer_mean",
    "answer_mean": "ll_answer_sum",
}
FOUR = ("sum", "mean", "answer_sum", "answer_mean")
TWO = ("sum", "answer_sum")
# estimator → (reductions, output_kind)
SPECS = {
    "token": (FOUR, "score"),
    "sent": (FOUR, "score"),
    "gap": (FOUR, "score"),
    "reranking": (FOUR, "score"),
    "template_diff": (TWO, "score"),
    "dropout_mean": (TWO, "probability"),
    "dropout_var": (TWO, "score"),
    "answer_prior": (TWO, "probability"),
}
MARKERS = {
    "marker_certainly": "certainly",
    "marker_possibly": "possibly",
    "marker_numeric_0": "numeric-0",
    "marker_numeric_25": "numeric-25",
    "marker_numeric_50": "numeric-50",
    "marker_numeric_75": "numeric-75",
    "marker_numeric_100": "numeric-100",
}


def softmax(values: list[float]) -> list[float]:
    top = max(values)
    z = [math.exp(v - top) for v in values]
    total = sum(z)
    return [x / total for x in z]


def first_max(values: list[float]) -> int:
    """Position of the largest value; the first one on a tie."""
    best = 0
    for k, v in enumerate(values):
        if v > values[best]:
            best = k
    return best


def column(group: list[dict], name: str) -> list[float]:
    return [s[name] for s in group]


def estimate(name: str, group: list[dict], reduction: str, n_options: int) -> tuple[int, float]:
    """(position of the predicted statement in `group`, confidence) of one estimator."""
    ll_col = COLUMN_OF[reduction]
    ll = column(group, ll_col)
    y = first_max(ll)
    if name == "token":
        return y, group[y]["ll_answer_sum"]
    if name == "sent":
        return y, group[y]["ll_mean"]
    if name == "gap":
        if len(group) == 1:
            return y, math.inf
        ordered = sorted(ll, reverse=True)
        return y, ordered[0] - ordered[1]
    if name == "reranking":
        other = column(group, RERANK_WITH[reduction])
        rank = 1 + sum(1 for v in other if v > other[y])
        return y, math.log2(n_options / rank)
    if name == "template_diff":
        return y, softmax(ll)[y] - softmax(column(group, ll_col + "_masked"))[y]
    if name in ("dropout_mean", "dropout_var"):
        passes = len(group[0][ll_col + "_dropout"])
        probs = [softmax([s[ll_col + "_dropout"][m] for s in group])[y] for m in range(passes)]
        mean = sum(probs) / passes
        if name == "dropout_mean":
            return y, mean
        return y, -sum((p - mean) ** 2 for p in probs) / passes
    if name == "answer_prior":
        masked = column(group, ll_col + "_masked")
        y = first_max(masked)
        return y, softmax(masked)[y]
    if name in MARKERS:  # Base on the group (the marked template's statements)
        return y, softmax(ll)[y]
    raise ValueError(name)


def answer_conditional(templates: pl.DataFrame, scored: set[str]) -> set[str]:
    """The scored templates whose answer score is conditioned on the question: the question
    templates if there are any, else the curated ones where [X] comes before [Y]."""
    rows = [r for r in templates.iter_rows(named=True) if r["template_id"] in scored]
    questions = {r["template_id"] for r in rows if r["kind"] == "question"}
    if questions:
        return questions
    return {
        r["template_id"]
        for r in rows
        if r["kind"] == "curated" and r["text"].index("[X]") < r["text"].index("[Y]")
    }


def reference_rows(
    scores: pl.DataFrame, instances: pl.DataFrame, templates: pl.DataFrame, estimators: list[str]
) -> pl.DataFrame:
    """Rows of `estimators` (names of SPECS and MARKERS) on one or more partitions of scores, as
    compute_estimates writes them. `instances` gives split, the answer space (answer_space: k and
    draw) and n_options (Reranking's K); `templates` kinds, texts, parent_id and variant."""
    per_instance = {
        r["instance_id"]: (r["split"], answer_space(r), r["n_options"])
        for r in instances.iter_rows(named=True)
    }
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for row in scores.iter_rows(named=True):
        key = (row["model_id"], row["relation_id"], row["instance_id"], row["template_id"])
        groups.setdefault(key, []).append(row)
    for group in groups.values():
        group.sort(key=lambda s: s["option_index"])
    variant_of = {
        (r["relation_id"], r["parent_id"], r["variant"]): r["template_id"]
        for r in templates.iter_rows(named=True)
        if r.get("parent_id") is not None
    }
    scored: dict[tuple[str, str], set[str]] = {}
    for model_id, relation_id, _, template_id in groups:
        scored.setdefault((model_id, relation_id), set()).add(template_id)
    conditional = {
        part: answer_conditional(templates.filter(pl.col("relation_id") == part[1]), names)
        for part, names in scored.items()
    }
    rows = []
    for (model_id, relation_id, instance_id, template_id), group in groups.items():
        split, k, n_options = per_instance[instance_id]
        for name in estimators:
            if name in MARKERS:
                marked = variant_of.get((relation_id, template_id, MARKERS[name]))
                source = groups.get((model_id, relation_id, instance_id, marked))
                if source is None:
                    continue  # no such variant, or not scored for this instance
                reductions, output_kind = FOUR, "probability"
            else:
                if name == "token" and template_id not in conditional[(model_id, relation_id)]:
                    continue
                source = group
                reductions, output_kind = SPECS[name]
            for reduction in reductions:
                position, confidence = estimate(name, source, reduction, n_options)
                chosen = source[position]
                rows.append(
                    (
                        model_id,
                        relation_id,
                        instance_id,
                        split,
                        *k,
                        template_id,
                        name,
                        reduction,
                        "template",
                        output_kind,
                        chosen["option_index"],
                        chosen["object_id"],
                        confidence,
                        chosen["is_gold"],
                    )
                )
    return pl.DataFrame(rows, schema=COLUMNS, orient="row").sort(SORT_KEYS, nulls_last=True)
