"""Tinner's claims (seed 001) on hand-made tables: selective precision and coverage at 0.5 of the
template marginal against accuracy and single templates, relations by option count above chance,
demonstrations against the plain template and wrong demonstrations against true ones."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.resamples import resample_plan
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import (
    CLAIMS,
    DESCRIPTIVE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    StoreTables,
)
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
    precision, change = fd.fmt(0.4 + difference), {0.6: "+150.0", -0.4: "−100.0"}[difference]
    assert (
        f"coverage at 0.5 0.200 (4 of 20 instances); selective precision at 0.5 {precision}; accuracy "
        f"0.400; relative increase {change} %"
    ) in f.numbers
    assert "per sequence" not in f.numbers  # the instances table carries no option counts


def test_coverage_per_sequence_divides_by_the_option_count():
    # 4 of 20 instances above 0.5, each with 5 options: 4 of 100 sequences, as the thesis counts
    instances = pl.DataFrame({"relation_id": ["P1"] * N, "instance_id": [f"i{k}" for k in range(N)]})
    t = store(
        estimates=marginal(FIRST_EIGHT, sure_on(range(4))), instances=instances.with_columns(n_options=5)
    )
    f = only(fd.few_facts_above_half_high_precision(t))
    assert "(4 of 20 instances); coverage per sequence 4.00 %" in f.numbers


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
    assert "coverage at 0.5 0.100 (2 of 20 instances); selective precision at 0.5 1.000; accuracy 0.100" in (
        f.numbers
    )


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
    fns = (
        fd.few_facts_above_half_high_precision,
        fd.aggregation_raises_precision,
        fd.paraphrases_cut_coverage,
        fd.fewer_objects_easier,
    )
    for fn in fns:
        for f in fn(store(estimates=estimates)):
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
    assert (
        "selective precision at 0.5: Template marginal 0.800 (coverage 0.500), Base 0.800 (coverage "
        "0.500); relative +0.0 %"
    ) in f.numbers


# --- paraphrases against single templates: coverage at 0.5 -------------------------------------


def per_template(marginal_sure, c0_sure, c1_sure) -> pl.DataFrame:
    """The template marginal and Base on P1:c0 (the headline template) and P1:c1, each above 0.5 on
    its own instances; correctness does not enter coverage."""
    return pl.concat(
        [
            rows("template_marginal", FIRST_EIGHT, sure_on(marginal_sure), template=None),
            rows("base", FIRST_EIGHT, sure_on(c0_sure), template="P1:c0"),
            rows("base", FIRST_EIGHT, sure_on(c1_sure), template="P1:c1"),
        ]
    )


HEADLINE, EVERY = "Base on the headline template", "Base on each single template"


@pytest.mark.parametrize(
    ("sure", "verdict", "headline", "every", "shown"),
    [
        # marginal above 0.5 on i0 … i3 (0.2); c0 on all (1.0), c1 on i0 … i9: per instance the share
        # of its templates above is 1 on i0 … i9 and 0.5 on i10 … i19 (mean 0.75)
        ((range(4), range(N), range(10)), HOLDS, -0.8, -0.55, "Template marginal 0.200, single template "
         "1.000; relative −80.0 %"),
        # marginal on every instance (1.0); c0 on i0 … i3 (0.2), c1 on none: shares 0.5 on i0 … i3 (0.1)
        ((range(N), range(4), ()), FAILS, 0.8, 0.9, "Template marginal 1.000, single template 0.200; "
         "relative +400.0 %"),
    ],
)  # fmt: skip
def test_coverage_of_the_marginal_against_the_headline_and_every_single_template(
    sure, verdict, headline, every, shown
):
    found = fd.paraphrases_cut_coverage(store(estimates=per_template(*sure)))
    one, all_ = only(found, HEADLINE), only(found, EVERY)
    assert (one.verdict, all_.verdict) == (verdict, verdict)
    assert (one.value, all_.value) == pytest.approx((headline, every))
    assert one.n == all_.n == N
    assert shown in one.numbers


def test_the_same_coverage_everywhere_is_inconclusive_and_holm_runs_over_both_rows():
    found = fd.evaluate_claims([store(estimates=per_template(range(5), range(5), range(5)))],
                               ["paraphrases_cut_coverage"])  # fmt: skip
    assert [(f.verdict, f.value, f.ci_low, f.ci_high) for f in found] == [(INCONCLUSIVE, 0.0, 0.0, 0.0)] * 2
    assert all("over 2 comparisons" in f.note for f in found)


# --- relations by option count, above chance ------------------------------------------------------


def relations_store(options: list[int], accuracies: list[float], n: int = 20) -> StoreTables:
    """Relations R0, R1, … with two curated templates each, `n` test instances, the template
    marginal right on the first accuracy·n, and probe_instances' option counts."""
    rids = [f"R{r}" for r in range(len(options))]
    templates = pl.DataFrame(
        {
            "relation_id": [r for r in rids for _ in (0, 1)],
            "template_id": [f"{r}:c{i}" for r in rids for i in (0, 1)],
            "rank": [0, 1] * len(rids),
            "kind": ["curated"] * 2 * len(rids),
        }
    )
    est, inst = [], []
    for r, a in zip(rids, accuracies, strict=True):
        right = [k < round(a * n) for k in range(n)]
        est.append(rows("template_marginal", right, 0.6, template=None, relation=r))
        est += [rows("base", right, 0.6, template=f"{r}:c{i}", relation=r) for i in (0, 1)]
        inst.append(pl.DataFrame({"relation_id": [r] * n, "instance_id": [f"i{k}" for k in range(n)]}))
    instances = pl.concat(inst).with_columns(n_options=pl.Series([o for o in options for _ in range(n)]))
    return StoreTables(MODEL, estimates=pl.concat(est), templates=templates, instances=instances)


def test_accuracy_above_chance_as_a_share_of_what_is_above_chance():
    frame = pl.DataFrame(
        {
            "relation_id": ["A"] * 4 + ["B"] * 5,
            "n_options": [2] * 4 + [5] * 5,
            "correct": [True, True, True, False, True, False, False, False, False],
        }
    )
    per = fd.above_chance(frame)
    # A: 0.75 at chance 1/2 → (0.75 − 0.5) / 0.5 = 0.5; B: 0.2 at chance 1/5 → 0, chance level
    assert per["chance"].to_list() == pytest.approx([0.5, 0.2])
    assert per["skill"].to_list() == pytest.approx([0.5, 0.0])


OPTIONS = [2, 3, 4, 6, 10, 20]


@pytest.mark.parametrize(
    ("accuracies", "verdict", "rho"),
    [
        # above chance 1, 0.925, 0.8, 0.52, 0.222, 0: falling with the option count, ρ = −1
        ([1.0, 0.95, 0.85, 0.6, 0.3, 0.05], HOLDS, -1.0),
        # above chance 0, 0.175, 0.333, 0.64, 0.889, 1: rising, ρ = +1 — though the raw accuracy
        # (0.5, 0.45, 0.5, 0.7, 0.9, 1.0) rises too, chance alone would make it fall
        ([0.5, 0.45, 0.5, 0.7, 0.9, 1.0], FAILS, 1.0),
    ],
)
def test_fewer_options_easier_reads_the_accuracy_above_chance(accuracies, verdict, rho):
    f = only(fd.fewer_objects_easier(relations_store(OPTIONS, accuracies)))
    assert f.subject == fd.FEWER_OBJECTS_SUBJECT
    assert (f.verdict, f.n) == (verdict, 6)
    assert f.value == pytest.approx(rho)
    assert f.ci_low <= f.value <= f.ci_high
    assert "R0 2 options: accuracy " in f.numbers and "chance 0.500" in f.numbers


def test_raw_accuracy_falling_only_as_chance_falls_is_not_fewer_objects_easier():
    # accuracy = chance in every relation (1/2, 1/4, 1/5, 1/10): raw accuracy falls with the option
    # count, the accuracy above chance is 0 everywhere: ρ undefined, no verdict either way
    f = only(fd.fewer_objects_easier(relations_store([2, 4, 5, 10], [0.5, 0.25, 0.2, 0.1])))
    assert f.verdict == INCONCLUSIVE and np.isnan(f.value)


def test_the_rank_correlation_interval_is_the_two_stage_bootstrap():
    """Against a loop: relations drawn, then their instances, ρ of the option count and the
    accuracy above chance per drawn relation."""
    from scipy.stats import spearmanr

    accuracies = [0.9, 0.6, 0.7, 0.35, 0.3, 0.2]
    t = relations_store(OPTIONS, accuracies)
    f = only(fd.fewer_objects_easier(t))
    rng = np.random.default_rng(fd.SEED)
    order = np.array(sorted(range(20), key=lambda k: f"i{k}"))  # the claim's rows: by instance id
    values = []
    for _ in range(1000):
        drawn = rng.integers(0, 6, 6)
        x, y = [], []
        for r in drawn:
            pick = rng.integers(0, 20, 20)
            correct = (order[pick] < round(accuracies[r] * 20)).astype(float)
            chance = 1 / OPTIONS[r]
            x.append(OPTIONS[r])
            y.append((correct.mean() - chance) / (1 - chance))
        values.append(spearmanr(x, y).statistic if len(set(x)) > 1 and len(set(y)) > 1 else np.nan)
    skills = [(a - 1 / o) / (1 - 1 / o) for a, o in zip(accuracies, OPTIONS, strict=True)]
    point = spearmanr(OPTIONS, skills).statistic
    assert f.value == pytest.approx(point)
    assert (f.ci_low, f.ci_high) == pytest.approx(fd.bc_interval(np.array(values), point))


def test_fewer_objects_needs_option_counts_and_three_relations():
    t = relations_store([2, 4], [1.0, 0.5])
    assert "needs 3 or more" in only(fd.fewer_objects_easier(t)).note
    bare = StoreTables(MODEL, estimates=t.estimates, templates=t.templates)
    f = only(fd.fewer_objects_easier(bare))
    assert f.verdict == NOT_TESTABLE and "n_options" in f.note


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
ALL, NONE = [True] * 10, [False] * 10


def context_store(by_kind: dict, kinds=KINDS, plain=(HALF, 0.6)) -> StoreTables:
    """Base on both parents (10 instances each; `plain` = (correct, confidence)) and on each kind's
    variants (a list of correct, confidence 0.6, or a (correct, confidence) pair)."""
    est = [rows("base", *plain, template=p) for p in ("P1:c0", "P1:c1")]
    for kind, side in by_kind.items():
        correct, confidence = side if isinstance(side, tuple) else (side, 0.6)
        est += [
            rows("base", correct, confidence, template=f"{p}:{kind.replace('_', '-')}")
            for p in ("P1:c0", "P1:c1")
        ]
    return StoreTables(MODEL, estimates=pl.concat(est), templates=context_templates(kinds))


def test_demonstrations_report_the_direction_found_and_leave_the_model_dependence_untested():
    # 1-shot: every pair right (1.0 against 0.5); 3-shot: every pair wrong (0.0 against 0.5)
    found = fd.demonstrations_raise_accuracy(context_store({"context_1shot": ALL, "context_3shot": NONE}))
    one, three = only(found, "context_1shot"), only(found, "context_3shot")
    assert one.subject == "context_1shot: accuracy(with demonstrations) − accuracy(plain)"
    assert (one.verdict, three.verdict) == (DESCRIPTIVE, DESCRIPTIVE)
    assert (one.value, three.value, one.n, three.n) == (0.5, -0.5, 20, 20)  # 10 instances × 2 parents
    assert one.numbers.startswith("Δaccuracy 0.500 [")
    assert "over 20 pairs; accuracy 1.000 with, 0.500 without (relative +100.0 %); ΔAUPC" in one.numbers
    assert one.numbers.endswith("direction found here: up (interval above 0)")
    assert three.numbers.endswith("direction found here: down (interval below 0)")
    model = only(found, "depends on the model")
    assert model.verdict == NOT_TESTABLE and "kcal models add" in model.note and "context-stage" in model.note


def test_demonstrations_that_change_nothing_show_no_direction_and_a_missing_kind_is_not_testable():
    found = fd.demonstrations_raise_accuracy(context_store({"context_1shot": HALF}, kinds=("context_1shot",)))
    one, three = only(found, "context_1shot"), only(found, "context_3shot")
    assert (one.value, one.ci_low, one.ci_high) == (0.0, 0.0, 0.0)
    assert one.numbers.endswith("no direction at 95 % (interval contains 0)")
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
    ("wrong", "true", "verdict", "difference"),
    [
        (NONE, ALL, HOLDS, -1.0),
        (ALL, NONE, FAILS, 1.0),
        (HALF, HALF, INCONCLUSIVE, 0.0),
    ],
)
def test_a_wrong_demonstration_against_a_true_one_on_the_same_pairs(wrong, true, verdict, difference):
    t = context_store({"context_wrong": wrong, "context_1shot": true, "context_fixed": HALF})
    found = fd.wrong_context_lowers_accuracy(t)
    accuracy, aupc = only(found, ": accuracy"), only(found, ": AUPC")
    assert accuracy.subject == "context_wrong − context_1shot: accuracy"
    # all right → AUPC 1, all wrong → 0; equal correctness and confidences → equal AUPC
    assert [(f.verdict, f.value, f.n) for f in (accuracy, aupc)] == [(verdict, difference, 20)] * 2
    plain = fd.fmt(sum(wrong) / 10 - 0.5)
    assert f"context_wrong − plain: Δaccuracy {plain} [" in accuracy.numbers
    assert "context_fixed − plain: Δaccuracy 0.000 [0.000, 0.000] over 20 pairs" in accuracy.numbers


def test_the_wrong_demonstration_is_compared_with_the_true_one_not_the_plain_template():
    # plain and wrong both half right: against the plain template nothing changed; against the
    # true demonstration (all right) the wrong one loses 0.5
    found = fd.wrong_context_lowers_accuracy(context_store({"context_wrong": HALF, "context_1shot": ALL}))
    f = only(found, ": accuracy")
    assert (f.verdict, f.value) == (HOLDS, -0.5)
    assert "accuracy 0.500 with, 1.000 with a true one" in f.numbers
    assert "context_wrong − plain: Δaccuracy 0.000 [0.000, 0.000]" in f.numbers
    assert f.numbers.endswith("context_fixed − plain: not scored")


def test_a_wrong_context_without_a_true_one_is_not_testable():
    t = context_store({"context_wrong": NONE}, kinds=("context_wrong",))
    found = fd.wrong_context_lowers_accuracy(t)
    assert [f.verdict for f in found] == [NOT_TESTABLE] * 2
    assert "context_1shot" in found[0].note and "--template-kinds" in found[0].note
    plain = store(estimates=rows("base", HALF, 0.6))  # TEMPLATES has no parent_id column at all
    assert {f.verdict for f in fd.wrong_context_lowers_accuracy(plain)} == {NOT_TESTABLE}


# --- demonstrations: selective precision and coverage at 0.5 --------------------------------------

FIRST_FIVE = [k < 5 for k in range(10)]
SURE_4 = [0.9 if k < 4 else 0.3 for k in range(10)]  # above 0.5: i0 … i3, all right
SURE_8 = [0.9 if k < 8 else 0.3 for k in range(10)]  # above 0.5: i0 … i7, five of them right


@pytest.mark.parametrize(
    ("plain", "with_", "verdict", "precision", "coverage"),
    [
        # plain: precision 4/4 = 1, coverage 0.4; with: 5/8 = 0.625, coverage 0.8
        (SURE_4, SURE_8, HOLDS, -0.375, 0.4),
        (SURE_8, SURE_4, FAILS, 0.375, -0.4),
    ],
)
def test_demonstrations_against_the_plain_parent_at_half(plain, with_, verdict, precision, coverage):
    t = context_store(
        {"context_1shot": (FIRST_FIVE, with_)}, kinds=("context_1shot",), plain=(FIRST_FIVE, plain)
    )
    found = fd.demonstrations_lower_selective_precision(t)
    p, c = only(found, "context_1shot: selective precision"), only(found, "context_1shot: coverage")
    assert (p.verdict, c.verdict) == (verdict, verdict)
    assert (p.value, c.value) == pytest.approx((precision, coverage))
    assert p.n == c.n == 20
    assert p.subject == "context_1shot: selective precision at 0.5, with − plain"
    if verdict == HOLDS:
        assert "0.625 with, 1.000 plain (relative −37.5 %)" in p.numbers
        assert "0.800 with, 0.400 plain (relative +100.0 %)" in c.numbers
    assert [f.verdict for f in found if "context_3shot" in f.subject] == [NOT_TESTABLE] * 2


def test_demonstrations_at_half_are_holm_adjusted_over_the_four_rows():
    t = context_store(
        {"context_1shot": (FIRST_FIVE, SURE_8), "context_3shot": (FIRST_FIVE, SURE_4)},
        kinds=("context_1shot", "context_3shot"),
        plain=(FIRST_FIVE, SURE_4),
    )
    found = fd.evaluate_claims([t], ["demonstrations_lower_selective_precision"])
    assert all("over 4 comparisons" in f.note for f in found)
    # 3-shot = plain: 0 with a [0, 0] interval, inconclusive
    assert [f.verdict for f in found] == [HOLDS, HOLDS, INCONCLUSIVE, INCONCLUSIVE]


def test_tinners_claims_cite_the_thesis_and_read_their_stages():
    keys = [k for k, c in CLAIMS.items() if c.paper.seed == "001"]
    assert keys == [
        "few_facts_above_half_high_precision",
        "aggregation_raises_precision",
        "paraphrases_cut_coverage",
        "fewer_objects_easier",
        "demonstrations_raise_accuracy",
        "wrong_context_lowers_accuracy",
        "demonstrations_lower_selective_precision",
    ]
    assert [CLAIMS[k].stage for k in keys] == ["bear"] * 4 + ["context"] * 3
    assert CLAIMS["demonstrations_raise_accuracy"].kind == fd.DESCRIPTIVE_KIND
    assert all(CLAIMS[k].sources and CLAIMS[k].number.text != "no number stated" for k in keys)
    # the wrong demonstrations rest on Table 6.1 (Table 6.4 is the reading-comprehension context)
    assert "Table 6.1" in CLAIMS["wrong_context_lowers_accuracy"].where
    assert "Table 6.4" not in " ".join(CLAIMS[k].where for k in keys)


def test_templates_fixture_is_what_the_helpers_assume():
    # the not-testable paths above rely on the shared fixture having two curated P1 templates
    assert TEMPLATES.filter(pl.col("relation_id") == "P1")["kind"].to_list() == ["curated", "curated"]
