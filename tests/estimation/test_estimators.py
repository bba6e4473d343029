"""Base and Margin on hand-computed examples and against the per-row reference; the registry's
contract (skipped estimators, instance grain, abstentions, output shapes) and the headline view."""

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.dataset.instances.probe import templates_frame
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.estimation import build_cube, partition_cubes
from kcal_pipeline.estimation.registry import (
    ESTIMATORS,
    NO_ANSWER,
    Estimate,
    compute_estimates,
    curated_template_estimates,
    headline_estimates,
    headline_template_estimates,
    register,
)
from tests.estimation.reference import reference_estimates

COLUMNS = [
    "model_id",
    "relation_id",
    "instance_id",
    "split",
    "answer_space_k",
    "answer_space_draw",
    "template_id",
    "estimator",
    "reduction",
    "grain",
    "output_kind",
    "predicted_index",
    "predicted_id",
    "confidence",
    "correct",
]
STATEMENT_COLUMNS = ["instance_id", "template_id", "option_index", "object_id", "is_gold", "ll_sum"]


def statements(rows, model="m", relation="P36"):
    """A statement_scores frame from (instance, template, option_index, object, is_gold, ll_sum) rows."""
    frame = pl.DataFrame(rows, schema=STATEMENT_COLUMNS, orient="row")
    return frame.select(
        pl.lit(model).alias("model_id"), pl.lit(relation).alias("relation_id"), *frame.columns
    )


def one_template(*lls, gold=0):
    """One instance 'i1', one template 't0', options 0..k−1 (objects Q0…) with the given lls."""
    return statements([("i1", "t0", o, f"Q{o}", o == gold, ll) for o, ll in enumerate(lls)])


def logs(*probs):
    return [math.log(p) for p in probs]


def run(name, cube, reduction="sum"):
    """The registered estimator's raw output on a cube."""
    return ESTIMATORS[name].fn(cube, reduction)


# --- Base and Margin by hand ------------------------------------------------------------------------


def test_base_and_margin_by_hand():
    # One instance, two templates, options 0, 1, 2.
    # t0: lls = log [0.5, 0.3, 0.2] → softmax = [0.5, 0.3, 0.2] (already normalised)
    #     Base = 0.5, Margin = 0.5 − 0.3 = 0.2, prediction = option 0
    # t1: lls = log [0.2, 0.3, 0.5] → the top option need not come first: option 2, same numbers
    rows = [("i1", "t0", o, f"Q{o}", o == 0, ll) for o, ll in enumerate(logs(0.5, 0.3, 0.2))]
    rows += [("i1", "t1", o, f"Q{o}", o == 0, ll) for o, ll in enumerate(logs(0.2, 0.3, 0.5))]
    cube = build_cube(statements(rows))
    base, margin = run("base", cube), run("margin", cube)
    assert base.predicted.tolist() == [[0, 2]]
    assert margin.predicted.tolist() == [[0, 2]]
    np.testing.assert_allclose(base.confidence, [[0.5, 0.5]], rtol=1e-12)
    np.testing.assert_allclose(margin.confidence, [[0.2, 0.2]], rtol=1e-12)


def test_softmax_is_shift_invariant_and_does_not_overflow():
    # lls [-1000, -1001]: p = [1, e^-1] / (1 + e^-1)
    # → Base = 1/(1 + e^-1) = 0.731059; Margin = (1 − e^-1)/(1 + e^-1) = 0.462117
    far = build_cube(one_template(-1000.0, -1001.0))
    assert run("base", far).confidence[0, 0] == pytest.approx(1 / (1 + math.e**-1), rel=1e-12)
    assert run("margin", far).confidence[0, 0] == pytest.approx(
        (1 - math.e**-1) / (1 + math.e**-1), rel=1e-12
    )
    # log [0.5, 0.3, 0.2] + 800 would overflow a naive exp() (e^800 > 1.8e308); the max-shift keeps
    # it exact: Base 0.5, Margin 0.2. A second instance i2 with one option (ll 805, p = [1]) has its
    # row padded to three options with −inf, which must not raise either (exp(−inf) = 0): Base =
    # Margin = 1.
    rows = [("i1", "t0", o, f"Q{o}", o == 0, ll + 800.0) for o, ll in enumerate(logs(0.5, 0.3, 0.2))]
    rows.append(("i2", "t0", 0, "Q9", True, 805.0))
    cube = build_cube(statements(rows))
    with np.errstate(all="raise"):
        base, margin = run("base", cube), run("margin", cube)
    np.testing.assert_allclose(base.confidence[:, 0], [0.5, 1.0], rtol=1e-12)
    np.testing.assert_allclose(margin.confidence[:, 0], [0.2, 1.0], rtol=1e-12)


def test_argmax_tie_goes_to_lowest_index():
    # lls [-1, -2, -1]: options 0 and 2 tie; p0 = p2 = 1 / (2 + e^-1) = 0.42232; Margin = p0 − p2 = 0
    cube = build_cube(one_template(-1.0, -2.0, -1.0))
    assert run("base", cube).predicted[0, 0] == 0
    assert run("base", cube).confidence[0, 0] == pytest.approx(1 / (2 + math.e**-1), rel=1e-12)
    assert run("margin", cube).predicted[0, 0] == 0
    assert run("margin", cube).confidence[0, 0] == pytest.approx(0.0, abs=1e-15)
    # lls [-3, -1, -1]: options 1 and 2 tie → option 1 (the lowest of the tied, not position 0)
    cube = build_cube(one_template(-3.0, -1.0, -1.0))
    assert run("base", cube).predicted[0, 0] == 1
    assert run("margin", cube).predicted[0, 0] == 1


def test_single_option_margin_equals_base():
    # one option: p = [1]; there is no runner-up, so Margin = Base = 1 (a cube with O = 1)
    cube = build_cube(one_template(-7.5))
    assert cube.shape == (1, 1, 1)
    for name in ("base", "margin"):
        out = run(name, cube)
        assert (out.predicted[0, 0], out.confidence[0, 0]) == (0, 1.0)
    # the same instance beside one with three options: its row is padded to [−7.5, −inf, −inf],
    # p = [1, 0, 0], and the padded 0 runner-up still gives Margin = 1 − 0 = Base = 1
    rows = [("i1", "t0", 0, "Q0", True, -7.5)] + [
        ("i2", "t0", o, f"Q{o}", o == 1, -1.0 - o) for o in range(3)
    ]
    cube = build_cube(statements(rows))
    assert cube.shape == (2, 1, 3)
    for name in ("base", "margin"):
        out = run(name, cube)
        assert (out.predicted[0, 0], out.confidence[0, 0]) == (0, 1.0)


def test_registry_rejects_duplicate_names_and_unknown_reductions():
    assert {"base", "margin"} <= set(ESTIMATORS)
    before = dict(ESTIMATORS)
    with pytest.raises(ValueError, match="'base' is already registered"):
        register("base", label="Base", family="single_template")(lambda cube, reduction: None)
    with pytest.raises(ValueError, match=r"'tmp_median': unknown reduction\(s\) \['median'\]"):
        register("tmp_median", label="x", family="test", reductions=("median",))(lambda cube, reduction: None)
    assert before == ESTIMATORS  # neither refused registration left anything behind


# --- compute_estimates: bookkeeping -----------------------------------------------------------------


def scores_frame():
    """Two instances, one template; option_index deliberately non-contiguous and rows unsorted.

    i1: options 0 (gold, p=0.5), 3 (p=0.2), 7 (p=0.3) → predicted option_index 0, correct;
        Base 0.5, Margin 0.5 − 0.3 = 0.2.
    i2: options 1 (p=0.6), 2 (gold, p=0.4) → predicted option_index 1 (object 'Q20'), wrong;
        Base 0.6, Margin 0.6 − 0.4 = 0.2.
    """
    return pl.DataFrame(
        {
            "model_id": ["m"] * 5,
            "relation_id": ["P36"] * 5,
            "instance_id": ["i2", "i1", "i1", "i2", "i1"],
            "template_id": ["t0"] * 5,
            "option_index": [2, 7, 0, 1, 3],
            "object_id": ["Q21", "Q13", "Q10", "Q20", "Q12"],
            "is_gold": [True, False, True, False, False],
            "ll_sum": [math.log(0.4), math.log(0.3), math.log(0.5), math.log(0.6), math.log(0.2)],
        }
    )


def test_compute_estimates_by_hand():
    out = compute_estimates(build_cube(scores_frame()), estimators=["base", "margin"])
    assert out.columns == COLUMNS
    assert out["predicted_index"].dtype == pl.Int32
    assert out["confidence"].dtype == pl.Float64
    assert out["correct"].dtype == pl.Boolean
    assert out["template_id"].dtype == pl.String
    # sorted by instance, then estimator; every row: reduction sum, template grain, a probability
    keys = ["model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction", "grain"]
    rows = out.select(*keys, "output_kind", "predicted_index", "predicted_id", "correct").rows()
    assert rows == [
        ("m", "P36", "i1", "t0", "base", "sum", "template", "probability", 0, "Q10", True),
        ("m", "P36", "i1", "t0", "margin", "sum", "template", "probability", 0, "Q10", True),
        ("m", "P36", "i2", "t0", "base", "sum", "template", "probability", 1, "Q20", False),
        ("m", "P36", "i2", "t0", "margin", "sum", "template", "probability", 1, "Q20", False),
    ]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.5, 0.2, 0.6, 0.2], rtol=1e-12)
    # one cube or a list of cubes: the same rows
    assert_frame_equal(compute_estimates([build_cube(scores_frame())], ["base", "margin"]), out)


def test_reduction_selects_the_column_and_estimators_the_subset():
    # ll_mean (same row order as scores_frame: i2/2, i1/7, i1/0, i2/1, i1/3) = log [0.5, 0.2, 0.1, 0.5, 0.7]
    # i1 under mean: options 0, 3, 7 → p = [0.1, 0.7, 0.2] → option 3 ('Q12', wrong), Base 0.7
    # i2 under mean: options 1, 2 → p = [0.5, 0.5], a tie → option 1 ('Q20', wrong), Base 0.5
    # under sum as in scores_frame: i1 → option 0 (0.5, correct), i2 → option 1 (0.6, wrong)
    # (Base also runs under answer_sum and answer_mean; this frame has neither column: skipped)
    df = scores_frame().with_columns(ll_mean=pl.Series(np.log([0.5, 0.2, 0.1, 0.5, 0.7])))
    out = compute_estimates(build_cube(df), estimators=["base"], log=lambda _: None)
    assert out["estimator"].to_list() == ["base"] * 4
    rows = out.select("instance_id", "reduction", "predicted_index", "predicted_id", "correct").rows()
    assert rows == [
        ("i1", "mean", 3, "Q12", False),
        ("i1", "sum", 0, "Q10", True),
        ("i2", "mean", 1, "Q20", False),
        ("i2", "sum", 1, "Q20", False),
    ]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.7, 0.5, 0.5, 0.6], rtol=1e-12)


def test_permuting_options_changes_nothing():
    # Same statements listed in a different option order (gold flags move with their option):
    # the softmax is permutation-equivariant, so confidence, correctness and the predicted object
    # must be identical. Random lls are tie-free, so the tie rule cannot interfere.
    rng = np.random.default_rng(7)
    rows = []
    for inst in range(30):
        k = int(rng.integers(1, 8))
        gold = int(rng.integers(0, k))
        for o in range(k):
            rows.append((f"i{inst:02d}", "t0", o, f"Q{inst}_{o}", o == gold, float(rng.normal(-20, 3))))
    df = statements(rows, relation="P1")
    shuffled = df.with_columns(
        option_index=pl.col("option_index").shuffle(seed=3).over("instance_id")
    ).sample(fraction=1.0, shuffle=True, seed=5)
    assert not df["option_index"].equals(shuffled.sort("instance_id", "object_id")["option_index"])
    keep = ["instance_id", "estimator", "predicted_id", "confidence", "correct"]
    a = compute_estimates(build_cube(df), ["base", "margin"]).select(keep)
    b = compute_estimates(build_cube(shuffled), ["base", "margin"]).select(keep)
    assert a["predicted_id"].to_list() == b["predicted_id"].to_list()
    assert a["correct"].to_list() == b["correct"].to_list()
    np.testing.assert_allclose(a["confidence"].to_numpy(), b["confidence"].to_numpy(), rtol=1e-12)
    assert 0 < a["correct"].sum() < a.height  # both outcomes occur, so the check has teeth


def test_unknown_estimator_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown estimator\(s\) \['nope'\]; known: \[.*'base'.*'margin'"):
        compute_estimates(build_cube(scores_frame()), estimators=["base", "nope"])
    with pytest.raises(ValueError, match="no estimators requested"):
        compute_estimates(build_cube(scores_frame()), estimators=[])


# --- the vectorised path against the per-row reference ---------------------------------------------


def random_partition(seed: int) -> pl.DataFrame:
    """A random (model, relation) partition of statement_scores, built to hit the cube's edge cases.

    Option counts 1–12 per instance (one instance always has exactly 1, one exactly 12, so rows are
    padded), option indices sometimes non-contiguous, 2–4 templates, ~20% of (instance, template)
    pairs missing and ~5% of single statements missing, ~40% of pairs with integer lls in
    {−3, −2, −1} (so argmax ties are frequent), rows shuffled.
    """
    rng = np.random.default_rng(seed)
    n_instances = int(rng.integers(4, 9))
    templates = [f"t{k}" for k in range(int(rng.integers(2, 5)))]
    counts = rng.integers(1, 13, size=n_instances)
    counts[:2] = (1, 12)
    counts = rng.permutation(counts)
    rows = []
    for i, k in enumerate(counts):
        inst = f"i{i:02d}"
        options = range(k) if rng.random() < 0.6 else np.sort(rng.choice(k + 3, size=k, replace=False))
        gold = int(rng.choice(options))
        kept = [t for t in templates if rng.random() > 0.2] or [templates[int(rng.integers(len(templates)))]]
        for t in kept:
            tied = rng.random() < 0.4
            pair = []
            for o in options:
                if tied:
                    ll_sum, ll_mean = float(rng.integers(-3, 0)), float(rng.integers(-3, 0))
                else:
                    ll_sum = float(rng.normal(-20, 4))
                    ll_mean = ll_sum / float(rng.integers(3, 13))
                pair.append((inst, t, int(o), f"Q{seed}_{i}_{o}", int(o) == gold, ll_sum, ll_mean))
            if len(pair) > 1:
                pair = [r for r in pair if rng.random() > 0.05] or pair[:1]
            rows += pair
    frame = pl.DataFrame(rows, schema=[*STATEMENT_COLUMNS, "ll_mean"], orient="row").with_columns(
        # the answer-only reductions, derived without drawing (the draws above stay as they were):
        # integer (tied) pairs stay tied, continuous ones get other argmaxes than sum and mean
        ll_answer_sum=pl.col("ll_sum") - pl.col("ll_mean"),
        ll_answer_mean=0.5 * pl.col("ll_mean") + 0.25 * pl.col("ll_sum"),
    )
    model, relation = pl.lit(f"m{seed % 3}").alias("model_id"), pl.lit(f"P{seed}").alias("relation_id")
    frame = frame.select(model, relation, *frame.columns)
    return frame.sample(fraction=1.0, shuffle=True, seed=seed)


REFERENCE_NAMES = ["base", "margin", "entropy"]


def reference(frame):
    """Reference rows for Base, Margin and entropy under all four reductions, in compute_estimates'
    order."""
    columns = ("ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean")
    every = pl.concat([reference_estimates(frame, column) for column in columns])
    return every.sort("model_id", "relation_id", "instance_id", "template_id", "estimator", "reduction")


SEEDS = range(24)


def test_random_partitions_cover_the_edge_cases():
    # The equality test below only has teeth if the partitions contain what can go wrong.
    frames = [random_partition(s) for s in SEEDS]
    lls = (
        pl.concat(frames)
        .group_by("model_id", "relation_id", "instance_id", "template_id")
        .agg(n=pl.len(), n_top=(pl.col("ll_sum") == pl.col("ll_sum").max()).sum())
    )
    assert (lls["n"] == 1).sum() > 0  # single-option pairs
    assert (lls["n_top"] > 1).sum() >= 20  # argmax ties
    n_pairs = [f.select(pl.struct("instance_id", "template_id").n_unique()).item() for f in frames]
    n_full = [f["instance_id"].n_unique() * f["template_id"].n_unique() for f in frames]
    assert (
        sum(p < f for p, f in zip(n_pairs, n_full, strict=True)) >= 10
    )  # missing (instance, template) pairs
    for f in frames:
        cube = build_cube(f)
        assert not cube.valid[cube.present].all()  # padding inside present rows
        assert f["instance_id"].to_list() != sorted(f["instance_id"].to_list())  # shuffled


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorised_estimates_equal_the_reference(seed):
    frame = random_partition(seed)
    out = compute_estimates(build_cube(frame), REFERENCE_NAMES)
    assert_frame_equal(out, reference(frame), check_exact=False, rel_tol=0, abs_tol=1e-12)


def test_several_partitions_at_once_equal_the_reference():
    # six partitions: three models share relation P0 … P5 seeds; compute_estimates over all cubes
    frame = pl.concat([random_partition(s) for s in range(6)])
    out = compute_estimates(partition_cubes(frame), REFERENCE_NAMES)
    assert out.select("model_id", "relation_id").unique().height == 6
    assert_frame_equal(out, reference(frame), check_exact=False, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_margin_never_exceeds_base(seed):
    # p_[1] − p_[2] ≤ p_[1] since p_[2] ≥ 0; equal only when the runner-up has probability 0
    # (one option). Margin ≥ 0 since p_[1] is the largest.
    out = compute_estimates(build_cube(random_partition(seed)), ["base", "margin"])
    wide = out.pivot("estimator", index=["instance_id", "template_id", "reduction"], values="confidence")
    assert wide.height == out.height // 2
    assert (wide["margin"] <= wide["base"]).all()
    assert (wide["margin"] >= 0).all()
    assert (wide["base"] <= 1 + 1e-15).all()


# --- the registry contract: skipped estimators, instance grain, abstentions, shapes -----------------


def two_relations():
    """Cubes of P30 and P36 with ll_sum only (no ll_mean, no dropout passes), curated templates."""
    p36 = scores_frame()
    p30 = scores_frame().with_columns(relation_id=pl.lit("P30"))
    templates = pl.DataFrame(
        {"relation_id": ["P30", "P36"], "template_id": ["t0", "t0"], "kind": ["curated"] * 2, "rank": [0, 0]}
    )
    return [build_cube(p30, templates=templates), build_cube(p36, templates=templates)]


def test_estimator_without_its_score_columns_is_skipped_with_one_log_line(temp_estimators):
    def needs_dropout(cube, reduction):
        raise AssertionError("must not run without ll_sum_dropout")

    temp_estimators("needs_dropout", needs_dropout, needs=("ll_sum_dropout",))
    lines = []
    out = compute_estimates(two_relations(), ["base", "needs_dropout"], log=lines.append)
    # one line for both relations, naming the estimator, the reduction and the missing column
    # (the others are Base's reductions without their columns, see the next test)
    [line] = [x for x in lines if "needs_dropout" in x]
    assert "needs_dropout (sum)" in line
    assert "no ll_sum_dropout scores" in line
    assert "P30, P36" in line
    # base still ran: 2 relations × 2 instances × 1 template
    assert out["estimator"].unique().to_list() == ["base"]
    assert out.height == 4


def test_estimator_without_its_reduction_column_is_skipped():
    # Base runs under all four reductions, but the cubes carry ll_sum only: the other three runs
    # are skipped, one line per missing column
    lines = []
    out = compute_estimates(two_relations(), ["base"], log=lines.append)
    assert len(lines) == 3
    skipped = [("mean", "ll_mean"), ("answer_sum", "ll_answer_sum"), ("answer_mean", "ll_answer_mean")]
    for line, (reduction, column) in zip(lines, skipped, strict=True):
        assert f"base ({reduction})" in line
        assert f"no {column} scores" in line
    assert out["reduction"].unique().to_list() == ["sum"]


def test_estimator_without_its_template_kind_is_skipped(temp_estimators):
    temp_estimators("marked_base", ESTIMATORS["base"].fn, template_kinds=("marker_verbal",))
    # curated templates only → skipped, naming the kind
    lines = []
    out = compute_estimates(two_relations(), ["marked_base"], log=lines.append)
    assert len(lines) == 1
    assert "marked_base (sum)" in lines[0]
    assert "no marker_verbal templates" in lines[0]
    assert out.is_empty()
    assert out.columns == COLUMNS  # an empty result still has the output schema
    # a cube built without a templates table has no kinds at all → skipped too
    lines = []
    compute_estimates(build_cube(scores_frame()), ["marked_base"], log=lines.append)
    assert len(lines) == 1
    assert "no marker_verbal templates" in lines[0]
    # a cube that has a marker_verbal template → it runs, no log line
    marked = pl.concat([scores_frame(), scores_frame().with_columns(template_id=pl.lit("t0:certainly"))])
    templates = pl.DataFrame(
        {
            "relation_id": ["P36", "P36"],
            "template_id": ["t0", "t0:certainly"],
            "kind": ["curated", "marker_verbal"],
            "rank": [0, 0],
        }
    )
    lines = []
    out = compute_estimates(build_cube(marked, templates=templates), ["marked_base"], log=lines.append)
    assert lines == []
    assert out.height == 4  # 2 instances × 2 templates


def unanimous(cube, reduction):
    """Instance grain test estimator: the answer every present template gives, confidence the mean
    Base over them; NO_ANSWER when they disagree (with a non-zero confidence, which must be zeroed)."""
    per_template = ESTIMATORS["base"].fn(cube, reduction)
    n_i = cube.shape[0]
    predicted, confidence = np.full(n_i, NO_ANSWER), np.zeros(n_i)
    for i in range(n_i):
        answers = per_template.predicted[i][cube.present[i]]
        confidence[i] = per_template.confidence[i][cube.present[i]].mean()
        if (answers == answers[0]).all():
            predicted[i] = answers[0]
    return Estimate(predicted, confidence)


def test_instance_grain_rows_and_no_answer(temp_estimators):
    temp_estimators("unanimous", unanimous, grain="instance", output_kind="score")
    rows = [
        # i1: t0 p = [0.6, 0.4] → option 0 (Base 0.6); t1 p = [0.7, 0.3] → option 0 (Base 0.7)
        #     → unanimous: option 0 = 'Q1' (gold, correct), confidence (0.6 + 0.7)/2 = 0.65
        *[("i1", "t0", o, f"Q{o + 1}", o == 0, ll) for o, ll in enumerate(logs(0.6, 0.4))],
        *[("i1", "t1", o, f"Q{o + 1}", o == 0, ll) for o, ll in enumerate(logs(0.7, 0.3))],
        # i2: t0 → option 0, t1 p = [0.3, 0.7] → option 1: they disagree → NO_ANSWER; the function
        #     returns confidence 0.65, compute_estimates must report predicted_id null, 0, wrong
        *[("i2", "t0", o, f"Q{o + 3}", o == 0, ll) for o, ll in enumerate(logs(0.6, 0.4))],
        *[("i2", "t1", o, f"Q{o + 3}", o == 0, ll) for o, ll in enumerate(logs(0.3, 0.7))],
        # i3: only t0, three options p = [0.2, 0.7, 0.1] → option 1 = 'Q6' (gold is 0: wrong), 0.7
        *[("i3", "t0", o, f"Q{o + 5}", o == 0, ll) for o, ll in enumerate(logs(0.2, 0.7, 0.1))],
    ]
    out = compute_estimates(build_cube(statements(rows)), ["base", "unanimous"])
    keys = out.select("instance_id", "template_id", "estimator").rows()
    # per instance: its template rows, then the instance row (template_id null sorts last)
    assert keys == [
        ("i1", "t0", "base"),
        ("i1", "t1", "base"),
        ("i1", None, "unanimous"),
        ("i2", "t0", "base"),
        ("i2", "t1", "base"),
        ("i2", None, "unanimous"),
        ("i3", "t0", "base"),
        ("i3", None, "unanimous"),
    ]
    instance = out.filter(pl.col("grain") == "instance")
    assert instance.select(
        "instance_id",
        "template_id",
        "reduction",
        "grain",
        "output_kind",
        "predicted_index",
        "predicted_id",
        "correct",
    ).rows() == [
        ("i1", None, "sum", "instance", "score", 0, "Q1", True),
        ("i2", None, "sum", "instance", "score", NO_ANSWER, None, False),
        ("i3", None, "sum", "instance", "score", 1, "Q6", False),
    ]
    np.testing.assert_allclose(instance["confidence"].to_numpy(), [0.65, 0.0, 0.7], rtol=1e-12)
    assert out.filter(pl.col("grain") == "template")["output_kind"].unique().to_list() == ["probability"]


def test_no_answer_on_the_first_instance(temp_estimators):
    def abstain_first(cube, reduction):
        # i1 abstains, i2 answers its option 1 ('Q20')
        return Estimate(np.array([NO_ANSWER, 1]), np.array([0.5, 0.9]))

    temp_estimators("abstain_first", abstain_first, grain="instance")
    out = compute_estimates(build_cube(scores_frame()), ["abstain_first"])
    # i1: NO_ANSWER → -1, null, confidence 0, wrong; i2: option 1 'Q20' (not gold), 0.9
    assert out.select("instance_id", "predicted_index", "predicted_id", "confidence", "correct").rows() == [
        ("i1", -1, None, 0.0, False),
        ("i2", 1, "Q20", 0.9, False),
    ]


def _wrong(shape_of):
    def fn(cube, reduction):
        predicted_shape, confidence_shape = shape_of(*cube.shape[:2])
        return Estimate(np.zeros(predicted_shape, dtype=np.int64), np.zeros(confidence_shape))

    return fn


@pytest.mark.parametrize(
    ("grain", "shape_of"),
    [
        pytest.param("template", lambda i, t: ((i, t + 1), (i, t + 1)), id="template-too-wide"),
        pytest.param("template", lambda i, t: ((i,), (i,)), id="template-1d"),
        pytest.param(
            "template",
            lambda i, t: ((i, t - 1), (i, t - 1)),
            id="template-narrow",
        ),
        pytest.param("template", lambda i, t: ((i, t), (i,)), id="template-conf-1d"),
        pytest.param("instance", lambda i, t: ((i, t), (i, t)), id="instance-2d"),
        pytest.param("instance", lambda i, t: ((i,), (i + 1,)), id="instance-conf-long"),
    ],
)
def test_wrong_shaped_output_is_named(temp_estimators, grain, shape_of):
    # scores_frame plus a second template: I = 2 instances, T = 2 templates
    frame = pl.concat([scores_frame(), scores_frame().with_columns(template_id=pl.lit("t1"))])
    temp_estimators("bad_shape", _wrong(shape_of), grain=grain)
    with pytest.raises(ValueError, match=r"estimator 'bad_shape': expected arrays of shape"):
        compute_estimates(build_cube(frame), ["bad_shape"])


# --- the headline view ------------------------------------------------------------------------------


def test_headline_keeps_rank_zero_only():
    # templates_frame(catalog, 2): P36:c0 (rank 0), P36:c1 (rank 1), P30:c0 (rank 0), …, all curated
    # → rows 1 (P36:c0) and 3 (P30:c0) are kept; row 2 (P36:c1, rank 1) is not
    est = pl.DataFrame(
        {"relation_id": ["P36", "P36", "P30"], "template_id": ["P36:c0", "P36:c1", "P30:c0"], "x": [1, 2, 3]}
    )
    tmpl = templates_frame(load_catalog(), 2)
    assert headline_template_estimates(est, tmpl)["x"].to_list() == [1, 3]


def _curated_with_a_marker_variant() -> pl.DataFrame:
    """Two curated templates per relation plus P36:c0's verbal-marker variant, which shares its
    parent's rank 0 but is not curated."""
    marker = pl.DataFrame(
        {"relation_id": ["P36"], "template_id": ["P36:c0:certainly"], "kind": ["marker_verbal"], "rank": [0]},
        schema_overrides={"rank": pl.Int32},
    )
    curated = templates_frame(load_catalog(), 2).select("relation_id", "template_id", "kind", "rank")
    return pl.concat([curated, marker])


def test_headline_keeps_curated_rank_zero_and_instance_rows():
    # A marker variant of P36:c0 shares its parent's rank 0 but is not curated: dropped.
    # Instance-grain rows have no template and are all kept; template rows of P36:c1 are dropped.
    tmpl = _curated_with_a_marker_variant()
    est = pl.DataFrame(
        {
            "relation_id": ["P36", "P36", "P36", "P36", "P30", "P36", "P30"],
            "template_id": ["P36:c0", "P36:c1", "P36:c0:certainly", "P36:c0", "P30:c0", None, None],
            "grain": ["template"] * 5 + ["instance"] * 2,
            "x": [1, 2, 3, 4, 5, 6, 7],
        }
    )
    # kept: 1 and 4 (P36:c0), 5 (P30:c0), then the instance rows 6 and 7
    assert headline_template_estimates(est, tmpl)["x"].to_list() == [1, 4, 5, 6, 7]


def test_headline_of_computed_estimates(temp_estimators):
    temp_estimators("unanimous", unanimous, grain="instance")
    # scores_frame under P36:c0 (headline) and P36:c1: 2 instances × 2 templates × base + 2 instance rows
    frame = pl.concat(
        [
            scores_frame().with_columns(template_id=pl.lit("P36:c0")),
            scores_frame().with_columns(template_id=pl.lit("P36:c1")),
        ]
    )
    out = compute_estimates(build_cube(frame), ["base", "unanimous"])
    assert out.height == 6
    head = headline_template_estimates(out, templates_frame(load_catalog(), 2))
    # kept: base on P36:c0 for i1 and i2, then unanimous for i1 and i2 (both templates agree per
    # instance: i1 → option 0, i2 → option 1, as in scores_frame)
    assert head.select("instance_id", "template_id", "estimator", "predicted_index").rows() == [
        ("i1", "P36:c0", "base", 0),
        ("i2", "P36:c0", "base", 1),
        ("i1", None, "unanimous", 0),
        ("i2", None, "unanimous", 1),
    ]


def test_estimates_carry_split_and_answer_space_k_from_probe_instances():
    # scores_frame's i1 and i2, and i1's `#k2` copy scored on its two kept options (0 gold, 2):
    # each row says its instance's split and answer space (0 full, 2 the copy).
    frame = pl.concat(
        [
            scores_frame(),
            scores_frame()
            .filter((pl.col("instance_id") == "i1") & pl.col("option_index").is_in([0, 2]))
            .with_columns(instance_id=pl.lit("i1#k2")),
        ]
    )
    instances = pl.DataFrame(
        {
            "instance_id": ["i1", "i2", "i1#k2"],
            "n_options": [3, 2, 2],
            "split": ["dev", "test", "dev"],
            "answer_space_k": [0, 0, 2],
            "answer_space_draw": [0, 0, 1],
        },
        schema_overrides={"answer_space_k": pl.Int32, "answer_space_draw": pl.Int32},
    )
    out = compute_estimates(build_cube(frame, instances=instances), ["base"])
    assert out["answer_space_k"].dtype == pl.Int32
    assert out.select("instance_id", "split", "answer_space_k").rows() == [
        ("i1", "dev", 0),
        ("i1#k2", "dev", 2),
        ("i2", "test", 0),
    ]


def test_headline_estimates_are_the_test_split_on_full_answer_spaces():
    # The headline numbers read the test split on full answer spaces only: dev rows and `#k` copies
    # on the headline template are dropped, as are other templates. Kept: 1 (test, k 0) and 5
    # (instance grain, test, k 0).
    tmpl = templates_frame(load_catalog(), 2)
    est = pl.DataFrame(
        {
            "relation_id": ["P36"] * 5,
            "template_id": ["P36:c0", "P36:c0", "P36:c0", "P36:c1", None],
            "grain": ["template"] * 4 + ["instance"],
            "split": ["test", "dev", "test", "test", "test"],
            "answer_space_k": [0, 0, 3, 0, 0],
            "x": [1, 2, 3, 4, 5],
        }
    )
    assert headline_estimates(est, tmpl)["x"].to_list() == [1, 5]
    assert headline_template_estimates(est, tmpl)["x"].to_list() == [1, 2, 3, 5]


def test_curated_template_estimates_keep_every_curated_template_only():
    # P36:c0 and P36:c1 are curated; a marker variant and instance-grain rows are not read.
    tmpl = _curated_with_a_marker_variant()
    est = pl.DataFrame(
        {
            "relation_id": ["P36", "P36", "P36", "P36"],
            "template_id": ["P36:c0", "P36:c1", "P36:c0:certainly", None],
            "x": [1, 2, 3, 4],
        }
    )
    assert curated_template_estimates(est, tmpl)["x"].to_list() == [1, 2]
