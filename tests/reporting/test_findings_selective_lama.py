"""Selective-LAMA's claims (seed 002) on hand-made tables: Token against the best other function
chosen on dev (Table 2), RC-AUC against prediction coverage (Table 1), Gap on easy and TemplateDiff
on hard relations (Table 3), predictor against estimator (Table 5), Sent and Reranking against
Token, and the specs."""

import dataclasses
import math

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
from kcal_pipeline.reporting.findings.selective_lama_blocks import (
    RelationBlocks,
    group_contrast,
    pearson_by,
    prediction_coverage,
    relation_blocks,
    side_by_side,
)
from tests.reporting.test_findings import MODEL, only, rows, store

ALTERNATE = [k % 2 == 0 for k in range(20)]  # i0 right, i1 wrong, …: 10 of 20
RANKED = [0.9 if c else 0.1 for c in ALTERNATE]  # every right answer above every wrong one
REVERSED = [0.1 if c else 0.9 for c in ALTERNATE]
# AURC = mean over k of the error rate among the k most confident. Right answers first: no error up
# to k = 10, then (k − 10)/k. Wrong answers first: 1 up to k = 10, then 10/k.
AURC_RANKED = sum((k - 10) / k for k in range(11, 21)) / 20
AURC_REVERSED = (10 + sum(10 / k for k in range(11, 21))) / 20


def heads(*relations: str) -> pl.DataFrame:
    """Each relation's headline template <relation>:c0."""
    return pl.DataFrame(
        {
            "relation_id": list(relations),
            "template_id": [f"{r}:c0" for r in relations],
            "rank": [0] * len(relations),
            "kind": ["curated"] * len(relations),
        }
    )


def scores(estimator, correct, confidence, relation="P1", **kw):
    return rows(estimator, correct, confidence, output_kind="score", relation=relation,
                template=f"{relation}:c0", **kw)  # fmt: skip


def dev(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(split=pl.lit("dev"))


def tables(test: list[pl.DataFrame], on_dev: list[pl.DataFrame] = ()) -> StoreTables:
    test_rows = pl.concat(test)
    dev_rows = pl.concat([dev(f) for f in on_dev]) if on_dev else pl.DataFrame()
    relations = sorted(set(test_rows["relation_id"].to_list()))
    return StoreTables(MODEL, estimates=test_rows, dev_estimates=dev_rows, templates=heads(*relations))


# --- the blocks of a two-stage resample -----------------------------------------------------------


def test_a_two_stage_resample_is_cut_into_one_block_per_drawn_relation():
    relation = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    sizes = np.bincount(relation)
    plan = resample_plan(np.array(["A"] * 3 + ["B"] * 5), 200, 0)[0].resamples
    blocks, owner = relation_blocks(plan, relation, sizes)
    assert np.array_equal(np.bincount(owner), np.full(200, 2))  # two relations drawn per resample
    twice = 0
    for b in range(200):
        mine = [blocks.rows(i) for i in np.flatnonzero(owner == b)]
        assert np.array_equal(np.concatenate(mine), plan.rows(b))  # the same rows, in draw order
        drawn = [int(relation[m[0]]) for m in mine]
        assert all((relation[m] == d).all() and m.size == sizes[d] for m, d in zip(mine, drawn, strict=True))
        twice += drawn[0] == drawn[1]
    assert 0 < twice < 200  # some resamples draw one relation twice: two blocks of it


def test_rows_that_are_not_a_relations_block_are_refused():
    relation = np.array([0, 0, 1, 1])
    bad = fd.Resamples(np.array([[0, 2, 1, 3]], dtype=np.int32), np.array([4]))
    with pytest.raises(ValueError, match="resample 0: rows at 0 are not one drawn relation's block"):
        relation_blocks(bad, relation, np.bincount(relation))


# --- Sent and Reranking against Token ------------------------------------------------------------


def test_sent_and_reranking_against_token_by_hand():
    # 4 instances, right on i0, i1. Ranked first: risks 0, 0, 1/3, 1/2 → AURC 5/24. Ranked last:
    # risks 1, 1, 2/3, 1/2 → AURC 19/24. Sent last, Token first: 19/24 − 5/24 = 7/12.
    correct = [True, True, False, False]
    est = pl.concat(
        [
            scores("token", correct, [-0.1, -0.2, -3.0, -4.0]),
            scores("sent", correct, [-4.0, -3.0, -0.2, -0.1]),
            scores("reranking", correct, [2.0, 1.5, 1.0, 0.5]),
        ]
    )
    found = fd.sent_reranking_worse_than_token(store(estimates=est))
    sent, rerank = only(found, "Sent"), only(found, "Reranking")
    assert sent.subject == "AURC(Sent) − AURC(Token)" and sent.value == pytest.approx(7 / 12)
    assert rerank.value == 0.0 and rerank.n == 4
    assert sent.numbers.startswith(
        f"ΔAURC {fd.fmt_ci(sent.value, sent.ci_low, sent.ci_high)} on the 4 instances"
    )
    own = "each on its own instances (the paper's convention): Sent 0.792 (n = 4), Token 0.208 (n = 4)"
    assert own in sent.numbers


@pytest.mark.parametrize(
    ("token", "sent", "verdict"),
    [(RANKED, REVERSED, HOLDS), (REVERSED, RANKED, FAILS), (RANKED, RANKED, INCONCLUSIVE)],
)
def test_sent_against_token_on_twenty_instances(token, sent, verdict):
    est = pl.concat([scores("token", ALTERNATE, token), scores("sent", ALTERNATE, sent)])
    f = only(fd.sent_reranking_worse_than_token(store(estimates=est)), "Sent")
    assert f.verdict == verdict and f.n == 20


def test_the_comparison_is_on_the_instances_token_is_defined_on():
    est = pl.concat([scores("token", ALTERNATE[:10], RANKED[:10]), scores("sent", ALTERNATE, REVERSED)])
    found = fd.sent_reranking_worse_than_token(store(estimates=est))
    assert only(found, "Sent").n == 10
    missing = only(found, "Reranking")
    assert missing.verdict == NOT_TESTABLE and "no Reranking estimates" in missing.note


def test_without_token_neither_comparison_is_testable():
    found = fd.sent_reranking_worse_than_token(store(estimates=scores("sent", ALTERNATE, RANKED)))
    assert len(found) == 2
    assert all(
        f.verdict == NOT_TESTABLE and "answer-conditional" in f.note and "stage selective" in f.note
        for f in found
    )


# --- the building blocks ---------------------------------------------------------------------------


def test_prediction_coverage_is_the_share_of_the_five_most_frequent_predictions():
    # block 0: option 0 three times, options 1 … 7 once: the top five cover 3 + 4 = 7 of 10.
    # block 1: rows 8, 9 (options 6, 7): at most five distinct, so all of them.
    predicted = np.array([0, 0, 0, 1, 2, 3, 4, 5, 6, 7])
    blocks = fd.Resamples(
        np.array([list(range(10)), [8, 9] + [fd.PAD] * 8], dtype=np.int32), np.array([10, 2])
    )
    assert prediction_coverage(predicted, blocks) == pytest.approx([0.7, 1.0])


def test_pearson_and_the_contrast_of_two_groups_per_resample():
    x = np.array([1.0, 2, 3] * 3)
    y = np.array([2.0, 4, 6, 3, 2, 1, 5, 5, 5])
    group = np.repeat([0, 1, 2], 3)
    r = pearson_by(x, y, group, 3)
    assert r[:2] == pytest.approx([1.0, -1.0]) and math.isnan(r[2])  # y constant in group 2
    first = np.array([True, True, False, False, True, True])
    # group 0: mean(1, 3) − mean(10) = −8; group 1: mean(5, 7) − mean(20) = −14; group 2: none
    values = np.array([1.0, 3, 10, 20, 5, 7])
    contrast = group_contrast(values, first, np.array([0, 0, 0, 1, 1, 1]), 3)
    assert contrast[:2] == pytest.approx([2 - 10, 6 - 20]) and math.isnan(contrast[2])  # group 2 empty


def test_the_sample_blocks_are_each_relation_once():
    wide = side_by_side(
        pl.concat([scores("sent", [True, False], 0.5, "P2"), scores("sent", [True] * 3, 0.5, "P1")]),
        ["sent"],
    )
    blocks = RelationBlocks.of(wide)
    assert blocks.names.tolist() == ["P1", "P2"]
    assert [blocks.sample.rows(k).tolist() for k in range(2)] == [[0, 1, 2], [3, 4]]
    assert blocks.owner.max() == fd.N_RESAMPLES - 1 and set(blocks.relation.tolist()) == {0, 1}


# --- Token is not always the best (Table 2) --------------------------------------------------------


def test_the_comparator_is_chosen_on_dev_and_judged_on_test():
    # Dev: Sent ranks its answers (lowest AURC), Gap reverses them: Sent is the comparator. Test: Sent
    # reverses, Gap and Token rank: AURC(Sent) − AURC(Token) = AURC_REVERSED − AURC_RANKED > 0 although
    # Gap ties Token on test. Token answers i0 … i9 only on test: its own AURC there is listed.
    t = tables(
        [
            scores("token", ALTERNATE, RANKED),
            scores("sent", ALTERNATE, REVERSED),
            scores("gap", ALTERNATE, RANKED),
        ],
        [
            scores("token", ALTERNATE, REVERSED),
            scores("sent", ALTERNATE, RANKED),
            scores("gap", ALTERNATE, REVERSED),
        ],
    )
    diff, per_relation = fd.selective_lama_best_function(t)
    assert diff.subject == "AURC(Sent) − AURC(Token)" and diff.verdict == FAILS
    assert diff.value == pytest.approx(AURC_REVERSED - AURC_RANKED) and diff.n == 20
    assert f"Sent {fd.fmt(AURC_RANKED)}, Gap {fd.fmt(AURC_REVERSED)}" in diff.numbers  # the dev AURCs
    assert per_relation.verdict == DESCRIPTIVE
    # on test Token and Gap tie at the lowest: the paper's order breaks it (Token first)
    assert per_relation.numbers.startswith("lowest: 1 distinct function(s) over 1 relation(s): P1 Token")


def test_a_function_better_than_token_holds_and_the_best_differs_by_relation():
    # P1: Gap ranks, Token reverses; P2 the other way round. Dev as test. Pooled, both are equally
    # bad: the paired difference is inconclusive or not, but each relation has its own winner.
    p1 = [scores("token", ALTERNATE, REVERSED), scores("gap", ALTERNATE, RANKED)]
    t = tables(p1, p1)
    diff, _ = fd.selective_lama_best_function(t)
    assert diff.subject == "AURC(Gap) − AURC(Token)" and diff.verdict == HOLDS
    assert diff.value == pytest.approx(AURC_RANKED - AURC_REVERSED)
    p2 = [scores("token", ALTERNATE, RANKED, "P2"), scores("gap", ALTERNATE, REVERSED, "P2")]
    _, per_relation = fd.selective_lama_best_function(tables(p1 + p2, p1 + p2))
    assert per_relation.numbers.startswith(
        f"lowest: 2 distinct function(s) over 2 relation(s): P1 Gap (Token {fd.fmt(AURC_REVERSED)}, Gap "
        f"{fd.fmt(AURC_RANKED)}; n = 20); P2 Token"
    )


def test_without_token_or_dev_rows_the_best_function_is_not_testable():
    no_token = fd.selective_lama_best_function(tables([scores("gap", ALTERNATE, RANKED)]))
    assert only(no_token).verdict == NOT_TESTABLE and "answer-conditional" in only(no_token).note
    no_dev = fd.selective_lama_best_function(
        tables([scores("token", ALTERNATE, RANKED), scores("gap", ALTERNATE, RANKED)])
    )
    assert only(no_dev).verdict == NOT_TESTABLE and "no dev rows" in only(no_dev).note


# --- RC-AUC against prediction coverage (Table 1) ----------------------------------------------------


def ranked_first(n_right: int, n: int) -> tuple[list[bool], list[float]]:
    correct = [k < n_right for k in range(n)]
    return correct, [0.9 if c else 0.1 for c in correct]


def aurc_ranked(n_right: int, n: int) -> float:
    """The right answers first: no error up to n_right, then (j − n_right)/j."""
    return sum((j - n_right) / j for j in range(n_right + 1, n + 1)) / n


def test_the_coverage_correlations_by_hand():
    # P1: every prediction option 0 (Cov^P 1), 6 of 10 right. P2: ten different options (Cov^P
    # 5/10), 1 right. P3: option 0 three times, seven others once (Cov^P 7/10), 3 right. Accuracy
    # (0.6, 0.1, 0.3) = Cov^P − 0.4: ρ(accuracy, Cov^P) = 1. Right answers ranked first.
    layout = {"P1": ([0] * 10, 6), "P2": (list(range(10)), 1), "P3": ([0, 0, 0, *range(1, 8)], 3)}
    est = []
    for relation, (predicted, right) in layout.items():
        correct, confidence = ranked_first(right, 10)
        for e in ("sent", "dropout_var"):
            est.append(scores(e, correct, confidence, relation, predicted=predicted))
    found = fd.rcauc_less_template_biased(tables(est))
    sent = only(found, "AURC(Sent)")
    neg_aurc = [-aurc_ranked(k, 10) for k in (6, 1, 3)]
    expected = float(np.corrcoef(neg_aurc, [1.0, 0.5, 0.7])[0, 1]) - 1.0
    assert sent.subject == "ρ(−AURC(Sent), Cov^P) − ρ(accuracy, Cov^P)"
    assert sent.value == pytest.approx(expected) and sent.n == 30
    assert sent.ci_low <= sent.value <= sent.ci_high
    assert "ρ(accuracy, Cov^P) 1.000 over 3 relations" in sent.numbers
    assert f"P2 0.100/{fd.fmt(aurc_ranked(1, 10))}/0.500" in sent.numbers
    dropout_var = only(found, "DropoutVar")
    assert dropout_var.verdict == DESCRIPTIVE and "the paper's exception" in dropout_var.note
    assert dropout_var.value == pytest.approx(expected)
    answer_coverage = only(found, "Cov^A")
    assert answer_coverage.verdict == NOT_TESTABLE and "gold option" in answer_coverage.note


def biased_and_unbiased(biased_right_first: bool) -> StoreTables:
    """Four relations that always predict option 0 (Cov^P 1) and four with twenty different
    predictions (Cov^P < 1 in every resample). One kind is right on 10 of 20 with its confidence
    reversed, the other on 4 of 20 with its right answers ranked first."""
    half = (ALTERNATE, REVERSED)
    few = ranked_first(4, 20)
    biased, unbiased = (few, half) if biased_right_first else (half, few)
    est = [scores("sent", *biased, f"B{k}", predicted=[0] * 20) for k in range(4)]
    est += [scores("sent", *unbiased, f"U{k}", predicted=list(range(20))) for k in range(4)]
    return tables(est)


def test_rc_auc_less_tied_to_prediction_coverage_than_accuracy_holds():
    # biased relations: more right (accuracy up with Cov^P) but badly ranked (−AURC down with it)
    f = only(fd.rcauc_less_template_biased(biased_and_unbiased(False)), "Sent")
    assert f.verdict == HOLDS and f.ci_high < 0 and f.value == pytest.approx(-2.0)


def test_rc_auc_more_tied_to_prediction_coverage_than_accuracy_does_not_hold():
    # biased relations: fewer right (accuracy down with Cov^P) but well ranked (−AURC up with it)
    f = only(fd.rcauc_less_template_biased(biased_and_unbiased(True)), "Sent")
    assert f.verdict == FAILS and f.ci_low > 0 and f.value == pytest.approx(2.0)


def test_too_few_relations_or_one_coverage_is_not_testable():
    two = [scores("sent", ALTERNATE, RANKED, r, predicted=list(range(20))) for r in ("P1", "P2")]
    f = only(fd.rcauc_less_template_biased(tables(two)), "Sent")
    assert f.verdict == NOT_TESTABLE and "answers in 2 relation(s)" in f.note
    same = [scores("sent", ALTERNATE[: 8 + 2 * k], RANKED[: 8 + 2 * k], f"P{k}") for k in range(3)]
    f = only(fd.rcauc_less_template_biased(tables(same)), "Sent")
    assert f.verdict == NOT_TESTABLE and "Cov^P, accuracy or AURC is the same in every relation" in f.note


# --- Gap on easy relations, TemplateDiff on hard ones (Table 3) ---------------------------------------


def table_3(easy: str, hard: str, middle: str | None = None) -> StoreTables:
    """Dev accuracy (Gap's rows): `easy` 8 of 10, `hard` 2 of 10, `middle` 5 of 10. Test: Gap ranks
    its answers where TemplateDiff and Token reverse them in "E", TemplateDiff ranks where Gap and
    Token reverse in "H"; the middle relation, if any, like "E"."""
    test, on_dev = [], []
    for relation, right in ((easy, 8), (hard, 2), (middle, 5)):
        if relation is None:
            continue
        on_dev.append(scores("gap", [k < right for k in range(10)], 0.5, relation))
        gap, td = (RANKED, REVERSED) if relation != "H" else (REVERSED, RANKED)
        test += [
            scores("token", ALTERNATE, REVERSED, relation),
            scores("gap", ALTERNATE, gap, relation),
            scores("template_diff", ALTERNATE, td, relation),
        ]
    return tables(test, on_dev)


def test_gap_wins_on_the_easy_relation_and_templatediff_on_the_hard_one():
    # E (easy): ΔGap = AURC_RANKED − AURC_REVERSED, ΔTD = 0; H (hard): ΔGap = 0, ΔTD the same as
    # E's ΔGap. Both contrasts = AURC_RANKED − AURC_REVERSED < 0 in every resample with both drawn.
    gap, td = fd.gap_easy_templatediff_hard(table_3("E", "H"))
    assert gap.subject == "mean over easy − over hard relations of AURC(Gap) − AURC(Token)"
    assert td.subject == "mean over hard − over easy relations of AURC(TemplateDiff) − AURC(Token)"
    for f in (gap, td):
        assert f.verdict == HOLDS and f.value == pytest.approx(AURC_RANKED - AURC_REVERSED) and f.n == 40
    assert "median dev accuracy 0.500, 1 easy and 1 hard relations" in gap.numbers
    assert f"E dev accuracy 0.800 (easy): ΔGap {fd.fmt_signed(AURC_RANKED - AURC_REVERSED)}, ΔTD +0.000" in (
        gap.numbers
    )
    # the paper's reading: the relations Gap wins (E) against those Token wins (H, a tie), accuracy 1/2
    assert "Gap wins 0.500 (1) vs Token wins 0.500 (1)" in gap.numbers


def test_gap_winning_on_the_hard_relation_does_not_hold_and_the_median_relation_is_left_out():
    gap, td = fd.gap_easy_templatediff_hard(table_3("H", "E", middle="M"))
    for f in (gap, td):
        assert f.verdict == FAILS and f.value == pytest.approx(AURC_REVERSED - AURC_RANKED)
        assert f.note == "left out, at the median: M" and f.n == 40


def test_without_templatediff_or_dev_rows_table_3_is_not_testable():
    t = table_3("E", "H")
    no_td = dataclasses.replace(t, estimates=t.estimates.filter(pl.col("estimator") != "template_diff"))
    found = fd.gap_easy_templatediff_hard(no_td)
    assert len(found) == 2 and all(f.verdict == NOT_TESTABLE and "TemplateDiff" in f.note for f in found)
    found = fd.gap_easy_templatediff_hard(dataclasses.replace(t, dev_estimates=pl.DataFrame()))
    assert all(f.verdict == NOT_TESTABLE and "median dev accuracy" in f.note for f in found)


# --- predictor against estimator (Table 5) -----------------------------------------------------------


def test_predictor_quality_is_not_testable_with_one_shared_prediction():
    f = only(fd.predictor_estimator_uncorrelated(tables([scores("gap", ALTERNATE, RANKED)])))
    assert f.verdict == NOT_TESTABLE
    assert "keep Base's prediction" in f.note and "here P@1 0.500 for every function" in f.note


# --- the specs -------------------------------------------------------------------------------------


def test_selective_lamas_claims_name_their_stages_sections_and_numbers():
    keys = [k for k, c in CLAIMS.items() if c.paper.seed == "002"]
    assert {k: (CLAIMS[k].stage, CLAIMS[k].where, CLAIMS[k].kind) for k in keys} == {
        "selective_lama_best_function": ("selective", "Abstract; §4.3, Table 2; §6", "difference"),
        "rcauc_less_template_biased": ("bear", "§4.2; §4.2, Table 1", "difference"),
        "gap_easy_templatediff_hard": ("selective", "§4.3; §4.3, Table 3", "difference"),
        "predictor_estimator_uncorrelated": ("selective", "§4.3; §4.3, Table 5; §6", "descriptive"),
        "sent_reranking_worse_than_token": ("selective", "§4.3, Table 2", "difference"),
    }
    best = CLAIMS["selective_lama_best_function"].number
    assert best.effect == pytest.approx(-0.008) and best.derived.startswith(".470 − .478, Gap − Token")
    assert "-0.247" in CLAIMS["rcauc_less_template_biased"].number.text
    assert all(CLAIMS[k].preconditions for k in keys)
