"""Template bias Cov^P and Cov^A (Selective-LAMA) per relation and averaged over relations; the
registry's "predictions" input kind. The arithmetic is in the comments."""

import polars as pl
import pytest

from kcal_pipeline.evaluation import compute_metrics
from kcal_pipeline.evaluation.bias import (
    TOP_OBJECTS,
    attach_gold_ids,
    top_predicted,
)
from kcal_pipeline.evaluation.registry import METRICS

# The registered metrics (METRICS[name]): calling one validates its inputs, then computes.
answer_coverage, prediction_coverage = METRICS["answer_coverage"], METRICS["prediction_coverage"]

# Relation P1, nine instances. Predictions: a ×3, b, c, d, e, f, and one without an answer.
P1_PREDICTED = ["a", "a", "b", None, "c", "d", "e", "f", "a"]
P1_GOLD = [["a"], ["x", "a"], ["b"], ["a"], ["c"], ["d"], ["e"], ["f"], ["g"]]


def test_top_objects_by_count_then_id():
    # a (3) first; b … f have one prediction each: the id order keeps b, c, d, e and drops f
    assert TOP_OBJECTS == 5
    assert top_predicted(pl.Series("p", P1_PREDICTED)).to_list() == ["a", "b", "c", "d", "e"]
    # fewer distinct objects than 5: all of them; a missing answer is never one
    assert top_predicted(pl.Series("p", ["z", None, "y", "z"])).to_list() == ["z", "y"]


def test_prediction_and_answer_coverage_by_hand():
    # S = {a, b, c, d, e}
    # Cov^P: predictions in S: a, a, b, c, d, e, a = 7 of 9 (f and the missing answer are not)
    # Cov^A: per instance share of its golds in S, each instance weighing 1:
    #   [a] 1, [x, a] 1/2, [b] 1, [a] 1, [c] 1, [d] 1, [e] 1, [f] 0, [g] 0 → 6.5 / 9 = 13/18
    assert prediction_coverage(P1_PREDICTED, P1_GOLD) == pytest.approx(7 / 9)
    assert answer_coverage(P1_PREDICTED, P1_GOLD) == pytest.approx(13 / 18)


def test_a_model_that_always_answers_the_same():
    # every prediction is "Paris": S = {Paris}, Cov^P = 1; golds Paris, Rome, Paris, Oslo → Cov^A = 2/4
    predicted = ["Paris"] * 4
    gold = [["Paris"], ["Rome"], ["Paris"], ["Oslo"]]
    assert prediction_coverage(predicted, gold) == 1.0
    assert answer_coverage(predicted, gold) == 0.5


def test_prediction_metrics_are_registered_and_validate_their_inputs():
    for name in ("prediction_coverage", "answer_coverage"):
        spec = METRICS[name]
        assert (spec.input, spec.needs, spec.higher_is_better, spec.family) == (
            "predictions",
            "any",
            None,
            "template_bias",
        )
    with pytest.raises(ValueError, match="equal length, got 2 and 1"):
        prediction_coverage(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"gold_ids of instance 1 \(0-based\) is empty"):
        answer_coverage(["a", "b"], [["a"], []])
    with pytest.raises(ValueError, match="predicted_id is empty"):
        answer_coverage([], [])


def estimates():
    """P1 as above; P2: predictions x, y with golds [x], [z]. Two estimators with the same answers,
    one of them score-valued: template bias reads answers only."""
    rows = [("P1", f"i{k}", p, g) for k, (p, g) in enumerate(zip(P1_PREDICTED, P1_GOLD, strict=True))]
    rows += [("P2", "j0", "x", ["x"]), ("P2", "j1", "y", ["z"])]
    frame = pl.DataFrame(
        rows,
        orient="row",
        schema={
            "relation_id": pl.String,
            "instance_id": pl.String,
            "predicted_id": pl.String,
            "gold_ids": pl.List(pl.String),
        },
    )
    base = frame.with_columns(estimator=pl.lit("base"), output_kind=pl.lit("probability"), confidence=0.7)
    gap = frame.with_columns(estimator=pl.lit("gap"), output_kind=pl.lit("score"), confidence=3.0)
    both = pl.concat([base, gap]).with_columns(
        model_id=pl.lit("m"),
        split=pl.lit("test"),
        correct=pl.col("gold_ids").list.contains(pl.col("predicted_id")).fill_null(False),
    )
    return both


def test_compute_metrics_per_relation_and_their_mean():
    # P1: Cov^P 7/9, Cov^A 13/18 (above), n 9
    # P2: S = {x, y}: Cov^P 2/2 = 1; golds x ∈ S, z ∉ S → Cov^A 1/2, n 2
    # all = the unweighted mean over relations: Cov^P (7/9 + 1)/2 = 8/9, Cov^A (13/18 + 1/2)/2 = 11/18,
    #   n 11. (Pooling the 11 instances would give S = {a, b, c, d, e} and Cov^P 7/11 instead.)
    out = compute_metrics(estimates(), ["prediction_coverage", "answer_coverage"])
    got = {
        (r["estimator"], r["scope_value"], r["metric"]): (r["value"], r["n"])
        for r in out.iter_rows(named=True)
    }
    approx = pytest.approx
    expected = {
        ("all", "prediction_coverage"): (approx(8 / 9), 11),
        ("all", "answer_coverage"): (approx(11 / 18), 11),
        ("P1", "prediction_coverage"): (approx(7 / 9), 9),
        ("P1", "answer_coverage"): (approx(13 / 18), 9),
        ("P2", "prediction_coverage"): (1.0, 2),
        ("P2", "answer_coverage"): (0.5, 2),
    }
    assert got == {(e, *k): v for e in ("base", "gap") for k, v in expected.items()}
    assert out["higher_is_better"].null_count() == out.height


def test_without_gold_ids_the_bias_metrics_are_left_out_or_asked_for():
    est = estimates().drop("gold_ids")
    out = compute_metrics(est)
    assert not {"prediction_coverage", "answer_coverage"} & set(out["metric"])
    assert "accuracy" in set(out["metric"])
    with pytest.raises(
        ValueError, match=r"'answer_coverage' reads predictions; missing estimates columns \['gold_ids'\]"
    ):
        compute_metrics(est, ["answer_coverage"])
    no_gold = estimates().with_columns(
        gold_ids=pl.when(pl.col("instance_id") == "j1")
        .then(pl.lit([], pl.List(pl.String)))
        .otherwise("gold_ids")
    )
    with pytest.raises(ValueError, match="no gold_ids for instance 'j1' of relation 'P2'"):
        compute_metrics(no_gold)


def test_attach_gold_ids_from_probe_instances():
    instances = pl.DataFrame(
        {
            "relation_id": ["P2", "P2", "P2"],
            "instance_id": ["j0", "j1", "j0#k2"],  # a subsample copy keeps its parent's golds
            "gold_ids": [["x"], ["z"], ["x"]],
            "n_options": [5, 5, 2],
        }
    )
    est = estimates().filter(relation_id="P2", estimator="base").drop("gold_ids")
    joined = attach_gold_ids(est, instances)
    assert joined["gold_ids"].to_list() == [["x"], ["z"]]
    assert joined.drop("gold_ids").equals(est)
    with pytest.raises(ValueError, match="no gold_ids for instance 'i0' of relation 'P1'"):
        attach_gold_ids(estimates().drop("gold_ids"), instances)
    with pytest.raises(ValueError, match="instances: missing column 'gold_ids'"):
        attach_gold_ids(est, instances.drop("gold_ids"))
