"""Consistency of knowledge-gap decisions (METHODS §4, Zhao et al. 2025): hand-worked measures,
the dev-tuned threshold and its fallback, empty-set conventions, the setups and pairs of the
consistency table, and that shuffling the options cannot change a closed-set estimate."""

import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation import partition_cubes
from kcal_pipeline.estimation.registry import compute_estimate_tables
from kcal_pipeline.evaluation.consistency import CONSISTENCY_SCHEMA, compute_consistency, seed_spread
from kcal_pipeline.evaluation.consistency_measures import (
    FALLBACK_THRESHOLD,
    consistency_measures,
    tune_threshold,
)
from kcal_pipeline.evaluation.consistency_setups import setup_rows
from kcal_pipeline.evaluation.decisions import DEGENERATE_SHARE

NAN = float("nan")


def same(actual: dict, expected: dict) -> None:
    """Equal measures, NaN equal to NaN."""
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if math.isnan(value):
            assert math.isnan(actual[key]), key
        else:
            assert actual[key] == pytest.approx(value, abs=1e-12), key


# --- the measures ------------------------------------------------------------------------------


def test_measures_hand_worked():
    # items 0..5. A1 = {0,1,2,3}, A2 = {0,1,5}; R1 = {4,5}, R2 = {2,3,4}
    # IoU_acc = |{0,1}| / |{0,1,2,3,5}| = 2/5; IoU_rej = |{4}| / |{2,3,4,5}| = 1/4
    # IoU_cons = 2·(2/5)(1/4) / (2/5 + 1/4) = (1/5) / (13/20) = 4/13
    # DecCons = |{0,1} ∪ {4}| / 6 = 3/6; Agreement: of A1 ∩ A2 = {0,1}, item 0 answers Q1 in both,
    # item 1 Q2 vs Q3 → 1/2
    out = consistency_measures(
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0, 1],
        ["Q1", "Q2", "Q1", "Q1", "Q1", "Q1"],
        ["Q1", "Q3", "Q1", "Q1", "Q1", "Q1"],
    )
    same(out, {"iou_acc": 0.4, "iou_rej": 0.25, "iou_cons": 4 / 13, "dec_cons": 0.5, "agreement": 0.5})


def test_identical_decisions_give_one_everywhere():
    out = consistency_measures([1, 0, 1, 0], [1, 0, 1, 0], ["a", "b", "c", "d"], ["a", "b", "c", "d"])
    same(out, {"iou_acc": 1.0, "iou_rej": 1.0, "iou_cons": 1.0, "dec_cons": 1.0, "agreement": 1.0})


def test_empty_sets_give_nan_and_disjoint_sets_give_zero():
    # everything accepted by both: R1 ∪ R2 is empty → IoU_rej NaN, and so IoU_cons
    same(
        consistency_measures([1, 1], [1, 1], ["a", "b"], ["a", "c"]),
        {"iou_acc": 1.0, "iou_rej": NAN, "iou_cons": NAN, "dec_cons": 1.0, "agreement": 0.5},
    )
    # nothing accepted by either: A1 ∪ A2 empty → IoU_acc NaN; A1 ∩ A2 empty → Agreement NaN
    same(
        consistency_measures([0, 0], [0, 0], ["a", "b"], ["a", "b"]),
        {"iou_acc": NAN, "iou_rej": 1.0, "iou_cons": NAN, "dec_cons": 1.0, "agreement": NAN},
    )
    # opposite decisions: both IoUs 0 → IoU_cons 0 (not 0/0); no shared acceptance → Agreement NaN
    same(
        consistency_measures([1, 0], [0, 1], ["a", "b"], ["a", "b"]),
        {"iou_acc": 0.0, "iou_rej": 0.0, "iou_cons": 0.0, "dec_cons": 0.0, "agreement": NAN},
    )


def test_no_answer_never_agrees_and_without_predictions_agreement_is_nan():
    assert consistency_measures([1, 1], [1, 1], [None, "a"], [None, "a"])["agreement"] == 0.5
    assert math.isnan(consistency_measures([1], [1])["agreement"])


def test_misaligned_decisions_are_named():
    with pytest.raises(ValueError, match="accept_a and accept_b"):
        consistency_measures([1, 0], [1])


# --- the threshold -----------------------------------------------------------------------------


def test_threshold_maximises_dev_decision_accuracy_ties_to_the_lowest():
    # distinct values 0.2 0.3 0.4 0.6 0.8 0.9 (correct: F F T F T T); accept C ≥ τ:
    #   τ = 0.2 (all)       correct accepted 3 + wrong rejected 0 = 3/6
    #   τ = 0.25            3 + 1 = 4/6
    #   τ = 0.35            3 + 2 = 5/6   ← best, tied with 0.7; the lower wins
    #   τ = 0.5 (0.4|0.6)   2 + 2 = 4/6
    #   τ = 0.7             2 + 3 = 5/6
    #   τ = 0.85            1 + 3 = 4/6
    t = tune_threshold([0.9, 0.8, 0.6, 0.4, 0.3, 0.2], [1, 1, 0, 1, 0, 0])
    assert t.tau == pytest.approx(0.35)
    assert not t.fallback
    assert (t.n_dev, t.accepted_share, t.dev_accuracy) == (6, pytest.approx(4 / 6), pytest.approx(5 / 6))


def test_degenerate_threshold_falls_back_at_the_stated_share():
    assert DEGENERATE_SHARE == 0.95
    # 19 correct at 0.9, one wrong at 0.7: τ = 0.8 is perfect on dev but accepts 19/20 = 95 %
    t = tune_threshold([0.9] * 19 + [0.7], [1] * 19 + [0])
    assert (t.tau, t.fallback, t.accepted_share, t.dev_accuracy) == (FALLBACK_THRESHOLD, True, 0.95, 1.0)
    # 18 of 20 accepted (90 %) is not degenerate: τ = (0.7 + 0.9)/2 stays
    t = tune_threshold([0.9] * 18 + [0.7] * 2, [1] * 18 + [0] * 2)
    assert (t.tau, t.fallback) == (pytest.approx(0.8), False)
    # rejecting 19/20 is degenerate too
    t = tune_threshold([0.9] + [0.7] * 19, [1] + [0] * 19)
    assert (t.tau, t.fallback, t.accepted_share) == (FALLBACK_THRESHOLD, True, 0.05)


def test_all_correct_dev_accepts_everything_and_falls_back():
    # every split accepts the correct ones; the best (ties to the lowest τ) accepts all → degenerate
    t = tune_threshold([0.3, 0.6, 0.9], [1, 1, 1])
    assert (t.tau, t.fallback, t.accepted_share) == (FALLBACK_THRESHOLD, True, 1.0)


def test_no_dev_rows_fall_back():
    t = tune_threshold([], [])
    assert (t.tau, t.fallback, t.n_dev) == (FALLBACK_THRESHOLD, True, 0)


def test_threshold_rejects_non_finite_confidence():
    with pytest.raises(ValueError, match="nan"):
        tune_threshold([0.5, float("nan")], [1, 0])


# --- the consistency table ---------------------------------------------------------------------

TEMPLATES = pl.DataFrame(
    {
        "relation_id": "P1",
        "template_id": ["P1:c0", "P1:c1", "P1:c0:typo", "P1:c0:certainly", "P1:c1:typo"],
        "kind": ["curated", "curated", "perturbation", "marker_verbal", "perturbation"],
        "rank": [0, 1, 0, 0, 1],
        "parent_id": [None, None, "P1:c0", "P1:c0", "P1:c1"],
        "variant": [None, None, "typo", "certainly", "typo"],
    },
    schema_overrides={"rank": pl.Int32},
)
ESTIMATES_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "template_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "confidence": pl.Float64,
    "predicted_id": pl.String,
    "correct": pl.Boolean,
}


def rows(
    estimator, template, split, confidences, predicted=None, correct=None, relation="P1", k=0, prefix=None,
    draw=1,
):  # fmt: skip
    """Estimate rows of one estimator on one template (None = instance grain), instances numbered;
    k > 0: their `#k<k>d<draw>` subsample copies."""
    prefix = prefix or split[0]
    n = len(confidences)
    return [
        {
            "model_id": "m",
            "relation_id": relation,
            "instance_id": f"{relation}/{prefix}{i}" + (f"#k{k}d{draw}" if k else ""),
            "split": split,
            "answer_space_k": k,
            "answer_space_draw": draw if k else 0,
            "template_id": template,
            "estimator": estimator,
            "reduction": "sum",
            "confidence": c,
            "predicted_id": (predicted or ["Q1"] * n)[i],
            "correct": bool((correct or [1] * n)[i]),
        }
        for i, c in enumerate(confidences)
    ]


def frame(*parts):
    return pl.DataFrame([r for p in parts for r in p], schema=ESTIMATES_SCHEMA)


# dev: base on the headline tunes τ = (0.4 + 0.7)/2 = 0.55 (4/4 decisions right, half accepted);
# base on the typo tunes τ = (0.3 + 0.6)/2 = 0.45
DEV = [
    rows("base", "P1:c0", "dev", [0.9, 0.7, 0.4, 0.2], correct=[1, 1, 0, 0]),
    rows("base", "P1:c0:typo", "dev", [0.8, 0.6, 0.3, 0.1], correct=[1, 1, 0, 0]),
]
# test: headline accepts (C ≥ 0.55) e0, e2; the typo (C ≥ 0.45) accepts e0, e1, e2
TEST = [
    rows("base", "P1:c0", "test", [0.6, 0.5, 0.9, 0.1], ["Q1", "Q1", "Q2", "Q1"]),
    rows("base", "P1:c0:typo", "test", [0.5, 0.6, 0.9, 0.2], ["Q1", "Q1", "Q3", "Q1"]),
]
TYPO = {"iou_acc": 2 / 3, "iou_rej": 1 / 2, "iou_cons": 4 / 7, "dec_cons": 3 / 4, "agreement": 1 / 2}


def pick(table, **where):
    out = table.filter(*(pl.col(k).is_null() if v is None else pl.col(k) == v for k, v in where.items()))
    assert out.height == 1, out
    return out.row(0, named=True)


def test_intra_typo_pair_hand_worked():
    # A1 = {e0, e2}, A2 = {e0, e1, e2}: IoU_acc 2/3; R1 = {e1, e3}, R2 = {e3}: IoU_rej 1/2;
    # IoU_cons = 2·(2/3)(1/2)/(7/6) = 4/7; DecCons = |{e0, e2, e3}|/4; Agreement: e0 Q1=Q1, e2 Q2≠Q3
    table = compute_consistency(frame(*DEV, *TEST), TEMPLATES, seed=44)
    assert table.schema == pl.Schema(CONSISTENCY_SCHEMA)
    for relation in (None, "P1"):  # one relation: the pooled row equals it
        row = pick(table, kind="intra", setup_b="typo", relation_id=relation, statistic="value")
        assert (row["setup_a"], row["estimator_a"], row["estimator_b"]) == ("original", "base", "base")
        assert row["threshold_a"] == pytest.approx(0.55) and row["threshold_b"] == pytest.approx(0.45)
        assert (row["fallback_a"], row["fallback_b"], row["n"], row["seed"]) == (False, False, 4, 44)
        same({m: row[m] for m in TYPO}, TYPO)


def test_each_setup_pairs_with_the_headline_and_only_random_ones_carry_the_probe_seed():
    """A templates table without perturbation_seed (one draw): the typo carries the probe seed, the
    subsample copies their draw (1)."""
    parts = [
        *DEV,
        *TEST,
        rows("base", "P1:c0:certainly", "test", [0.6, 0.5, 0.9, 0.1]),  # marker variant: same as c0
        rows("base", "P1:c1", "test", [0.6, 0.5, 0.9, 0.1]),  # paraphrase
        rows("base", "P1:c1:typo", "test", [0.6, 0.5, 0.9, 0.1]),  # typo of a non-headline: no part
        rows("base", "P1:c0", "test", [0.6, 0.5], k=3),  # #k3d1 copies of e0, e1
        rows("base", "P1:c1", "test", [0.6], k=3),  # a non-headline template on a copy: no part
    ]
    table = compute_consistency(frame(*parts), TEMPLATES, seed=4).filter(
        pl.col("relation_id").is_null(), pl.col("statistic") == "value"
    )
    intra = {r["setup_b"]: r for r in table.filter(pl.col("kind") == "intra").iter_rows(named=True)}
    assert sorted(intra) == ["answer_space_k=3", "certainly", "paraphrase", "typo"]
    assert {s: r["seed"] for s, r in intra.items()} == {
        "answer_space_k=3": 1,
        "certainly": None,
        "paraphrase": None,
        "typo": 4,
    }
    assert {s: r["n"] for s, r in intra.items()} == {
        "answer_space_k=3": 2,
        "certainly": 4,
        "paraphrase": 4,
        "typo": 4,
    }
    # the marker and the paraphrase have no dev rows: τ_b falls back to 0.5, accepting e0, e1, e2
    # against the headline's e0, e2 (τ_a 0.55): A ∩ = 2, A ∪ = 3; R1 = {e1, e3}, R2 = {e3};
    # answers Q1 everywhere vs the headline's Q2 on e2: Agreement 1/2 (the typo's numbers)
    row = intra["paraphrase"]
    assert (row["threshold_b"], row["fallback_b"]) == (FALLBACK_THRESHOLD, True)
    same({m: row[m] for m in TYPO}, TYPO)
    # the copies: e0 0.6 vs 0.6, e1 0.5 vs 0.5 at τ 0.55 and 0.5: (A, A) and (R, A)
    same(
        {m: intra["answer_space_k=3"][m] for m in TYPO},
        {"iou_acc": 0.5, "iou_rej": 0.0, "iou_cons": 0.0, "dec_cons": 0.5, "agreement": 1.0},
    )


def test_each_draw_of_a_subsample_is_a_seed_with_mean_and_spread():
    # The option-count sweep's draws (answer_space_draws 2) of the #k3 copies of e0, e1; no dev
    # rows, so τ_b falls back to 0.5; the headline (τ_a 0.55) accepts e0 (0.6), rejects e1 (0.5).
    # draw 1 (0.6, 0.5): e0 (A, A), e1 (R, A): IoU_acc 1/2, IoU_rej 0, DecCons 1/2, Agreement 1
    # draw 2 (0.4, 0.7): e0 (A, R), e1 (R, A): IoU_acc 0, IoU_rej 0, DecCons 0, Agreement NaN
    # mean over the draws: IoU_acc 1/4, DecCons 1/4, Agreement 1 (NaN left out); std of IoU_acc √2/4
    parts = [*DEV, *TEST]
    parts += [rows("base", "P1:c0", "test", c, k=3, draw=d) for d, c in ((1, [0.6, 0.5]), (2, [0.4, 0.7]))]
    table = compute_consistency(frame(*parts), TEMPLATES, seed=4).filter(
        pl.col("relation_id").is_null(), pl.col("setup_b") == "answer_space_k=3"
    )
    one, two = (pick(table, statistic="value", seed=d) for d in (1, 2))
    assert (one["n"], two["n"], one["threshold_b"], one["fallback_b"]) == (2, 2, 0.5, True)
    same({m: one[m] for m in TYPO}, {"iou_acc": 0.5, "iou_rej": 0.0, "iou_cons": 0.0, "dec_cons": 0.5,
                                     "agreement": 1.0})  # fmt: skip
    same({m: two[m] for m in TYPO}, {"iou_acc": 0.0, "iou_rej": 0.0, "iou_cons": 0.0, "dec_cons": 0.0,
                                     "agreement": float("nan")})  # fmt: skip
    mean, std = (pick(table, statistic=s, seed=None) for s in ("mean", "std"))
    assert (mean["n_seeds"], mean["iou_acc"], mean["dec_cons"], mean["agreement"]) == (2, 0.25, 0.25, 1.0)
    assert std["iou_acc"] == pytest.approx(2**0.5 / 4)


def test_setup_rows_label_and_align_items():
    parts = [*TEST, rows("base", "P1:c0", "test", [0.6], k=3), rows("vote2_average", None, "test", [0.4])]
    labelled = setup_rows(frame(*parts), TEMPLATES)
    got = labelled.select("instance_id", "template_id", "setup", "instance", "anchor").rows()
    assert ("P1/t0#k3d1", "P1:c0", "answer_space_k=3", "P1/t0", "P1:c0") in got
    assert ("P1/t0", "P1:c0:typo", "typo", "P1/t0", "P1:c0") in got
    assert ("P1/t0", None, "original", "P1/t0", None) in got


def test_cross_pairs_hand_worked_marker_estimators_left_out():
    # margin on the headline, no dev rows → τ 0.5: accepts e0 (0.5), e1 (0.6), e2; base (τ 0.55)
    # e0, e2: the typo numbers again. marker_certainly (reads another prompt) is left out; the
    # instance-grain votes pair only with each other.
    parts = [
        *DEV,
        *TEST,
        rows("margin", "P1:c0", "test", [0.5, 0.6, 0.9, 0.2], ["Q1", "Q1", "Q3", "Q1"]),
        rows("marker_certainly", "P1:c0", "test", [0.5, 0.6, 0.9, 0.2]),
        rows("vote2_average", None, "test", [1.0, 0.0]),
        rows("vote3_average", None, "test", [1.0, 0.0]),
    ]
    table = compute_consistency(frame(*parts), TEMPLATES)
    cross = table.filter((pl.col("kind") == "cross") & pl.col("relation_id").is_null())
    assert cross.select("estimator_a", "estimator_b").rows() == [
        ("base", "margin"),
        ("vote2_average", "vote3_average"),
    ]
    row = pick(cross, estimator_a="base")
    assert (row["setup_a"], row["setup_b"], row["seed"], row["n"]) == ("original", "original", None, 4)
    same({m: row[m] for m in TYPO}, TYPO)
    # identical decisions and answers: 1 everywhere
    votes = pick(cross, estimator_a="vote2_average")
    same({m: votes[m] for m in TYPO}, dict.fromkeys(TYPO, 1.0))


def test_cross_counts_match_a_pairwise_alignment():
    """The matrix products over [item, estimator] agree with aligning each pair by hand, also when
    estimators cover different items and relations pool."""
    rng = np.random.default_rng(3)
    parts = []
    for relation in ("P1", "P2"):
        for name in ("base", "margin", "entropy", "gap"):
            keep = rng.random(12) < 0.8
            conf = rng.random(12).round(2)
            pred = [f"Q{v}" for v in rng.integers(0, 3, 12)]
            parts.append(
                [
                    r
                    for r, k in zip(
                        rows(name, f"{relation}:c0", "test", conf, pred, relation=relation), keep, strict=True
                    )
                    if k
                ]
            )
    templates = pl.concat(
        [
            TEMPLATES.head(1),
            TEMPLATES.head(1).with_columns(relation_id=pl.lit("P2"), template_id=pl.lit("P2:c0")),
        ]
    )
    estimates = frame(*parts)
    table = compute_consistency(estimates, templates).filter(pl.col("kind") == "cross")
    assert table.height == 6 * 3  # 6 pairs × (pooled, P1, P2)
    for row in table.iter_rows(named=True):
        sides = [
            estimates.filter(
                pl.col("estimator") == row[f"estimator_{s}"],
                pl.lit(True) if row["relation_id"] is None else pl.col("relation_id") == row["relation_id"],
            ).select("instance_id", "confidence", "predicted_id")
            for s in "ab"
        ]
        both = sides[0].join(sides[1], on="instance_id", suffix="_b")
        expected = consistency_measures(
            both["confidence"] >= FALLBACK_THRESHOLD,  # no dev rows: every threshold falls back
            both["confidence_b"] >= FALLBACK_THRESHOLD,
            both["predicted_id"].to_list(),
            both["predicted_id_b"].to_list(),
        )
        assert row["n"] == both.height
        same({m: row[m] for m in expected}, expected)


# A run's templates: the typo of the headline drawn with seeds 4, 44 and 99 (variants.py ids and
# perturbation_seed), one 1-shot context variant (drawn with the probe seed) and a marker.
SEEDED_TEMPLATES = pl.DataFrame(
    {
        "relation_id": "P1",
        "template_id": [
            "P1:c0",
            *(f"P1:c0:typo-s{s}" for s in (4, 44, 99)),
            "P1:c0:context-1shot",
            "P1:c0:certainly",
        ],
        "kind": ["curated", *["perturbation"] * 3, "context_1shot", "marker_verbal"],
        "rank": 0,
        "parent_id": [None, *["P1:c0"] * 5],
        "variant": [None, "typo", "typo", "typo", "context-1shot", "certainly"],
        "perturbation_seed": [None, 4, 44, 99, None, None],
    },
    schema_overrides={"rank": pl.Int32, "perturbation_seed": pl.Int64},
)
# The headline as in DEV/TEST: τ_a 0.55, A1 = {e0, e2}, R1 = {e1, e3}, answers Q1 Q1 Q2 Q1.
# Each seed's typo is tuned on its own dev rows:
#   s4:  dev 0.8 0.6 | 0.3 0.1 → τ 0.45; test 0.5 0.6 0.9 0.2 → A2 {e0, e1, e2}: the TYPO numbers
#   s44: dev 0.9 0.8 | 0.2 0.1 → τ 0.5;  test 0.6 0.4 0.9 0.1 → A2 {e0, e2} = A1, same answers: 1s
#   s99: dev 0.95 0.85 | 0.75 0.65 → τ 0.8; test 0.85 0.9 0.7 0.2 → A2 {e0, e1}: A∩ {e0}, A∪
#        {e0, e1, e2} → 1/3; R2 {e2, e3}: R∩ {e3}, R∪ {e1, e2, e3} → 1/3; IoU_cons 1/3;
#        DecCons |{e0, e3}|/4 = 1/2; Agreement e0 Q1 = Q1 → 1
SEEDED = [
    *DEV[:1],
    *TEST[:1],
    rows("base", "P1:c0:typo-s4", "dev", [0.8, 0.6, 0.3, 0.1], correct=[1, 1, 0, 0]),
    rows("base", "P1:c0:typo-s4", "test", [0.5, 0.6, 0.9, 0.2], ["Q1", "Q1", "Q3", "Q1"]),
    rows("base", "P1:c0:typo-s44", "dev", [0.9, 0.8, 0.2, 0.1], correct=[1, 1, 0, 0]),
    rows("base", "P1:c0:typo-s44", "test", [0.6, 0.4, 0.9, 0.1], ["Q1", "Q1", "Q2", "Q1"]),
    rows("base", "P1:c0:typo-s99", "dev", [0.95, 0.85, 0.75, 0.65], correct=[1, 1, 0, 0]),
    rows("base", "P1:c0:typo-s99", "test", [0.85, 0.9, 0.7, 0.2], ["Q1", "Q1", "Q2", "Q1"]),
    rows("base", "P1:c0:context-1shot", "test", [0.5, 0.6, 0.9, 0.2], ["Q1", "Q1", "Q3", "Q1"]),
    rows("base", "P1:c0:certainly", "test", [0.5, 0.6, 0.9, 0.2], ["Q1", "Q1", "Q3", "Q1"]),
]
PER_SEED = {
    4: (0.45, TYPO),
    44: (0.5, dict.fromkeys(TYPO, 1.0)),
    99: (0.8, {"iou_acc": 1 / 3, "iou_rej": 1 / 3, "iou_cons": 1 / 3, "dec_cons": 1 / 2, "agreement": 1.0}),
}


def test_each_perturbation_seed_is_its_own_setup_with_its_own_threshold():
    table = compute_consistency(frame(*SEEDED), SEEDED_TEMPLATES, seed=13)
    typo = table.filter(pl.col("setup_b") == "typo", pl.col("statistic") == "value")
    for pooled in (True, False):
        got = typo.filter(pl.col("relation_id").is_null() == pooled)
        assert got["seed"].to_list() == [4, 44, 99]
        for row in got.iter_rows(named=True):
            tau, expected = PER_SEED[row["seed"]]
            assert row["threshold_a"] == pytest.approx(0.55) and row["threshold_b"] == pytest.approx(tau)
            assert (row["n"], row["n_seeds"], row["fallback_b"]) == (4, None, False)
            same({m: row[m] for m in TYPO}, expected)


def test_mean_and_std_over_the_perturbation_seeds_hand_worked():
    table = compute_consistency(frame(*SEEDED), SEEDED_TEMPLATES, seed=13)
    mean = pick(table, setup_b="typo", relation_id=None, statistic="mean")
    std = pick(table, setup_b="typo", relation_id=None, statistic="std")
    # IoU_acc 2/3, 1, 1/3: mean 2/3, deviations 0, ±1/3 → sample variance (2/9)/2, std 1/3
    # IoU_rej 1/2, 1, 1/3: mean 11/18, deviations −2/18, 7/18, −5/18 → variance (78/324)/2
    # IoU_cons 4/7, 1, 1/3: mean (12 + 21 + 7)/63 = 40/63, deviations −4/63, 23/63, −19/63
    # DecCons 3/4, 1, 1/2: mean 3/4, std 1/4; Agreement 1/2, 1, 1: mean 5/6, deviations −1/3,
    # 1/6, 1/6 → variance (1/6)/2; τ_b 0.45, 0.5, 0.8: mean 1.75/3; τ_a 0.55 in every seed: std 0
    same(
        {m: mean[m] for m in TYPO},
        {"iou_acc": 2 / 3, "iou_rej": 11 / 18, "iou_cons": 40 / 63, "dec_cons": 3 / 4, "agreement": 5 / 6},
    )
    same(
        {m: std[m] for m in TYPO},
        {
            "iou_acc": 1 / 3,
            "iou_rej": math.sqrt(78 / 324 / 2),
            "iou_cons": math.sqrt((16 + 529 + 361) / 63**2 / 2),
            "dec_cons": 1 / 4,
            "agreement": math.sqrt(1 / 12),
        },
    )
    assert (mean["threshold_a"], std["threshold_a"]) == (pytest.approx(0.55), 0.0)
    assert mean["threshold_b"] == pytest.approx(1.75 / 3)
    for row in (mean, std):
        assert (row["seed"], row["n"], row["n_seeds"], row["fallback_a"], row["fallback_b"]) == (
            None, None, 3, False, False,
        )  # fmt: skip
    # the same numbers as seed_spread's side-by-side summary of the per-seed rows
    wide = pick(seed_spread(table), setup_b="typo", relation_id=None)
    assert wide["n_seeds"] == 3
    for m in TYPO:
        assert (wide[f"{m}_mean"], wide[f"{m}_std"]) == (pytest.approx(mean[m]), pytest.approx(std[m]))


def test_one_number_per_pair_is_seed_null_and_not_std():
    """What a DuckDB user filters on: the 1-shot context (one draw, probe seed 13) gets a mean equal to
    its value and a NaN std; the marker and the cross pairs have their value row only."""
    parts = [*SEEDED, rows("margin", "P1:c0", "test", [0.5, 0.6, 0.9, 0.2])]
    table = compute_consistency(frame(*parts), SEEDED_TEMPLATES, seed=13)
    one_shot = table.filter(pl.col("setup_b") == "context-1shot", pl.col("relation_id").is_null())
    assert one_shot.select("statistic", "seed", "n_seeds").rows() == [("mean", None, 1), ("std", None, 1),
                                                                     ("value", 13, None)]  # fmt: skip
    mean, std, value = one_shot.iter_rows(named=True)
    same({m: mean[m] for m in TYPO}, TYPO)  # the s4 typo's numbers: the same test confidences
    same({m: value[m] for m in TYPO}, TYPO)
    same({m: std[m] for m in TYPO}, dict.fromkeys(TYPO, NAN))
    assert [r["fallback_b"] for r in (mean, std, value)] == [True] * 3  # no dev rows: τ 0.5
    assert pick(table, setup_b="certainly", relation_id=None)["statistic"] == "value"
    headline = table.filter(pl.col("seed").is_null(), pl.col("statistic") != "std")
    keys = ["kind", "setup_b", "estimator_a", "estimator_b", "reduction", "relation_id"]
    assert headline.select(keys).is_unique().all()
    assert sorted(headline.filter(pl.col("relation_id").is_null())["setup_b"]) == [
        "certainly", "context-1shot", "original", "typo",
    ]  # fmt: skip


def test_seed_spread_is_mean_and_sample_std_over_seeds():
    a = compute_consistency(frame(*DEV, *TEST), TEMPLATES, seed=4)
    b = compute_consistency(
        frame(*DEV, *TEST[:1], rows("base", "P1:c0:typo", "test", [0.6, 0.4, 0.9, 0.1])), TEMPLATES, seed=44
    )
    spread = seed_spread(pl.concat([a, b]))
    row = pick(spread, setup_b="typo", relation_id=None)
    # seed 4: IoU_acc 2/3; seed 44: the typo (τ 0.45) accepts e0, e2 as the headline does: 1
    # → mean 5/6, std |1 − 2/3|/√2
    assert row["n_seeds"] == 2
    assert row["iou_acc_mean"] == pytest.approx(5 / 6)
    assert row["iou_acc_std"] == pytest.approx((1 / 3) / math.sqrt(2))
    assert spread.filter(pl.col("setup_b") == "original").is_empty()  # cross rows have no seed


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="missing column\\(s\\) \\['predicted_id'\\]"):
        compute_consistency(frame(*TEST).drop("predicted_id"), TEMPLATES)
    bad = frame(*TEST).with_columns(confidence=pl.lit(float("inf")))
    with pytest.raises(ValueError, match="confidence inf is not a finite number \\(estimator 'base'"):
        compute_consistency(bad, TEMPLATES)
    with pytest.raises(ValueError, match="templates: missing column 'rank'"):
        compute_consistency(frame(*TEST), TEMPLATES.drop("rank"))


# --- option shuffling --------------------------------------------------------------------------

SHUFFLE_TEMPLATES = pl.DataFrame(
    {
        "relation_id": "P36",
        "template_id": ["P36:c0", "P36:c1", "P36:c2", "P36:c0:certainly", "P36:c0:numeric-50"],
        "text": [
            "The capital of [X] is [Y].",
            "[X] has its capital in [Y].",
            "[X]'s capital city is [Y].",
            "The capital of [X] is certainly [Y].",
            "I'm 50% confident that the capital of [X] is [Y].",
        ],
        "kind": ["curated", "curated", "curated", "marker_verbal", "marker_numeric"],
        "rank": [0, 1, 2, 0, 0],
        "parent_id": [None, None, None, "P36:c0", "P36:c0"],
        "variant": [None, None, None, "certainly", "numeric-50"],
    },
    schema_overrides={"rank": pl.Int32},
)


def shuffle_scores(n_instances=10, n_options=4, passes=3, seed=0):
    """statement_scores of one relation with every score column, continuous (no ties)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_instances):
        golds = {0} if i % 3 else {0, 2}  # some instances with two golds
        for t in SHUFFLE_TEMPLATES["template_id"]:
            for o in range(n_options):
                ll = rng.normal(-8, 3, size=4)
                out.append(
                    {
                        "model_id": "m",
                        "relation_id": "P36",
                        "instance_id": f"i{i}",
                        "template_id": t,
                        "option_index": o,
                        "object_id": f"i{i}:Q{o}",
                        "is_gold": o in golds,
                        "ll_sum": ll[0],
                        "ll_mean": ll[0] / 5 + ll[1] / 50,
                        "ll_answer_sum": ll[2],
                        "ll_answer_mean": ll[2] / 2 + ll[3] / 50,
                        "ll_sum_masked": ll[1],
                        "ll_answer_sum_masked": ll[3],
                        "ll_sum_dropout": list(ll[0] + rng.normal(0, 0.5, passes)),
                        "ll_answer_sum_dropout": list(ll[2] + rng.normal(0, 0.5, passes)),
                    }
                )
    scores = pl.DataFrame(out)
    instances = pl.DataFrame(
        {
            "instance_id": [f"i{i}" for i in range(n_instances)],
            "n_options": n_options,
            "split": ["dev" if i % 2 else "test" for i in range(n_instances)],
        }
    )
    return scores, instances


def test_option_shuffling_changes_no_estimate():
    """Zhao et al. shuffle the answer options of a multiple-choice prompt; a closed-set probe scores
    every option as its own statement, so permuting option_index within an instance (the same
    permutation on all its templates) changes no estimator's confidence or predicted option."""
    scores, instances = shuffle_scores()
    rng = np.random.default_rng(7)
    perms = {f"i{i}": rng.permutation(4) for i in range(10)}
    mapping = pl.DataFrame(
        [(inst, old, int(new)) for inst, p in perms.items() for old, new in enumerate(p)],
        schema={"instance_id": pl.String, "option_index": pl.Int64, "new_index": pl.Int64},
        orient="row",
    )
    shuffled = (
        scores.join(mapping, on=["instance_id", "option_index"])
        .with_columns(option_index=pl.col("new_index"))
        .drop("new_index")
        .sample(fraction=1.0, shuffle=True, seed=1)
    )
    assert not shuffled.sort("instance_id", "template_id", "option_index")["object_id"].equals(
        scores.sort("instance_id", "template_id", "option_index")["object_id"]
    )

    def estimate(frame):
        cubes = partition_cubes(frame, instances, SHUFFLE_TEMPLATES)
        return compute_estimate_tables(cubes, log=lambda _: None)

    before, after = estimate(scores), estimate(shuffled)
    ran = before.status.filter(pl.col("status") == "ran")
    assert (
        ran.select("estimator", "reduction")
        .sort(pl.all())
        .equals(
            after.status.filter(pl.col("status") == "ran").select("estimator", "reduction").sort(pl.all())
        )
    )
    # every family ran: aggregations, marginal, markers, multi-answer, null model, recalibration,
    # Selective-LAMA (dropout included), single template
    assert set(ran["estimator"]) >= {
        "base", "margin", "entropy", "vote2_average", "min_consistency", "template_marginal",
        "marker_certainly", "marker_numeric_50", "sca_tau0", "sca_tuned", "answer_prior",
        "base_temperature", "margin_isotonic", "template_marginal_platt", "token", "sent", "gap",
        "reranking", "template_diff", "dropout_mean", "dropout_var",
    }  # fmt: skip
    keys = ["instance_id", "template_id", "estimator", "reduction"]
    joined = before.estimates.join(after.estimates, on=keys, how="full", nulls_equal=True, suffix="_shuffled")
    assert joined.height == before.estimates.height == after.estimates.height
    assert joined["predicted_id"].equals(joined["predicted_id_shuffled"].alias("predicted_id"))
    np.testing.assert_allclose(
        joined["confidence_shuffled"].to_numpy(), joined["confidence"].to_numpy(), rtol=1e-9, atol=1e-12
    )
    assert (joined["predicted_index"] != joined["predicted_index_shuffled"]).any()  # the options did move
