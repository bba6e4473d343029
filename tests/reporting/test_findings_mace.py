"""MACE's claims (seed 003) on hand-made tables: AUROC over cumulative gold-count sets, SCA against
the other estimators, SCA at τ = 0 against the tuned τ on MACE relations only.

AUROC values are computed by hand from the Mann–Whitney count: each (right, wrong) pair where the
right answer is more confident counts 1, a tie ½, over n_right · n_wrong pairs."""

import dataclasses

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.bootstrap import PAD, Resamples, resample_plan
from kcal_pipeline.evaluation.registry import METRICS
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from tests.reporting.test_findings import (
    ALTERNATE,
    MACE_RELATIONS,
    TEMPLATES,
    instance_rows,
    mace,
    only,
    rows,
    store,
)

FIVE_RIGHT_FIVE_WRONG = [True] * 5 + [False] * 5
SEPARATED = [0.9] * 5 + [0.1] * 5  # every right answer above every wrong one: AUROC 1
INVERTED = [0.2] * 5 + [0.8] * 5  # every right answer below every wrong one: AUROC 0


def by_gold(first, others):
    """Ten questions per gold count 1, 2, 4, 6 (five right, five wrong): the one-gold questions with
    confidences `first`, the others with `others`."""
    return mace({n: (FIVE_RIGHT_FIVE_WRONG, first if n == 1 else others) for n in (1, 2, 4, 6)})


# --- AUROC over cumulative gold-count sets ---------------------------------------------------------


def test_restricting_resamples_keeps_the_drawn_rows_of_the_subset_in_draw_order():
    res = Resamples(np.array([[0, 1, 2, PAD], [2, 2, 0, 1]], dtype=np.int32), np.array([3, 4]))
    sub = fd.restricted(res, np.array([True, False, True]))
    assert sub.sizes.tolist() == [2, 3]
    assert [sub.rows(b).tolist() for b in range(2)] == [[0, 2], [2, 2, 0]]
    with pytest.raises(ValueError, match="keep: no row is kept"):
        fd.restricted(res, np.zeros(3, dtype=bool))


def test_auroc_falls_when_many_gold_questions_rank_their_right_answers_low():
    f = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(SEPARATED, INVERTED)))
    # {1}: 1. {1,2}: right 5@0.9 + 5@0.2, wrong 5@0.1 + 5@0.8: (5·10 + 5·5)/100 = 0.75.
    # {1,2,4}: (5·15 + 10·5)/225 = 0.556. {1,2,4,6}: (5·20 + 15·5)/400 = 0.4375.
    assert f.subject == "AUROC{1,2,4,6} − AUROC{1}"
    assert f.value == pytest.approx(0.4375 - 1.0) and f.verdict == HOLDS and f.ci_high < 0
    assert f.n == 40
    assert "AUROC by cumulative gold-count set: {1} 1.000 [1.000, 1.000] (n = 10), {1,2} 0.750" in f.numbers
    assert "{1,2,4} 0.556" in f.numbers and "{1,2,4,6} 0.438" in f.numbers  # 0.4375 rounded to even
    assert f.note == "AUROC falls at every step (monotone)"


def test_auroc_that_rises_with_mixed_golds_does_not_hold_and_equal_ones_are_inconclusive():
    rises = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(INVERTED, SEPARATED)))
    # {1}: 0; {1,2,4,6}: right 15@0.9 + 5@0.2, wrong 15@0.1 + 5@0.8: (15·20 + 5·15)/400 = 0.9375
    assert (rises.verdict, rises.value) == (FAILS, pytest.approx(0.9375)) and rises.ci_low > 0
    assert rises.note == "not monotone: AUROC does not fall at every step"
    same = only(fd.mace_auroc_falls_with_mixed_golds(by_gold(SEPARATED, SEPARATED)))
    # AUROC 1 in every set and every resample with both classes: the difference is exactly 0
    assert (same.verdict, same.value, same.ci_low, same.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)


def test_the_one_gold_auroc_is_read_on_the_same_resamples_as_the_pooled_one():
    """Against a slow reference: two MACE relations (the resamples draw relations, then questions),
    each resample's AUROC on all its rows and on its one-gold rows, the registry's auroc per
    resample, then the bias-corrected interval of their difference."""
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
    c, y = pooled["confidence"].to_numpy(), pooled["correct"].to_numpy()
    one = pooled["n_gold"].to_numpy() == 1
    res = resample_plan(pooled["relation_id"].to_numpy(), fd.N_RESAMPLES, fd.SEED)[0].resamples
    auroc = METRICS["auroc"]
    slow = []
    for b in range(res.n_resamples):
        r = res.rows(b)
        slow.append(auroc(c[r], y[r]) - auroc(c[r[one[r]]], y[r[one[r]]]))
    point = auroc(c, y) - auroc(c[one], y[one])
    low, high = fd.bc_interval(np.array(slow), point)
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((point, low, high), rel=1e-12)


def test_auroc_by_gold_count_without_mace_questions_or_with_one_gold_count_is_not_testable():
    closed = store(estimates=rows("base", ALTERNATE, 0.5), relations=MACE_RELATIONS)
    f = only(fd.mace_auroc_falls_with_mixed_golds(closed))
    assert f.verdict == NOT_TESTABLE and "no MACE relation" in f.note and "stage mace" in f.note
    one = only(fd.mace_auroc_falls_with_mixed_golds(mace({1: (FIVE_RIGHT_FIVE_WRONG, SEPARATED)})))
    assert one.verdict == NOT_TESTABLE and "one gold count only ([1])" in one.note


def test_the_trend_claims_carry_the_papers_statement_and_preconditions():
    for key in ("mace_accuracy_rises_with_golds", "mace_confidence_falls_with_golds"):
        spec = fd.CLAIMS[key]
        assert spec.number.text.startswith("no number available to kcal (only the abstract was accessible)")
        assert spec.number.model == "four LLM families, 7B–72B" and spec.number.effect is None
        assert "test questions of at least two gold counts" in spec.preconditions


# --- SCA against the other estimators --------------------------------------------------------------

MARGIN_075 = [0.8] * 10 + [0.2] * 5 + [0.8] * 5  # right all 0.8; wrong 5 below, 5 tied: (50 + 25)/100


def on_mace(estimator, confidence, correct=None, *, headline=False, **kw):
    """20 MACE questions (the first 10 right): SCA-like instance rows under answer_sum, or the
    others on the headline template under sum."""
    correct = correct if correct is not None else [True] * 10 + [False] * 10
    if headline:
        return rows(estimator, correct, confidence, template="mace-x:c0", relation="mace-x", **kw)
    return instance_rows(estimator, confidence, correct, relation="mace-x", **kw)


def mace_store(*frames, fits=None):
    return store(
        estimates=pl.concat(frames), relations=MACE_RELATIONS, **({"fits": fits} if fits is not None else {})
    )


SCA_PERFECT = [0.9] * 10 + [0.1] * 10  # AUROC 1


def fits(estimator, n_dev, reduction="answer_sum", parameter="tau", value=0.0):
    return pl.DataFrame(
        {"relation_id": ["mace-x"], "estimator": [estimator], "reduction": [reduction], "answer_space_k": [0],
         "parameter": [parameter], "value": [value], "n_dev": [n_dev]}
    )  # fmt: skip


def test_sca_against_the_best_other_estimator_on_the_same_questions():
    t = mace_store(
        on_mace("sca_tau0", SCA_PERFECT, reduction="answer_sum"),
        on_mace("base", 0.5, headline=True),  # all tied: AUROC 0.5
        on_mace("margin", MARGIN_075, headline=True),
    )
    f = only(fd.sca_beats_others(t))
    assert f.subject == "AUROC(SCA (τ = 0)) − AUROC(Margin)"
    assert (f.verdict, f.value, f.n) == (HOLDS, pytest.approx(0.25), 20) and f.ci_low > 0
    assert f.numbers.endswith("AUROC of the others: Margin 0.750, Base 0.500")
    worse = mace_store(
        on_mace("sca_tau0", 0.5, reduction="answer_sum"), on_mace("margin", SCA_PERFECT, headline=True)
    )
    g = only(fd.sca_beats_others(worse))
    assert (g.verdict, g.value, g.ci_low, g.ci_high) == (FAILS, -0.5, -0.5, -0.5)  # 0.5 − 1 everywhere


def test_sca_tuned_on_too_few_dev_questions_gives_way_to_tau_zero_and_few_dev_fits_are_left_out():
    frames = (
        on_mace("sca_tau0", 0.5, reduction="answer_sum"),
        on_mace("sca_tuned", SCA_PERFECT, reduction="answer_sum"),
        on_mace("margin", MARGIN_075, headline=True),
        on_mace("base_temperature", SCA_PERFECT, headline=True),  # AUROC 1, but fitted on 3 questions
    )
    few = fits("sca_tuned", 5).vstack(fits("base_temperature", 3, "sum", "temperature", 1.0))
    f = only(fd.sca_beats_others(mace_store(*frames, fits=few)))
    assert f.subject == "AUROC(SCA (τ = 0)) − AUROC(Margin)" and f.value == pytest.approx(-0.25)
    assert f.note.startswith("SCA at τ = 0: the tuned τ is not used (too few dev instances: sca_tuned")
    assert "left out, fitted on fewer than 20 dev questions: Base + temperature" in f.note
    enough = fits("sca_tuned", 40).vstack(fits("base_temperature", 3, "sum", "temperature", 1.0))
    g = only(fd.sca_beats_others(mace_store(*frames, fits=enough)))
    assert g.subject == "AUROC(SCA (τ tuned)) − AUROC(Margin)" and g.value == pytest.approx(0.25)


def test_an_estimator_on_fewer_questions_and_the_markers_are_not_ranked():
    t = mace_store(
        on_mace("sca_tau0", SCA_PERFECT, reduction="answer_sum"),
        on_mace("margin", MARGIN_075, headline=True),
        rows("token", [True] * 5 + [False] * 5, SEPARATED, template="mace-x:c0", relation="mace-x",
             output_kind="score"),
        on_mace("marker_certainly", SCA_PERFECT, headline=True),
    )  # fmt: skip
    f = only(fd.sca_beats_others(t))
    assert f.subject == "AUROC(SCA (τ = 0)) − AUROC(Margin)"
    assert "left out, defined on fewer questions than SCA: Token (n = 10)" in f.note
    assert "Marker" not in f.numbers


def test_sca_against_others_is_not_testable_without_mace_sca_or_a_second_estimator():
    off_mace = store(estimates=on_mace("sca_tau0", SCA_PERFECT, reduction="answer_sum"))  # no relations
    assert "no MACE relation" in only(fd.sca_beats_others(off_mace)).note
    no_sca = mace_store(on_mace("base", 0.5, headline=True))
    f = only(fd.sca_beats_others(no_sca))
    assert f.verdict == NOT_TESTABLE and "--template-kinds curated,question" in f.note
    alone = mace_store(on_mace("sca_tau0", SCA_PERFECT, reduction="answer_sum"))
    assert "no other confidence estimator" in only(fd.sca_beats_others(alone)).note


# --- SCA τ = 0 against τ tuned ---------------------------------------------------------------------


def test_sca_tau_zero_on_a_relation_that_is_not_mace_is_not_testable():
    kw = {"reduction": "answer_sum", "relation": "P1"}
    t = mace_store(instance_rows("sca_tau0", 0.5, **kw), instance_rows("sca_tuned", 0.5, **kw))
    f = only(fd.sca_tau0_as_good_as_tuned(t))
    assert f.verdict == NOT_TESTABLE and "no MACE relation" in f.note
    tau0_only = mace_store(on_mace("sca_tau0", 0.5, reduction="answer_sum"))
    assert "--dev-fraction > 0" in only(fd.sca_tau0_as_good_as_tuned(tau0_only)).note
