"""Selective-LAMA confidence functions (Token, Sent, Gap, Reranking, TemplateDiff, DropoutMean,
DropoutVar) on hand-worked cubes, against the per-row reference on random partitions, their
properties, their skip reasons, and one real probe scored by the embedded model."""

import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.dataset.instances.probe import (
    build_statements,
    instance_row,
    instances_frame,
    templates_frame,
)
from kcal_pipeline.dataset.instances.relation_probe import run_templates
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.markers import MARKER_VARIANTS, estimator_name
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimate_tables, compute_estimates
from tests.estimation.reference_selective import reference_rows

SELECTIVE = ["token", "sent", "gap", "reranking", "template_diff", "dropout_mean", "dropout_var"]
MARKERS = [estimator_name(v) for v in MARKER_VARIANTS]
MINE = [*SELECTIVE, *MARKERS, "answer_prior"]
LL = ["ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean"]
PASSES = ["ll_sum_dropout", "ll_answer_sum_dropout"]
ALL_KINDS = ("curated", "marker_verbal", "marker_numeric")


def p36_templates(kinds=("curated",), max_templates=2) -> pl.DataFrame:
    """The real templates table of a run (run_templates) for P36: P36:c0 "The capital of [X] is
    [Y]." (the answer after the subject) and P36:c1 "[Y] is the capital of [X]." (answer first),
    plus their marker variants P36:c0:certainly, …, P36:c1:numeric-100 when those kinds are chosen."""
    templates = run_templates(
        templates_frame(load_catalog(), max_templates), None, list(kinds), max_templates, [0]
    )
    return templates.filter(pl.col("relation_id") == "P36")


def scores(rows, columns, model="m", relation="P36") -> pl.DataFrame:
    """A statement_scores frame: rows (instance, template, option_index, object, is_gold, *values),
    one value per name in `columns` (a list of pass values for the *_dropout columns)."""
    schema = {
        "instance_id": pl.String,
        "template_id": pl.String,
        "option_index": pl.Int32,
        "object_id": pl.String,
        "is_gold": pl.Boolean,
        **{c: pl.List(pl.Float64) if c in PASSES else pl.Float64 for c in columns},
    }
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.select(
        pl.lit(model).alias("model_id"), pl.lit(relation).alias("relation_id"), *frame.columns
    )


def instances(n_options: dict[str, int], split="test") -> pl.DataFrame:
    return pl.DataFrame(
        {"instance_id": list(n_options), "n_options": list(n_options.values()), "split": split},
        schema_overrides={"n_options": pl.Int32},
    )


def logs(*probs):
    return [math.log(p) for p in probs]


def rows_of(out: pl.DataFrame, estimator: str, reduction: str = "sum") -> list[tuple]:
    """(instance, template, predicted_index, correct) of one estimator and reduction."""
    part = out.filter((pl.col("estimator") == estimator) & (pl.col("reduction") == reduction))
    return part.select("instance_id", "template_id", "predicted_index", "correct").rows()


def confidences(out: pl.DataFrame, estimator: str, reduction: str = "sum") -> list[float]:
    part = out.filter((pl.col("estimator") == estimator) & (pl.col("reduction") == reduction))
    return part["confidence"].to_list()


def quiet(_line: str) -> None:
    pass


# --- Token, Sent, Gap by hand -----------------------------------------------------------------------


def token_sent_gap_cube():
    """i1 on P36:c0 (answer after the subject) and P36:c1 (answer first), options Q0 (gold), Q1, Q2;
    i2 with one option (Q9, gold) on P36:c0."""
    rows = [
        # P36:c0: ll_sum [-2, -1, -4] → ŷ = 1 (Q1, wrong) under sum; likewise under every reduction
        ("i1", "P36:c0", 0, "Q0", True, -2.0, -0.4, -1.5, -0.75),
        ("i1", "P36:c0", 1, "Q1", False, -1.0, -0.2, -0.5, -0.25),
        ("i1", "P36:c0", 2, "Q2", False, -4.0, -0.8, -3.0, -1.5),
        # P36:c1: ll_sum [-3, -3, -5], a tie → ŷ = 0 (Q0, gold); ll_mean [-0.6, -0.5, -1.0] → ŷ = 1
        ("i1", "P36:c1", 0, "Q0", True, -3.0, -0.6, -2.0, -1.0),
        ("i1", "P36:c1", 1, "Q1", False, -3.0, -0.5, -2.5, -1.25),
        ("i1", "P36:c1", 2, "Q2", False, -5.0, -1.0, -4.0, -2.0),
        ("i2", "P36:c0", 0, "Q9", True, -6.0, -1.2, -0.7, -0.35),
    ]
    return build_cube(scores(rows, LL), instances({"i1": 3, "i2": 1}), p36_templates())


def test_token_is_the_answer_score_of_the_prediction_on_answer_conditional_templates_only():
    out = compute_estimates(token_sent_gap_cube(), ["token"], log=quiet)
    # Only P36:c0 rows: on P36:c1 "[Y] is the capital of [X]." the answer comes first, its score
    # ignores the subject. i1: ŷ = 1 under every reduction → ll_answer_sum(Q1) = -0.5; i2 → -0.7.
    for reduction in ("sum", "mean", "answer_sum", "answer_mean"):
        assert rows_of(out, "token", reduction) == [("i1", "P36:c0", 1, False), ("i2", "P36:c0", 0, True)]
        assert confidences(out, "token", reduction) == [-0.5, -0.7]
    assert out["output_kind"].unique().to_list() == ["score"]


def test_sent_is_the_mean_log_likelihood_of_the_prediction():
    out = compute_estimates(token_sent_gap_cube(), ["sent"], log=quiet)
    # sum: c0 ŷ = 1 → ll_mean -0.2; c1 ŷ = 0 (the tie's lowest index) → ll_mean -0.6 although
    # option 1 has the higher mean: Sent scores the Base prediction, it does not re-predict.
    assert rows_of(out, "sent") == [
        ("i1", "P36:c0", 1, False),
        ("i1", "P36:c1", 0, True),
        ("i2", "P36:c0", 0, True),
    ]
    assert confidences(out, "sent") == [-0.2, -0.6, -1.2]
    # mean: c1 ŷ = 1 (-0.5 > -0.6) → -0.5
    assert rows_of(out, "sent", "mean")[1] == ("i1", "P36:c1", 1, False)
    assert confidences(out, "sent", "mean") == [-0.2, -0.5, -1.2]


def test_gap_between_the_two_best_options_zero_on_a_tie_inf_with_one_option():
    out = compute_estimates(token_sent_gap_cube(), ["gap"], log=quiet)
    # sum:  c0 -1 − (-2) = 1; c1 tie -3, -3 → 0; i2 one option → +inf
    # mean: c0 -0.2 − (-0.4) = 0.2; c1 -0.5 − (-0.6) = 0.1
    # answer_sum: c0 -0.5 − (-1.5) = 1; c1 -2 − (-2.5) = 0.5; answer_mean: 0.5, 0.25
    expected = {"sum": [1.0, 0.0], "mean": [0.2, 0.1], "answer_sum": [1.0, 0.5], "answer_mean": [0.5, 0.25]}
    for reduction, (c0, c1) in expected.items():
        np.testing.assert_allclose(confidences(out, "gap", reduction), [c0, c1, math.inf], rtol=1e-12)
    assert rows_of(out, "gap")[1] == ("i1", "P36:c1", 0, True)


def test_gap_in_a_cube_of_one_option():
    # O = 1: no runner-up anywhere → +inf; no warnings from −inf arithmetic
    cube = build_cube(scores([("i1", "t0", 0, "Q0", True, -3.0)], ["ll_sum"]))
    with np.errstate(all="raise"):
        out = ESTIMATORS["gap"].fn(cube, "sum")
    assert out.predicted.tolist() == [[0]] and out.confidence.tolist() == [[math.inf]]


# --- Reranking by hand ------------------------------------------------------------------------------


def test_reranking_by_hand_rank_ties_multi_gold_and_k_from_the_probe():
    rows = [
        # i1: 4 options, golds Q0 and Q2
        #   sum:         ll_sum [-4, -3, -4, -6] → ŷ = 1 (wrong); under ll_mean [-1, -2, -1, -3] two
        #                options are strictly higher than -2 → rank 3 → log2(4/3) = 0.415037
        #   mean:        ll_mean → ŷ = 0 (tie with 2 → 0, gold); under ll_sum only -3 beats -4 (option
        #                2's -4 ties: not counted) → rank 2 → log2(4/2) = 1
        #   answer_sum:  [-4, -3, -4, -6] → ŷ = 1; under ll_answer_mean [-3, -2, -1, -4] only -1 beats
        #                -2 → rank 2 → 1 (paired with ll_mean instead it would be 0.415)
        #   answer_mean: [-3, -2, -1, -4] → ŷ = 2 (gold); under ll_answer_sum -3 beats -4 (-4 ties)
        #                → rank 2 → 1
        ("i1", "P36:c0", 0, "Q0", True, -4.0, -1.0, -4.0, -3.0),
        ("i1", "P36:c0", 1, "Q1", False, -3.0, -2.0, -3.0, -2.0),
        ("i1", "P36:c0", 2, "Q2", True, -4.0, -1.0, -4.0, -1.0),
        ("i1", "P36:c0", 3, "Q3", False, -6.0, -3.0, -6.0, -4.0),
        # i2: 2 options, gold Q5. sum: ŷ = 0; under ll_mean [-0.5, -0.1] it comes last → log2(2/2) = 0
        #     mean: ŷ = 1 (gold); under ll_sum [-1, -2] last again → 0
        ("i2", "P36:c0", 0, "Q4", False, -1.0, -0.5, -1.0, -0.5),
        ("i2", "P36:c0", 1, "Q5", True, -2.0, -0.1, -2.0, -0.1),
        # i3: the probe gives it 3 options, 2 were scored on this template: K = 3, not 2.
        #     ŷ = 0, first under the other rule too → log2(3/1) = 1.5849625
        ("i3", "P36:c0", 0, "Q6", True, -1.0, -0.1, -1.0, -0.1),
        ("i3", "P36:c0", 1, "Q7", False, -2.0, -0.2, -2.0, -0.2),
    ]
    cube = build_cube(scores(rows, LL), instances({"i1": 4, "i2": 2, "i3": 3}), p36_templates())
    out = compute_estimates(cube, ["reranking"], log=quiet)
    expected = {
        "sum": ([1, 0, 0], [math.log2(4 / 3), 0.0, math.log2(3)]),
        "mean": ([0, 1, 0], [1.0, 0.0, math.log2(3)]),
        "answer_sum": ([1, 0, 0], [1.0, 0.0, math.log2(3)]),
        "answer_mean": ([2, 1, 0], [1.0, 0.0, math.log2(3)]),
    }
    for reduction, (predicted, confidence) in expected.items():
        part = out.filter(pl.col("reduction") == reduction)
        assert part["predicted_index"].to_list() == predicted
        np.testing.assert_allclose(part["confidence"].to_numpy(), confidence, rtol=1e-12, atol=1e-15)
    # multi-gold: i1's ŷ = 0 under mean and ŷ = 2 under answer_mean are both correct
    i1 = out.filter(pl.col("instance_id") == "i1").select("reduction", "correct").rows()
    assert sorted(i1) == [("answer_mean", True), ("answer_sum", False), ("mean", True), ("sum", False)]
    assert confidences(out, "reranking", "sum")[0] == pytest.approx(0.4150374992788438, rel=1e-12)


# --- TemplateDiff by hand ---------------------------------------------------------------------------


def test_template_diff_by_hand():
    # masked scores need not be normalised: log [2, 6, 2] − 10 → softmax [0.2, 0.6, 0.2]
    rows = [
        # P36:c0  sum: p = [0.5, 0.3, 0.2] → ŷ = 0, 0.5; masked p(0) = 0.2 → 0.5 − 0.2 = 0.3
        #         answer_sum: p = [0.1, 0.6, 0.3] → ŷ = 1, 0.6; masked [.25, .25, .5] → 0.6 − 0.25 = 0.35
        *[
            ("i1", "P36:c0", o, f"Q{o}", o == 0, s, a, sm - 10, am)
            for o, s, a, sm, am in zip(
                range(3),
                logs(0.5, 0.3, 0.2),
                logs(0.1, 0.6, 0.3),
                logs(2, 6, 2),
                logs(0.25, 0.25, 0.5),
                strict=True,
            )
        ],
        # P36:c1  sum: ŷ = 0, 0.5; masked p = [0.7, 0.2, 0.1] → 0.5 − 0.7 = −0.2 (the template alone is
        #         surer than with the subject); answer_sum: [.2, .2, .6] → ŷ = 2; masked .8 → −0.2
        *[
            ("i1", "P36:c1", o, f"Q{o}", o == 0, s, a, sm, am)
            for o, s, a, sm, am in zip(
                range(3),
                logs(0.5, 0.3, 0.2),
                logs(0.2, 0.2, 0.6),
                logs(0.7, 0.2, 0.1),
                logs(0.1, 0.1, 0.8),
                strict=True,
            )
        ],
        # i2, one option: p = 1 with and without the subject → 0
        ("i2", "P36:c0", 0, "Q9", True, -3.0, -1.0, -9.0, -5.0),
    ]
    columns = ["ll_sum", "ll_answer_sum", "ll_sum_masked", "ll_answer_sum_masked"]
    out = compute_estimates(build_cube(scores(rows, columns)), ["template_diff"], log=quiet)
    assert rows_of(out, "template_diff") == [
        ("i1", "P36:c0", 0, True),
        ("i1", "P36:c1", 0, True),
        ("i2", "P36:c0", 0, True),
    ]
    np.testing.assert_allclose(confidences(out, "template_diff"), [0.3, -0.2, 0.0], atol=1e-12)
    assert [r[2] for r in rows_of(out, "template_diff", "answer_sum")] == [1, 2, 0]
    np.testing.assert_allclose(confidences(out, "template_diff", "answer_sum"), [0.35, -0.2, 0.0], atol=1e-12)
    assert out["reduction"].unique().sort().to_list() == ["answer_sum", "sum"]


# --- DropoutMean, DropoutVar by hand ----------------------------------------------------------------


def test_dropout_two_passes_by_hand():
    # i1, ŷ from the deterministic scores: sum p = [.5, .3, .2] → ŷ = 0; answer_sum [.2, .3, .5] → ŷ = 2
    # sum passes:        pass 1 p = [.6, .3, .1], pass 2 p = [.4, .4, .2] → p(0) = .6, .4
    #                    mean .5, var ((.1)² + (.1)²)/2 = .01 → DropoutVar −.01
    # answer_sum passes: pass 1 [.2, .2, .6], pass 2 [.2, .7, .1] → p(2) = .6, .1 (pass 2's argmax is
    #                    option 1: the passes score ŷ, they do not re-predict)
    #                    mean .35, var ((.25)² + (.25)²)/2 = .0625 → −.0625
    # i2, one option: p = 1 in every pass → mean 1, var 0
    sum_passes = [logs(0.6, 0.4), logs(0.3, 0.4), logs(0.1, 0.2)]
    answer_passes = [logs(0.2, 0.2), logs(0.2, 0.7), logs(0.6, 0.1)]
    rows = [
        ("i1", "t0", o, f"Q{o}", o == 0, s, a, sp, ap)
        for o, s, a, sp, ap in zip(
            range(3), logs(0.5, 0.3, 0.2), logs(0.2, 0.3, 0.5), sum_passes, answer_passes, strict=True
        )
    ]
    rows.append(("i2", "t0", 0, "Q9", False, -2.0, -1.0, [-2.5, -1.5], [-1.0, -0.5]))
    cube = build_cube(scores(rows, ["ll_sum", "ll_answer_sum", *PASSES]))
    assert cube.scores["ll_sum_dropout"].shape == (2, 1, 3, 2)
    out = compute_estimates(cube, ["dropout_mean", "dropout_var"], log=quiet)
    np.testing.assert_allclose(confidences(out, "dropout_mean"), [0.5, 1.0], rtol=1e-12)
    np.testing.assert_allclose(confidences(out, "dropout_var"), [-0.01, 0.0], atol=1e-15)
    np.testing.assert_allclose(confidences(out, "dropout_mean", "answer_sum"), [0.35, 1.0], rtol=1e-12)
    np.testing.assert_allclose(confidences(out, "dropout_var", "answer_sum"), [-0.0625, 0.0], atol=1e-15)
    assert rows_of(out, "dropout_mean", "answer_sum") == [("i1", "t0", 2, False), ("i2", "t0", 0, False)]
    kinds = out.select("estimator", "output_kind").unique().sort("estimator").rows()
    assert kinds == [("dropout_mean", "probability"), ("dropout_var", "score")]


def test_dropout_three_passes_softmax_within_each_pass():
    # ŷ = 1 (p = [.3, .7]); passes p(1) = .2, .5, .8 → mean .5, var (.09 + 0 + .09)/3 = .06.
    # Pass m is shifted by −10·m: a softmax within each pass ignores it, one across passes would not.
    passes = [[math.log(p) - 10 * m for m, p in enumerate(ps)] for ps in ((0.8, 0.5, 0.2), (0.2, 0.5, 0.8))]
    rows = [
        ("i1", "t0", o, f"Q{o}", o == 1, ll, pp)
        for o, ll, pp in zip(range(2), logs(0.3, 0.7), passes, strict=True)
    ]
    out = compute_estimates(
        build_cube(scores(rows, ["ll_sum", "ll_sum_dropout"])), ["dropout_mean", "dropout_var"], log=quiet
    )
    assert out.select("estimator", "predicted_index", "correct").rows() == [
        ("dropout_mean", 1, True),
        ("dropout_var", 1, True),
    ]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.5, -0.06], rtol=1e-12)


# --- skipped with one line naming what is missing ---------------------------------------------------


def test_without_masked_or_dropout_scores_those_estimators_are_skipped():
    # statement_scores always has the optional columns, null when not computed: the cube drops them
    rows = [("i1", "P36:c0", o, f"Q{o}", o == 0, -1.0 - o, -0.5 - o, -1.0 - o, -0.5 - o) for o in range(2)]
    frame = scores(rows, LL).with_columns(
        pl.lit(None, pl.Float64).alias("ll_sum_masked"),
        pl.lit(None, pl.Float64).alias("ll_answer_sum_masked"),
        pl.lit(None, pl.List(pl.Float64)).alias("ll_sum_dropout"),
        pl.lit(None, pl.List(pl.Float64)).alias("ll_answer_sum_dropout"),
    )
    lines = []
    tables = compute_estimate_tables(
        build_cube(frame, templates=p36_templates()), SELECTIVE, log=lines.append
    )
    assert sorted(lines) == [
        "skipped, no ll_answer_sum_dropout scores (P36): dropout_mean (answer_sum), dropout_var (answer_sum)",
        "skipped, no ll_answer_sum_masked scores (P36): template_diff (answer_sum)",
        "skipped, no ll_sum_dropout scores (P36): dropout_mean (sum), dropout_var (sum)",
        "skipped, no ll_sum_masked scores (P36): template_diff (sum)",
    ]
    assert tables.estimates["estimator"].unique().sort().to_list() == ["gap", "reranking", "sent", "token"]


def test_token_without_answer_conditional_templates_is_skipped():
    rows = [("i1", "P36:c1", o, f"Q{o}", o == 0, -1.0 - o, -0.5 - o, -1.0 - o, -0.5 - o) for o in range(2)]
    frame = scores(rows, LL)
    reason = "no answer-conditional templates (the answer slot comes first, or no templates table) (P36)"
    # P36:c1 "[Y] is the capital of [X]." only: the answer comes first
    for cube in (build_cube(frame, templates=p36_templates()), build_cube(frame)):
        lines = []
        out = compute_estimates(cube, ["token", "gap"], log=lines.append)
        assert lines == [
            f"skipped, {reason}: token (sum), token (mean), token (answer_sum), token (answer_mean)"
        ]
        assert out["estimator"].unique().to_list() == ["gap"]


def test_reranking_without_its_second_rule_is_skipped():
    rows = [("i1", "t0", o, f"Q{o}", o == 0, -1.0 - o, -1.0 - o) for o in range(2)]
    lines = []
    out = compute_estimates(
        build_cube(scores(rows, ["ll_sum", "ll_answer_sum"])), ["reranking"], log=lines.append
    )
    assert sorted(lines) == [
        "skipped, no ll_answer_mean scores (P36): reranking (answer_mean)",
        "skipped, no ll_answer_mean scores (Reranking's second rule) (P36): reranking (answer_sum)",
        "skipped, no ll_mean scores (P36): reranking (mean)",
        "skipped, no ll_mean scores (Reranking's second rule) (P36): reranking (sum)",
    ]
    assert out.is_empty()


# --- random partitions: the reference and the properties --------------------------------------------


def random_partition(seed: int, ties: bool = True) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(scores, probe instances, templates) of one random P36 partition on the real templates table
    (P36:c0, P36:c1 and their 14 marker variants, some variants left out).

    4–8 instances with 1–8 options (one with 1, one with 8), some option indices non-contiguous,
    one or two golds, ~15% of (instance, template) pairs and ~5% of statements missing; with
    `ties`, ~40% of pairs have integer scores in {−3, −2, −1} in every column (argmax and rank
    ties). Every score column, 2 or 3 dropout passes. Rows shuffled.
    """
    rng = np.random.default_rng(seed)
    templates = p36_templates(ALL_KINDS)
    variants = templates.filter(pl.col("parent_id").is_not_null())
    dropped = variants["template_id"].to_list()[: int(rng.integers(0, 4))] if seed % 2 else []
    scored = [t for t in templates["template_id"].to_list() if t not in set(dropped)]
    n_passes = 2 + seed % 2
    counts = rng.integers(1, 9, size=int(rng.integers(4, 9)))
    counts[:2] = (1, 8)
    counts = rng.permutation(counts)
    rows, probe = [], {}
    for i, k in enumerate(counts):
        inst = f"i{i:02d}"
        probe[inst] = int(k)
        options = (
            list(range(k))
            if rng.random() < 0.6
            else sorted(rng.choice(k + 3, size=k, replace=False).tolist())
        )
        golds = set(rng.choice(options, size=1 + int(k > 1 and rng.random() < 0.3), replace=False).tolist())
        kept = [t for t in scored if rng.random() > 0.15] or scored[:1]
        for t in kept:
            tied = ties and rng.random() < 0.4
            pair = []
            for o in options:
                if tied:
                    values = [float(v) for v in rng.integers(-3, 0, size=6)]
                    passes = [[float(v) for v in rng.integers(-3, 0, size=n_passes)] for _ in PASSES]
                else:
                    length = float(rng.integers(3, 13))
                    ll_sum, ll_answer_sum = float(rng.normal(-20, 4)), float(rng.normal(-6, 2))
                    masked = [float(rng.normal(-20, 4)), float(rng.normal(-6, 2))]
                    values = [ll_sum, ll_sum / length, ll_answer_sum, ll_answer_sum / 2, *masked]
                    passes = [(v + rng.normal(0, 1, size=n_passes)).tolist() for v in (ll_sum, ll_answer_sum)]
                pair.append((inst, t, int(o), f"Q{seed}_{i}_{o}", int(o) in golds, *values, *passes))
            if len(pair) > 1:
                pair = [r for r in pair if rng.random() > 0.05] or pair[:1]
            rows += pair
    columns = [*LL, "ll_sum_masked", "ll_answer_sum_masked", *PASSES]
    frame = scores(rows, columns, model=f"m{seed % 3}").sample(fraction=1.0, shuffle=True, seed=seed)
    split = ["dev" if rng.random() < 0.3 else "test" for _ in probe]
    return frame, instances(probe).with_columns(split=pl.Series(split)), templates


SEEDS = range(16)


def test_random_partitions_cover_the_edge_cases():
    frames = [random_partition(s)[0] for s in SEEDS]
    pairs = (
        pl.concat([f.with_columns(seed=pl.lit(s)) for s, f in zip(SEEDS, frames, strict=True)])
        .group_by("seed", "instance_id", "template_id")
        .agg(
            n=pl.len(),
            n_top=(pl.col("ll_sum") == pl.col("ll_sum").max()).sum(),
            golds=pl.col("is_gold").sum(),
        )
    )
    assert (pairs["n"] == 1).sum() > 0  # single options (gap +inf)
    assert (pairs["n_top"] > 1).sum() >= 20  # argmax ties
    assert (pairs["golds"] > 1).sum() >= 10  # multi-gold
    assert {f["ll_sum_dropout"].list.len().max() for f in frames} == {2, 3}
    templates = {s: set(f["template_id"].unique()) for s, f in zip(SEEDS, frames, strict=True)}
    assert any(len(t) < 16 for t in templates.values())  # some marker variants left out


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorised_equals_the_reference(seed):
    frame, probe, templates = random_partition(seed)
    out = compute_estimates(build_cube(frame, probe, templates), MINE, log=quiet)
    expected = reference_rows(frame, probe, templates, MINE)
    assert out["estimator"].n_unique() >= 10
    assert_frame_equal(out, expected, check_exact=False, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_option_order_changes_nothing(seed):
    # Renumber each instance's options by a random permutation (the same on every template); with
    # tie-free scores no estimator may change its answer, confidence or correctness.
    frame, probe, templates = random_partition(seed, ties=False)
    rng = np.random.default_rng(100 + seed)
    mapping = []
    for inst, indices in frame.group_by("instance_id").agg(pl.col("option_index").unique()).iter_rows():
        mapping += [
            (inst, old, new) for old, new in zip(indices, rng.permutation(indices).tolist(), strict=True)
        ]
    renumber = pl.DataFrame(
        mapping,
        schema=["instance_id", "option_index", "new_index"],
        orient="row",
        schema_overrides={"option_index": pl.Int32, "new_index": pl.Int32},
    )
    shuffled = (
        frame.join(renumber, on=["instance_id", "option_index"])
        .with_columns(option_index=pl.col("new_index"))
        .drop("new_index")
    )
    assert not shuffled.sort("instance_id", "template_id", "object_id")["option_index"].equals(
        frame.sort("instance_id", "template_id", "object_id")["option_index"]
    )
    keep = ["instance_id", "template_id", "estimator", "reduction", "predicted_id", "confidence", "correct"]
    a = compute_estimates(build_cube(frame, probe, templates), MINE, log=quiet).select(keep)
    b = compute_estimates(build_cube(shuffled, probe, templates), MINE, log=quiet).select(keep)
    assert_frame_equal(a, b, check_exact=False, rel_tol=0, abs_tol=1e-12)
    assert 0 < a["correct"].sum() < a.height


@pytest.mark.parametrize("seed", SEEDS)
def test_bounds(seed):
    frame, probe, templates = random_partition(seed)
    out = compute_estimates(build_cube(frame, probe, templates), [*SELECTIVE, "answer_prior"], log=quiet)

    def conf(name):
        return out.filter(pl.col("estimator") == name)["confidence"].to_numpy()

    assert (conf("dropout_var") <= 0).all()  # −Var ≤ 0
    assert ((conf("dropout_mean") >= 0) & (conf("dropout_mean") <= 1 + 1e-15)).all()
    assert ((conf("template_diff") >= -1) & (conf("template_diff") <= 1)).all()  # difference of probabilities
    assert (conf("gap") >= 0).all()  # the prediction is the best option
    assert (conf("reranking") >= 0).all()  # rank ≤ the valid options ≤ K
    assert ((conf("answer_prior") > 0) & (conf("answer_prior") <= 1 + 1e-15)).all()


# --- one real probe, scored by the embedded model ---------------------------------------------------


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[2] / ".kcal" / "models")


def test_a_real_probe_gives_rows_for_every_estimator(tmp_path):
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
    from kcal_pipeline.scoring.partition import score_partition

    # P36:c0 and its seven marker variants; France with 3 options, Iceland with one. Subject mask, 2
    # dropout passes at rate 0.1 (SmolLM2 has no dropout of its own), as `--subject-mask --dropout
    # --dropout-passes 2 --dropout-rate 0.1`: 32 statements, each scored 4 times.
    labels = {"Q90": "Paris", "Q2868": "Lima", "Q1764": "Reykjavík", "Q64": "Berlin"}
    probe = instances_frame(
        [
            instance_row(
                "P36",
                "Q142",
                "France",
                ["Q90"],
                ["Q64", "Q90", "Q2868"],
                labels,
                split_seed=0,
                dev_fraction=0.2,
            ),
            instance_row(
                "P36", "Q189", "Iceland", ["Q1764"], ["Q1764"], labels, split_seed=0, dev_fraction=0.2
            ),
        ]
    )
    templates = p36_templates(ALL_KINDS, max_templates=1)
    assert templates.height == 8
    statements = build_statements(probe, templates)
    options = ScoringOptions(dropout=True, dropout_passes=2, dropout_rate=0.1, subject_mask=True)
    loaded = load_model(DEFAULT_MODEL, model_cache())
    frame = score_partition(loaded, loaded.key, statements, options, tmp_path, "P36", chunk_size=1024).frame
    cube = build_cube(frame, probe, templates)
    assert cube.scores["ll_sum_dropout"].shape == (2, 8, 3, 2)
    lines = []
    out = compute_estimate_tables(cube, MINE, log=lines.append).estimates
    assert lines == []  # nothing skipped
    counts = dict(out.group_by("estimator").len().iter_rows())
    # 2 instances × reductions × templates: all 8 templates, but Token on P36:c0 only (the one
    # curated template, its answer after the subject) and the markers on their parent's row, P36:c0
    on_c0 = {"token", *MARKERS}
    assert counts == {n: 2 * len(ESTIMATORS[n].reductions) * (1 if n in on_c0 else 8) for n in MINE}
    assert set(out.filter(pl.col("estimator").is_in(on_c0))["template_id"]) == {"P36:c0"}
    single = pl.col("instance_id") == "P36:Q189"
    assert out.filter(single & (pl.col("estimator") == "gap"))["confidence"].to_list() == [math.inf] * 32
    finite = out.filter(~(single & (pl.col("estimator") == "gap")))["confidence"].to_numpy()
    assert np.isfinite(finite).all()
    # the real scores are real: the passes differ from each other (dropout was on)
    present = cube.valid[..., None] & np.ones(2, dtype=bool)
    passes = cube.scores["ll_sum_dropout"][present].reshape(-1, 2)
    assert (passes[:, 0] != passes[:, 1]).any()
