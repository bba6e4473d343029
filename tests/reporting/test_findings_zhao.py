"""Zhao et al.'s claims (seed 004) on hand-made estimates: decisions recomputed from dev-tuned
thresholds, intra-method IoU_cons per variant and seed, Agreement, Abstain F1, the 0.5 safeguard and
cross-method DecCons, every expected point computed by hand below.

The test items come in blocks of ten (i0 … i9 in block 0, i10 … i19 in block 1, …): the original
accepts positions 0–4 of every block (confidence 0.9) and rejects 5–9 (0.1); a variant flips
chosen positions. Dev rows (correct at 0.8, wrong at 0.2, half each) tune every threshold to 0.5
(the midpoint), not degenerate. With ten blocks the flips are 10–40 % of 100 items, so an interval's
side is beyond doubt where a verdict is asserted."""

import math

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import DESCRIPTIVE, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from kcal_pipeline.reporting.findings.zhao_decisions import best_split_tau, pair_deccons
from tests.reporting.test_findings import EST_SCHEMA, MODEL, only, store

HEAD = "P1:c0"
BLOCKS = 10
N = 10 * BLOCKS


def template_rows(*variants: tuple[str, int | None]) -> pl.DataFrame:
    """The headline template and the named variants of it (variant, perturbation seed)."""
    kind = {"typo": "perturbation", "extra-space": "perturbation", "context-fixed": "context_fixed"}
    rows = [(HEAD, "curated", None, None, None)]
    rows += [(f"{HEAD}:{v}" + ("" if s is None else f"-s{s}"), kind[v], HEAD, v, s) for v, s in variants]
    return pl.DataFrame(
        rows,
        schema={"template_id": pl.String, "kind": pl.String, "parent_id": pl.String, "variant": pl.String,
                "perturbation_seed": pl.Int64},
        orient="row",
    ).with_columns(relation_id=pl.lit("P1"), rank=pl.lit(0, pl.Int32))  # fmt: skip


def estimates(split, template, confidence, correct, predicted=None, estimator="base", prefix="i"):
    n = len(confidence)
    return pl.DataFrame(
        {
            "model_id": MODEL, "relation_id": "P1", "instance_id": [f"{prefix}{k}" for k in range(n)],
            "split": split, "answer_space_k": 0, "answer_space_draw": 0, "template_id": template,
            "estimator": estimator, "reduction": "sum",
            "grain": "template" if template else "instance", "output_kind": "probability",
            "predicted_index": predicted if predicted is not None else [0] * n,
            "confidence": confidence, "correct": correct,
        },
        schema=EST_SCHEMA,
    )  # fmt: skip


def accepting(flips=(), positions=range(5)) -> list[float]:
    """Test confidences: accept (0.9) at `positions` of every block, each flip toggled."""
    accept = [(k % 10 in positions) != (k % 10 in flips) for k in range(N)]
    return [0.9 if a else 0.1 for a in accept]


def right(positions=range(5)) -> list[bool]:
    return [k % 10 in positions for k in range(N)]


def template_of(variant: str, seed: int | None) -> str:
    return HEAD if variant == "original" else f"{HEAD}:{variant}" + ("" if seed is None else f"-s{seed}")


def dev(template: str, estimator: str = "base", missed: int = 0) -> pl.DataFrame:
    """20 dev rows, 10 right (0.8) and 10 wrong (0.2): τ = 0.5 accepts the right ones; the last
    `missed` right ones get 0.1 (still right, now rejected: τ stays 0.5)."""
    conf = [0.8] * (10 - missed) + [0.1] * missed + [0.2] * 10
    return estimates("dev", template, conf, [True] * 10 + [False] * 10, estimator=estimator, prefix="d")


def intra(variants: dict[tuple[str, int | None], dict], original: dict | None = None) -> fd.StoreTables:
    """Base on the headline template and its variants: each setup's test rows (accepting(**flips),
    right(...) unless given) and its dev rows."""
    frames = []
    for (variant, seed), spec in {("original", None): original or {}, **variants}.items():
        template = template_of(variant, seed)
        frames.append(
            estimates(
                "test", template, spec.get("confidence", accepting(spec.get("flips", ()))),
                spec.get("correct", right()), spec.get("predicted"),
            )
        )  # fmt: skip
        frames.append(spec.get("dev", dev(template)))
    return store(
        estimates=pl.concat([f for f in frames if f["split"][0] == "test"]),
        dev_estimates=pl.concat([f for f in frames if f["split"][0] == "dev"]),
        templates=template_rows(*(v for v in variants)),
    )


# IoU_cons of the original against a variant that flips positions 4 and 5 of each block:
# A∩A = 4, R∩R = 4, A only = 1, R only = 1 per block, IoU_acc = IoU_rej = 4/6.
TWO_FLIPS = 2 / 3
# ... that flips position 4 only: IoU_acc = 4/5, IoU_rej = 5/6, harmonic mean 2·0.8·(5/6) / (0.8 + 5/6).
ONE_FLIP = 2 * 0.8 * (5 / 6) / (0.8 + 5 / 6)
# ... that flips 3, 4, 5, 6: A∩A 3, R∩R 3, A only 2, R only 2: IoU_acc = IoU_rej = 3/7.
FOUR_FLIPS = 3 / 7
TYPO = {("typo", 4): {"flips": (4, 5)}, ("typo", 44): {"flips": (4, 5)}, ("typo", 99): {"flips": (4,)}}
TYPO_MEAN = (2 * TWO_FLIPS + ONE_FLIP) / 3  # 0.71655


# --- decisions -----------------------------------------------------------------------------------


def test_the_raw_dev_split_is_the_best_accuracy_midpoint_and_resampled_deccons_counts_shared_items():
    # one right at 0.95, 19 wrong at 0.3: accepting ≥ 0.625 gets all 20 right (accuracy 1)
    assert best_split_tau(np.array([0.95] + [0.3] * 19), np.array([True] + [False] * 19)) == 0.625
    assert best_split_tau(np.array([0.4, 0.4]), np.array([True, False])) == 0.4  # one value: accept all
    assert math.isnan(best_split_tau(np.array([]), np.array([], dtype=bool)))
    # three items; estimator 1 absent on the last: DecCons(0, 1) = 1 alike of 2 shared
    d = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 0.0]])
    p = (d != 0).astype(float)
    assert pair_deccons(p, d)[0, 1] == 0.5
    # a resample drawing the first item twice and the second never: 2 alike of 2
    assert pair_deccons(p, d, np.array([[2.0, 0.0, 1.0]]))[0, 0, 1] == 1.0


# --- 1. IoU_cons against the paper's highest --------------------------------------------------------


def test_iou_cons_below_the_papers_highest_holds_and_one_above_it_does_not():
    found = fd.consistency_far_from_one(
        intra({**TYPO, ("extra-space", 4): {"flips": (4,)}, ("context-fixed", None): {}})
    )
    typo = only(found, "vs typo")
    assert (typo.verdict, typo.n) == (HOLDS, N)
    assert typo.value == pytest.approx(TYPO_MEAN) and typo.ci_high < 0.86
    assert "(mean over 3 draw(s): seed 4: 0.667, seed 44: 0.667, seed 99: 0.816) against the paper's " \
        "highest 0.86; DecCons 0.833" in typo.numbers  # fmt: skip
    # one flip per block: 0.816 < 0.86, but the interval reaches past it
    assert only(found, "extra-space").value == pytest.approx(ONE_FLIP)
    # the fixed demonstration changes nothing: IoU_cons 1 on every resample, above 0.97
    fixed = only(found, "context-fixed")
    assert (fixed.verdict, fixed.value, fixed.ci_low, fixed.ci_high) == (FAILS, 1.0, 1.0, 1.0)
    assert "(mean over 1 draw(s): not drawn: 1.000)" in fixed.numbers
    assert fixed.note == ""  # every threshold tuned, none degenerate


def test_iou_cons_without_a_variant_is_not_testable_and_an_undefined_one_is_inconclusive():
    found = fd.consistency_far_from_one(intra({("typo", 4): {"confidence": [0.9] * N}}))
    assert {f.verdict for f in found if "typo" not in f.subject} == {NOT_TESTABLE}
    assert "kcal run --template-kinds curated,context_fixed" in only(found, "context-fixed").note
    # both setups accept everything: nothing rejected, IoU_rej (so IoU_cons) undefined
    everything = intra({("typo", 4): {"confidence": [0.9] * N}}, original={"confidence": [0.9] * N})
    typo = only(fd.consistency_far_from_one(everything), "typo")
    assert typo.verdict == INCONCLUSIVE and typo.note.startswith("IoU_cons undefined on a draw")
    assert {f.verdict for f in fd.consistency_far_from_one(store())} == {NOT_TESTABLE}


# --- 2. inconsistency is consistent ------------------------------------------------------------------


def test_a_spread_over_seeds_below_the_papers_largest_holds_and_a_wide_one_does_not():
    same = {("typo", s): {"flips": (4, 5)} for s in (4, 44, 99)}
    steady = only(fd.inconsistency_is_consistent(intra(same)), "typo")
    assert (steady.verdict, steady.value) == (HOLDS, 0.0) and steady.ci_high == pytest.approx(0.0, abs=1e-12)
    # seeds 4 and 44 change nothing (IoU_cons 1), seed 99 rejects everything the original accepted
    # and accepts the rest: IoU_cons 0; sample std of (1, 1, 0) = √(1/3)
    wide = {
        ("typo", 4): {},
        ("typo", 44): {},
        ("typo", 99): {"confidence": accepting(positions=range(5, 10))},
    }
    spread = only(fd.inconsistency_is_consistent(intra(wide)), "typo")
    assert spread.verdict == FAILS and spread.value == pytest.approx(math.sqrt(1 / 3))
    assert "over 3 seeds (seed 4: 1.000, seed 44: 1.000, seed 99: 0.000; range 1.000)" in spread.numbers
    mixed = only(fd.inconsistency_is_consistent(intra(TYPO)), "typo")
    assert mixed.value == pytest.approx(np.std([TWO_FLIPS, TWO_FLIPS, ONE_FLIP], ddof=1))  # 0.0864


def test_one_seed_or_no_variant_leaves_the_spread_not_testable():
    found = fd.inconsistency_is_consistent(intra({("typo", 4): {"flips": (4,)}}))
    one = only(found, "typo")
    assert one.verdict == NOT_TESTABLE and one.note.startswith("one draw only (seed 4)")
    assert "--perturbation-seeds 4,44,99" in one.note
    assert only(found, "extra-space").verdict == NOT_TESTABLE


# --- 3 and 4. one-shot against zero-shot, space against typo ---------------------------------------


def test_a_one_shot_prefix_that_flips_more_holds_against_each_zero_shot_variant():
    tables = intra({**TYPO, ("extra-space", 4): {}, ("context-fixed", None): {"flips": (3, 4, 5, 6)}})
    found = fd.one_shot_moves_decisions_more(tables)
    typo, space = only(found, "− typo"), only(found, "− extra-space")
    assert typo.verdict == HOLDS and typo.value == pytest.approx(FOUR_FLIPS - TYPO_MEAN)  # −0.288
    assert space.verdict == HOLDS and space.value == pytest.approx(FOUR_FLIPS - 1.0)
    assert "; IoU_cons context-fixed 0.429, typo 0.717 (mean over its seeds)" in typo.numbers
    # the one-shot prefix changing nothing is more consistent than the typo: does not hold
    calm = intra({**TYPO, ("context-fixed", None): {}})
    assert only(fd.one_shot_moves_decisions_more(calm), "− typo").verdict == FAILS
    assert only(fd.one_shot_moves_decisions_more(calm), "− extra-space").verdict == NOT_TESTABLE


def test_an_extra_space_that_flips_less_than_the_typo_holds_and_one_that_flips_more_does_not():
    least = only(fd.space_moves_decisions_least(intra({**TYPO, ("extra-space", 4): {}})))
    assert least.verdict == HOLDS and least.value == pytest.approx(1.0 - TYPO_MEAN)  # +0.283
    most = intra({**TYPO, ("extra-space", 4): {"flips": (3, 4, 5, 6)}})
    assert only(fd.space_moves_decisions_least(most)).value == pytest.approx(FOUR_FLIPS - TYPO_MEAN)
    assert only(fd.space_moves_decisions_least(most)).verdict == FAILS
    missing = only(fd.space_moves_decisions_least(intra(TYPO)))
    assert missing.verdict == NOT_TESTABLE and "no extra-space variant" in missing.note


# --- 5. Agreement against IoU_cons -----------------------------------------------------------------


def test_answers_that_change_under_consistent_decisions_put_agreement_below_iou_cons():
    # context-fixed decides as the original (IoU_cons 1) but answers another option at positions 0
    # and 1: 3 of the 5 accepted in both agree per block, Agreement 0.6
    other = [1 if k % 10 in (0, 1) else 0 for k in range(N)]
    tables = intra({("context-fixed", None): {"predicted": other}, ("typo", 4): {"flips": (4, 5)}})
    found = fd.agreement_below_iou_under_one_shot(tables)
    shot = only(found, "context-fixed")
    assert shot.verdict == HOLDS and shot.value == pytest.approx(0.6 - 1.0)
    assert shot.numbers.endswith("; Agreement 0.600, IoU_cons 1.000")
    typo = only(found, "typo")  # 4 accepted in both per block, all alike: Agreement 1 − IoU_cons 2/3
    assert typo.verdict == DESCRIPTIVE and typo.value == pytest.approx(1 - TWO_FLIPS)
    same = intra({("context-fixed", None): {"flips": (4, 5)}})  # the same answers: 1 − 2/3 > 0
    assert only(fd.agreement_below_iou_under_one_shot(same)).verdict == FAILS


# --- 6. Abstain F1 --------------------------------------------------------------------------------


def test_decisions_that_change_while_abstain_f1_stays_hold_and_the_reverse_does_not():
    # the typo flips positions 4 and 5, and the model's answer flips with them (4 wrong, 5 right):
    # Abstain F1 = 2|R ∩ W| / (|R| + |W|) is 1 on both sides, yet 20 % of the decisions changed
    follows = {("typo", 4): {"flips": (4, 5), "correct": right(positions=(0, 1, 2, 3, 5))}}
    f = only(fd.abstain_f1_stable_while_decisions_change(intra(follows)), "typo")
    assert f.verdict == HOLDS and f.value == pytest.approx(0.2)
    assert "changed decisions 0.200, Abstain F1 original 1.000, typo 1.000, IoU_cons 0.667" in f.numbers
    # the same decisions, but positions 0 and 1 now answered wrongly: |W| = 7, |R ∩ W| = 5 per
    # block, Abstain F1 10/12; no decision changed: 0 − |0.833 − 1| < 0
    worse = {("typo", 4): {"correct": right(positions=(2, 3, 4))}}
    g = only(fd.abstain_f1_stable_while_decisions_change(intra(worse)), "typo")
    assert g.verdict == FAILS and g.value == pytest.approx(-(1 - 10 / 12))
    assert only(fd.abstain_f1_stable_while_decisions_change(intra(worse)), "extra-space").verdict == (
        NOT_TESTABLE
    )


# --- 7. the 0.5 safeguard ---------------------------------------------------------------------------


def test_the_safeguard_that_rescues_a_degenerate_threshold_raises_iou_cons():
    # the original's dev rows: one right at 0.95, 19 wrong at 0.3: the best split (0.625) accepts
    # 5 % of them, degenerate, so τ = 0.5. Its test rows at 0.55 on positions 0–4: accepted at 0.5,
    # rejected at 0.625. The typo accepts the same (0.9): IoU_cons 1 with the safeguard; without,
    # the original accepts nothing: IoU_acc 0, IoU_cons 0.
    degenerate = estimates("dev", HEAD, [0.95] + [0.3] * 19, [True] + [False] * 19, prefix="d")
    original = {"confidence": [0.55 if k % 10 < 5 else 0.1 for k in range(N)], "dev": degenerate}
    f = only(fd.threshold_safeguard_raises_iou(intra({("typo", 4): {}}, original)), "typo")
    assert (f.verdict, f.value, f.ci_low, f.ci_high) == (HOLDS, 1.0, 1.0, 1.0)
    assert f.numbers.endswith("IoU_cons with the safeguard 1.000, at the raw dev split 0.000")
    assert f.note == "the safeguard fired on original"
    calm = only(fd.threshold_safeguard_raises_iou(intra({("typo", 4): {"flips": (4,)}})), "typo")
    assert calm.verdict == NOT_TESTABLE and calm.note.startswith("the safeguard did not fire")


# --- 8 and 9. cross-method -------------------------------------------------------------------------


def cross(test_flips: dict[str, tuple], dev_missed: dict[str, int], estimators=("base", "margin", "entropy")):
    """Estimators on the headline template: test rows accepting(test_flips[e]), dev rows missing
    dev_missed[e] of the right ones (rejected at τ 0.5, so the dev decisions differ)."""
    test = [
        estimates("test", HEAD, accepting(test_flips.get(e, ())), right(), estimator=e) for e in estimators
    ]
    devs = [dev(HEAD, e, dev_missed.get(e, 0)) for e in estimators]
    return store(estimates=pl.concat(test), dev_estimates=pl.concat(devs), templates=template_rows())


def test_the_pair_least_consistent_on_dev_is_judged_on_test():
    # dev: Entropy misses 5 right rows, Margin 1: DecCons Base–Entropy 15/20, Base–Margin 19/20,
    # Entropy–Margin 16/20 → Base vs Entropy. On test Margin is the one that flips (3 per block),
    # Entropy flips 3, 4, 5 too: the chosen pair's test DecCons is 7/10, below 0.89
    tables = cross({"entropy": (3, 4, 5), "margin": (0, 1, 2, 3, 4, 5, 6)}, {"entropy": 5, "margin": 1})
    f = only(fd.cross_method_deccons_low(tables))
    assert (f.verdict, f.value, f.n) == (HOLDS, pytest.approx(0.7), N)
    assert f.numbers.startswith("Base vs Entropy: DecCons 0.700 [")
    assert f.numbers.endswith("on test; dev DecCons 0.750, the lowest of 3 pairs on dev")
    agree = only(fd.cross_method_deccons_low(cross({}, {"entropy": 5, "margin": 1})))
    assert (agree.verdict, agree.value, agree.ci_low) == (FAILS, 1.0, 1.0)
    lone = only(fd.cross_method_deccons_low(cross({}, {}, estimators=("base",))))
    assert lone.verdict == NOT_TESTABLE and "no pair of estimators" in lone.note


def test_estimators_of_one_family_agreeing_more_than_across_families_holds():
    # Base, Margin, Entropy (single_template) decide alike; Token and Sent (selective_lama) alike,
    # each flipping 3 positions against the first family: within 1.0, across 0.7
    names = ("base", "margin", "entropy", "token", "sent")
    flips = {"token": (3, 4, 5), "sent": (3, 4, 5)}
    f = only(fd.similar_signals_agree_more(cross(flips, {}, estimators=names)))
    assert f.verdict == HOLDS and f.value == pytest.approx(1.0 - 0.7)
    assert "selective_lama 1.000 (1 pair(s)); selective_lama × single_template 0.700 (6 pair(s)); " \
        "single_template 1.000 (3 pair(s))" in f.numbers  # fmt: skip
    # Margin and Sent decide the reverse of Base and Token on every item: within each family DecCons
    # 0, across half the pairs agree fully and half not at all (mean 0.5): −0.5 on every resample
    reverse = dict.fromkeys(("margin", "sent"), tuple(range(10)))
    g = only(
        fd.similar_signals_agree_more(cross(reverse, {}, estimators=("base", "margin", "token", "sent")))
    )
    assert (g.verdict, g.value, g.ci_low, g.ci_high) == (FAILS, -0.5, -0.5, -0.5)
    one_family = only(fd.similar_signals_agree_more(cross({}, {})))
    assert one_family.verdict == NOT_TESTABLE and "a pair across families" in one_family.note


def test_the_paper_numbers_are_printed_ones_and_derived_effects_say_how():
    space = fd.CLAIMS["space_moves_decisions_least"].number
    assert (space.effect, space.derived) == (0.071, "0.736 − 0.665 (TokProb, Mistral-7B, MMLU; Table 7)")
    assert fd.CLAIMS["agreement_below_iou_under_one_shot"].number.effect == -0.29
    for key in ("consistency_far_from_one", "inconsistency_is_consistent", "cross_method_deccons_low"):
        assert "derived from the authors" not in fd.CLAIMS[key].number.text
