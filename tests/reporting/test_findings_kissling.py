"""Kissling et al. (seed 000)'s claims on Margin, the aggregations, selective prediction and the
markers (kissling.py, kissling_selection.py) on hand-made tables, each value worked out by hand in
the comments; the claims about Base alone are tested in test_findings_kissling_base.py.

Where a verdict must be exact every instance contributes the same difference, so every bootstrap
resample gives the same value and the interval is [d, d]. A failed vote is a row with predicted
index −1, confidence 0 and correct False, as the estimator writes it: squared error (0 − 0)² = 0."""

import polars as pl
import pytest

from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import CLAIMS, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from kcal_pipeline.reporting.findings.kissling import TABLE1_BRIER, TABLE4_BRIER
from kcal_pipeline.reporting.findings.kissling_selection import MARKER_PAPER
from tests.reporting.test_findings import ALTERNATE, instance_rows, marked, only, rows, store

ALL_RIGHT, ALL_WRONG = [True] * 20, [False] * 20
SURE = [1.0 if c else 0.0 for c in ALTERNATE]  # confidence 1 on the right, 0 on the wrong: Brier 0
RIGHT_ONES, WRONG_ONES = ALTERNATE, [not c for c in ALTERNATE]  # i0, i2, … right; i1, i3, … wrong


def exactly(found, subject: str):
    """The one row whose subject is `subject` (only() matches a part, and the rows on the instances
    both answer extend their paper-convention row's subject)."""
    (f,) = [f for f in found if f.subject == subject]
    return f


KEYS = {
    # key: (where, stage, the paper's effect)
    "margin_lowers_ace": ("§5.1; §5.1, Table 1", "bear", -0.138),
    "average_estimates_best_brier": ("§5.1; §3.2; App. C; §5.1, Table 1", "bear", None),
    "consistency_poor_brier": ("§5.1; §5.1, Table 1", "bear", None),
    "min_average_vs_vote2_brier": ("§5.1; §3.2; App. C; §5.1, Table 1", "bear", -0.023),
    "max_aggregation_worst_brier": ("App. C; §3.2; App. C, Table 4", "bear", None),
    "stricter_vote_lowers_brier": ("App. C; §3.2; App. C, Table 4", "bear", None),
    "vote_trades_coverage_for_accuracy": ("App. C", "bear", 0.2),
    "vote_threshold_raises_accuracy": ("§5.2; §3.2", "bear", 0.08),
    "markers_lower_accuracy_raise_ace": ("§7; App. E; §7, Fig. 6; App. E, Fig. 11", "markers", None),
}


def test_the_claims_cite_their_sections_and_the_papers_gpt2_cells():
    for key, (where, stage, effect) in KEYS.items():
        c = CLAIMS[key]
        assert (c.where, c.stage, c.number.effect) == (where, stage, effect), key
        assert c.preconditions and "released" not in c.number.text and not c.number.released, key
    # the cells each row shows beside kcal's, read from the quoted rows (gpt2, Table 1's Brier columns)
    assert TABLE1_BRIER == {
        "base": "0.237", "margin": "0.181", "vote2_average": "0.140", "min_average": "0.117",
        "vote2_consistency": "0.315", "min_consistency": "0.259",
    }  # fmt: skip
    assert TABLE4_BRIER == {
        "min_average": "0.117", "max_average": "0.147", "vote2_average": "0.140",
        "vote3_average": "0.124", "vote4_average": "0.072", "vote5_average": "0.032",
    }  # fmt: skip
    gpt2, average = MARKER_PAPER["ace"]
    assert (gpt2["marker_possibly"], gpt2["marker_numeric_100"], average["marker_certainly"]) == (
        "0.019", "0.025", "0.021",
    )  # fmt: skip
    assert MARKER_PAPER["accuracy"][0]["marker_numeric_25"] == "-0.012"


# --- the Average estimates against Base and Margin -----------------------------------------------


def vote_failing_on_the_wrong(confidence_right: float) -> pl.DataFrame:
    """Vote(2) Average answering the 10 right instances at one confidence and failing the 10 wrong."""
    return instance_rows(
        "vote2_average",
        [confidence_right if c else 0.0 for c in ALTERNATE],
        predicted=[0 if c else -1 for c in ALTERNATE],
    )


def single_template(estimator: str, right: float, wrong: float) -> pl.DataFrame:
    """Base or Margin on the headline template: one confidence on the right, one on the wrong."""
    return rows(estimator, ALTERNATE, [right if c else wrong for c in ALTERNATE])


def test_the_averages_beat_base_and_margin_and_the_vote_is_also_compared_where_it_answers():
    # Base and Margin: 0.7 on the right (error 0.09), 0.9 on the wrong (0.81): Brier (0.9 + 8.1)/20 = 0.45.
    # Min Average: SURE, Brier 0. Vote(2): 0.6 on the right (0.16), fails the wrong (0): Brier 1.6/20 = 0.08.
    # Every instance: Vote − Base = 0.08 − 0.45 = −0.37, each instance's difference negative → holds;
    # on the 10 Vote answers: 0.16 − 0.09 = +0.07 on each → does not hold, exactly.
    est = pl.concat(
        [single_template("base", 0.7, 0.9), single_template("margin", 0.7, 0.9),
         instance_rows("min_average", SURE), vote_failing_on_the_wrong(0.6)]
    )  # fmt: skip
    found = fd.average_estimates_best_brier(store(estimates=est))
    assert len(found) == 6
    for other in ("Base", "Margin"):
        every = exactly(found, f"Brier(Vote(2) Average) − Brier({other})")
        answered = exactly(found, f"Brier(Vote(2) Average) − Brier({other}) on the instances both answer")
        assert (every.verdict, every.n, every.value) == (HOLDS, 20, pytest.approx(-0.37))
        assert every.ci_high < 0 and "failed votes count with zero error" in every.numbers
        assert (answered.verdict, answered.n) == (FAILS, 10)
        assert (answered.value, answered.ci_low, answered.ci_high) == pytest.approx((0.07, 0.07, 0.07))
        by_min = [f for f in found if f.subject == f"Brier(Min Average) − Brier({other})"]
        assert [(f.verdict, f.n) for f in by_min] == [(HOLDS, 20)]  # −0.09 or −0.81 on each: −0.45
        assert by_min[0].value == pytest.approx(-0.45)
    base = exactly(found, "Brier(Vote(2) Average) − Brier(Base)")
    assert "Brier Vote(2) Average 0.080, Base 0.450; paper, gpt2 (Table 1): 0.140 vs 0.237" in base.numbers


def test_averages_worse_than_base_do_not_hold_and_a_missing_estimator_is_named():
    # Base SURE (Brier 0) against Averages at 0.5 everywhere (0.25): +0.25 on each instance.
    est = pl.concat(
        [single_template("base", 1.0, 0.0), single_template("margin", 1.0, 0.0),
         instance_rows("min_average", 0.5), instance_rows("vote2_average", 0.5)]
    )  # fmt: skip
    found = fd.average_estimates_best_brier(store(estimates=est))
    assert {f.verdict for f in found} == {FAILS}
    assert all(f.value == pytest.approx(0.25) for f in found)
    gone = fd.average_estimates_best_brier(store(estimates=est.filter(pl.col("estimator") != "margin")))
    assert only(gone).verdict == NOT_TESTABLE and "no Margin estimates" in only(gone).note


# --- Consistency against Average -----------------------------------------------------------------


def test_consistency_against_the_average_of_the_same_aggregation():
    # Vote(2): Consistency 0.5 everywhere (Brier 0.25) vs Average SURE (0): +0.25 → holds.
    # Min: Consistency SURE vs Average 0.5: −0.25 → does not hold.
    est = pl.concat(
        [instance_rows("vote2_consistency", 0.5), instance_rows("vote2_average", SURE),
         instance_rows("min_consistency", SURE), instance_rows("min_average", 0.5)]
    )  # fmt: skip
    found = fd.consistency_poor_brier(store(estimates=est))
    vote = only(found, "Brier(Vote(2) Consistency) − Brier(Vote(2) Average)")
    least = only(found, "Brier(Min Consistency) − Brier(Min Average)")
    assert (vote.verdict, vote.value, vote.ci_low, vote.ci_high, vote.n) == (HOLDS, 0.25, 0.25, 0.25, 20)
    assert (least.verdict, least.value) == (FAILS, -0.25)
    assert "paper, gpt2 (Table 1): 0.315 vs 0.140" in vote.numbers
    assert "paper, gpt2 (Table 1): 0.259 vs 0.117" in least.numbers
    assert only(fd.consistency_poor_brier(store(estimates=est.head(20)))).verdict == NOT_TESTABLE


# --- Min Average against the plurality vote under both conventions --------------------------------


def test_the_papers_convention_and_the_instances_both_answer_can_disagree():
    # Min Average: 0.7 on the right (error 0.09), 0.9 on the wrong (0.81): Brier 0.45.
    # Vote(2): 0.6 on the right (0.16), fails the wrong (0, the paper's zero calibration error): 0.08.
    # Paper's convention: 0.45 − 0.08 = +0.37 (each instance +0.07 − 0.16 … or +0.81): does not hold;
    # on the 10 Vote answers: 0.09 − 0.16 = −0.07 on each → holds, exactly.
    est = pl.concat(
        [instance_rows("min_average", [0.7 if c else 0.9 for c in ALTERNATE]), vote_failing_on_the_wrong(0.6)]
    )
    found = fd.min_average_vs_vote2_brier(store(estimates=est))
    every = exactly(found, "Brier(Min Average) − Brier(Vote(2) Average)")
    answered = only(found, "on the instances both answer")
    assert len(found) == 2
    assert (every.verdict, every.n, every.value) == (FAILS, 20, pytest.approx(0.37))
    assert (answered.verdict, answered.n) == (HOLDS, 10)
    assert (answered.value, answered.ci_low, answered.ci_high) == pytest.approx((-0.07, -0.07, -0.07))
    assert "Brier Min Average 0.450, Vote(2) Average 0.080" in every.numbers
    assert "paper, gpt2 (Table 1): 0.117 vs 0.140" in every.numbers


# --- Max, the worst aggregation ------------------------------------------------------------------


def test_max_against_min_and_every_vote_level():
    # Max 0.5 everywhere (Brier 0.25); Min and Vote(2) SURE (0); Vote(3) SURE on the right, failing
    # the wrong (0): +0.25 on every instance. Vote(2) < the largest level: compared again where it
    # answers (all 20); Vote(3), unanimity here, is not (Max would give its answer and confidence).
    vote3 = instance_rows(
        "vote3_average", [1.0 if c else 0.0 for c in ALTERNATE], predicted=[0 if c else -1 for c in ALTERNATE]
    )
    est = pl.concat(
        [instance_rows("max_average", 0.5), instance_rows("min_average", SURE),
         instance_rows("vote2_average", SURE), vote3]
    )  # fmt: skip
    found = fd.max_aggregation_worst_brier(store(estimates=est))
    assert [f.subject for f in found] == [
        "Brier(Max Average) − Brier(Min Average)",
        "Brier(Max Average) − Brier(Vote(2) Average)",
        "Brier(Max Average) − Brier(Vote(3) Average)",
        "Brier(Max Average) − Brier(Vote(2) Average) on the instances both answer",
    ]
    assert [(f.verdict, f.value, f.n) for f in found] == [(HOLDS, 0.25, 20)] * 4
    assert "paper, gpt2 (Table 4): 0.147 vs 0.117" in found[0].numbers
    assert "paper, gpt2 (Table 4): 0.147 vs 0.124" in found[2].numbers
    no_max = fd.max_aggregation_worst_brier(store(estimates=est.filter(pl.col("estimator") != "max_average")))
    assert only(no_max).verdict == NOT_TESTABLE and "no Max Average estimates" in only(no_max).note


# --- a stricter vote against withdrawing at random -----------------------------------------------


def two_votes(withdrawn: list[bool]) -> pl.DataFrame:
    """Vote(2) answers all 20 at confidence 0.8: error 0.04 on the right, 0.64 on the wrong (Σ 6.8,
    Brier 0.34); Vote(3) withdraws the `withdrawn` instances and keeps Vote(2)'s answers elsewhere."""
    vote2 = instance_rows("vote2_average", 0.8)
    vote3 = instance_rows(
        "vote3_average",
        [0.0 if w else 0.8 for w in withdrawn],
        correct=[c and not w for c, w in zip(ALTERNATE, withdrawn, strict=True)],
        predicted=[-1 if w else 0 for w in withdrawn],
    )
    return pl.concat([vote2, vote3])


HALF_AND_HALF = [k in (0, 2, 4, 6, 8, 1, 3, 5, 7, 9) for k in range(20)]  # 5 right, 5 wrong


@pytest.mark.parametrize(
    ("withdrawn", "verdict", "value", "brier3", "withdrawn_error"),
    [
        # the 10 wrong: −(6.4 − 10 · 6.8/20)/20 = −(6.4 − 3.4)/20 = −0.15; Vote(3) Brier 0.4/20 = 0.02
        (WRONG_ONES, HOLDS, -0.15, 0.02, 0.64),
        # the 10 right: −(0.4 − 3.4)/20 = +0.15, though Brier still falls (0.34 → 6.4/20 = 0.32)
        (RIGHT_ONES, FAILS, 0.15, 0.32, 0.04),
        # 5 of each: −(3.4 − 3.4)/20 = 0, what chance gives
        (HALF_AND_HALF, INCONCLUSIVE, 0.0, 0.17, 0.34),
    ],
)
def test_a_stricter_vote_against_as_many_answers_withdrawn_at_random(
    withdrawn, verdict, value, brier3, withdrawn_error
):
    f = only(fd.stricter_vote_lowers_brier(store(estimates=two_votes(withdrawn))))
    assert f.subject == "Brier(Vote(3) Average) − Brier(Vote(2) Average, as many withdrawn at random)"
    assert (f.verdict, f.n) == (verdict, 20) and f.value == pytest.approx(value, abs=1e-12)
    assert f.ci_low <= f.value <= f.ci_high
    assert (
        f"Brier Vote(2) 0.340 → Vote(3) {fd.fmt(brier3)}; withdrawn 10 of 20 answers, mean squared error "
        f"{fd.fmt(withdrawn_error)} vs 0.340 over Vote(2)'s answers; paper, gpt2 (Table 4): 0.140 → 0.124"
        in f.numbers
    )


def test_one_vote_level_gives_no_step():
    f = only(fd.stricter_vote_lowers_brier(store(estimates=instance_rows("vote2_average", 0.8))))
    assert f.verdict == NOT_TESTABLE and "--max-templates 3" in f.note


# --- the 0.1 threshold on C^Vote_Average ---------------------------------------------------------


def test_the_threshold_keeps_the_right_answers_and_the_share_rejected_is_shown():
    # Right i0, i2, …: confidence 0.1 (kept: the threshold keeps ≥ 0.1). Wrong: i1, i5, … fail (0),
    # i3, i7, … answer at 0.05 (rejected). Kept: the 10 right, accuracy 1.
    # Every instance: 1 − 10/20 = +0.5, rejected 10 of 20; the 15 answered: 1 − 10/15 = +1/3, rejected 5.
    confidence = [0.1 if c else 0.0 if k % 4 == 1 else 0.05 for k, c in enumerate(ALTERNATE)]
    predicted = [-1 if k % 4 == 1 else 0 for k in range(20)]
    est = instance_rows("vote2_average", confidence, predicted=predicted)
    every, answered = fd.vote_threshold_raises_accuracy(store(estimates=est))
    assert every.subject == "accuracy(C^Vote_Average ≥ 0.1) − accuracy(all)"
    assert answered.subject == every.subject + " on the instances the vote answers"
    assert (every.verdict, every.value, every.n) == (HOLDS, 0.5, 20)
    assert (answered.verdict, answered.value, answered.n) == (HOLDS, pytest.approx(1 / 3), 15)
    assert every.numbers.endswith("; accuracy 1.000 kept vs 0.500; rejected 0.500 (10 of 20)")
    assert answered.numbers.endswith("; accuracy 1.000 kept vs 0.667; rejected 0.333 (5 of 15)")


def test_rejecting_the_right_answers_does_not_hold():
    # The right at 0.05 (rejected), the wrong at 0.5 (kept): accuracy kept 0 − 0.5 = −0.5; a resample's
    # kept accuracy is always 0 and its overall one is its share right, so every resample is < 0 but
    # one that draws only wrong instances.
    est = instance_rows("vote2_average", [0.05 if c else 0.5 for c in ALTERNATE])
    found = fd.vote_threshold_raises_accuracy(store(estimates=est))
    assert [(f.verdict, f.value, f.n) for f in found] == [(FAILS, -0.5, 20)] * 2
    assert all(f.ci_high < 0 for f in found)
    f = only(fd.vote_threshold_raises_accuracy(store(estimates=instance_rows("min_average", 0.5))))
    assert f.verdict == NOT_TESTABLE and "no Vote(2) Average estimates" in f.note


# --- markers -------------------------------------------------------------------------------------


def test_each_marker_row_shows_the_papers_cells_for_its_injection():
    found = fd.markers_lower_accuracy_raise_ace(store(estimates=marked(ALL_RIGHT, ALL_WRONG)))
    acc, cal = only(found, "accuracy("), only(found, "ACE(")
    assert acc.numbers.endswith(" over 40 pairs; paper Δaccuracy: gpt2 -0.012, average -0.016")
    assert cal.numbers.endswith(" over 40 pairs; paper ΔACE: gpt2 0.037, average 0.021")
