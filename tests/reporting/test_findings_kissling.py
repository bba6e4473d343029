"""Kissling et al. (seed 000)'s added claims on hand-made tables: overconfidence, the reduction,
the option-count sweep and accuracy against ACE across relations; each holds, does not hold (or is
inconclusive) and is not testable with the precondition named.

Where a verdict must be exact every row of a side is alike (one confidence, all right or all
wrong), so every bootstrap resample gives the same value and the interval is [d, d]."""

import math

import polars as pl
import pytest

from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import CLAIMS, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from tests.reporting.test_findings import ALTERNATE, MODEL, differences, only, rows, store

ALL_RIGHT, ALL_WRONG = [True] * 20, [False] * 20


def test_the_new_claims_say_where_they_come_from_and_what_the_paper_found():
    for key, where, stage, effect in [
        ("models_overconfident", "Abstract; §4", "bear", 0.336),
        ("sum_best_reduction", "App. B (reductions)", "bear", -0.001),
        ("more_options_lower_ace", "§5.4, Fig. 5", "sweep", -0.113),
        ("ace_falls_with_accuracy", "Fig. 4", "bear", None),
        ("min_average_vs_vote2_brier", "§4, Table 1; App. C (Brier by aggregation)", "bear", None),
        ("margin_lowers_ace", "§4, Table 1 (intrinsic confidence); Fig. 4", "bear", -0.14),
    ]:
        c = CLAIMS[key]
        assert (c.where, c.stage, c.number.effect) == (where, stage, effect), key
        assert c.preconditions and "the authors' released" in c.number.text, key
    assert "min_average_best_brier" not in CLAIMS
    assert "across models" in CLAIMS["ace_falls_with_accuracy"].setting


# --- models are overconfident --------------------------------------------------------------------


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
        "mean confidence(Base) − accuracy(Base)",
        verdict,
        gap,
        low,
        high,
        50,
    )
    assert f.numbers == f"gap {fd.fmt_ci(gap, low, high)}; mean confidence 0.700; accuracy 0.400"


def test_overconfidence_without_the_gap_row_is_not_testable():
    table = metrics([("base", "accuracy", 0.4, 0.3, 0.5)])
    for t in (store(), store(metrics=table), store(differences=differences("margin", "ace", 0, 0, 0))):
        f = only(fd.models_overconfident(t))
        assert f.verdict == NOT_TESTABLE and "confidence_gap" in f.note and "--dev-fraction < 1" in f.note


# --- Sum is the best reduction -------------------------------------------------------------------


def reduced(**by_reduction) -> pl.DataFrame:
    """Base under each reduction: (correct, confidence) on instances i0 … i19 of the headline
    template, plus a Margin row and a non-headline template's row that the claim must not read."""
    frames = [rows("base", c, p, reduction=r) for r, (c, p) in by_reduction.items()]
    frames += [
        rows("margin", ALL_WRONG, 0.0, reduction="mean"),
        rows("base", ALL_WRONG, 0.0, template="P1:c1"),
    ]
    return pl.concat(frames)


# H = 2·Acc·(1 − ACE)/(Acc + 1 − ACE): all right at confidence 1 → Acc 1, ACE 0, H 1; all right at
# 0.5 → ACE 0.5, H = 2·0.5/1.5 = 2/3; all wrong at 0 → Acc 0, ACE 0, H 0.
PERFECT, HALF_SURE, NOTHING = (ALL_RIGHT, 1.0), (ALL_RIGHT, 0.5), (ALL_WRONG, 0.0)


@pytest.mark.parametrize(
    ("tables", "best", "verdict", "difference"),
    [
        ({"sum": PERFECT, "mean": HALF_SURE, "answer_sum": NOTHING}, "Mean", HOLDS, 1 / 3),
        ({"sum": HALF_SURE, "mean": NOTHING, "answer_mean": PERFECT}, "Mean(A)", FAILS, -1 / 3),
        ({"sum": HALF_SURE, "answer_sum": HALF_SURE}, "Sum(A)", INCONCLUSIVE, 0.0),
    ],
)
def test_sums_h_against_the_best_other_reduction(tables, best, verdict, difference):
    f = only(fd.sum_best_reduction(store(estimates=reduced(**tables))))
    assert f.subject == f"H(Base, Sum) − H(Base, {best})"
    assert (f.verdict, f.n) == (verdict, 20)
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((difference, difference, difference))
    assert "Sum: H " in f.numbers and f"{best}: H " in f.numbers


def test_the_reductions_accuracy_ace_and_h_are_shown():
    f = only(fd.sum_best_reduction(store(estimates=reduced(sum=PERFECT, mean=HALF_SURE))))
    assert f.numbers == (
        "ΔH 0.333 [0.333, 0.333]; Sum: H 1.000, accuracy 1.000, ACE 0.000; "
        "Mean: H 0.667, accuracy 1.000, ACE 0.500"
    )


def test_sum_alone_or_no_sum_is_not_testable():
    for est in (reduced(sum=PERFECT), reduced(mean=PERFECT, answer_sum=HALF_SURE)):
        f = only(fd.sum_best_reduction(store(estimates=est)))
        assert f.verdict == NOT_TESTABLE and "--build (stage bear)" in f.note
    assert (
        "under sum reduction(s) only"
        in only(fd.sum_best_reduction(store(estimates=reduced(sum=PERFECT)))).note
    )


# --- more options lower ACE ----------------------------------------------------------------------


def swept(full, cuts, *, n=20):
    """Base on the full answer space of i0 … i{n-1} and on sweep copies: `cuts` maps (k, draw) to
    (correct, confidence) of copies `i<j>#k<k>d<draw>` of the first `n` instances; a cut copy of
    another estimator is a decoy."""
    frames = [rows("base", full[0], full[1], instances=[f"i{j}" for j in range(len(full[0]))])]
    for (k, draw), (correct, confidence) in cuts.items():
        ids = [f"i{j}#k{k}d{draw}" for j in range(n)]
        frames.append(
            rows("base", correct[:n], confidence, instances=ids).with_columns(
                answer_space_k=pl.lit(k, dtype=pl.Int32), answer_space_draw=pl.lit(draw, dtype=pl.Int32)
            )
        )
    decoy = rows("margin", ALL_WRONG, 0.9, instances=[f"i{j}#k5d1" for j in range(20)])
    return pl.concat([*frames, decoy.with_columns(answer_space_k=pl.lit(5, dtype=pl.Int32))])


# One confidence 0.9: ACE |1 − 0.9| = 0.1 when all are right, |0 − 0.9| = 0.9 when all are wrong.
SURE_RIGHT, SURE_WRONG = (ALL_RIGHT, 0.9), (ALL_WRONG, 0.9)


@pytest.mark.parametrize(
    ("full", "cut", "verdict", "difference"),
    [
        (SURE_RIGHT, SURE_WRONG, HOLDS, -0.8),
        (SURE_WRONG, SURE_RIGHT, FAILS, 0.8),
        (SURE_RIGHT, SURE_RIGHT, INCONCLUSIVE, 0.0),
    ],
)
def test_full_answer_space_against_the_smallest_k_on_draw_one(full, cut, verdict, difference):
    # k = 5 draw 1 decides; draw 2 (the opposite of draw 1) and k = 10 are shown only.
    other = SURE_RIGHT if cut is SURE_WRONG else SURE_WRONG
    est = swept(full, {(10, 1): other, (5, 2): other, (5, 1): cut})
    f = only(fd.more_options_lower_ace(store(estimates=est)))
    assert f.subject == "ACE(Base, full answer space) − ACE(Base, k = 5), draw 1"
    assert (f.verdict, f.n) == (verdict, 20)
    assert (f.value, f.ci_low, f.ci_high) == pytest.approx((difference, difference, difference))
    d2 = round(abs(full[0][0] - 0.9) - abs(other[0][0] - 0.9), 3) + 0.0
    assert f"draw 2: ΔACE {fd.fmt_ci(d2, d2, d2)}" in f.numbers
    ace_full, ace_cut, ace_other = (fd.fmt(abs(s[0][0] - 0.9)) for s in (full, cut, other))
    assert (
        f"k=5: ACE {ace_cut} (draw 1), {ace_other} (draw 2), 20 instances cut; "
        f"full answer space on them {ace_full}; k=10: ACE {ace_other} (draw 1)" in f.numbers
    )


def test_only_the_instances_the_sweep_cut_are_compared():
    # 40 instances on the full space: i0 … i19 all right, i20 … i39 all wrong; k = 5 cuts i0 … i19 only.
    full = (ALL_RIGHT + ALL_WRONG, 0.9)
    f = only(fd.more_options_lower_ace(store(estimates=swept(full, {(5, 1): SURE_WRONG}))))
    assert (f.n, f.verdict) == (20, HOLDS)
    assert f.value == pytest.approx(0.1 - 0.9)


def test_a_store_without_a_sweep_is_not_testable():
    f = only(fd.more_options_lower_ace(store(estimates=rows("base", ALTERNATE, 0.5))))
    assert f.verdict == NOT_TESTABLE
    assert "--answer-space-k 5,10,20" in f.note and "stage sweep" in f.note
    only_cut = swept(SURE_RIGHT, {(5, 1): SURE_WRONG}).filter(pl.col("answer_space_k") > 0)
    f = only(fd.more_options_lower_ace(store(estimates=only_cut)))
    assert f.verdict == NOT_TESTABLE and "not their full answer spaces" in f.note


# --- ACE falls as accuracy grows -----------------------------------------------------------------

RELATIONS = [f"R{r}" for r in range(1, 6)]
HEADS = pl.DataFrame(
    {"relation_id": RELATIONS, "template_id": [f"{r}:c0" for r in RELATIONS], "rank": 0, "kind": "curated"}
)


def by_relation(confidence: float, relations=RELATIONS) -> pl.DataFrame:
    """Four instances per relation at one confidence; relation r has r − 1 of 4 right: accuracy
    0, 0.25, 0.5, 0.75, 1; every row shares one bin, so ACE = |accuracy − confidence|."""
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


@pytest.mark.parametrize(
    ("confidence", "verdict", "value"),
    [
        (0.9, HOLDS, R_AT_09),  # ACE falls with accuracy in every pair of relations: every resample < 0
        (0.1, FAILS, 0.525 / math.sqrt(0.625 * 0.457)),  # ACE .1, .15, .4, .65, .9: the mirror image
        (0.5, INCONCLUSIVE, 0.0),  # ACE .5, .25, 0, .25, .5: a V, r = 0
    ],
)
def test_pearson_r_of_accuracy_and_ace_across_relations(confidence, verdict, value):
    f = only(
        fd.ace_falls_with_accuracy(fd.StoreTables(MODEL, estimates=by_relation(confidence), templates=HEADS))
    )
    assert (f.subject, f.verdict, f.n) == ("Pearson r(accuracy, ACE) of Base across relations", verdict, 5)
    assert f.value == pytest.approx(value, abs=1e-12)
    assert f.ci_low <= f.value <= f.ci_high
    assert f"over 5 relations; accuracy/ACE per relation: R1 0.000/{fd.fmt(confidence)}" in f.numbers
    assert abs(R_AT_09 - -0.98234) < 1e-5


def test_fewer_than_five_relations_is_not_testable():
    t = fd.StoreTables(MODEL, estimates=by_relation(0.9, RELATIONS[:4]), templates=HEADS)
    f = only(fd.ace_falls_with_accuracy(t))
    assert f.verdict == NOT_TESTABLE and "4 relation(s)" in f.note and "stage bear" in f.note
    assert only(fd.ace_falls_with_accuracy(store())).verdict == NOT_TESTABLE


def test_the_new_claims_run_through_evaluate_claims():
    keys = ["models_overconfident", "sum_best_reduction", "more_options_lower_ace", "ace_falls_with_accuracy"]
    t = fd.StoreTables(MODEL, estimates=by_relation(0.9), templates=HEADS)
    found = {f.claim: f for f in fd.evaluate_claims([t], keys)}
    assert found["ace_falls_with_accuracy"].verdict == HOLDS
    assert {found[k].verdict for k in keys[:3]} == {NOT_TESTABLE}
    staged = fd.evaluate_claims({"bear": [t]}, ["more_options_lower_ace"])
    assert only(staged).verdict == NOT_TESTABLE and "no 'sweep' stage" in only(staged).note
