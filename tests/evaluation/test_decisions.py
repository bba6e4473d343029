"""Decisions at a threshold (precision, recall, F1, FPR) over instances and over asserted
statements, at τ = 0.5 and at a τ tuned on dev; the registry's threshold input kinds. The
arithmetic is in the comments."""

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcal_pipeline.estimation.marginal import OPTION_ESTIMATES_SCHEMA
from kcal_pipeline.evaluation import compute_metrics, compute_template_metrics
from kcal_pipeline.evaluation.decisions import DEGENERATE_SHARE, f1, fpr, precision, recall, tune_f1
from kcal_pipeline.evaluation.engine import THRESHOLDS_SCHEMA, tuned_thresholds
from kcal_pipeline.evaluation.registry import METRICS, TunedThreshold, register

DECISION_METRICS = [
    f"{prefix}{name}_{suffix}"
    for prefix in ("", "statement_")
    for name in ("precision", "recall", "f1", "fpr")
    for suffix in ("t050", "tuned")
]
nan = pytest.approx(math.nan, nan_ok=True)


def test_every_decision_metric_is_registered_with_its_input_and_direction():
    got = {n: (METRICS[n].input, METRICS[n].needs, METRICS[n].higher_is_better) for n in DECISION_METRICS}
    for name, (kind, needs, higher) in got.items():
        assert kind == ("statements" if name.startswith("statement_") else "threshold")
        assert higher is (not name.removeprefix("statement_").startswith("fpr"))
        # τ = 0.5 only means something on a probability; statements are probabilities
        expected_needs = "any" if name.endswith("_tuned") and kind == "threshold" else "probability"
        assert needs == expected_needs, name
    assert METRICS["f1_t050"].threshold == 0.5 and METRICS["f1_tuned"].threshold is tune_f1


# Test instances: 0.95 ✓, 0.65 ✗, 0.55 ✓, 0.2 ✗, 0.6 ✓, 0.5 ✗, 0.45 ✓
C7 = np.array([0.95, 0.65, 0.55, 0.2, 0.6, 0.5, 0.45])
Y7 = np.array([True, False, True, False, True, False, True])


def test_precision_recall_f1_fpr_at_half():
    # accept C ≥ 0.5 (0.5 itself is accepted): 0.95 ✓, 0.65 ✗, 0.55 ✓, 0.6 ✓, 0.5 ✗
    #   TP 3, FP 2; rejected 0.2 ✗ (TN 1), 0.45 ✓ (FN 1)
    # precision 3/5, recall 3/4, F1 2·3/(2·3 + 2 + 1) = 2/3, FPR 2/(2 + 1) = 2/3
    assert precision(C7, Y7, 0.5) == pytest.approx(0.6)
    assert recall(C7, Y7, 0.5) == pytest.approx(0.75)
    assert f1(C7, Y7, 0.5) == pytest.approx(2 / 3)
    assert fpr(C7, Y7, 0.5) == pytest.approx(2 / 3)
    # F1 is the harmonic mean of the two: 2·0.6·0.75/1.35 = 2/3
    assert pytest.approx(2 / 3) == 2 * 0.6 * 0.75 / (0.6 + 0.75)
    # registered at τ = 0.5, the spec applies its own threshold
    assert METRICS["precision_t050"](C7, Y7) == pytest.approx(0.6)


@pytest.mark.parametrize("tau", [0.0, 0.3, 0.5, 0.55, 0.6, 0.96])
def test_decisions_equal_sklearn_on_the_accept_rule(tau):
    from sklearn.metrics import confusion_matrix, f1_score, precision_score, recall_score

    accept = tau <= C7
    kw = {"zero_division": np.nan}
    assert precision(C7, Y7, tau) == pytest.approx(precision_score(Y7, accept, **kw), nan_ok=True)
    assert recall(C7, Y7, tau) == pytest.approx(recall_score(Y7, accept, **kw), nan_ok=True)
    assert f1(C7, Y7, tau) == pytest.approx(f1_score(Y7, accept, **kw), nan_ok=True)
    tn, fp, _, _ = confusion_matrix(Y7, accept, labels=[False, True]).ravel()
    assert fpr(C7, Y7, tau) == pytest.approx(fp / (fp + tn))


def test_empty_cells_give_nan_or_zero_as_documented():
    c, y = np.array([0.2, 0.4]), np.array([True, False])
    # nothing accepted at 0.5: precision 0/0 → NaN; recall 0/1 = 0; F1 0/(0 + 0 + 1) = 0; FPR 0/1 = 0
    assert precision(c, y, 0.5) == nan
    assert (recall(c, y, 0.5), f1(c, y, 0.5), fpr(c, y, 0.5)) == (0.0, 0.0, 0.0)
    # no correct and nothing accepted: F1 0/0 → NaN, recall NaN
    wrong = np.array([False, False])
    assert f1(c, wrong, 0.5) == nan and recall(c, wrong, 0.5) == nan
    # all correct: no wrong one, FPR NaN
    assert fpr(c, np.array([True, True]), 0.1) == nan
    # τ NaN (a score estimator without a tuned τ): every measure NaN
    assert all(m(c, y, math.nan) == nan for m in (precision, recall, f1, fpr))


# Dev instances: 0.9 ✓, 0.8 ✓, 0.7 ✗, 0.6 ✓, 0.4 ✗, 0.3 ✗ (P = 3 correct of 6)
DEV_C = np.array([0.9, 0.8, 0.7, 0.6, 0.4, 0.3])
DEV_Y = np.array([True, True, False, True, False, False])


def test_tune_f1_by_hand():
    # F1(τ) = 2·TP / (accepted + P) for each distinct dev confidence:
    #   τ 0.9: 2·1/(1+3) = 0.5    0.8: 4/5 = 0.8    0.7: 4/6    0.6: 6/7 ≈ 0.857 (best)
    #   0.4: 6/8        0.3: 6/9
    # τ = 0.6 accepts 4 of 6 (67 %): not degenerate
    assert tune_f1(DEV_C, DEV_Y, "probability") == TunedThreshold(0.6, False, None, 6)


def test_tune_f1_ties_go_to_the_largest_threshold():
    # 0.9 ✓, 0.8 ✗, 0.7 ✗, 0.6 ✓, 6 × 0.1 ✗ (n 10, P 2): F1 = 2·TP/(accepted + 2)
    #   τ 0.9: 2/3; 0.8: 2/4; 0.7: 2/5; 0.6: 4/6 = 2/3; 0.1: 4/12
    # 0.9 and 0.6 tie → the larger, 0.9 (accepts 1/10: not degenerate)
    c = np.array([0.9, 0.8, 0.7, 0.6] + [0.1] * 6)
    y = np.array([True, False, False, True] + [False] * 6)
    assert tune_f1(c, y, "probability") == TunedThreshold(0.9, False, None, 10)
    assert f1(c, y, 0.9) == f1(c, y, 0.6) == pytest.approx(2 / 3)


def test_tune_f1_falls_back_to_half_and_says_why():
    empty = np.empty(0), np.empty(0, dtype=bool)
    assert tune_f1(*empty, "probability") == TunedThreshold(0.5, True, "no dev rows", 0)
    assert tune_f1(DEV_C, np.zeros(6, dtype=bool), "probability") == TunedThreshold(
        0.5, True, "no correct dev row", 6
    )
    # 0.05, 0.10, …, 1.00 with only the lowest wrong: the best τ is 0.1 (F1 2·19/(19 + 19) = 1),
    # which accepts 19 of 20 = 95 % → degenerate
    c = np.linspace(0.05, 1.0, 20)
    y = np.arange(20) != 0
    out = tune_f1(c, y, "probability")
    assert (out.threshold, out.fallback, out.n_dev) == (0.5, True, 20)
    assert out.reason.startswith("degenerate: the best τ 0.1 accepts 95.0% of 20 dev rows")
    assert DEGENERATE_SHARE == 0.95
    # a score has no neutral 0.5: the fallback τ is NaN
    fallback = tune_f1(*empty, "score")
    assert math.isnan(fallback.threshold) and fallback.fallback


def estimates():
    """base (probability): dev = DEV_C/DEV_Y on P1; test = C7/Y7, the first four on P1, the last
    three on P2. gap (score): dev 5 ✓, 3 ✓, 2 ✗, 1 ✗ on P1; test 4 ✓, 2.5 ✗, 3 ✓, −1 ✗ on P2."""
    rows = [
        ("base", "probability", "dev", "P1", f"d{i}", float(c), bool(y))
        for i, (c, y) in enumerate(zip(DEV_C, DEV_Y, strict=True))
    ]
    gap_dev = zip([5.0, 3.0, 2.0, 1.0], [True, True, False, False], strict=True)
    rows += [
        ("base", "probability", "test", "P1" if i < 4 else "P2", f"t{i}", float(c), bool(y))
        for i, (c, y) in enumerate(zip(C7, Y7, strict=True))
    ]
    rows += [("gap", "score", "dev", "P1", f"d{i}", c, y) for i, (c, y) in enumerate(gap_dev)]
    rows += [
        ("gap", "score", "test", "P2", f"t{i}", c, y)
        for i, (c, y) in enumerate(zip([4.0, 2.5, 3.0, -1.0], [True, False, True, False], strict=True))
    ]
    schema = ["estimator", "output_kind", "split", "relation_id", "instance_id", "confidence", "correct"]
    frame = pl.DataFrame(rows, orient="row", schema=schema)
    return frame.with_columns(model_id=pl.lit("m"))


def values(out: pl.DataFrame) -> dict:
    return {
        (r["estimator"], r["split"], r["scope_value"], r["metric"]): r["value"]
        for r in out.iter_rows(named=True)
    }


def test_compute_metrics_tunes_tau_on_dev_and_applies_it_to_test():
    names = [n for n in DECISION_METRICS if not n.startswith("statement_")]
    got = values(compute_metrics(estimates(), names))
    approx = pytest.approx
    # base, τ tuned on dev = 0.6 (test_tune_f1_by_hand). Test, all 7 instances:
    #   at 0.5: as in test_precision_recall_f1_fpr_at_half
    #   at 0.6: accept 0.95 ✓, 0.65 ✗, 0.6 ✓ → TP 2, FP 1, FN 2 (0.55, 0.45), TN 2 (0.2, 0.5)
    #           precision 2/3, recall 2/4, F1 4/(4 + 1 + 2) = 4/7, FPR 1/3
    expected = {
        "precision_t050": 0.6, "recall_t050": 0.75, "f1_t050": 2 / 3, "fpr_t050": 2 / 3,
        "precision_tuned": 2 / 3, "recall_tuned": 0.5, "f1_tuned": 4 / 7, "fpr_tuned": 1 / 3,
    }  # fmt: skip
    assert {m: got[("base", "test", "all", m)] for m in expected} == approx(expected)
    # P2 alone (0.6 ✓, 0.5 ✗, 0.45 ✓): at 0.5 accept 0.6 ✓, 0.5 ✗ → P 1/2, R 1/2, F1 2/4, FPR 1/1;
    #   at 0.6 accept 0.6 ✓ → P 1, R 1/2, F1 2/3, FPR 0/1 — the group's τ, not one tuned per relation
    p2 = {
        "precision_t050": 0.5, "recall_t050": 0.5, "f1_t050": 0.5, "fpr_t050": 1.0,
        "precision_tuned": 1.0, "recall_tuned": 0.5, "f1_tuned": 2 / 3, "fpr_tuned": 0.0,
    }  # fmt: skip
    assert {m: got[("base", "test", "P2", m)] for m in p2} == approx(p2)
    # on dev itself the tuned τ is in-sample: F1 6/7
    assert got[("base", "dev", "all", "f1_tuned")] == approx(6 / 7)
    # gap (score): no *_t050; dev F1 over τ ∈ {5, 3, 2, 1} (P 2) = 2/3, 4/4, 4/5, 4/6 → τ = 3 (50 %)
    #   test: accept 4 ✓, 3 ✓ → precision 1, recall 1, F1 1, FPR 0
    assert {m for (e, _, _, m) in got if e == "gap"} == {
        "precision_tuned",
        "recall_tuned",
        "f1_tuned",
        "fpr_tuned",
    }
    gap = {
        m: got[("gap", "test", "all", m)]
        for m in ("precision_tuned", "recall_tuned", "f1_tuned", "fpr_tuned")
    }
    assert gap == {"precision_tuned": 1.0, "recall_tuned": 1.0, "f1_tuned": 1.0, "fpr_tuned": 0.0}


def test_tuned_thresholds_record_tau_and_fallback():
    est = pl.concat(
        [
            estimates(),
            # a group with no dev split at all: answer space k = 2, test only
            estimates().filter(split="test", estimator="base").with_columns(answer_space_k=pl.lit(2)),
        ],
        how="diagonal",
    ).with_columns(pl.col("answer_space_k").fill_null(0))
    table = tuned_thresholds(est)
    assert table.schema == pl.Schema(THRESHOLDS_SCHEMA)
    assert table.sort("estimator", "answer_space_k").rows() == [
        ("m", "base", None, 0, 0, "instances", "tune_f1", 0.6, False, None, 6),
        ("m", "base", None, 2, 1, "instances", "tune_f1", 0.5, True, "no dev rows", 0),
        ("m", "gap", None, 0, 0, "instances", "tune_f1", 3.0, False, None, 4),
    ]
    # the k = 2 copy's tuned metrics use the fallback 0.5, i.e. equal its t050 ones
    out = compute_metrics(est, ["f1_t050", "f1_tuned"]).filter(answer_space_k=2, scope="all")
    assert out["value"].to_list() == pytest.approx([2 / 3, 2 / 3])


def option_estimates():
    """Template-marginal P(o | r, s), reduction sum, relation P1.
    dev:  d1: o0 0.7 gold, o1 0.2, o2 0.1;  d2: o0 0.4 gold, o1 0.6
    test: t1: o0 0.5 gold, o1 0.3 gold, o2 0.2;  t2: o0 0.45, o1 0.55 gold"""
    rows = [
        ("dev", "d1", 0, 0.7, True), ("dev", "d1", 1, 0.2, False), ("dev", "d1", 2, 0.1, False),
        ("dev", "d2", 0, 0.4, True), ("dev", "d2", 1, 0.6, False),
        ("test", "t1", 0, 0.5, True), ("test", "t1", 1, 0.3, True), ("test", "t1", 2, 0.2, False),
        ("test", "t2", 0, 0.45, False), ("test", "t2", 1, 0.55, True),
    ]  # fmt: skip
    frame = pl.DataFrame(
        rows, orient="row", schema=["split", "instance_id", "option_index", "probability", "is_gold"]
    )
    return (
        frame.with_columns(
            model_id=pl.lit("m"),
            relation_id=pl.lit("P1"),
            answer_space_k=pl.lit(0),
            answer_space_draw=pl.lit(0),
            option_id=pl.format("Q{}", "option_index"),
            estimator=pl.lit("template_marginal"),
            reduction=pl.lit("sum"),
        )
        .select(list(OPTION_ESTIMATES_SCHEMA))
        .cast(OPTION_ESTIMATES_SCHEMA)
    )


def test_statement_decisions_over_asserted_statements():
    # A statement is asserted when P > τ (strictly, METHODS §2).
    # dev statements (0.7 ✓, 0.2, 0.1, 0.4 ✓, 0.6), P = 2: F1(τ) = 2·TP/(asserted + 2) asserting P > τ
    #   0.7: 0; 0.6: 2/3; 0.4: 2/4; 0.2: 4/5 (best, asserts 3 of 5); 0.1: 4/6 → τ = 0.2
    # test statements (0.5 ✓, 0.3 ✓, 0.2, 0.45, 0.55 ✓):
    #   at 0.5: asserted 0.55 ✓ (0.5 is not above 0.5) → TP 1, FP 0, FN 2, TN 2: P 1, R 1/3, F1 1/2, FPR 0
    #   at 0.2: asserted 0.5 ✓, 0.3 ✓, 0.45 ✗, 0.55 ✓ → TP 3, FP 1, FN 0, TN 1: P 3/4, R 1, F1 6/7, FPR 1/2
    names = [n for n in DECISION_METRICS if n.startswith("statement_")]
    out = compute_metrics(estimates(), names, option_estimates=option_estimates())
    assert set(out["estimator"]) == {"template_marginal"} and set(out["reduction"]) == {"sum"}
    test = out.filter(split="test", scope="all")
    assert test["n"].unique().to_list() == [5]
    got = dict(zip(test["metric"], test["value"], strict=True))
    assert got == pytest.approx(
        {
            "statement_precision_t050": 1.0, "statement_recall_t050": 1 / 3,
            "statement_f1_t050": 0.5, "statement_fpr_t050": 0.0,
            "statement_precision_tuned": 3 / 4, "statement_recall_tuned": 1.0,
            "statement_f1_tuned": 6 / 7, "statement_fpr_tuned": 0.5,
        }
    )  # fmt: skip
    assert (
        out.filter(scope="relation", scope_value="P1", split="test")["value"].to_list()
        == test["value"].to_list()
    )
    table = tuned_thresholds(estimates(), option_estimates()).filter(unit="statements")
    assert table.rows() == [
        ("m", "template_marginal", "sum", 0, 0, "statements", "tune_f1_strict", 0.2, False, None, 5)
    ]


def test_statement_metrics_need_option_estimates_and_sound_ones():
    # all metrics without option_estimates: the statement ones are left out, the others computed
    out = compute_metrics(estimates())
    assert not out.filter(pl.col("metric").str.starts_with("statement_")).height
    assert out.filter(metric="f1_tuned").height > 0
    with pytest.raises(
        ValueError, match="'statement_f1_t050' reads statements; missing argument option_estimates"
    ):
        compute_metrics(estimates(), ["statement_f1_t050"])
    opts = option_estimates()
    with pytest.raises(ValueError, match="several rows for option 0 of instance 'd1'"):
        compute_metrics(estimates(), ["statement_f1_t050"], option_estimates=pl.concat([opts, opts.head(1)]))
    bad = opts.with_columns(
        probability=pl.when(pl.col("option_index") == 2).then(1.5).otherwise("probability")
    )
    with pytest.raises(ValueError, match=r"probability 1\.5 of option 2 of instance 'd1' is outside"):
        compute_metrics(estimates(), ["statement_f1_t050"], option_estimates=bad)
    with pytest.raises(ValueError, match="missing column 'is_gold'"):
        compute_metrics(estimates(), ["statement_f1_t050"], option_estimates=opts.drop("is_gold"))


def test_template_metrics_take_fixed_thresholds_only():
    est = estimates().filter(estimator="base").with_columns(template_id=pl.lit("P:c0"))
    # test, τ 0.5: P1 (0.95 ✓, 0.65 ✗, 0.55 ✓, 0.2 ✗) F1 2·2/(4 + 1) = 0.8; P2 F1 0.5 (above);
    # all_template_mean weighs the relations by instances: (4·0.8 + 3·0.5)/7 = 4.7/7
    out = compute_template_metrics(est, ["f1_t050"]).filter(scope="all_template_mean", split="test")
    assert out["value"].item() == pytest.approx(4.7 / 7)
    with pytest.raises(ValueError, match=r"\['f1_tuned'\] are not computed per template"):
        compute_template_metrics(est, ["f1_t050", "f1_tuned"])


def test_threshold_specs_are_checked_and_called_with_their_tau():
    with pytest.raises(ValueError, match="'f1_tuned' uses a threshold tuned on the dev split: pass tau"):
        METRICS["f1_tuned"](C7, Y7)
    assert METRICS["f1_tuned"](C7, Y7, tau=0.6) == pytest.approx(4 / 7)
    assert METRICS["f1_t050"](C7, Y7, tau=0.6) == pytest.approx(4 / 7)  # an explicit τ wins
    with pytest.raises(ValueError, match="'f1_t050' needs probabilities"):
        METRICS["f1_t050"]([3.0, -1.0], [1, 0], "score")
    with pytest.raises(ValueError, match=r"input must be one of .* got 'scores'"):
        register("x_new", label="x", family="x", needs="any", higher_is_better=True, input="scores")(f1)
    with pytest.raises(ValueError, match=r"threshold .* goes with input 'threshold' or 'statements'"):
        register("x_new", label="x", family="x", needs="any", higher_is_better=True, input="threshold")(f1)
    with pytest.raises(ValueError, match=r"threshold .* goes with input 'threshold' or 'statements'"):
        register("x_new", label="x", family="x", needs="any", higher_is_better=True, threshold=0.5)(f1)
    assert "x_new" not in METRICS


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.7, 0.9]), st.booleans()), min_size=1, max_size=40
    )
)
def test_tune_f1_equals_a_brute_force_search(points):
    c = np.array([p for p, _ in points])
    y = np.array([r for _, r in points])
    out = tune_f1(c, y, "probability")
    if out.fallback:
        assert out.threshold == 0.5
        return
    # every distinct value as τ, F1 by the plain function; the best, ties to the largest τ
    best = max(sorted(set(c)), key=lambda tau: (f1(c, y, tau), tau))
    assert out.threshold == best
    assert DEGENERATE_SHARE > (c >= best).mean() > 1 - DEGENERATE_SHARE
