"""Kissling et al. (seed 000)'s claims about Base on hand-made tables: overconfidence (§5.1), Sum's H
against the runner-up reduction picked on dev (App. B), Mean's right skew and low ACE (App. B), the
option-count sweep averaged over draws (§5.4) and ACE against accuracy (§5.3: across models not
testable here, across relations descriptive).

Where a verdict must be exact every row of a side is alike (one confidence, all right or all
wrong), so every bootstrap resample gives the same value and the interval is [d, d]. Expected
values are worked out by hand in the comments."""

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from kcal_pipeline.evaluation.resamples import instance_resamples
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import (
    CLAIMS,
    DESCRIPTIVE,
    FAILS,
    FIGURE_ONLY,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
)
from kcal_pipeline.reporting.findings.kissling_base import _resample_skewness, _skewness
from tests.reporting.test_findings import MODEL, only, rows, store

ALL_RIGHT, ALL_WRONG = [True] * 20, [False] * 20
KEYS = (
    "models_overconfident",
    "sum_best_reduction",
    "mean_reduction_skews_low",
    "more_options_lower_ace",
    "ace_falls_with_accuracy",
)


def test_the_claims_cite_the_sections_they_rest_on_and_print_no_number_off_a_figure():
    where = {
        "models_overconfident": "§5.1, Fig. 2; Abstract",
        "sum_best_reduction": "App. B, Fig. 8",
        "mean_reduction_skews_low": "App. B, Fig. 9",
        "more_options_lower_ace": "§5.4; §5.4, Fig. 5",
        "ace_falls_with_accuracy": "§5.3, Fig. 4; §5.3",
    }
    for key in KEYS:
        c = CLAIMS[key]
        assert c.where == where[key] and not c.reference, key
        assert "released" not in c.number.text and not c.number.released, key
        assert c.number.effect is None, key
    assert CLAIMS["more_options_lower_ace"].stage == "sweep"
    assert CLAIMS["ace_falls_with_accuracy"].kind == fd.DESCRIPTIVE_KIND
    assert CLAIMS["mean_reduction_skews_low"].number.model == "opt-1.3b"
    assert {CLAIMS[k].number for k in KEYS if k != "mean_reduction_skews_low"} == {FIGURE_ONLY}


# --- Base is overconfident (§5.1) ----------------------------------------------------------------


def metrics(rows_: list[tuple[str, str, float, float, float]]) -> pl.DataFrame:
    """Metrics rows (estimator, metric, value, ci_low, ci_high) on the headline selection, plus a
    decoy under another reduction and scope that the claim must not read."""
    base = {"model_id": MODEL, "split": "test", "answer_space_k": 0, "n": 50}
    out = []
    for estimator, metric, value, low, high in rows_:
        row = {**base, "estimator": estimator, "metric": metric, "ci_low": low, "ci_high": high}
        out += [
            {**row, "reduction": "sum", "scope": "all", "scope_value": "all", "value": value},
            {**row, "reduction": "mean", "scope": "all", "scope_value": "all", "value": 9.0},
            {**row, "reduction": "sum", "scope": "relation", "scope_value": "P1", "value": 9.0},
        ]
    return pl.DataFrame(out)


@pytest.mark.parametrize(
    ("gap", "low", "high", "verdict"),
    [(0.3, 0.2, 0.4, HOLDS), (-0.1, -0.2, -0.05, FAILS), (0.01, -0.02, 0.04, INCONCLUSIVE)],
)
def test_overconfidence_reads_bases_signed_gap_and_its_interval(gap, low, high, verdict):
    table = metrics(
        [
            ("base", "confidence_gap", gap, low, high),
            ("base", "mean_confidence", 0.7, 0.6, 0.8),
            ("base", "accuracy", 0.4, 0.3, 0.5),
            ("margin", "confidence_gap", -0.5, -0.6, -0.4),
        ]
    )
    f = only(fd.models_overconfident(store(metrics=table)))
    assert (f.subject, f.verdict, f.value, f.ci_low, f.ci_high, f.n) == (
        "mean confidence(Base) − accuracy(Base)", verdict, gap, low, high, 50,
    )  # fmt: skip
    assert f.numbers == f"gap {fd.fmt_ci(gap, low, high)}; mean confidence 0.700; accuracy 0.400"


def test_overconfidence_without_the_gap_row_is_not_testable():
    for t in (store(), store(metrics=metrics([("base", "accuracy", 0.4, 0.3, 0.5)]))):
        f = only(fd.models_overconfident(t))
        assert f.verdict == NOT_TESTABLE and "confidence_gap" in f.note and "--dev-fraction < 1" in f.note


# --- Sum has the highest H (App. B) ----------------------------------------------------------------


def reduced(split="test", **by_reduction) -> pl.DataFrame:
    """Base under each reduction: (correct, confidence) on instances i0 … i19 of the headline
    template, plus a Margin row and a non-headline template's row that the claim must not read."""
    frames = [rows("base", c, p, reduction=r) for r, (c, p) in by_reduction.items()]
    frames += [
        rows("margin", ALL_WRONG, 0.0, reduction="mean"),
        rows("base", ALL_WRONG, 0.0, template="P1:c1"),
    ]
    return pl.concat(frames).with_columns(split=pl.lit(split))


# H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE): all right at confidence 1 → Acc 1, ACE 0, H 1; all right at
# 0.5 → ACE 0.5, H = 2·0.5/1.5 = 2/3; all wrong at 0 → Acc 0, ACE 0, H 0.
PERFECT, HALF_SURE, NOTHING = (ALL_RIGHT, 1.0), (ALL_RIGHT, 0.5), (ALL_WRONG, 0.0)


def reductions_store(test: dict, dev: dict):
    return store(estimates=reduced(**test), dev_estimates=reduced("dev", **dev))


@pytest.mark.parametrize(
    ("test", "dev", "runner", "verdict", "difference"),
    [
        # dev: Mean (2/3) beats Sum(A) (0): Mean is the runner-up; test H 1 − 2/3.
        ({"sum": PERFECT, "mean": HALF_SURE, "answer_sum": NOTHING},
         {"mean": HALF_SURE, "answer_sum": NOTHING}, "Mean", HOLDS, 1 / 3),
        # dev picks Sum(A) although Mean beats Sum on test: the pick is the dev split's, 2/3 − 0.
        ({"sum": HALF_SURE, "mean": PERFECT, "answer_sum": NOTHING},
         {"mean": NOTHING, "answer_sum": PERFECT}, "Sum(A)", HOLDS, 2 / 3),
        ({"sum": HALF_SURE, "mean": PERFECT}, {"mean": HALF_SURE}, "Mean", FAILS, -1 / 3),
        ({"sum": HALF_SURE, "answer_mean": HALF_SURE},
         {"answer_mean": HALF_SURE}, "Mean(A)", INCONCLUSIVE, 0.0),
    ],
)  # fmt: skip
def test_sums_h_against_the_runner_up_picked_on_the_dev_split(test, dev, runner, verdict, difference):
    f = only(fd.sum_best_reduction(reductions_store(test, dev)))
    assert f.subject == f"H(Base, Sum) − H(Base, {runner})"
    assert (f.verdict, f.n) == (verdict, 20)
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((difference, difference, difference))
    assert f.note.startswith("runner-up picked on the dev split by H: ")


def test_the_reductions_accuracy_ace_and_h_are_shown_with_the_dev_pick():
    t = reductions_store({"sum": PERFECT, "mean": HALF_SURE}, {"mean": HALF_SURE, "sum": NOTHING})
    f = only(fd.sum_best_reduction(t))
    assert f.numbers == (
        "ΔH 0.333 [0.333, 0.333] on 20 test instances; Sum: H 1.000, accuracy 1.000, ACE 0.000; "
        "Mean: H 0.667, accuracy 1.000, ACE 0.500"
    )
    assert f.note == "runner-up picked on the dev split by H: Mean 0.667"


def test_sum_alone_no_sum_or_no_dev_split_is_not_testable():
    for est in (reduced(sum=PERFECT), reduced(mean=PERFECT, answer_sum=HALF_SURE)):
        f = only(
            fd.sum_best_reduction(store(estimates=est, dev_estimates=est.with_columns(split=pl.lit("dev"))))
        )
        assert f.verdict == NOT_TESTABLE and "--build (stage bear)" in f.note
    f = only(fd.sum_best_reduction(store(estimates=reduced(sum=PERFECT, mean=HALF_SURE))))
    assert f.verdict == NOT_TESTABLE and "--dev-fraction > 0" in f.note


# --- Mean skews right and lowers ACE (App. B) ------------------------------------------------------


def two_values(n_low, low, n_high, high):
    return [low] * n_low + [high] * n_high


def mean_and_sum(mean_conf, sum_conf, correct):
    n = len(mean_conf)
    ids = [f"i{j}" for j in range(n)]
    return store(
        estimates=pl.concat(
            [
                rows("base", correct, mean_conf, reduction="mean", instances=ids),
                rows("base", correct, sum_conf, reduction="sum", instances=ids),
                rows("margin", correct, 0.99, reduction="mean", instances=ids),  # a decoy
            ]
        )
    )


# A two-point sample with share p at the upper value has g1 = (1 − 2p)/√(p(1 − p)): p = 1/4 → 2/√3.
G1_QUARTER = 2 / math.sqrt(3)


@pytest.mark.parametrize(
    ("mean_conf", "sum_conf", "skew", "skew_verdict", "ace", "ace_verdict"),
    [
        # Mean 30 × 0.1, 10 × 0.7, all wrong: two bins, ACE (0.1 + 0.7)/2 = 0.4; Sum 0.9 → ACE 0.9.
        (two_values(30, 0.1, 10, 0.7), [0.9] * 40, G1_QUARTER, HOLDS, 0.4 - 0.9, HOLDS),
        # mirrored: 30 × 0.9, 10 × 0.3 → g1 −2/√3; ACE (0.9 + 0.3)/2 = 0.6 against Sum's 0.1.
        (two_values(10, 0.3, 30, 0.9), [0.1] * 40, -G1_QUARTER, FAILS, 0.6 - 0.1, FAILS),
        # symmetric, equal under both reductions: g1 0, ΔACE 0.
        (two_values(20, 0.2, 20, 0.8), two_values(20, 0.2, 20, 0.8), 0.0, INCONCLUSIVE, 0.0, INCONCLUSIVE),
    ],
)
def test_means_skewness_and_its_ace_against_sums(mean_conf, sum_conf, skew, skew_verdict, ace, ace_verdict):
    found = fd.mean_reduction_skews_low(mean_and_sum(mean_conf, sum_conf, [False] * 40))
    g1, delta = only(found, "skewness"), only(found, "ACE(Base, Mean)")
    assert (g1.verdict, g1.n) == (skew_verdict, 40) and g1.value == pytest.approx(skew, abs=1e-12)
    assert g1.ci_low <= g1.value <= g1.ci_high
    assert (delta.verdict, delta.subject) == (ace_verdict, "ACE(Base, Mean) − ACE(Base, Sum)")
    assert delta.value == pytest.approx(ace, abs=1e-12)


def test_means_accuracy_confidence_and_largest_confidence_are_shown():
    found = fd.mean_reduction_skews_low(mean_and_sum(two_values(30, 0.1, 10, 0.7), [0.9] * 40, [False] * 40))
    # mean confidence (30·0.1 + 10·0.7)/40 = 0.25; Sum's confidences are all equal: no skewness.
    assert only(found, "skewness").numbers == (
        "g1 1.155 [" + only(found, "skewness").numbers.split("[")[1].split("]")[0] + "] on 40 instances; "
        "Mean: accuracy 0.000, ACE 0.400, mean confidence 0.250, largest 0.700, skewness 1.155; "
        "Sum: accuracy 0.000, ACE 0.900, mean confidence 0.900, largest 0.900, skewness n/a"
    )


def test_skewness_matches_scipy_and_every_resample_is_read_from_its_raw_moments():
    values = np.random.default_rng(3).beta(1, 6, 50)
    assert _skewness(values) == pytest.approx(stats.skew(values), rel=1e-12)
    assert _skewness(np.array([0.1, 0.1, 0.1, 0.7])) == pytest.approx(G1_QUARTER)
    assert math.isnan(_skewness(np.full(5, 0.3)))
    res = instance_resamples(50, 20, 0)
    expected = [stats.skew(values[i]) for i in res.indices]
    assert _resample_skewness(values, res) == pytest.approx(expected, rel=1e-9)


def test_without_mean_or_sum_both_rows_are_not_testable():
    found = fd.mean_reduction_skews_low(store(estimates=rows("base", ALL_WRONG, 0.9)))
    assert [f.verdict for f in found] == [NOT_TESTABLE, NOT_TESTABLE] and "Sum and Mean" in found[0].note


# --- more options lower ACE (§5.4, Fig. 5) ---------------------------------------------------------


def swept(full, cuts, *, n=20):
    """Base on the full answer space of i0 … and on sweep copies: `cuts` maps (k, draw) to
    (correct, confidence) of copies `i<j>#k<k>d<draw>` of the first `n` instances; a cut copy of
    another estimator is a decoy."""
    frames = [rows("base", full[0], full[1], instances=[f"i{j}" for j in range(len(full[0]))])]
    for (k, draw), (correct, confidence) in cuts.items():
        copies = rows("base", correct[:n], confidence, instances=[f"i{j}#k{k}d{draw}" for j in range(n)])
        frames.append(
            copies.with_columns(answer_space_k=pl.lit(k, pl.Int32), answer_space_draw=pl.lit(draw, pl.Int32))
        )
    decoy = rows("margin", ALL_WRONG, 0.9, instances=[f"i{j}#k5d1" for j in range(20)])
    return pl.concat([*frames, decoy.with_columns(answer_space_k=pl.lit(5, pl.Int32))])


# One confidence 0.9: all right → ACE 0.1, gap −0.1; all wrong → ACE 0.9, gap +0.9.
SURE_RIGHT, SURE_WRONG = (ALL_RIGHT, 0.9), (ALL_WRONG, 0.9)


@pytest.mark.parametrize(
    ("full", "draws", "verdict", "ace", "gap"),
    [
        # k = 5 over draws wrong, right, wrong: ACE (0.9 + 0.1 + 0.9)/3, gap (0.9 − 0.1 + 0.9)/3.
        (SURE_RIGHT, (SURE_WRONG, SURE_RIGHT, SURE_WRONG), HOLDS, 0.1 - 1.9 / 3, -0.1 - 1.7 / 3),
        (SURE_WRONG, (SURE_RIGHT,) * 3, FAILS, 0.9 - 0.1, 0.9 + 0.1),
        (SURE_RIGHT, (SURE_RIGHT,) * 3, INCONCLUSIVE, 0.0, 0.0),
    ],
)
def test_the_full_answer_space_against_the_smallest_k_averaged_over_draws(full, draws, verdict, ace, gap):
    cuts = {(5, d): side for d, side in enumerate(draws, 1)} | {(10, 1): SURE_WRONG}
    found = fd.more_options_lower_ace(store(estimates=swept(full, cuts)))
    d_ace = only(found, "ACE(Base, full answer space) − ACE(Base, k = 5), mean over 3 draw(s)")
    d_gap = only(found, "(confidence − accuracy)(full answer space)")
    for f, value in ((d_ace, ace), (d_gap, gap)):
        assert (f.verdict, f.n) == (verdict, 20)
        assert (f.value, f.ci_low, f.ci_high) == pytest.approx((value, value, value))
        assert f.numbers.endswith(f"{fd.fmt_ci(value, value, value)} on 20 instances cut in every draw")
    assert [f.subject for f in found if f.verdict == DESCRIPTIVE] == [
        "Base at full answer space", "Base at k = 5", "Base at k = 10",
    ]  # fmt: skip


def test_every_option_counts_ace_confidence_and_accuracy_are_the_mean_over_draws():
    cuts = {(5, 1): SURE_WRONG, (5, 2): SURE_RIGHT, (5, 3): SURE_WRONG}
    found = fd.more_options_lower_ace(store(estimates=swept(SURE_RIGHT, cuts)))
    k5 = only(found, "Base at k = 5")
    # ACE (0.9 + 0.1 + 0.9)/3 = 0.633, confidence 0.9, accuracy (0 + 1 + 0)/3 = 0.333.
    assert (k5.verdict, k5.n, k5.value) == (DESCRIPTIVE, 20, pytest.approx(1.9 / 3))
    assert k5.numbers == (
        "ACE 0.633, mean confidence 0.900, accuracy 0.333 (mean over 3 draw(s); ACE, confidence, accuracy "
        "of draw 1: 0.900, 0.900, 0.000; draw 2: 0.100, 0.900, 1.000; draw 3: 0.900, 0.900, 0.000)"
    )
    assert (
        only(found, "Base at full answer space").numbers == "ACE 0.100, mean confidence 0.900, accuracy 1.000"
    )


def test_only_the_instances_cut_in_every_draw_are_compared():
    # 40 instances on the full space: i0 … i19 right, i20 … i39 wrong; k = 5 cuts i0 … i19 in draw 1,
    # only i0 … i9 in draw 2: the pair rests on i0 … i9, all right at full (ACE 0.1), wrong when cut.
    est = swept((ALL_RIGHT + ALL_WRONG, 0.9), {(5, 1): SURE_WRONG})
    est = pl.concat(
        [est, swept(SURE_RIGHT, {(5, 2): SURE_WRONG}, n=10).filter(pl.col("answer_space_draw") == 2)]
    )
    f = only(fd.more_options_lower_ace(store(estimates=est)), "ACE(Base, full")
    assert (f.n, f.verdict, f.value) == (10, HOLDS, pytest.approx(0.1 - 0.9))


def test_a_store_without_a_sweep_or_without_its_full_answer_spaces_is_not_testable():
    f = only(fd.more_options_lower_ace(store(estimates=rows("base", ALL_WRONG, 0.5))))
    assert f.verdict == NOT_TESTABLE and "--answer-space-k 5,10,20,40" in f.note and "stage sweep" in f.note
    only_cut = swept(SURE_RIGHT, {(5, 1): SURE_WRONG}).filter(pl.col("answer_space_k") > 0)
    f = only(fd.more_options_lower_ace(store(estimates=only_cut)))
    assert f.verdict == NOT_TESTABLE and "not their full answer spaces" in f.note


# --- ACE against accuracy (§5.3, Fig. 4) -----------------------------------------------------------

RELATIONS = [f"R{r}" for r in range(1, 6)]
HEADS = pl.DataFrame(
    {"relation_id": RELATIONS, "template_id": [f"{r}:c0" for r in RELATIONS], "rank": 0, "kind": "curated"}
)


def by_relation(confidence: float, relations=RELATIONS) -> pl.DataFrame:
    """Four instances per relation at one confidence; relation r has r − 1 of 4 right: accuracy
    0, 0.25, 0.5, 0.75, 1; every row shares one bin, so ACE = |accuracy − confidence|. Margin has
    rows in R1 only."""
    return pl.concat(
        [
            rows("base", [j < r for j in range(4)], confidence, template=f"{rel}:c0", relation=rel)
            for r, rel in enumerate(relations)
        ]
        + [rows("margin", [True] * 4, 0.1, template="R1:c0", relation="R1")]
    )


# accuracy x = 0, .25, .5, .75, 1 (mean .5); at confidence 0.9 ACE y = .9, .65, .4, .15, .1 (mean .44):
# Σdx·dy = −.5·.46 − .25·.21 + 0 − .25·.29 − .5·.34 = −.525, Σdx² = .625, Σdy² = .457.
R_AT_09 = -0.525 / math.sqrt(0.625 * 0.457)


def test_across_models_is_not_testable_here_and_across_relations_is_kcals_own_description():
    found = fd.ace_falls_with_accuracy(fd.StoreTables(MODEL, estimates=by_relation(0.9), templates=HEADS))
    paper = only(found, "across models")
    assert (
        paper.verdict == NOT_TESTABLE
        and "kcal models add" in paper.note
        and "two or more models" in paper.note
    )
    base = only(found, "of Base across relations (kcal's own)")
    assert (base.verdict, base.n) == (DESCRIPTIVE, 5)
    assert base.value == pytest.approx(R_AT_09, abs=1e-12) and abs(R_AT_09 - -0.98234) < 1e-5
    assert base.ci_low <= base.value <= base.ci_high
    assert (
        base.numbers.startswith(f"r {fd.fmt(R_AT_09)} [") and "accuracy/ACE: R1 0.000/0.900" in base.numbers
    )
    # Margin has one relation, Min Average none: no description, said why.
    for name in ("Margin", "Min Average"):
        f = only(found, f"of {name} across relations")
        assert f.verdict == NOT_TESTABLE and "fewer than 5" in f.note


def test_a_v_shaped_relation_pattern_gives_r_zero_and_the_mirror_image_r_positive():
    for confidence, r in ((0.5, 0.0), (0.1, -R_AT_09)):
        t = fd.StoreTables(MODEL, estimates=by_relation(confidence), templates=HEADS)
        assert only(fd.ace_falls_with_accuracy(t), "of Base").value == pytest.approx(r, abs=1e-12)


def test_the_claims_run_through_evaluate_claims_without_a_verdict_where_none_is_made():
    t = fd.StoreTables(MODEL, estimates=by_relation(0.9), templates=HEADS)
    found = fd.evaluate_claims([t], list(KEYS))
    by_key = {}
    for f in found:
        by_key.setdefault(f.claim, set()).add(f.verdict)
    assert by_key["ace_falls_with_accuracy"] == {NOT_TESTABLE, DESCRIPTIVE}
    assert all(by_key[k] == {NOT_TESTABLE} for k in KEYS[:4])
    staged = fd.evaluate_claims({"bear": [t]}, ["more_options_lower_ace"])
    assert only(staged).verdict == NOT_TESTABLE and "no 'sweep' stage" in only(staged).note
