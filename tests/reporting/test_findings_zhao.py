"""Zhao et al.'s claims (seed 004) on hand-made consistency tables: cross-method DecCons, the
spread of intra-method consistency over perturbation draws, and the paper's numbers beside them."""

import math

import polars as pl

from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE
from tests.reporting.test_findings import MODEL, only, store

SCHEMA = {
    "model_id": pl.String, "kind": pl.String, "setup_a": pl.String, "setup_b": pl.String,
    "estimator_a": pl.String, "estimator_b": pl.String, "reduction": pl.String, "relation_id": pl.String,
    "seed": pl.Int64, "statistic": pl.String, "n_seeds": pl.Int64, "fallback_a": pl.Boolean,
    "fallback_b": pl.Boolean, "n": pl.Int64, "iou_cons": pl.Float64, "dec_cons": pl.Float64,
}  # fmt: skip


def row(**kw):
    common = {"model_id": MODEL, "setup_a": "original", "reduction": "sum", "relation_id": None,
              "seed": None, "statistic": "value", "n_seeds": None, "fallback_a": False, "fallback_b": False,
              "n": 30, "iou_cons": math.nan, "dec_cons": math.nan}  # fmt: skip
    return {**common, **kw}


def cross(pairs: dict[tuple[str, str], float], fallback=(), decoys=True):
    """Cross-method rows (pooled, Sum) with the pairs' DecCons, plus decoys the claim must not read:
    the same pair per relation, under Mean, and an intra row, each with DecCons 0."""
    out = []
    for (a, b), dec in pairs.items():
        pair = {"kind": "cross", "setup_b": "original", "estimator_a": a, "estimator_b": b}
        out.append(row(**pair, dec_cons=dec, fallback_b=(a, b) in fallback))
        if decoys:
            out += [row(**pair, dec_cons=0.0, relation_id="P1"), row(**pair, dec_cons=0.0, reduction="mean")]
    if decoys:
        out.append(row(kind="intra", setup_b="typo", estimator_a="base", estimator_b="base", seed=4,
                       dec_cons=0.0))  # fmt: skip
    return store(consistency=pl.DataFrame(out, schema=SCHEMA))


# --- cross-method DecCons ------------------------------------------------------------------------


def test_the_lowest_cross_method_deccons_below_the_criterion_holds_and_every_pair_is_listed():
    f = only(fd.cross_method_deccons_low(cross({("base", "margin"): 0.95, ("base", "entropy"): 0.4})))
    assert (f.verdict, f.value, f.n) == (HOLDS, 0.4, 30)
    assert f.numbers == (
        "lowest DecCons 0.400 (Base vs Entropy, n = 30); "
        "every pair: Base vs Entropy 0.400, Base vs Margin 0.950"
    )
    assert f.note == "1 of 2 tuned pairs below 0.9"


def test_cross_method_deccons_all_high_does_not_hold_and_undefined_or_fallback_pairs_are_not_judged():
    high = only(fd.cross_method_deccons_low(cross({("base", "margin"): 0.95, ("base", "entropy"): 0.9})))
    assert (high.verdict, high.value) == (FAILS, 0.9)  # 0.9 is not below 0.9
    undefined = only(
        fd.cross_method_deccons_low(cross({("base", "margin"): 0.95, ("base", "gap"): math.nan}))
    )
    assert undefined.verdict == INCONCLUSIVE and "DecCons undefined on 1 pair(s)" in undefined.note
    # Sent's threshold fell back to 0.5: its DecCons 0.0 is listed but decides nothing
    fallen = only(
        fd.cross_method_deccons_low(
            cross({("base", "margin"): 0.95, ("base", "sent"): 0.0}, fallback={("base", "sent")})
        )
    )
    assert (fallen.verdict, fallen.value) == (FAILS, 0.95)
    assert "Base vs Sent 0.000 (fallback threshold)" in fallen.numbers
    assert "1 pair(s) left out of the verdict: a threshold fell back to 0.5" in fallen.note
    every = cross({("base", "sent"): 0.0}, fallback={("base", "sent")})
    assert only(fd.cross_method_deccons_low(every)).verdict == INCONCLUSIVE


def test_cross_method_deccons_without_a_table_or_cross_rows_is_not_testable():
    assert "no consistency table" in only(fd.cross_method_deccons_low(store())).note
    intra_only = cross({}, decoys=True)  # the decoy intra row only
    f = only(fd.cross_method_deccons_low(intra_only))
    assert f.verdict == NOT_TESTABLE and "fewer than two estimators of one grain" in f.note


# --- spread over draws ---------------------------------------------------------------------------


def draws(setups: dict[str, list[tuple[int, float]]], std=None):
    """Base's pooled intra rows, one per (setup, seed) with its IoU_cons (DecCons 0.8 + IoU/10),
    a std row per setup, and decoys: Margin's rows and a per-relation row with IoU_cons 0."""
    out = []
    for setup, values in setups.items():
        for seed, iou in values:
            common = {"kind": "intra", "setup_b": setup, "estimator_b": "base", "seed": seed,
                      "iou_cons": iou, "dec_cons": 0.8 + iou / 10}  # fmt: skip
            out += [
                row(**common, estimator_a="base"),
                row(**{**common, "iou_cons": 0.0}, estimator_a="margin"),
                row(**{**common, "iou_cons": 0.0}, estimator_a="base", relation_id="P1"),
            ]
        if std is not None:
            out.append(row(kind="intra", setup_b=setup, estimator_a="base", estimator_b="base",
                           statistic="std", iou_cons=std, n=None, n_seeds=len(values)))  # fmt: skip
    return store(consistency=pl.DataFrame(out, schema=SCHEMA))


def test_a_range_over_draws_above_two_points_holds_and_one_of_two_points_does_not():
    # Zhao et al.'s own derived numbers: shuffled options 0.39–0.43 (range 0.04), typo 0.54–0.56 (0.02)
    wide = only(fd.consistency_varies_over_draws(draws({"typo": [(4, 0.40), (44, 0.39), (99, 0.43)]}, 0.02)))
    assert wide.subject == "IoU_cons range over draws, typo"
    assert (wide.verdict, round(wide.value, 10), wide.n) == (HOLDS, 0.04, 30)
    assert wide.numbers == (
        "IoU_cons range 0.040 over 3 draws (seed 4: 0.400, seed 44: 0.390, seed 99: 0.430); std 0.020; "
        "DecCons range 0.004"
    )
    narrow = only(fd.consistency_varies_over_draws(draws({"typo": [(4, 0.54), (44, 0.55), (99, 0.56)]})))
    # 0.56 − 0.54 is 0.020000000000000018 in floating point: still "at most 0.02"
    assert narrow.verdict == FAILS and "std n/a" in narrow.numbers


def test_every_drawn_setup_present_is_judged_and_undefined_draws_are_inconclusive():
    found = fd.consistency_varies_over_draws(
        draws({"typo": [(4, 0.5), (44, math.nan), (99, math.nan)], "context-1shot": [(13, 0.7)],
               "extra-space": [(4, 0.6), (44, 0.6)], "context-fixed": [(None, 0.9)]})
    )  # fmt: skip
    assert [f.subject.split(", ")[1] for f in found] == ["typo", "extra-space", "context-1shot"]
    typo = only(found, "typo")
    assert typo.verdict == INCONCLUSIVE and typo.note == "IoU_cons undefined on 2 draw(s)"
    assert only(found, "extra-space").verdict == FAILS  # range 0
    shot = only(found, "context-1shot")
    assert shot.verdict == NOT_TESTABLE and shot.note.startswith("one draw only (seed 13): the context")


def test_draws_without_a_table_a_typo_or_a_second_seed_are_not_testable():
    assert "no consistency table" in only(fd.consistency_varies_over_draws(store())).note
    one = only(fd.consistency_varies_over_draws(draws({"typo": [(4, 0.5)]})))
    assert one.verdict == NOT_TESTABLE and one.note.startswith("one draw only (seed 4)")
    assert "--perturbation-seeds 4,44,99" in one.note
    none = only(fd.consistency_varies_over_draws(draws({"extra-space": [(4, 0.5)]})), "typo")
    assert none.verdict == NOT_TESTABLE and "no typo variants were scored" in none.note


def test_the_papers_derived_numbers_say_where_they_come_from():
    far = fd.CLAIMS["consistency_far_from_one"].number
    assert "typo 0.54–0.56, one-shot 0.80–0.82" in far.text and "around 40%" in far.text
    assert "derived from the authors' released per-question decisions" in far.text
    assert far.model.startswith("Llama-3.2-1B-Instruct, MMLU") and far.effect is None
    low = fd.CLAIMS["cross_method_deccons_low"].number
    assert '"as low as 7%"' in low.text and "0.057" in low.text and "0.184" in low.text
