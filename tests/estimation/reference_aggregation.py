"""A slow, obviously-correct reference for the aggregations over templates (Vote(k), Min, Max, each
with Average and Consistency), the template marginal and its option_estimates table.

One instance at a time in plain Python (dicts, lists, `math`), no cube: rows grouped by instance
and template, each template's statements sorted by option_index, a softmax over exactly the scored
options. Which templates count as paraphrases is written out here again on purpose. For tests only;
never make it fast.
"""

from __future__ import annotations

import math

import polars as pl

from tests.estimation.reference import COLUMNS, REDUCTION_OF_COLUMN, SORT_KEYS, answer_space

PARAPHRASE_KINDS = ("curated", "generated")
MAX_VOTE_K = 12
OPTION_COLUMNS = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "option_index": pl.Int32,
    "option_id": pl.String,
    "is_gold": pl.Boolean,
    "estimator": pl.String,
    "reduction": pl.String,
    "probability": pl.Float64,
}


def softmax(lls: list[float]) -> list[float]:
    top = max(lls)
    z = [math.exp(x - top) for x in lls]
    total = sum(z)
    return [v / total for v in z]


def _partitions(scores: pl.DataFrame, column: str, templates: pl.DataFrame | None):
    """{(model, relation): (paraphrase template ids, {instance: {template: [(option_index,
    object_id, is_gold, ll)] sorted}})}. Without a templates table every template is a paraphrase."""
    kinds = {}
    for row in templates.iter_rows(named=True) if templates is not None else ():
        kinds[(row["relation_id"], row["template_id"])] = row["kind"]
    parts: dict = {}
    for row in scores.iter_rows(named=True):
        key = (str(row["model_id"]), str(row["relation_id"]))
        statement = (
            int(row["option_index"]),
            str(row["object_id"]),
            bool(row["is_gold"]),
            float(row[column]),
        )
        instances = parts.setdefault(key, {})
        instances.setdefault(str(row["instance_id"]), {}).setdefault(str(row["template_id"]), []).append(
            statement
        )
    out = {}
    for (model, relation), instances in parts.items():
        every = {t for per_template in instances.values() for t in per_template}
        if templates is None:
            paraphrases = sorted(every)
        else:
            paraphrases = sorted(t for t in every if kinds[(relation, t)] in PARAPHRASE_KINDS)
        for per_template in instances.values():
            for statements in per_template.values():
                statements.sort()
        out[(model, relation)] = (paraphrases, instances)
    return out


def _template_answer(statements) -> tuple[int, float, dict[int, float]]:
    """(ỹ_t as option_index, Base_t, {option_index: p_t}); the first maximum wins a tie."""
    p = softmax([s[3] for s in statements])
    best = 0
    for position, s in enumerate(statements):
        if s[3] > statements[best][3]:
            best = position
    return statements[best][0], p[best], {s[0]: q for s, q in zip(statements, p, strict=True)}


def _vote(answers: list[int], k: int) -> int | None:
    counts: dict[int, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    top = max(counts.values())
    leaders = [a for a, c in counts.items() if c == top]
    return leaders[0] if len(leaders) == 1 and top >= k else None


def _extreme(answers: list[int], bases: list[float], largest: bool) -> int:
    best = 0  # the first template wins a tie
    for t in range(1, len(bases)):
        if (bases[t] > bases[best]) if largest else (bases[t] < bases[best]):
            best = t
    return answers[best]


def reference_aggregations(
    scores: pl.DataFrame,
    reduction_column: str = "ll_sum",
    templates: pl.DataFrame | None = None,
    instances: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Rows of vote{k}_{average,consistency} (k = 2 … min(T, 12)), {min,max}_{average,consistency}
    and template_marginal for every instance that has a paraphrase template, as compute_estimates
    gives them under the reduction that reads `reduction_column`."""
    per_instance = _instance_info(instances)
    reduction = REDUCTION_OF_COLUMN[reduction_column]
    rows = []
    for (model, relation), (paraphrases, by_instance) in _partitions(
        scores, reduction_column, templates
    ).items():
        for instance_id, by_template in by_instance.items():
            used = [t for t in paraphrases if t in by_template]
            if not used:
                continue
            objects = {s[0]: (s[1], s[2]) for t in by_template for s in by_template[t]}
            per_template = [_template_answer(by_template[t]) for t in used]
            answers = [a for a, _, _ in per_template]
            bases = [b for _, b, _ in per_template]
            n = len(used)
            head = (model, relation, instance_id, *per_instance.get(instance_id, (None, 0, 0)))

            chosen = {f"vote{k}": _vote(answers, k) for k in range(2, min(len(paraphrases), MAX_VOTE_K) + 1)}
            chosen["min"] = _extreme(answers, bases, largest=False)
            chosen["max"] = _extreme(answers, bases, largest=True)
            for name, predicted in chosen.items():
                agree = [t for t in range(n) if answers[t] == predicted]
                average, consistency = sum(bases[t] for t in agree) / n, len(agree) / n
                rows.append(_row(head, objects, f"{name}_average", reduction, predicted, average))
                rows.append(_row(head, objects, f"{name}_consistency", reduction, predicted, consistency))
            marginal = _marginal(per_template)
            best = max(marginal, key=lambda o: (marginal[o], -o))  # the lowest option among the tied
            rows.append(_row(head, objects, "template_marginal", reduction, best, marginal[best]))
    return pl.DataFrame(rows, schema=COLUMNS, orient="row").sort(SORT_KEYS, nulls_last=True)


def _row(head, objects, name, reduction, predicted, confidence) -> tuple:
    """An instance-grain estimates row; `predicted` None is no answer: −1, null, 0, wrong."""
    if predicted is None:
        return (*head, None, name, reduction, "instance", "probability", -1, None, 0.0, False)
    object_id, is_gold = objects[predicted]
    return (
        *head,
        None,
        name,
        reduction,
        "instance",
        "probability",
        predicted,
        object_id,
        confidence,
        is_gold,
    )


def _marginal(per_template) -> dict[int, float]:
    """P(o) = (1/T_i) Σ_t p_t(o) over the options any of the instance's templates scored."""
    options = sorted({o for _, _, p in per_template for o in p})
    return {o: sum(p.get(o, 0.0) for _, _, p in per_template) / len(per_template) for o in options}


def _instance_info(instances: pl.DataFrame | None) -> dict[str, tuple[str | None, int, int]]:
    info = {}
    for row in instances.iter_rows(named=True) if instances is not None else ():
        info[str(row["instance_id"])] = (row["split"], *answer_space(row))
    return info


def reference_option_estimates(
    scores: pl.DataFrame,
    reduction_columns: tuple[str, ...] = ("ll_sum",),
    templates: pl.DataFrame | None = None,
    instances: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per (instance, option a paraphrase template scored, reduction) with P(o | r, s)."""
    per_instance = _instance_info(instances)
    rows = []
    for column in reduction_columns:
        for (model, relation), (paraphrases, by_instance) in _partitions(scores, column, templates).items():
            for instance_id, by_template in by_instance.items():
                used = [t for t in paraphrases if t in by_template]
                if not used:
                    continue
                objects = {s[0]: (s[1], s[2]) for t in used for s in by_template[t]}
                marginal = _marginal([_template_answer(by_template[t]) for t in used])
                split, answer_space_k, answer_space_draw = per_instance.get(instance_id, (None, 0, 0))
                for option, probability in marginal.items():
                    object_id, is_gold = objects[option]
                    rows.append(
                        (
                            model, relation, instance_id, split, answer_space_k, answer_space_draw, option,
                            object_id, is_gold,
                            "template_marginal", REDUCTION_OF_COLUMN[column], probability,
                        )
                    )  # fmt: skip
    keys = ("model_id", "relation_id", "instance_id", "option_index", "estimator", "reduction")
    return pl.DataFrame(rows, schema=OPTION_COLUMNS, orient="row").sort(keys)
