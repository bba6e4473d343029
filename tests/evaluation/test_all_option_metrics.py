"""All-option calibration (issue 29): the multi-hot Brier and the classwise ECE over the template
marginal's whole option distribution, and the signed gap mean confidence − accuracy: by hand, their
properties, and against libraries where one defines the same number:

  * multi-hot Brier, one gold per instance = sklearn.metrics.brier_score_loss on the [N, K]
    probabilities with scale_by_half=False ((1/N) Σ_i Σ_k (p_ik − y_ik)², sklearn's multi-class
    Brier); with several golds = the sum over option columns of sklearn.metrics.mean_squared_error
    (multioutput="raw_values"), the same sum with y multi-hot;
  * classwise ECE = the mean over classes of netcal 1.4.0's ECE(20) on (P(class), 1[class gold]):
    netcal has no classwise ECE, but its binary-mode ECE is exactly Kull et al.'s per-class term
    (tests/evaluation/test_netcal_crosscheck.py shows how netcal bins); in sampled answer spaces
    each class over the instances that offer it (a slow loop over classes here).
"""

import netcal.metrics as netcal_metrics  # the dev extra (pyproject.toml)
import numpy as np
import polars as pl
import pytest
from sklearn.metrics import brier_score_loss, mean_squared_error

from kcal_pipeline.evaluation import METRICS, compute_metrics
from kcal_pipeline.evaluation.bootstrap import bootstrap_intervals
from kcal_pipeline.evaluation.resamples import resample_plan
from kcal_pipeline.evaluation.tables import metrics_and_differences
from tests.evaluation.test_bootstrap import slow_bc

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
classwise_ece, confidence_gap, multihot_brier = (
    METRICS["classwise_ece"],
    METRICS["confidence_gap"],
    METRICS["multihot_brier"],
)

# Three instances of one relation; b has two golds, c only two options (a drawn answer space).
#   (instance, option, P(o | r, s), gold)
TINY = [
    ("a", "Q1", 0.6, True), ("a", "Q2", 0.3, False), ("a", "Q3", 0.1, False),
    ("b", "Q1", 0.2, False), ("b", "Q2", 0.5, True), ("b", "Q3", 0.3, True),
    ("c", "Q1", 0.7, False), ("c", "Q2", 0.3, True),
]  # fmt: skip
# multi-hot Brier: a (0.6 − 1)² + 0.3² + 0.1² = 0.26; b 0.2² + (0.5 − 1)² + (0.3 − 1)² = 0.78;
#   c 0.7² + (0.3 − 1)² = 0.98 → (0.26 + 0.78 + 0.98)/3 = 2.02/3
TINY_BRIER = 2.02 / 3
# classwise ECE, 20 equal-width bins (bin = ⌊20·p⌋):
#   Q1: 0.6 ✓ (bin 12), 0.2 ✗ (4), 0.7 ✗ (14) → (0.4 + 0.2 + 0.7)/3 = 13/30
#   Q2: 0.3 ✗ and 0.3 ✓ share bin 6 (conf 0.3, acc 0.5: 2/3·0.2), 0.5 ✓ (10: 1/3·0.5) → 9/30
#   Q3: 0.1 ✗ (2), 0.3 ✓ (6) → (0.1 + 0.7)/2 = 12/30 (c does not offer Q3: 2 instances)
#   mean over the 3 classes: 34/90
TINY_CLASSWISE = 34 / 90


def columns(rows):
    instance, option, p, gold = (np.array(col) for col in zip(*rows, strict=True))
    return p.astype(float), gold.astype(bool), instance, option


def option_frame(rows, relation="P1", split="test", **extra):
    """option_estimates rows (as estimation.marginal writes them) of one relation and split."""
    instance, option, p, gold = zip(*rows, strict=True)
    return pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": relation,
            "instance_id": list(instance),
            "split": split,
            "answer_space_k": pl.Series([0] * len(rows), dtype=pl.Int32),
            "option_index": pl.Series(range(len(rows)), dtype=pl.Int32),
            "option_id": list(option),
            "is_gold": list(gold),
            "estimator": "template_marginal",
            "reduction": "sum",
            "probability": list(p),
            **extra,
        }
    )


def base_estimates(instances, relation="P1"):
    """One Base answer per instance (what compute_metrics always needs besides option estimates)."""
    return pl.DataFrame(
        {
            "model_id": "m",
            "estimator": "base",
            "relation_id": relation,
            "instance_id": instances,
            "split": "test",
            "confidence": 0.5,
            "correct": True,
        }
    )


def test_multihot_brier_and_classwise_ece_by_hand():
    c, y, instance, option = columns(TINY)
    # the definitions on integer codes, the registered specs on labels of any kind
    assert multihot_brier.fn(c, y, *codes(instance, option)) == pytest.approx(TINY_BRIER, abs=1e-15)
    assert classwise_ece.fn(c, y, *codes(instance, option)) == pytest.approx(TINY_CLASSWISE, abs=1e-15)
    assert multihot_brier(c, y, instance=instance, option=option) == pytest.approx(TINY_BRIER, abs=1e-15)
    # and through compute_metrics: the batched path
    out = compute_metrics(base_estimates(["a", "b", "c"]), option_estimates=option_frame(TINY))
    got = out.filter(estimator="template_marginal", scope="all")
    values = dict(zip(got["metric"], got["value"], strict=True))
    assert values["multihot_brier"] == pytest.approx(TINY_BRIER, abs=1e-15)
    assert values["classwise_ece"] == pytest.approx(TINY_CLASSWISE, abs=1e-15)
    assert set(got["n"]) == {8}  # n counts statements, as for the other option-estimate metrics
    assert got.filter(metric="multihot_brier")["higher_is_better"].to_list() == [False]


def codes(instance, option):
    return (np.unique(instance, return_inverse=True)[1], np.unique(option, return_inverse=True)[1])


def test_a_class_is_an_option_object_within_its_relation():
    # the same object Q1 in two relations is two classes: P1's Q1 (0.6 ✓) and P2's Q1 (0.6 ✗) are
    # binned apart, |1 − 0.6| and |0 − 0.6|; pooled they would share a bin at acc 0.5 (gap 0.1)
    rows = [("a", "Q1", 0.6, True), ("a", "Q2", 0.4, False)]
    frame = pl.concat(
        [option_frame(rows), option_frame([("b", "Q1", 0.6, False), ("b", "Q2", 0.4, True)], "P2")]
    )
    est = pl.concat([base_estimates(["a"]), base_estimates(["b"], "P2")])
    out = compute_metrics(est, ["classwise_ece"], option_estimates=frame).filter(scope="all")
    # classes P1:Q1 0.4, P1:Q2 0.4, P2:Q1 0.6, P2:Q2 0.6 → 0.5
    assert out["value"].to_list() == [pytest.approx(0.5)]


def test_properties_order_one_hot_and_the_multi_gold_floor():
    c, y, instance, option = columns(TINY)
    rng = np.random.default_rng(0)
    for _ in range(5):  # neither the row order nor the option names matter
        order = rng.permutation(c.size)
        renamed = {o: f"X{k}" for k, o in enumerate(rng.permutation(np.unique(option)))}
        relabelled = np.array([renamed[o] for o in option[order]])
        assert METRICS["multihot_brier"](c[order], y[order], instance=instance[order], option=relabelled) == (
            pytest.approx(TINY_BRIER, abs=1e-15)
        )
        assert METRICS["classwise_ece"](c[order], y[order], instance=instance[order], option=relabelled) == (
            pytest.approx(TINY_CLASSWISE, abs=1e-15)
        )
    # perfect predictions: P = 1[gold] (one-hot with one gold, multi-hot with two) → 0
    exact = y.astype(float)
    for name in ("multihot_brier", "classwise_ece"):
        assert METRICS[name](exact, y, instance=instance, option=option) == 0.0
    # a distribution (Σ p = 1) over G golds scores at least (G − 1)²/G: two golds at ½ each → ½
    half = np.array([0.5, 0.5, 0.0])
    assert multihot_brier(half, [True, True, False], instance=np.zeros(3), option=np.arange(3)) == 0.5


def dirichlet_sample(seed, n=40, k=5, golds=1):
    """[n, k] probabilities (rows sum to 1) and labels: `golds` gold options per row, drawn with
    the probabilities (so the data is neither perfectly calibrated nor hopeless)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.7), size=n)
    y = np.zeros((n, k), dtype=bool)
    for i in range(n):
        y[i, rng.choice(k, size=golds, replace=False, p=p[i])] = True
    return p, y


def flat(p, y):
    """The [n, k] arrays as option-estimate rows (instance i, option j): the spec's arguments."""
    n, k = p.shape
    return {"confidence": p.ravel(), "correct": y.ravel(), "instance": np.repeat(np.arange(n), k),
            "option": np.tile(np.arange(k), n)}  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multihot_brier_equals_sklearn(seed):
    p, y = dirichlet_sample(seed)
    labels = y.argmax(axis=1)
    ours = multihot_brier(**flat(p, y))
    assert ours == pytest.approx(brier_score_loss(labels, p, labels=range(5), scale_by_half=False), abs=1e-12)
    p2, y2 = dirichlet_sample(seed, golds=2)
    by_column = mean_squared_error(y2.astype(float), p2, multioutput="raw_values").sum()
    assert multihot_brier(**flat(p2, y2)) == pytest.approx(by_column, abs=1e-12)


def netcal_ece(p, y):
    return netcal_metrics.ECE(20).measure(p, y.astype(int))


@pytest.mark.parametrize(("seed", "golds"), [(0, 1), (1, 2), (2, 3)])
def test_classwise_ece_equals_the_mean_of_netcal_ece_per_class(seed, golds):
    # a full answer space: every class is offered to every instance (Kull et al.'s setting)
    p, y = dirichlet_sample(seed, golds=golds)
    expected = np.mean([netcal_ece(p[:, j], y[:, j]) for j in range(p.shape[1])])
    assert classwise_ece(**flat(p, y)) == pytest.approx(expected, abs=1e-12)


def test_classwise_ece_in_drawn_answer_spaces_bins_each_class_over_the_instances_offering_it():
    # 60 instances, each offered the gold and 3 of 11 other classes (an answer_space_k = 4 draw)
    rng = np.random.default_rng(7)
    rows = []
    for i in range(60):
        gold = int(rng.integers(12))
        offered = [gold, *rng.choice([j for j in range(12) if j != gold], size=3, replace=False)]
        p = rng.dirichlet(np.ones(4))
        rows += [(i, j, p[k], j == gold) for k, j in enumerate(offered)]
    instance, option, c, y = (np.array(col) for col in zip(*rows, strict=True))
    y = y.astype(bool)
    per_class = [netcal_ece(c[option == j], y[option == j]) for j in np.unique(option)]  # the slow way
    assert classwise_ece(c, y, instance=instance, option=option) == pytest.approx(
        np.mean(per_class), abs=1e-12
    )


def test_confidence_gap_by_hand_and_its_sign():
    # over-confident: mean C (0.9 + 0.6 + 0.3)/3 = 0.6, accuracy 1/3 → +0.2667
    assert confidence_gap(np.array([0.9, 0.6, 0.3]), np.array([True, False, False])) == pytest.approx(
        0.6 - 1 / 3
    )
    # under-confident: 0.6 on two right answers → −0.4; calibrated on average → 0 (ACE need not be)
    assert confidence_gap(np.array([0.6, 0.6]), np.array([True, True])) == pytest.approx(-0.4)
    assert confidence_gap(np.array([0.9, 0.1]), np.array([False, True])) == pytest.approx(0.0)
    spec = METRICS["confidence_gap"]
    assert (spec.input, spec.needs, spec.higher_is_better, spec.value_range) == (
        "confidence", "probability", None, (-1.0, 1.0)
    )  # fmt: skip


def test_confidence_gap_interval_is_the_bias_corrected_interval_of_its_resamples():
    # the gap is bootstrapped like the five DEFAULT_METRICS: the interval equals a plain loop over
    # the plan's resamples (scope all: relations, then instances; relation: instances), read
    # around the gap on the scope's rows (test_bootstrap.slow_bc)
    rng = np.random.default_rng(3)
    c = np.round(rng.random(30), 1)
    y = rng.random(30) < c**2  # over-confident
    relation = np.repeat(["P1", "P2"], 15)
    frame = pl.concat(
        [base_estimates([f"i{k:02d}" for k in range(15)], r) for r in ("P1", "P2")]
    ).with_columns(confidence=c, correct=y)
    out = bootstrap_intervals(frame, ["confidence_gap"], n_resamples=200, seed=4)
    got = {(r["scope"], r["scope_value"]): (r["ci_low"], r["ci_high"]) for r in out.iter_rows(named=True)}
    plan = resample_plan(relation, 200, seed=4)
    assert len(got) == len(plan) == 3
    for sc in plan:
        rows = [sc.resamples.rows(b) for b in range(200)]
        values = np.array([confidence_gap(c[r], y[r]) for r in rows])
        low, high = slow_bc(values, confidence_gap(c[sc.rows], y[sc.rows]))
        assert got[(sc.scope, sc.scope_value)] == (
            pytest.approx(low, abs=1e-12),
            pytest.approx(high, abs=1e-12),
        )
    assert got[("all", "all")][0] > 0  # clearly over-confident


def test_option_metrics_need_option_estimates_and_labels():
    declared = {
        m.name: (m.input, m.needs, m.higher_is_better) for m in METRICS.values() if m.input == "options"
    }
    assert declared == {
        "multihot_brier": ("options", "probability", False),
        "classwise_ece": ("options", "probability", False),
    }
    with pytest.raises(ValueError, match="'multihot_brier' reads options; missing argument option_estimates"):
        compute_metrics(base_estimates(["a"]), ["multihot_brier"])
    assert not compute_metrics(base_estimates(["a"])).filter(metric="classwise_ece").height  # left out
    with pytest.raises(ValueError, match="'classwise_ece' reads options: pass option"):
        METRICS["classwise_ece"]([0.5, 0.5], [True, False], instance=["a", "a"])
    with pytest.raises(ValueError, match="instance must be 1-D of length 2"):
        METRICS["multihot_brier"]([0.5, 0.5], [True, False], instance=["a"], option=["Q1", "Q2"])
    no_id = option_frame(TINY).with_columns(
        option_id=pl.when(pl.col("option_index") == 4).then(None).otherwise("option_id")
    )
    with pytest.raises(ValueError, match="option 4 of instance 'b' has no option_id"):
        compute_metrics(base_estimates(["a", "b", "c"]), ["classwise_ece"], option_estimates=no_id)


TEMPLATES = pl.DataFrame({"relation_id": "P1", "template_id": ["c0"], "kind": ["curated"], "rank": [0]})


def test_metrics_table_breaks_option_metrics_down_and_bootstraps_the_gap():
    # Base on 12 test instances of P1 (template c0); the template marginal's options of a, b, c
    instances = [f"i{k}" for k in range(12)] + ["a", "b", "c"]
    est = base_estimates(instances).with_columns(
        confidence=pl.Series([0.5 + k / 40 for k in range(15)]),
        correct=pl.Series([k % 3 != 0 for k in range(15)]),
        template_id=pl.lit("c0"),
        reduction=pl.lit("sum"),
        grain=pl.lit("template"),
        output_kind=pl.lit("probability"),
        answer_space_k=pl.lit(0, pl.Int32),
        predicted_id=pl.lit("Q1"),
    )
    gold_count = {"b": 2}
    probe = pl.DataFrame(
        {
            "relation_id": "P1",
            "instance_id": instances,
            "n_gold": [gold_count.get(i, 1) for i in instances],
            "n_options": [2 if i == "c" else 3 for i in instances],
            "gold_ids": [["Q2", "Q3"] if i == "b" else ["Q1"] for i in instances],
        }
    )
    relations = pl.DataFrame({"relation_id": ["P1"], "domain": ["closed_set"]})
    table, differences = metrics_and_differences(est, TEMPLATES, relations, probe, option_frame(TINY), 50, 1)
    gap = table.filter(metric="confidence_gap", scope="all").row(0, named=True)
    # mean C = 0.5 + (0 + … + 14)/600 = 0.675; correct: 10 of 15 → gap 0.675 − 2/3
    assert gap["value"] == pytest.approx(0.675 - 10 / 15)
    assert gap["ci_low"] <= gap["value"] <= gap["ci_high"]
    assert "confidence_gap" not in set(differences["metric"])  # differences: DEFAULT_METRICS only
    brier = table.filter(metric="multihot_brier")
    by_scope = {(r["scope"], r["scope_value"]): (r["value"], r["n"]) for r in brier.iter_rows(named=True)}
    assert by_scope == {
        ("all", "all"): (pytest.approx(TINY_BRIER), 8),
        ("relation", "P1"): (pytest.approx(TINY_BRIER), 8),
        ("domain", "closed_set"): (pytest.approx(TINY_BRIER), 8),
        ("n_gold", "1"): (pytest.approx((0.26 + 0.98) / 2), 5),  # a and c
        ("n_gold", "2"): (pytest.approx(0.78), 3),  # b
        ("n_options", "2"): (pytest.approx(0.98), 2),
        ("n_options", "3"): (pytest.approx((0.26 + 0.78) / 2), 6),
    }
    assert brier["ci_low"].null_count() == brier.height  # no interval over statements (yet)
