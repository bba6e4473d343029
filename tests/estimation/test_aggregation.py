"""Vote(k), Min and Max with Average and Consistency: hand-worked examples, the paraphrase
selection, the skip reasons, properties, and the vectorised path against the per-row reference."""

import gc
import math
import weakref

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.estimation import build_cube, partition_cubes
from kcal_pipeline.estimation.aggregation import MAX_VOTE_K, template_answers
from kcal_pipeline.estimation.registry import ESTIMATORS, NO_ANSWER, compute_estimates
from tests.estimation.reference_aggregation import reference_aggregations
from tests.estimation.test_estimators import statements

LL_COLUMNS = ("ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean")
VOTES = [f"vote{k}_{c}" for k in range(2, MAX_VOTE_K + 1) for c in ("average", "consistency")]
EXTREMES = ["min_average", "min_consistency", "max_average", "max_consistency"]
AGGREGATIONS = [*VOTES, *EXTREMES]


def template_rows(instance, template, probs, gold=(0,), objects=None):
    """Statements of one (instance, template) with ll = log p (so p_t is `probs` itself)."""
    objects = objects or [f"Q{o}" for o in range(len(probs))]
    return [
        (instance, template, o, objects[o], o in gold, math.log(p))
        for o, p in enumerate(probs)
        if p is not None
    ]


def templates_table(relation, kinds):
    """A templates table: {template_id: kind}, ranks in order of appearance."""
    return pl.DataFrame(
        {
            "relation_id": relation,
            "template_id": list(kinds),
            "kind": list(kinds.values()),
            "rank": list(range(len(kinds))),
        },
        schema_overrides={"rank": pl.Int32},
    )


def by_estimator(out):
    """{estimator: {instance_id: (predicted_index, predicted_id, confidence, correct)}} of one reduction."""
    table = {}
    for e, i, p, pid, c, ok in out.select(
        "estimator", "instance_id", "predicted_index", "predicted_id", "confidence", "correct"
    ).iter_rows():
        table.setdefault(e, {})[i] = (p, pid, c, ok)
    return table


def quiet(lines=None):
    return (lambda _: None) if lines is None else lines.append


# --- by hand ---------------------------------------------------------------------------------------


def five_curated_templates():
    """Five curated templates c0…c4 (P36:c0 … P36:c4); gold option 0 unless said.

    i1 (3 options): c0 p = [.5, .3, .2] → 0 (Base .5); c1 [.6, .3, .1] → 0 (.6);
        c2 [.2, .7, .1] → 1 (.7); c3 [.4, .35, .25] → 0 (.4); c4 [.1, .1, .8] → 2 (.8)
        votes: option 0 × 3, 1 × 1, 2 × 1.
    i2 (2 options, c4 missing: T_i = 4): c0 [.3, .7] → 1 (.7); c1 [.45, .55] → 1 (.55);
        c2 [.9, .1] → 0 (.9); c3 [.6, .4] → 0 (.6); votes 2 : 2, a tied top count.
    i3 (one option, gold): every template p = [1] → 0, Base 1.
    i4 (3 options, gold 0 AND 1): c0 [.2, .6, .2] → 1 (.6); c1 [.2, .7, .1] → 1 (.7);
        c2 [.5, .4, .1] → 0 (.5); c3 [.1, .8, .1] → 1 (.8); c4 [.1, .2, .7] → 2 (.7)
        votes: 1 × 3, 0 × 1, 2 × 1.
    """
    t = [f"P36:c{r}" for r in range(5)]
    rows = []
    i1 = [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.4, 0.35, 0.25], [0.1, 0.1, 0.8]]
    for template, probs in zip(t, i1, strict=True):
        rows += template_rows("i1", template, probs)
    for template, probs in zip(t, [[0.3, 0.7], [0.45, 0.55], [0.9, 0.1], [0.6, 0.4]], strict=False):
        rows += template_rows("i2", template, probs, objects=["Q10", "Q11"])
    for template in t:
        rows += template_rows("i3", template, [1.0], objects=["Q20"])
    i4 = [[0.2, 0.6, 0.2], [0.2, 0.7, 0.1], [0.5, 0.4, 0.1], [0.1, 0.8, 0.1], [0.1, 0.2, 0.7]]
    for template, probs in zip(t, i4, strict=True):
        rows += template_rows("i4", template, probs, gold=(0, 1), objects=["Q30", "Q31", "Q32"])
    return statements(rows), templates_table("P36", dict.fromkeys(t, "curated"))


def test_vote_by_hand():
    scores, templates = five_curated_templates()
    out = by_estimator(compute_estimates(build_cube(scores, templates=templates), VOTES, log=quiet()))
    # T = 5: vote2 … vote5 run, vote6 … vote12 are skipped (not in the output)
    assert set(out) == {f"vote{k}_{c}" for k in range(2, 6) for c in ("average", "consistency")}
    # i1: option 0 has 3 votes → accepted by vote2 and vote3 (correct); Average = (.5 + .6 + .4)/5
    #     = 0.3, Consistency = 3/5 = 0.6. vote4, vote5: 3 < 4 → no answer: −1, null, 0, wrong.
    for k in (2, 3):
        assert out[f"vote{k}_average"]["i1"] == (0, "Q0", pytest.approx(0.3, abs=1e-12), True)
        assert out[f"vote{k}_consistency"]["i1"] == (0, "Q0", pytest.approx(0.6, abs=1e-12), True)
    for k in (4, 5):
        for c in ("average", "consistency"):
            assert out[f"vote{k}_{c}"]["i1"] == (NO_ANSWER, None, 0.0, False)
    # i2: 2 : 2 is a tied top count → no answer at every k, even vote2, and wrong although one of
    #     the two leaders (option 0) is gold
    for name in out:
        assert out[name]["i2"] == (NO_ANSWER, None, 0.0, False)
    # i3: one option, 5 votes → accepted up to vote5 (unanimity); Average = 5 · 1/5 = 1
    for name in out:
        assert out[name]["i3"] == (0, "Q20", 1.0, True)
    # i4: option 1 has 3 votes, and is one of the two gold options → correct; Average = (.6 + .7 +
    #     .8)/5 = 0.42, Consistency 0.6; vote4 fails
    assert out["vote3_average"]["i4"] == (1, "Q31", pytest.approx(0.42, abs=1e-12), True)
    assert out["vote3_consistency"]["i4"] == (1, "Q31", pytest.approx(0.6, abs=1e-12), True)
    assert out["vote4_average"]["i4"] == (NO_ANSWER, None, 0.0, False)


def test_min_and_max_by_hand():
    scores, templates = five_curated_templates()
    out = by_estimator(compute_estimates(build_cube(scores, templates=templates), EXTREMES, log=quiet()))
    # i1: Min = c3 (Base .4) → option 0, correct: Average (.5 + .6 + .4)/5 = 0.3, Consistency 0.6;
    #     Max = c4 (.8) → option 2, wrong: Average .8/5 = 0.16, Consistency 1/5 = 0.2
    assert out["min_average"]["i1"] == (0, "Q0", pytest.approx(0.3, abs=1e-12), True)
    assert out["min_consistency"]["i1"] == (0, "Q0", pytest.approx(0.6, abs=1e-12), True)
    assert out["max_average"]["i1"] == (2, "Q2", pytest.approx(0.16, abs=1e-12), False)
    assert out["max_consistency"]["i1"] == (2, "Q2", pytest.approx(0.2, abs=1e-12), False)
    # i2 (T_i = 4, c4 missing): Min = c1 (.55) → option 1, wrong: Average (.7 + .55)/4 = 0.3125,
    #     Consistency 2/4; Max = c2 (.9) → option 0, correct: Average (.9 + .6)/4 = 0.375, 0.5
    assert out["min_average"]["i2"] == (1, "Q11", pytest.approx(0.3125, abs=1e-12), False)
    assert out["min_consistency"]["i2"] == (1, "Q11", 0.5, False)
    assert out["max_average"]["i2"] == (0, "Q10", pytest.approx(0.375, abs=1e-12), True)
    assert out["max_consistency"]["i2"] == (0, "Q10", 0.5, True)
    # i3: one option, every Base 1 (a five-way tie, c0 wins): 1 and 1
    for name in EXTREMES:
        assert out[name]["i3"] == (0, "Q20", 1.0, True)


def test_min_and_max_template_ties_go_to_the_lowest_template():
    # Two options; p = [.7, .3] and [.3, .7] have the same Base exactly (1 + e^d and e^d + 1, the
    # same two floats added), so these are real ties in floating point.
    # i1 (gold 0): c0 [.7, .3] → 0 (.7); c1 [.3, .7] → 1 (.7); c2 [.2, .8] → 1 (.8)
    #     Min: c0 and c1 tie at .7 → c0 → option 0, correct: Average .7/3, Consistency 1/3
    #     Max: c2 → 1, wrong: Average (.7 + .8)/3 = 0.5, Consistency 2/3
    # i2 (gold 1): c0 [.6, .4] → 0 (.6); c1 [.1, .9] → 1 (.9); c2 [.9, .1] → 0 (.9)
    #     Max: c1 and c2 tie at .9 → c1 → option 1, correct: Average .9/3 = 0.3, Consistency 1/3
    #     Min: c0 → 0, wrong: Average (.6 + .9)/3 = 0.5, Consistency 2/3
    rows = []
    for t, probs in zip(["c0", "c1", "c2"], [[0.7, 0.3], [0.3, 0.7], [0.2, 0.8]], strict=True):
        rows += template_rows("i1", t, probs)
    for t, probs in zip(["c0", "c1", "c2"], [[0.6, 0.4], [0.1, 0.9], [0.9, 0.1]], strict=True):
        rows += template_rows("i2", t, probs, gold=(1,))
    cube = build_cube(statements(rows))
    out = by_estimator(compute_estimates(cube, EXTREMES, log=quiet()))
    assert out["min_average"]["i1"] == (0, "Q0", pytest.approx(0.7 / 3, abs=1e-12), True)
    assert out["min_consistency"]["i1"] == (0, "Q0", pytest.approx(1 / 3, abs=1e-12), True)
    assert out["max_average"]["i1"] == (1, "Q1", pytest.approx(0.5, abs=1e-12), False)
    assert out["max_consistency"]["i1"] == (1, "Q1", pytest.approx(2 / 3, abs=1e-12), False)
    assert out["max_average"]["i2"] == (1, "Q1", pytest.approx(0.3, abs=1e-12), True)
    assert out["max_consistency"]["i2"] == (1, "Q1", pytest.approx(1 / 3, abs=1e-12), True)
    assert out["min_average"]["i2"] == (0, "Q0", pytest.approx(0.5, abs=1e-12), False)
    # the ties are exact in the arrays too, so the rule (not rounding) decided
    base = ESTIMATORS["base"].fn(cube, "sum").confidence
    assert base[0, 0] == base[0, 1] and base[1, 1] == base[1, 2]


def test_a_template_with_tied_options_votes_for_the_lowest_index():
    # c0 p = [.4, .4, .2] → option 0 (the tie rule of every argmax); c1 [.1, .6, .3] → 1;
    # c2 [.5, .3, .2] → 0 → vote2: option 0 (2 votes); Average (.4 + .5)/3 = 0.3, Consistency 2/3
    rows = []
    for t, probs in zip(["c0", "c1", "c2"], [[0.4, 0.4, 0.2], [0.1, 0.6, 0.3], [0.5, 0.3, 0.2]], strict=True):
        rows += template_rows("i1", t, probs, gold=(1,))
    out = by_estimator(compute_estimates(build_cube(statements(rows)), ["vote2_average"], log=quiet()))
    assert out["vote2_average"]["i1"] == (0, "Q0", pytest.approx(0.3, abs=1e-12), False)


# --- which templates are aggregated ---------------------------------------------------------------


def paraphrases_and_variants():
    """One instance, two options (gold 0), six templates of the relation P1:
    curated c0 [.6, .4] → 0 (.6); curated c1 [.3, .7] → 1 (.7); generated g0 [.2, .8] → 1 (.8);
    and three templates that are not paraphrases, all sure of option 0: the verbal-marker variant
    c0:certainly [.99, .01], the perturbation c0:typo [.95, .05], the question q0 [.97, .03]."""
    kinds = {
        "P1:c0": "curated",
        "P1:c1": "curated",
        "P1:g0": "generated",
        "P1:c0:certainly": "marker_verbal",
        "P1:c0:typo": "perturbation",
        "P1:q0": "question",
    }
    probs = [[0.6, 0.4], [0.3, 0.7], [0.2, 0.8], [0.99, 0.01], [0.95, 0.05], [0.97, 0.03]]
    rows = [r for t, p in zip(kinds, probs, strict=True) for r in template_rows("i1", t, p)]
    return statements(rows, relation="P1"), templates_table("P1", kinds)


def test_only_paraphrase_templates_are_aggregated():
    scores, templates = paraphrases_and_variants()
    lines = []
    out = compute_estimates(build_cube(scores, templates=templates), AGGREGATIONS, log=lines.append)
    got = by_estimator(out)
    # T = 3 paraphrases (c0, c1, g0), although the cube has 6 templates:
    # vote2: option 1 (c1, g0) → wrong; Average (.7 + .8)/3 = 0.5, Consistency 2/3. Counting the
    #        variants too, option 0 would have 4 votes of 6 and be right.
    assert got["vote2_average"]["i1"] == (1, "Q1", pytest.approx(0.5, abs=1e-12), False)
    assert got["vote2_consistency"]["i1"] == (1, "Q1", pytest.approx(2 / 3, abs=1e-12), False)
    # vote3: 2 < 3 → no answer
    assert got["vote3_average"]["i1"] == (NO_ANSWER, None, 0.0, False)
    # Max: g0 (.8) → 1, not the marker variant (.99); Min: c0 (.6) → 0: Average .6/3, 1/3
    assert got["max_average"]["i1"] == (1, "Q1", pytest.approx(0.5, abs=1e-12), False)
    assert got["min_average"]["i1"] == (0, "Q0", pytest.approx(0.2, abs=1e-12), True)
    assert got["min_consistency"]["i1"] == (0, "Q0", pytest.approx(1 / 3, abs=1e-12), True)
    # vote4 … vote12 need more paraphrases than the 3 there are: one line says so for all of them
    assert set(got) == {"vote2_average", "vote2_consistency", "vote3_average", "vote3_consistency", *EXTREMES}
    [line] = [x for x in lines if "its vote level is above the cube's 3 paraphrase templates" in x]
    assert "vote4_average (sum)" in line and "vote4_consistency (sum)" in line and "(P1)" in line
    assert "vote12_consistency (sum)" in line and "vote3_average" not in line


def test_without_a_templates_table_every_template_is_aggregated():
    # Kinds unknown: all six templates count (T = 6): option 0 has 4 votes (c0, certainly, typo,
    # q0) → vote2 … vote4 accept it (correct): Average (.6 + .99 + .95 + .97)/6 = 3.51/6 = 0.585,
    # Consistency 4/6; vote5 and vote6 run and fail.
    scores, _ = paraphrases_and_variants()
    got = by_estimator(compute_estimates(build_cube(scores), VOTES, log=quiet()))
    assert got["vote4_average"]["i1"] == (0, "Q0", pytest.approx(0.585, abs=1e-12), True)
    assert got["vote4_consistency"]["i1"] == (0, "Q0", pytest.approx(4 / 6, abs=1e-12), True)
    assert got["vote6_average"]["i1"] == (NO_ANSWER, None, 0.0, False)
    assert "vote7_average" not in got


def test_no_paraphrase_templates_skips_every_aggregation_with_its_reason():
    # only a question template: no paraphrase at all
    rows = template_rows("i1", "P1:q0", [0.9, 0.1])
    cube = build_cube(statements(rows, relation="P1"), templates=templates_table("P1", {"P1:q0": "question"}))
    lines = []
    out = compute_estimates(cube, [*AGGREGATIONS, "template_marginal"], log=lines.append)
    assert out.is_empty()
    sum_lines = [x for x in lines if "(sum)" in x]
    assert any(
        "no paraphrase templates (curated or generated)" in x
        and "min_average (sum)" in x
        and "template_marginal (sum)" in x
        for x in sum_lines
    )
    assert any(
        "its vote level is above the cube's 0 paraphrase templates" in x and "vote2_average (sum)" in x
        for x in lines
    )


def test_instances_without_a_paraphrase_template_get_no_row():
    # i1 has c0 and c1; i2 was scored on the marker variant only → no aggregation row for i2
    # (T_i = 0), while i1's rows are as usual: c0 [.8, .2] → 0, c1 [.6, .4] → 0 → vote2 0, Average
    # (.8 + .6)/2 = 0.7, Consistency 1
    kinds = {"P1:c0": "curated", "P1:c1": "curated", "P1:c0:certainly": "marker_verbal"}
    rows = template_rows("i1", "P1:c0", [0.8, 0.2]) + template_rows("i1", "P1:c1", [0.6, 0.4])
    rows += template_rows("i2", "P1:c0:certainly", [0.5, 0.5])
    cube = build_cube(statements(rows, relation="P1"), templates=templates_table("P1", kinds))
    out = compute_estimates(cube, AGGREGATIONS, log=quiet())
    assert out["instance_id"].unique().to_list() == ["i1"]
    got = by_estimator(out)
    assert got["vote2_average"]["i1"] == (0, "Q0", pytest.approx(0.7, abs=1e-12), True)
    assert got["vote2_consistency"]["i1"] == (0, "Q0", 1.0, True)


def test_registry_entries():
    # vote2 … vote12 in both confidences, min and max: instance grain, probabilities, all four
    # reductions ('sum' first: the report's summary reads the first)
    for name in [*AGGREGATIONS, "template_marginal"]:
        spec = ESTIMATORS[name]
        assert (spec.grain, spec.output_kind) == ("instance", "probability"), name
        assert spec.reductions == ("sum", "mean", "answer_sum", "answer_mean"), name
    assert "vote13_average" not in ESTIMATORS and len(VOTES) == 22


# --- random partitions: properties and the reference ------------------------------------------------

OTHER_TEMPLATES = [
    (":c0:certainly", "marker_verbal"),
    (":c0:numeric-50", "marker_numeric"),
    (":c0:typo", "perturbation"),
    (":q0", "question"),
]


def _draw(rng, kept, tied, favourite, seen, earlier):
    """One template's lls over the options `kept`.

    Continuous (tie-free) draws, the favourite option lifted on most templates so that votes pass.
    Tied mode: integers in {−3, −2, −1}, so argmax ties and equal Base across templates are
    frequent. Equal Base across templates must be equal in floating point in both the vectorised
    path and the reference (else rounding, not the tie rule, would decide Min/Max, and the two
    could decide differently): a template either copies an earlier one's vector exactly, or its
    multiset of ll − max differs from every earlier one (up to two options a permutation is still
    exact: a + b = b + a).
    """
    if not tied:
        lift = 6.0 * (np.asarray(kept) == favourite) * (rng.random() < 0.7)
        return tuple(float(x) for x in rng.normal(-20, 4, len(kept)) + lift)
    same = [values for options, values in earlier if options == kept]
    if same and rng.random() < 0.3:
        return same[0]
    for _ in range(30):
        values = tuple(float(x) for x in rng.integers(-3, 0, len(kept)))
        key = tuple(sorted(x - max(values) for x in values))
        if len(kept) <= 2 or seen.get(key, (kept, values)) == (kept, values):
            seen.setdefault(key, (kept, values))
            earlier.append((kept, values))
            return values
    return tuple(float(x) for x in rng.normal(-20, 4, len(kept)))


def random_partition(seed, with_templates=True):
    """(statement_scores with all four ll columns, templates table or None, probe_instances) of one
    random partition: 1–4 curated and 0–2 generated paraphrases plus up to four variant/question
    templates (never aggregated), 5–9 instances with 1–12 options (one has 1, two have 2), option indices
    sometimes non-contiguous, 1–2 gold options, ~20 % of (instance, template) pairs and ~5 % of
    statements missing, one instance scored on non-paraphrase templates only (when there are any),
    ~40 % of instances with integer lls (ties), rows shuffled."""
    rng = np.random.default_rng(seed)
    relation = f"P{seed}"
    kinds = {f"{relation}:c{r}": "curated" for r in range(int(rng.integers(1, 5)))}
    kinds |= {f"{relation}:g{r}": "generated" for r in range(int(rng.integers(0, 3)))}
    others = {relation + suffix: kind for suffix, kind in OTHER_TEMPLATES if rng.random() < 0.5}
    counts = rng.integers(1, 13, size=int(rng.integers(5, 10)))
    counts[[0, 2, 3]] = (1, 2, 2)  # two-option templates tie in Base when one is the other swapped
    rows, instances = [], []
    for i, k in enumerate(counts):
        instance = f"{relation}:i{i:02d}"
        options = list(range(k)) if rng.random() < 0.6 else sorted(rng.choice(k + 3, size=k, replace=False))
        options = [int(o) for o in options]
        n_gold = 2 if k >= 2 and rng.random() < 0.3 else 1
        gold = {int(o) for o in rng.choice(options, size=n_gold, replace=False)}
        if i == 1 and others:
            used = list(others)
        else:
            used = [t for t in [*kinds, *others] if rng.random() > 0.2] or [next(iter(kinds))]
        tied, favourite = rng.random() < 0.4, int(rng.choice(options))
        seen = {c: {} for c in LL_COLUMNS}
        earlier = {c: [] for c in LL_COLUMNS}
        for t in used:
            kept = tuple(o for o in options if rng.random() > 0.05) or (options[0],)
            values = [_draw(rng, kept, tied, favourite, seen[c], earlier[c]) for c in LL_COLUMNS]
            for j, o in enumerate(kept):
                rows.append((instance, t, o, f"Q{seed}_{i}_{o}", o in gold, *(v[j] for v in values)))
        instances.append((instance, int(k), "dev" if rng.random() < 0.3 else "test"))
    frame = pl.DataFrame(
        rows,
        schema=["instance_id", "template_id", "option_index", "object_id", "is_gold", *LL_COLUMNS],
        orient="row",
    )
    frame = frame.select(
        pl.lit(f"m{seed % 2}").alias("model_id"), pl.lit(relation).alias("relation_id"), pl.all()
    )
    templates = templates_table(relation, kinds | others) if with_templates else None
    probe = pl.DataFrame(instances, schema=["instance_id", "n_options", "split"], orient="row")
    return frame.sample(fraction=1.0, shuffle=True, seed=seed), templates, probe


SEEDS = range(16)


def test_random_partitions_cover_the_edge_cases():
    # The equality test below has teeth only if the partitions hold what can go wrong.
    counts = dict.fromkeys(
        ["failed", "accepted", "accepted_k4+", "no_paraphrase", "missing", "one_option", "multi_gold"], 0
    )
    counts |= {"argmax_tie": 0, "extreme_tie": 0}
    for seed in SEEDS:
        scores, templates, probe = random_partition(seed)
        cube = build_cube(scores, probe, templates)
        votes = compute_estimates(cube, VOTES, log=quiet())
        answered = votes["predicted_index"] != NO_ANSWER
        counts["failed"] += int((~answered).sum())
        counts["accepted"] += int(answered.sum())
        counts["accepted_k4+"] += int((answered & ~votes["estimator"].str.contains("vote[23]_")).sum())
        paraphrases = cube.paraphrase_templates()
        present = cube.present[:, paraphrases]
        counts["no_paraphrase"] += int((present.sum(axis=1) == 0).sum())
        counts["missing"] += int((present.any(axis=1) & ~present.all(axis=1)).sum())
        counts["one_option"] += int((cube.n_options == 1).sum())
        counts["multi_gold"] += int((cube.gold.sum(axis=1) > 1).sum())
        ll = cube.ll("sum")[:, paraphrases]
        counts["argmax_tie"] += int(((ll == ll.max(axis=2, keepdims=True)).sum(axis=2) > 1).sum())
        # Min or Max decided by the template tie rule: the extreme Base on two templates that answer
        # differently
        base = ESTIMATORS["base"].fn(cube, "sum")
        for extreme in (np.inf, -np.inf):
            b = np.where(present, base.confidence[:, paraphrases], extreme)
            at = b == (b.min if extreme > 0 else b.max)(axis=1, keepdims=True)
            answers = np.where(at, base.predicted[:, paraphrases], -1)
            counts["extreme_tie"] += int((answers.max(axis=1) != np.where(at, answers, 99).min(axis=1)).sum())
    assert counts["failed"] >= 100 and counts["accepted"] >= 100 and counts["accepted_k4+"] >= 20
    assert counts["no_paraphrase"] >= 5 and counts["missing"] >= 20
    assert counts["one_option"] >= len(SEEDS) and counts["multi_gold"] >= 10
    assert counts["argmax_tie"] >= 20 and counts["extreme_tie"] >= 5, counts


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_templates", [True, False], ids=["kinds", "no-templates-table"])
def test_vectorised_aggregations_equal_the_reference(seed, with_templates):
    scores, templates, probe = random_partition(seed, with_templates)
    names = [*AGGREGATIONS, "template_marginal"]
    out = compute_estimates(build_cube(scores, probe, templates), names, log=quiet())
    expected = pl.concat(
        [reference_aggregations(scores, column, templates, probe) for column in LL_COLUMNS]
    ).sort("model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction", nulls_last=True)
    assert out.height > 0
    assert_frame_equal(out, expected, check_exact=False, rel_tol=0, abs_tol=1e-12)


def test_several_partitions_at_once_equal_the_reference():
    parts = [random_partition(s) for s in range(6)]
    scores = pl.concat([p[0] for p in parts])
    templates = pl.concat([p[1] for p in parts])
    probe = pl.concat([p[2] for p in parts])
    out = compute_estimates(partition_cubes(scores, probe, templates), AGGREGATIONS, log=quiet())
    expected = pl.concat(
        [reference_aggregations(scores, column, templates, probe) for column in LL_COLUMNS]
    ).filter(pl.col("estimator") != "template_marginal")
    expected = expected.sort(
        "model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction"
    )
    assert_frame_equal(out, expected, check_exact=False, rel_tol=0, abs_tol=1e-12)


def wide(out):
    """One row per (instance, reduction), one column per estimator's confidence and prediction."""
    keys = ["relation_id", "instance_id", "reduction"]
    return out.pivot("estimator", index=keys, values=["confidence", "predicted_index"])


@pytest.mark.parametrize("seed", SEEDS)
def test_higher_vote_thresholds_accept_a_subset(seed):
    # Vote(k+1) accepts only what Vote(k) accepts, with the same answer; so Vote(T) ⊆ Vote(2)
    scores, templates, probe = random_partition(seed)
    cube = build_cube(scores, probe, templates)
    out = compute_estimates(cube, [f"vote{k}_consistency" for k in range(2, MAX_VOTE_K + 1)], log=quiet())
    t = len(cube.paraphrase_templates())
    table = wide(out)
    for k in range(2, t):
        lower, higher = (
            table[f"predicted_index_vote{k}_consistency"],
            table[f"predicted_index_vote{k + 1}_consistency"],
        )
        accepted = higher != NO_ANSWER
        assert (lower.filter(accepted) == higher.filter(accepted)).all()
    if t >= 2:
        top = table[f"predicted_index_vote{t}_consistency"]
        assert (
            table["predicted_index_vote2_consistency"].filter(top != NO_ANSWER)
            == top.filter(top != NO_ANSWER)
        ).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_consistency_is_a_multiple_of_one_over_t_and_bounds_average(seed):
    scores, templates, probe = random_partition(seed)
    cube = build_cube(scores, probe, templates)
    out = compute_estimates(cube, AGGREGATIONS, log=quiet())
    n_templates = dict(
        zip(cube.instance_ids, cube.present[:, cube.paraphrase_templates()].sum(axis=1), strict=True)
    )
    for name in {n.rsplit("_", 1)[0] for n in out["estimator"].unique()}:
        average = out.filter(estimator=f"{name}_average").sort("instance_id", "reduction")
        consistency = out.filter(estimator=f"{name}_consistency").sort("instance_id", "reduction")
        # the same answers; Average ≤ Consistency since Base_t ≤ 1; both in [0, 1]
        assert average["predicted_index"].equals(consistency["predicted_index"])
        a, c = average["confidence"].to_numpy(), consistency["confidence"].to_numpy()
        assert (a <= c + 1e-15).all() and (a >= 0).all() and (c <= 1).all()
        # Consistency ∈ {0, 1/T_i, …, 1}: C · T_i is a whole number
        t_i = np.array([n_templates[i] for i in consistency["instance_id"]])
        np.testing.assert_allclose(c * t_i, np.round(c * t_i), atol=1e-12)


def test_permuting_options_changes_no_aggregation():
    # Continuous lls (no argmax ties, no equal Base), so the tie rules cannot interfere: the same
    # statements under other option indices give the same answers (by object) and confidences.
    rng = np.random.default_rng(11)
    kinds = {"P1:c0": "curated", "P1:c1": "curated", "P1:c2": "curated", "P1:g0": "generated"}
    rows, permuted = [], []
    for i in range(40):
        k = int(rng.integers(1, 7))
        favourite, new_index = int(rng.integers(0, k)), rng.permutation(k)
        for t in kinds:
            if rng.random() < 0.15:
                continue
            for o in range(k):
                ll = float(rng.normal(-10, 2)) + (3.0 if o == favourite and rng.random() < 0.6 else 0.0)
                rows.append((f"i{i:02d}", t, o, f"Q{i}_{o}", o == 0, ll))
                permuted.append((f"i{i:02d}", t, int(new_index[o]), f"Q{i}_{o}", o == 0, ll))
    df = statements(rows, relation="P1")
    shuffled = statements(permuted, relation="P1").sample(fraction=1.0, shuffle=True, seed=5)
    assert not df["option_index"].equals(statements(permuted, relation="P1")["option_index"])
    templates = templates_table("P1", kinds)
    keep = ["instance_id", "template_id", "estimator", "predicted_id", "confidence", "correct"]
    names = [*AGGREGATIONS, "template_marginal", "entropy"]
    a = compute_estimates(build_cube(df, templates=templates), names, log=quiet()).select(keep)
    b = compute_estimates(build_cube(shuffled, templates=templates), names, log=quiet()).select(keep)
    assert a.height == b.height > 0
    assert a["predicted_id"].to_list() == b["predicted_id"].to_list()
    assert a["correct"].to_list() == b["correct"].to_list()
    np.testing.assert_allclose(a["confidence"].to_numpy(), b["confidence"].to_numpy(), rtol=0, atol=1e-12)
    assert 0 < a["correct"].sum() < a.height
    assert (a["predicted_id"].is_null()).sum() > 0  # failed votes are compared too


def test_template_answers_are_shared_per_cube_and_reduction_but_never_across_cubes():
    # The 26 aggregation estimators of one (cube, reduction) reuse one ỹ_t/Base_t computation; a
    # different cube (even built from similar data) gets its own, and the memo keeps no cube alive.
    a = build_cube(statements(template_rows("i1", "c0", [0.7, 0.3]) + template_rows("i1", "c1", [0.6, 0.4])))
    b = build_cube(statements(template_rows("i1", "c0", [0.2, 0.8]) + template_rows("i1", "c1", [0.1, 0.9])))
    assert template_answers(a, "sum") is template_answers(a, "sum")
    # interleaved: a → option 0 (Average (.7 + .6)/2 = .65), b → option 1 ((.8 + .9)/2 = .85), a again
    for cube, answer, average in [(a, 0, 0.65), (b, 1, 0.85), (a, 0, 0.65)]:
        out = ESTIMATORS["vote2_average"].fn(cube, "sum")
        assert out.predicted.tolist() == [answer]
        assert out.confidence[0] == pytest.approx(average, abs=1e-12)
    gone = weakref.ref(b)
    template_answers(b, "sum")
    del b
    gc.collect()
    assert gone() is None
