"""MACE's claims (seed 003) on hand-made tables: the gold-count trends against chance or with the
option count held fixed, the calibration gap by gold count, AUROC over cumulative gold-count sets,
SCA against a comparator picked on the dev split, SCA on one-gold questions, τ = 0 against the τ
MACE would tune (dev AUROC), and the τ-sensitivity row.

Expected values are computed by hand: chance accuracy n/(n + 5), a uniform guesser's confidence
1/(n + 5); log-odds over uniform logit(c) + log(n + 4); AUROC from the Mann–Whitney count (each
(right, wrong) pair where the right answer is more confident counts 1, a tie ½, over
n_right · n_wrong pairs)."""

import dataclasses
import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.evaluation.resamples import PAD, Resamples, resample_plan
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import DESCRIPTIVE, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from tests.reporting.test_findings import (
    ALTERNATE,
    MACE_RELATIONS,
    SURE,
    TEMPLATES,
    TEN_RIGHT,
    TEN_WRONG,
    instance_rows,
    mace,
    only,
    rows,
    store,
)

FIVE_RIGHT_FIVE_WRONG = [True] * 5 + [False] * 5
SEPARATED = [0.9] * 5 + [0.1] * 5  # every right answer above every wrong one: AUROC 1
INVERTED = [0.2] * 5 + [0.8] * 5  # every right answer below every wrong one: AUROC 0
# A uniform guesser: one right of 6 options at one gold (confidence 1/6), six of 11 at six (1/11).
GUESSER = {1: ([True] + [False] * 5, 1 / 6), 6: ([True] * 6 + [False] * 5, 1 / 11)}


def by_gold(first, others):
    """Ten questions per gold count 1, 2, 4, 6 (five right, five wrong): the one-gold questions with
    confidences `first`, the others with `others`."""
    return mace({n: (FIVE_RIGHT_FIVE_WRONG, first if n == 1 else others) for n in (1, 2, 4, 6)})


def exact(f, value):
    """Every resample gives the same statistic: the point and both interval ends are `value`."""
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((value, value, value), abs=1e-12)


# --- accuracy and confidence by gold count -------------------------------------------------------


def test_accuracy_is_read_against_chance():
    t = mace({1: (TEN_WRONG, 0.9), 2: (FIVE_RIGHT_FIVE_WRONG, 0.6), 6: (TEN_RIGHT, 0.3)})
    f = only(fd.mace_accuracy_rises_with_golds(t))
    # chance-corrected: 1 gold (0 − 1/6)/(5/6) = −0.2; 6 golds (1 − 6/11)/(5/11) = 1: +1.2
    assert f.subject == "chance-corrected accuracy: 6 golds − 1 gold" and f.verdict == HOLDS and f.n == 30
    exact(f, 1.2)
    assert "raw Δaccuracy +1.000, chance alone +0.379" in f.numbers  # 6/11 − 1/6 = 0.3788
    assert "1: accuracy 0.000, chance 0.167, accuracy − chance -0.167 [-0.167, -0.167] (n = 10)" in f.numbers
    assert "6: accuracy 1.000, chance 0.545, accuracy − chance 0.455 [0.455, 0.455]" in f.numbers
    assert f.note.startswith("chance-corrected accuracy rises at every step (monotone)")
    assert f.note.endswith("accuracy not above chance (interval not above 0) at 1, 2 gold(s)")
    falls = only(fd.mace_accuracy_rises_with_golds(mace({1: (TEN_RIGHT, 0.3), 6: (TEN_WRONG, 0.9)})))
    assert falls.verdict == FAILS  # 1 − (0 − 6/11)/(5/11) = 1 − (−1.2)
    exact(falls, -2.2)


def test_a_guesser_raises_raw_accuracy_and_lowers_raw_confidence_but_no_claim_holds():
    """At chance on every gold count: raw accuracy rises by 6/11 − 1/6 = 0.379 and raw confidence
    falls by 1/6 − 1/11, which the old reading called 'holds'; against chance and with the option
    count held fixed both are 0."""
    t = mace(GUESSER)
    acc = only(fd.mace_accuracy_rises_with_golds(t))
    assert acc.verdict == INCONCLUSIVE and acc.value == 0.0 and acc.ci_low < 0 < acc.ci_high
    assert "raw Δaccuracy +0.379, chance alone +0.379" in acc.numbers
    conf = only(fd.mace_confidence_falls_with_golds(t))
    assert (conf.verdict, conf.value, conf.ci_low, conf.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)
    assert "confidence 0.167 (uniform 1/6 = 0.167; n = 6)" in conf.numbers
    assert "confidence 0.091 (uniform 1/11 = 0.091; n = 11)" in conf.numbers
    gaps = fd.mace_overconfident_one_gold_overprudent_many(t)
    assert [g.verdict for g in gaps] == [INCONCLUSIVE, INCONCLUSIVE]
    assert "a uniform guesser's −0.455" in gaps[1].numbers  # (1 − 6)/11
    auroc = only(fd.mace_auroc_falls_with_mixed_golds(t))
    # held fixed every log-odds is 0: all tied, AUROC 0.5 in both sets. Raw: {1} all tied 0.5;
    # {1,6}: right 1@1/6 + 6@1/11, wrong 5@1/6 + 5@1/11: (1·(5 + 2.5) + 6·2.5)/70 = 22.5/70
    assert (auroc.verdict, auroc.value, auroc.ci_low, auroc.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)
    assert (
        f"raw confidence (as the paper reads its methods): ΔAUROC {fd.fmt(22.5 / 70 - 0.5)}" in auroc.numbers
    )


def test_confidence_is_read_as_log_odds_over_the_uniform_share():
    t = mace({1: (TEN_WRONG, 0.9), 2: (FIVE_RIGHT_FIVE_WRONG, 0.6), 6: (TEN_RIGHT, 0.3)})
    f = only(fd.mace_confidence_falls_with_golds(t))
    # 1 gold: log 9 + log 5 = log 45; 6 golds: log(3/7) + log 10 = log(30/7): Δ = log(2/21)
    assert f.subject == "confidence log-odds over uniform: 6 golds − 1 gold" and f.verdict == HOLDS
    exact(f, math.log(2 / 21))
    assert "1: log-odds 3.807, confidence 0.900 (uniform 1/6 = 0.167; n = 10)" in f.numbers
    assert f.note == "confidence log-odds over uniform falls at every step (monotone)"  # 2: log 1.5 + log 6
    # the same raw confidence 0.5 at 6 and 11 options: log 5 → log 10, the top option stands out more
    same = only(fd.mace_confidence_falls_with_golds(mace({1: (TEN_RIGHT, 0.5), 6: (TEN_RIGHT, 0.5)})))
    assert same.verdict == FAILS
    exact(same, math.log(2))


def test_overconfident_on_one_gold_and_more_over_prudent_than_a_guesser_on_six():
    t = mace({1: (TEN_WRONG, 0.9), 6: (TEN_RIGHT, 0.3)})
    one, six = fd.mace_overconfident_one_gold_overprudent_many(t)
    assert one.subject == "Base confidence − accuracy − a guesser's, 1 gold (over-confident)"
    assert six.subject == "Base confidence − accuracy − a guesser's, 6 golds (over-prudent)"
    assert (one.verdict, six.verdict, one.n, six.n) == (HOLDS, HOLDS, 10, 10)
    exact(one, 0.9)  # 0.9 − 0; a guesser's gap at one gold is (1 − 1)/6 = 0
    exact(six, 0.3 - 1 + 5 / 11)  # raw −0.7, a guesser's (1 − 6)/11
    assert six.numbers.endswith("raw confidence − accuracy −0.700, a uniform guesser's −0.455")
    # under-confident on one gold, over-confident on six: both do not hold
    wrong = fd.mace_overconfident_one_gold_overprudent_many(mace({1: (TEN_RIGHT, 0.3), 6: (TEN_WRONG, 0.9)}))
    assert [f.verdict for f in wrong] == [FAILS, FAILS]
    exact(wrong[0], -0.7)
    exact(wrong[1], 0.9 + 5 / 11)


def test_gold_count_claims_without_mace_questions_or_with_one_gold_count_are_not_testable():
    closed = store(estimates=rows("base", ALTERNATE, 0.5), relations=MACE_RELATIONS)
    for fn in (fd.mace_accuracy_rises_with_golds, fd.mace_overconfident_one_gold_overprudent_many):
        assert "--relation mace-award" in only(fn(closed)).note
    one = only(fd.mace_overconfident_one_gold_overprudent_many(mace({1: (TEN_RIGHT, 0.5)})))
    assert one.verdict == NOT_TESTABLE and "one gold count only ([1])" in one.note


def test_the_log_odds_are_zero_at_the_uniform_share_and_the_margin_at_any_option_count():
    assert fd.uniform_log_odds([1 / 6, 1 / 11], [1, 6]).tolist() == [0.0, 0.0]
    d = 2.0  # a softmax raising its top option by d: c = e^d / (e^d + K − 1)
    c = [math.exp(d) / (math.exp(d) + k - 1) for k in (6, 11)]
    assert fd.uniform_log_odds(c, [1, 6]) == pytest.approx([d, d])
    assert fd.chance_accuracy([1, 2, 4, 6]).tolist() == pytest.approx([1 / 6, 2 / 7, 4 / 9, 6 / 11])


# --- AUROC over cumulative gold-count sets ---------------------------------------------------------


def test_restricting_resamples_keeps_the_drawn_rows_of_the_subset_in_draw_order():
    res = Resamples(np.array([[0, 1, 2, PAD], [2, 2, 0, 1]], dtype=np.int32), np.array([3, 4]))
    sub = fd.restricted(res, np.array([True, False, True]))
    assert sub.sizes.tolist() == [2, 3]
    assert [sub.rows(b).tolist() for b in range(2)] == [[0, 2], [2, 2, 0]]
    assert fd.restricted_means(np.array([1.0, 5.0, 3.0]), sub).tolist() == [2.0, 7 / 3]
    with pytest.raises(ValueError, match="keep: no row is kept"):
        fd.restricted(res, np.zeros(3, dtype=bool))


def test_auroc_falls_when_many_gold_questions_rank_their_right_answers_low():
    f = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(SEPARATED, INVERTED)))
    # log-odds keep the order here (1 gold: 0.9 → log 45, 0.1 → log(5/9); K = 7, 9, 11: 0.2 → log 1.5,
    # log 2, log 2.5 < 0.8 → log 24, log 32, log 40 < log 45), so raw and held-fixed AUROCs agree:
    # {1}: 1. {1,2}: right 5 high + 5 low, wrong 5 lowest + 5 high: (5·10 + 5·5)/100 = 0.75.
    # {1,2,4}: (5·15 + 10·5)/225 = 0.556. {1,2,4,6}: (5·20 + 15·5)/400 = 0.4375.
    assert f.subject == "AUROC{1,2,4,6} − AUROC{1}, option count held fixed"
    assert f.value == pytest.approx(0.4375 - 1.0) and f.verdict == HOLDS and f.ci_high < 0
    assert f.n == 40
    assert "AUROC by cumulative gold-count set: {1} 1.000 [1.000, 1.000] (n = 10), {1,2} 0.750" in f.numbers
    assert "{1,2,4} 0.556" in f.numbers and "{1,2,4,6} 0.438" in f.numbers  # 0.4375 rounded to even
    assert "raw confidence (as the paper reads its methods): ΔAUROC -0.562" in f.numbers
    assert f.note == "AUROC falls at every step (monotone)"


def test_auroc_that_rises_with_mixed_golds_does_not_hold_and_equal_ones_are_inconclusive():
    rises = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(INVERTED, SEPARATED)))
    # {1}: 0; {1,2,4,6}: right 15 high + 5 low, wrong 15 low + 5 high: (15·20 + 5·15)/400 = 0.9375
    assert (rises.verdict, rises.value) == (FAILS, pytest.approx(0.9375)) and rises.ci_low > 0
    assert rises.note == "not monotone: AUROC does not fall at every step"
    same = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(SEPARATED, SEPARATED)))
    assert (same.verdict, same.value, same.ci_low, same.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)


def test_the_one_gold_auroc_is_read_on_the_same_resamples_as_the_pooled_one():
    """Against a slow reference: two MACE relations (the resamples draw relations, then questions),
    each resample's AUROC of the log-odds on all its rows and on its one-gold rows, then the
    bias-corrected interval of their difference."""
    rng = np.random.default_rng(3)
    frames, instances = [], []
    for relation in ("mace-x", "mace-y"):
        n = 24
        ids = [f"{relation}-q{k:02d}" for k in range(n)]
        gold = [(1, 2, 4, 6)[k % 4] for k in range(n)]
        correct = (rng.random(n) < 0.5).tolist()
        confidence = np.round(rng.random(n), 2).tolist()
        frames.append(
            rows("base", correct, confidence, template=f"{relation}:c0", relation=relation, instances=ids)
        )
        instances += list(zip([relation] * n, ids, gold, strict=True))
    templates = pl.concat(
        [TEMPLATES, pl.DataFrame({"relation_id": ["mace-y"], "template_id": ["mace-y:c0"], "rank": [0],
                                  "kind": ["curated"]})]
    )  # fmt: skip
    relations = pl.DataFrame({"relation_id": ["mace-x", "mace-y"], "domain": ["mace", "mace"]})
    inst = pl.DataFrame(instances, schema=["relation_id", "instance_id", "n_gold"], orient="row")
    t = dataclasses.replace(
        store(estimates=pl.concat(frames), instances=inst, relations=relations), templates=templates
    )
    f = only(fd.mace_auroc_falls_with_mixed_golds(t))

    pooled = (
        pl.concat(frames).join(inst, on=["relation_id", "instance_id"]).sort("relation_id", "instance_id")
    )
    y, gold = pooled["correct"].to_numpy(), pooled["n_gold"].to_numpy()
    c = np.clip(pooled["confidence"].to_numpy(), 1e-6, 1 - 1e-6)
    odds = np.round(np.log(c / (1 - c)) + np.log(gold + 4.0), 12)
    one = gold == 1
    res = resample_plan(pooled["relation_id"].to_numpy(), fd.N_RESAMPLES, fd.SEED)[0].resamples
    auroc = METRICS["auroc"]
    slow = []
    for b in range(res.n_resamples):
        r = res.rows(b)
        slow.append(auroc(odds[r], y[r], "score") - auroc(odds[r[one[r]]], y[r[one[r]]], "score"))
    point = auroc(odds, y, "score") - auroc(odds[one], y[one], "score")
    low, high = fd.bc_interval(np.array(slow), point)
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((point, low, high), rel=1e-12)


def test_auroc_by_gold_count_without_mace_questions_or_with_one_gold_count_is_not_testable():
    closed = store(estimates=rows("base", ALTERNATE, 0.5), relations=MACE_RELATIONS)
    f = only(fd.mace_auroc_falls_with_mixed_golds(closed))
    assert f.verdict == NOT_TESTABLE and "no MACE relation" in f.note and "stage mace" in f.note
    one = only(fd.mace_auroc_falls_with_mixed_golds(mace({1: (FIVE_RIGHT_FIVE_WRONG, SEPARATED)})))
    assert one.verdict == NOT_TESTABLE and "one gold count only ([1])" in one.note


def test_the_gold_count_claims_cite_table_3_and_the_paper_effects_are_derived_from_it():
    acc = fd.CLAIMS["mace_accuracy_rises_with_golds"]
    assert acc.number.effect == pytest.approx((61.7 - 48.0) / 100) and "Table 3" in acc.where
    auroc = fd.CLAIMS["mace_auroc_falls_with_mixed_golds"]
    assert auroc.number.effect == pytest.approx((73.8 - 80.9) / 100) and auroc.where.startswith(
        "§5.2, Fig. 3"
    )
    assert fd.CLAIMS["mace_confidence_falls_with_golds"].number.effect is None  # % vs log-odds


# --- SCA against the best other estimator, picked on dev ------------------------------------------

MARGIN_075 = [0.8] * 10 + [0.2] * 5 + [0.8] * 5  # right all 0.8; wrong 5 below, 5 tied: (50 + 25)/100
SCA_PERFECT = [0.9] * 10 + [0.1] * 10  # AUROC 1
FIRST_TEN = [True] * 10 + [False] * 10


def on_mace(estimator, confidence, correct=None, *, headline=False, split="test", ids=None, **kw):
    """20 MACE questions (the first 10 right): SCA-like instance rows under answer_sum, or the
    others on the headline template under sum; `split` "dev" for the dev split's rows."""
    correct = correct if correct is not None else FIRST_TEN
    kw |= {"instances": ids} if ids else {}
    if headline:
        frame = rows(estimator, correct, confidence, template="mace-x:c0", relation="mace-x", **kw)
    else:
        frame = instance_rows(estimator, confidence, correct, relation="mace-x", **kw)
    return frame.with_columns(split=pl.lit(split))


def sca_rows(confidence, split="test", name="sca_tau0", **kw):
    return on_mace(name, confidence, reduction="answer_sum", split=split, **kw)


def mace_store(*frames, fits=None, instances=None):
    both = pl.concat(frames)
    return store(
        estimates=both.filter(pl.col("split") == "test"),
        dev_estimates=both.filter(pl.col("split") == "dev"),
        relations=MACE_RELATIONS,
        **({"fits": fits} if fits is not None else {}),
        **({"instances": instances} if instances is not None else {}),
    )


def fits(estimator, n_dev, reduction="answer_sum", parameter="tau", value=0.0):
    return pl.DataFrame(
        {"relation_id": ["mace-x"], "estimator": [estimator], "reduction": [reduction], "answer_space_k": [0],
         "parameter": [parameter], "value": [value], "n_dev": [n_dev]}
    )  # fmt: skip


def test_the_comparator_is_picked_on_dev_not_on_the_test_questions():
    t = mace_store(
        sca_rows(SCA_PERFECT),
        sca_rows(SCA_PERFECT, "dev"),
        on_mace("base", 0.5, headline=True),  # test: all tied, AUROC 0.5
        on_mace("base", SCA_PERFECT, headline=True, split="dev"),  # dev: AUROC 1
        on_mace("margin", MARGIN_075, headline=True),  # test: 0.75, the best on test
        on_mace("margin", 0.5, headline=True, split="dev"),  # dev: 0.5
    )
    f = only(fd.sca_beats_others(t))
    assert f.subject == "AUROC(SCA (τ = 0)) − AUROC(Base), all gold counts [1,2,4,6]"
    assert (f.verdict, f.value, f.ci_low, f.ci_high, f.n) == (HOLDS, 0.5, 0.5, 0.5, 20)  # 1 − 0.5 always
    assert "test AUROC SCA (τ = 0) 1.000, Base 0.500" in f.numbers
    assert f.numbers.endswith("best dev AUROCs: Base 1.000, Margin 0.500")
    worse = mace_store(
        sca_rows(0.5), sca_rows(0.5, "dev"),
        on_mace("margin", SCA_PERFECT, headline=True),
        on_mace("margin", SCA_PERFECT, headline=True, split="dev"),
    )  # fmt: skip
    g = only(fd.sca_beats_others(worse))
    assert (g.verdict, g.value, g.ci_low, g.ci_high) == (FAILS, -0.5, -0.5, -0.5)  # 0.5 − 1 everywhere


def test_an_abstaining_comparator_is_compared_on_the_questions_both_answer_and_on_every_question():
    # the vote answers q0 … q15 at 0.6 (10 right, 6 wrong) and abstains on q16 … q19 (wrong, 0)
    vote = [0.6] * 16 + [0.0] * 4
    predicted = [0] * 16 + [-1] * 4
    t = mace_store(
        sca_rows(SCA_PERFECT), sca_rows(SCA_PERFECT, "dev"),
        on_mace("vote2_consistency", vote, predicted=predicted),
        on_mace("vote2_consistency", vote, predicted=predicted, split="dev"),
    )  # fmt: skip
    both, every = fd.sca_beats_others(t)
    label = "AUROC(SCA (τ = 0)) − AUROC(Vote(2) Consistency), all gold counts [1,2,4,6]"
    assert both.subject == f"{label}: the questions both answer"
    # both answer: 16 questions, the vote ties them all (0.5): 1 − 0.5 in every resample
    assert (both.verdict, both.value, both.ci_low, both.ci_high, both.n) == (HOLDS, 0.5, 0.5, 0.5, 16)
    assert every.subject == f"{label}: every question (Vote(2) Consistency abstains on 4)"
    # every question: right 10@0.6, wrong 6@0.6 + 4@0: (10·4 + ½·10·6)/100 = 0.7
    assert every.value == pytest.approx(1 - 0.7) and every.n == 20


def test_too_few_dev_fits_and_estimators_on_fewer_questions_are_not_picked():
    t = mace_store(
        sca_rows(SCA_PERFECT), sca_rows(SCA_PERFECT, "dev"),
        on_mace("margin", MARGIN_075, headline=True),
        on_mace("margin", MARGIN_075, headline=True, split="dev"),
        on_mace("base_temperature", SCA_PERFECT, headline=True),  # AUROC 1, but fitted on 3 questions
        on_mace("base_temperature", SCA_PERFECT, headline=True, split="dev"),
        rows("token", FIVE_RIGHT_FIVE_WRONG, SEPARATED, template="mace-x:c0", relation="mace-x",
             output_kind="score"),  # 10 of SCA's 20 questions
        on_mace("marker_certainly", SCA_PERFECT, headline=True),
        fits=fits("base_temperature", 3, "sum", "temperature", 1.0),
    )  # fmt: skip
    f = only(fd.sca_beats_others(t))
    assert f.subject.startswith("AUROC(SCA (τ = 0)) − AUROC(Margin)")
    assert "left out, fitted on fewer than 20 dev questions: Base + temperature scaling" in f.note
    assert "left out, not scoring every one of SCA's questions: Token" in f.note
    assert "Marker" not in f.numbers


def test_sca_against_others_is_not_testable_without_mace_sca_a_dev_split_or_a_second_estimator():
    off_mace = store(estimates=sca_rows(SCA_PERFECT))  # no relations
    assert "no MACE relation" in only(fd.sca_beats_others(off_mace)).note
    no_sca = mace_store(on_mace("base", 0.5, headline=True))
    f = only(fd.sca_beats_others(no_sca))
    assert f.verdict == NOT_TESTABLE and "--template-kinds curated,question" in f.note
    no_dev = mace_store(sca_rows(SCA_PERFECT), on_mace("base", 0.5, headline=True))
    assert "no dev-split rows on the MACE relations" in only(fd.sca_beats_others(no_dev)).note
    alone = mace_store(sca_rows(SCA_PERFECT), sca_rows(SCA_PERFECT, "dev"))
    assert "no other confidence estimator" in only(fd.sca_beats_others(alone)).note


# --- SCA on one-gold questions ---------------------------------------------------------------------

IDS = [f"q{k}" for k in range(20)]
ONE_GOLD = pl.DataFrame({"relation_id": ["mace-x"] * 20, "instance_id": IDS, "n_gold": [1] * 10 + [6] * 10})


def one_gold_store(sca, others):
    """20 questions, q0 … q9 one-gold (q0 … q4 right), q10 … q19 six-gold (q10 … q14 right): SCA and
    `others` ({estimator: (one-gold confidences, dev confidences)}), the six-gold rows all at 0.5."""
    correct = FIVE_RIGHT_FIVE_WRONG * 2
    frames = [sca_rows(sca + [0.5] * 10, correct=correct, ids=IDS),
              sca_rows(sca + [0.5] * 10, "dev", correct=correct, ids=IDS)]  # fmt: skip
    for name, (test, dev) in others.items():
        frames += [on_mace(name, test + [0.5] * 10, correct, headline=True, ids=IDS),
                   on_mace(name, dev + [0.5] * 10, correct, headline=True, split="dev", ids=IDS)]  # fmt: skip
    return mace_store(*frames, instances=ONE_GOLD)


def test_sca_on_one_gold_questions_is_judged_by_non_inferiority_against_the_dev_pick():
    ties = [0.5] * 10
    t = one_gold_store(
        SEPARATED, {"base": (ties, ties), "margin": ([0.9] * 5 + [0.1] * 4 + [0.9], SEPARATED)}
    )
    f = only(fd.sca_keeps_single_answer_auroc(t))
    # one-gold: SCA 1; Margin (dev 1, picked) 0.9 for 5 right, 4 wrong below, 1 wrong tied: (20 + 2.5)/25
    assert f.subject == "AUROC(SCA (τ = 0)) − AUROC(Margin), one-gold questions [1]" and f.n == 10
    assert f.value == pytest.approx(1 - 22.5 / 25) and f.verdict == HOLDS and f.ci_low >= -fd.AUROC_MARGIN
    assert "AUROC(SCA (τ = 0)) − AUROC(Base) 0.500 [0.500, 0.500]" in f.numbers  # 1 − 0.5 (ties)
    assert "SCA (τ = 0) on all gold counts" in f.numbers
    worse = only(fd.sca_keeps_single_answer_auroc(one_gold_store(ties, {"margin": (SEPARATED, SEPARATED)})))
    assert (worse.verdict, worse.value, worse.ci_high) == (FAILS, -0.5, -0.5)  # 0.5 − 1 < −0.02


# --- SCA τ = 0 against τ tuned on dev AUROC -------------------------------------------------------


def sca(tau0, tuned, correct, dev=None):
    """SCA at τ = 0 and at the Brier-tuned τ on the MACE relation's questions; `dev` (τ = 0, tuned)
    their dev rows (default: the test ones)."""
    dev = dev or (tau0, tuned)
    frames = [
        sca_rows(tau0, correct=correct),
        sca_rows(tuned, name="sca_tuned", correct=correct),
        sca_rows(dev[0], "dev", correct=correct),
        sca_rows(dev[1], "dev", "sca_tuned", correct=correct),
    ]
    return mace_store(*frames)


def test_tau_zero_against_the_tau_that_dev_auroc_picks_is_a_non_inferiority_test():
    same = only(fd.sca_tau0_as_good_as_tuned(sca(0.5, 0.5, ALTERNATE)))
    assert same.subject == "AUROC(SCA τ = 0) − AUROC(SCA τ tuned on dev AUROC)"
    assert (same.verdict, same.value, same.ci_low) == (HOLDS, 0.0, 0.0)
    assert same.note.startswith(
        "dev AUROC (n = 20): τ = 0 0.500, Brier-tuned τ 0.500, so the dev-AUROC choice is τ = 0"
    )
    # dev picks the Brier-tuned τ (AUROC 1 > 0.5), which separates the test answers too: −0.5 < −0.02
    better = only(fd.sca_tau0_as_good_as_tuned(sca(0.5, SURE, ALTERNATE)))
    assert (better.verdict, better.value, better.ci_high) == (FAILS, -0.5, -0.5)
    assert better.numbers == (
        "ΔAUROC -0.500 [-0.500, -0.500]; τ = 0 − Brier-tuned τ: ΔAUROC -0.500 [-0.500, -0.500], "
        "ΔBrier 0.250 [0.250, 0.250]"  # Brier 0.25 at 0.5 everywhere, 0 when sure and right
    )
    # the same test rows, but on dev τ = 0 wins: MACE's choice is τ = 0, whatever the test split says
    picked_on_dev = only(fd.sca_tau0_as_good_as_tuned(sca(0.5, SURE, ALTERNATE, dev=(SURE, 0.5))))
    assert (picked_on_dev.verdict, picked_on_dev.value) == (HOLDS, 0.0)
    assert "τ = 0 − Brier-tuned τ: ΔAUROC -0.500" in picked_on_dev.numbers
    # 40 questions, 20 right: tuned separates them (AUROC 1); τ = 0 puts one right answer at the
    # wrong ones' 0.1, a tie with each of the 20: (19·20 + ½·20)/400 = 0.975, ΔAUROC −0.025, and a
    # resample may draw that question 0, 1, 2, … times: the interval straddles −0.02
    correct = [True] * 20 + [False] * 20
    tuned, tau0 = [0.9] * 20 + [0.1] * 20, [0.1] + [0.9] * 19 + [0.1] * 20
    mixed = only(fd.sca_tau0_as_good_as_tuned(sca(tau0, tuned, correct)))
    assert mixed.verdict == INCONCLUSIVE and mixed.ci_low < -fd.AUROC_MARGIN < mixed.ci_high
    assert mixed.value == pytest.approx(-0.025)


def test_tau_tuned_on_few_dev_questions_or_without_a_dev_split_is_not_testable():
    base = sca(0.5, 0.5, ALTERNATE)
    few = only(fd.sca_tau0_as_good_as_tuned(dataclasses.replace(base, fits=fits("sca_tuned", 2))))
    assert few.verdict == NOT_TESTABLE
    assert few.note.startswith("too few dev instances: sca_tuned was fitted on at most 2 per relation")
    assert "fitted on 2 dev instances per relation; tuned τ 0.000" in few.note
    assert few.note.endswith("τ was tuned to 0 everywhere, so both are the same estimator here)")
    many = only(fd.sca_tau0_as_good_as_tuned(dataclasses.replace(base, fits=fits("sca_tuned", 40))))
    assert many.verdict == HOLDS and "same estimator" in many.note
    no_dev = dataclasses.replace(base, dev_estimates=pl.DataFrame())
    assert "no dev-split rows" in only(fd.sca_tau0_as_good_as_tuned(no_dev)).note
    closed = dataclasses.replace(base, relations=pl.DataFrame({"relation_id": ["mace-x"], "domain": ["geo"]}))
    assert only(fd.sca_tau0_as_good_as_tuned(closed)).note.startswith("no MACE relation in this store")
    tau0_only = mace_store(sca_rows(0.5))
    assert "needs a dev split" in only(fd.sca_tau0_as_good_as_tuned(tau0_only)).note


# --- τ sensitivity ---------------------------------------------------------------------------------


def test_tau_sensitivity_is_not_testable_here_and_shows_the_two_tau_kcal_stores():
    t = mace_store(
        sca_rows(SCA_PERFECT, "dev"), sca_rows(SCA_PERFECT, "dev", "sca_tuned"),
        sca_rows(0.5, "dev", "snca_tau0"), sca_rows(SCA_PERFECT, "dev", "snca_tuned"),
        sca_rows(0.5),
    )  # fmt: skip
    missing, sca_row, snca_row = fd.sca_less_tau_sensitive(t)
    assert (
        missing.verdict == NOT_TESTABLE
        and "every τ of a grid" in missing.note
        and "kcal findings" in missing.note
    )
    assert (sca_row.verdict, sca_row.subject, sca_row.value, sca_row.n) == (
        DESCRIPTIVE, "SCA: dev AUROC at the tuned τ − at τ = 0", 0.0, 20
    )  # fmt: skip
    assert snca_row.value == 0.5 and snca_row.numbers == (
        "dev AUROC τ = 0 0.500, Brier-tuned τ 1.000, difference 0.500"
    )
    assert len(fd.sca_less_tau_sensitive(mace_store(sca_rows(0.5)))) == 1
