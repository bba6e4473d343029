"""Tinner 2024's claims (seed 001) on hand-made tables: precision at 0.5 of the template marginal,
aggregation against Base, demonstrations and a wrong context against the plain template."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.bootstrap import resample_plan
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import CLAIMS, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE, StoreTables
from tests.reporting.test_findings import MODEL, TEMPLATES, only, rows, store

N = 20
FIRST_EIGHT = [k < 8 for k in range(N)]  # i0 … i7 right, i8 … i19 wrong: accuracy 0.4


def marginal(correct, confidence, *, templates=("P1:c0", "P1:c1"), base_confidence=0.9, base_correct=None):
    """The template marginal (instance grain) and Base on each of `templates` (the paraphrases it
    averages; the first is the headline one)."""
    base_correct = correct if base_correct is None else base_correct
    return pl.concat(
        [rows("template_marginal", correct, confidence, template=None)]
        + [rows("base", base_correct, base_confidence, template=t) for t in templates]
    )


def sure_on(indices, low=0.3):
    return [0.9 if k in indices else low for k in range(N)]


# --- precision at 0.5 against accuracy ------------------------------------------------------------


@pytest.mark.parametrize(
    ("confident", "verdict", "difference"),
    [
        # above 0.5: i0 … i3, all right → precision 1.0 against accuracy 0.4
        (range(4), HOLDS, 0.6),
        # above 0.5: i8 … i11, all wrong → precision 0.0 against 0.4
        (range(8, 12), FAILS, -0.4),
    ],
)
def test_precision_at_half_of_the_template_marginal_against_its_accuracy(confident, verdict, difference):
    f = only(
        fd.few_facts_above_half_high_precision(store(estimates=marginal(FIRST_EIGHT, sure_on(confident))))
    )
    assert f.subject == "Template marginal: precision at 0.5 − accuracy"
    assert (f.verdict, f.n) == (verdict, N)
    assert f.value == pytest.approx(difference)
    assert f.ci_low <= f.value <= f.ci_high
    precision = fd.fmt(0.4 + difference)
    assert f"share above 0.5 0.200 (4 of 20); precision at 0.5 {precision}; accuracy 0.400" in f.numbers


def test_precision_equal_to_accuracy_is_inconclusive():
    # 10 above 0.5, 5 of them right; 10 below, 5 right: precision 0.5 = accuracy 0.5
    correct = [k % 2 == 0 for k in range(N)]
    f = only(fd.few_facts_above_half_high_precision(store(estimates=marginal(correct, sure_on(range(10))))))
    assert (f.verdict, f.value) == (INCONCLUSIVE, 0.0)
    assert f.ci_low < 0 < f.ci_high


def test_the_interval_is_the_bias_corrected_one_of_the_ratio_per_resample():
    """Against a loop over the same resample plan: precision at 0.5 − accuracy, resample by resample."""
    rng = np.random.default_rng(3)
    confidence = rng.uniform(0.2, 0.8, N).round(3).tolist()
    correct = (rng.uniform(size=N) < np.array(confidence)).tolist()
    f = only(fd.few_facts_above_half_high_precision(store(estimates=marginal(correct, confidence))))
    order = sorted(range(N), key=lambda k: f"i{k}")  # the claim's rows: by instance id (i0, i1, i10, …)
    c, y = np.array(confidence)[order], np.array(correct)[order]
    plan = resample_plan(np.array(["P1"] * N), fd.N_RESAMPLES, fd.SEED)[0].resamples
    values = []
    for b in range(plan.n_resamples):
        r = plan.rows(b)
        above = c[r] > 0.5
        values.append(y[r][above].mean() - y[r].mean() if above.any() else np.nan)
    point = y[c > 0.5].mean() - y.mean()
    assert f.value == pytest.approx(point)
    assert (f.ci_low, f.ci_high) == pytest.approx(fd.bc_interval(np.array(values), point))


def test_exactly_half_is_not_above_half():
    # Tinner asserts a fact when P > 0.5: the two instances at exactly 0.5 are not counted
    confidence = [0.5, 0.5] + [0.9] * 2 + [0.1] * 16
    correct = [False, False, True, True] + [False] * 16
    f = only(fd.few_facts_above_half_high_precision(store(estimates=marginal(correct, confidence))))
    assert "share above 0.5 0.100 (2 of 20); precision at 0.5 1.000; accuracy 0.100" in f.numbers


def test_nothing_above_half_leaves_precision_undefined():
    f = only(fd.few_facts_above_half_high_precision(store(estimates=marginal(FIRST_EIGHT, 0.3))))
    assert f.verdict == INCONCLUSIVE and np.isnan(f.value)
    assert "no instance has P(o | r, s) > 0.5" in f.note


@pytest.mark.parametrize(
    "estimates",
    [
        rows("base", FIRST_EIGHT, 0.9),  # no template marginal at all
        marginal(FIRST_EIGHT, 0.9, templates=("P1:c0",)),  # over one template: it is Base
    ],
)
def test_the_marginal_over_fewer_than_two_templates_is_not_testable(estimates):
    for fn in (fd.few_facts_above_half_high_precision, fd.aggregation_raises_precision):
        f = only(fn(store(estimates=estimates)))
        assert f.verdict == NOT_TESTABLE and "--max-templates 2" in f.note and "stage bear" in f.note


# --- aggregation against Base --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("marginal_confident", "base_confident", "verdict", "difference"),
    [
        # the marginal asserts i0 … i3 (all right, precision 1.0); Base asserts every instance (0.4)
        (range(4), range(N), HOLDS, 0.6),
        # the marginal asserts i8 … i11 (all wrong, 0.0); Base i0 … i3 (all right, 1.0)
        (range(8, 12), range(4), FAILS, -1.0),
    ],
)
def test_precision_at_half_of_the_marginal_against_base_on_the_headline_template(
    marginal_confident, base_confident, verdict, difference
):
    est = marginal(FIRST_EIGHT, sure_on(marginal_confident), base_confidence=sure_on(base_confident))
    # a Base row on an instance the marginal lacks is not paired
    extra = rows("base", [True], 0.9, instances=["i99"])
    f = only(fd.aggregation_raises_precision(store(estimates=pl.concat([est, extra]))))
    assert f.subject == "precision at 0.5: Template marginal − Base"
    assert (f.verdict, f.n) == (verdict, N)
    assert f.value == pytest.approx(difference)
    assert f.ci_low <= f.value <= f.ci_high


def test_the_same_confidences_make_aggregation_inconclusive():
    est = marginal(FIRST_EIGHT, sure_on(range(10)), base_confidence=sure_on(range(10)))
    f = only(fd.aggregation_raises_precision(store(estimates=est)))
    assert (f.verdict, f.value, f.ci_low, f.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)
    assert "Template marginal 0.800 (share above 0.5 0.500), Base 0.800 (share above 0.5 0.500)" in f.numbers


# --- demonstrations and context ------------------------------------------------------------------

KINDS = ("context_1shot", "context_3shot", "context_wrong", "context_fixed")


def context_templates(kinds=KINDS) -> pl.DataFrame:
    """Two curated parents in P1, each with one variant per kind (ids as variants.py makes them)."""
    parents = [("P1:c0", 0), ("P1:c1", 1)]
    variant_rows = [(f"{p}:{k.replace('_', '-')}", k, p, rank) for p, rank in parents for k in kinds]
    return pl.DataFrame(
        [(p, "curated", None, rank) for p, rank in parents] + variant_rows,
        schema={"template_id": pl.String, "kind": pl.String, "parent_id": pl.String, "rank": pl.Int32},
        orient="row",
    ).with_columns(relation_id=pl.lit("P1"))


HALF = [k % 2 == 0 for k in range(10)]


def context_store(correct_by_kind: dict[str, list[bool]], kinds=KINDS) -> StoreTables:
    """Base on both parents (10 instances each, half right) and on each kind's variants."""
    est = [rows("base", HALF, 0.6, template=p) for p in ("P1:c0", "P1:c1")]
    est += [
        rows("base", correct, 0.6, template=f"{p}:{kind.replace('_', '-')}")
        for kind, correct in correct_by_kind.items()
        for p in ("P1:c0", "P1:c1")
    ]
    return StoreTables(MODEL, estimates=pl.concat(est), templates=context_templates(kinds))


ALL, NONE = [True] * 10, [False] * 10


def test_demonstrations_against_the_plain_parent_on_instance_and_parent_pairs():
    # 1-shot: every pair right (1.0 against 0.5); 3-shot: every pair wrong (0.0 against 0.5)
    found = fd.demonstrations_raise_accuracy(context_store({"context_1shot": ALL, "context_3shot": NONE}))
    one, three = only(found, "context_1shot"), only(found, "context_3shot")
    assert one.subject == "context_1shot: accuracy(with demonstrations) − accuracy(plain)"
    assert (one.verdict, three.verdict) == (HOLDS, FAILS)
    assert (one.value, three.value) == (0.5, -0.5)
    assert one.n == three.n == 20  # 10 instances × 2 parent templates
    assert "over 20 pairs; accuracy 1.000 with, 0.500 without" in one.numbers


def test_demonstrations_that_change_nothing_are_inconclusive_and_a_missing_kind_is_not_testable():
    t = context_store({"context_1shot": HALF}, kinds=("context_1shot",))
    one, three = (only(fd.demonstrations_raise_accuracy(t), k) for k in ("context_1shot", "context_3shot"))
    assert (one.verdict, one.value, one.ci_low, one.ci_high) == (INCONCLUSIVE, 0.0, 0.0, 0.0)
    assert three.verdict == NOT_TESTABLE
    assert "no context_3shot variants" in three.note and "stage context" in three.note


def test_pairs_need_both_sides():
    # variants on 6 of the parents' 10 instances: 12 pairs, not 20
    t = context_store({"context_1shot": ALL}, kinds=("context_1shot",))
    est = t.estimates.filter(
        ~(
            pl.col("template_id").str.ends_with("context-1shot")
            & pl.col("instance_id").is_in(["i6", "i7", "i8", "i9"])
        )
    )
    f = only(
        fd.demonstrations_raise_accuracy(StoreTables(MODEL, estimates=est, templates=t.templates)), "1shot"
    )
    # on i0 … i5 the parent is right on i0, i2, i4: 0.5, with the context 1.0
    assert (f.n, f.value) == (12, 0.5)


@pytest.mark.parametrize(
    ("wrong", "verdict", "difference"), [(NONE, HOLDS, -0.5), (ALL, FAILS, 0.5), (HALF, INCONCLUSIVE, 0.0)]
)
def test_a_wrong_fact_against_the_plain_parent_with_the_knowledge_free_control_beside_it(
    wrong, verdict, difference
):
    f = only(fd.wrong_context_lowers_accuracy(context_store({"context_wrong": wrong, "context_fixed": HALF})))
    assert f.subject == "context_wrong: accuracy(with a wrong fact) − accuracy(plain)"
    assert (f.verdict, f.value, f.n) == (verdict, difference, 20)
    assert "context_fixed (knowledge-free): Δaccuracy 0.000 [0.000, 0.000] over 20 pairs" in f.numbers


def test_a_wrong_context_without_its_variants_is_not_testable_and_a_missing_control_is_said():
    t = context_store({"context_wrong": NONE}, kinds=("context_wrong",))
    assert only(fd.wrong_context_lowers_accuracy(t)).numbers.endswith("context_fixed: not scored")
    plain = store(estimates=rows("base", HALF, 0.6))  # TEMPLATES has no parent_id column at all
    f = only(fd.wrong_context_lowers_accuracy(plain))
    assert f.verdict == NOT_TESTABLE and "context_wrong" in f.note and "--template-kinds" in f.note


def test_the_demonstration_claims_are_holm_adjusted_as_one_family():
    found = fd.evaluate_claims(
        [context_store({"context_1shot": ALL, "context_3shot": HALF})], ["demonstrations_raise_accuracy"]
    )
    assert all("over 2 comparisons" in f.note for f in found)
    assert [f.verdict for f in found] == [HOLDS, INCONCLUSIVE]


def test_tinners_claims_say_the_thesis_gives_no_number_and_read_their_stages():
    keys = [k for k, c in CLAIMS.items() if c.paper.seed == "001"]
    assert keys == [
        "few_facts_above_half_high_precision",
        "aggregation_raises_precision",
        "demonstrations_raise_accuracy",
        "wrong_context_lowers_accuracy",
    ]
    assert [CLAIMS[k].stage for k in keys] == ["bear", "bear", "context", "context"]
    assert all(
        CLAIMS[k].number.text == "no number available to kcal (the thesis was not accessible)" for k in keys
    )


def test_templates_fixture_is_what_the_helpers_assume():
    # the not-testable paths above rely on the shared fixture having two curated P1 templates
    assert TEMPLATES.filter(pl.col("relation_id") == "P1")["kind"].to_list() == ["curated", "curated"]
