"""Selective-LAMA's claims (seed 002) on hand-made tables: the spread of accuracy and of 1 − AURC
over a relation's templates, Sent and Reranking against Token, and the best function's spec."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation.bootstrap import resample_plan
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import CLAIMS, FAILS, HOLDS, INCONCLUSIVE, NOT_TESTABLE, StoreTables
from kcal_pipeline.reporting.findings.selective_lama import relation_blocks
from tests.reporting.test_findings import MODEL, only, rows, store

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


# --- CV(1 − AURC) − CV(accuracy) -----------------------------------------------------------------


def curated(relations: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame(
        [(r, f"{r}:c{k}", k, "curated") for r, n in relations.items() for k in range(n)],
        schema={"relation_id": pl.String, "template_id": pl.String, "rank": pl.Int32, "kind": pl.String},
        orient="row",
    )


def base_on(relation, template, correct, confidence):
    return rows("base", correct, confidence, template=template, relation=relation)


def test_the_template_spread_by_hand():
    # P1, 4 instances. c0: right on i0, i1 (confidence 0.9, 0.8; wrong ones 0.2, 0.1): accuracy 1/2,
    # risks 0, 0, 1/3, 1/2 → AURC 5/24, 1 − AURC 19/24. c1: right on i0 only, ranked first: accuracy
    # 1/4, risks 0, 1/2, 2/3, 3/4 → AURC 23/48, 1 − AURC 25/48.
    # CV (population sd / mean) of (1/2, 1/4) = 1/3; of (38/48, 25/48) = (13/96)/(63/96) = 13/63.
    # P2: both templates alike → CV 0 for both. Mean over relations: (13/63 − 21/63)/2 = −4/63.
    p1 = [
        base_on("P1", "P1:c0", [True, True, False, False], [0.9, 0.8, 0.2, 0.1]),
        base_on("P1", "P1:c1", [True, False, False, False], [0.9, 0.1, 0.2, 0.3]),
    ]
    p2 = [base_on("P2", f"P2:c{k}", [True, False, True, False], [0.9, 0.1, 0.8, 0.2]) for k in (0, 1)]
    t = StoreTables(MODEL, estimates=pl.concat(p1 + p2), templates=curated({"P1": 2, "P2": 2}))
    f = only(fd.rcauc_less_template_biased(t))
    assert f.subject == "mean over relations: CV(1 − AURC) − CV(accuracy)"
    assert f.value == pytest.approx(-4 / 63) and f.n == 8
    assert f.ci_low <= f.value <= f.ci_high
    assert "per relation CV(1 − AURC) vs CV(accuracy): P1 0.206 vs 0.333, P2 0.000 vs 0.000" in f.numbers
    assert "over 2 relations with 2 templates" in f.numbers


ALTERNATE = [k % 2 == 0 for k in range(20)]
RANKED = [0.9 if c else 0.1 for c in ALTERNATE]  # every right answer above every wrong one
REVERSED = [0.1 if c else 0.9 for c in ALTERNATE]


@pytest.mark.parametrize(("confidence", "verdict"), [(RANKED, HOLDS), (REVERSED, FAILS)])
def test_a_template_whose_confidence_ranks_its_answers_varies_less_on_the_selective_score(
    confidence, verdict
):
    # c0 right everywhere: accuracy 1 = 1 − AURC. c1 right on half: 1 − AURC is above its accuracy
    # in every resample when its confidence puts the right answers first (the two templates' scores
    # closer: smaller CV), below it when it puts them last.
    est = pl.concat([base_on("P1", "P1:c0", [True] * 20, 0.9), base_on("P1", "P1:c1", ALTERNATE, confidence)])
    f = only(fd.rcauc_less_template_biased(StoreTables(MODEL, estimates=est, templates=curated({"P1": 2}))))
    assert f.verdict == verdict
    # accuracy (1, 1/2): CV 1/3. c1's risk at k: right answers first → 0 up to k = 10, then
    # (k − 10)/k; wrong answers first → 1 up to k = 10, then 10/k.
    if verdict == HOLDS:
        aurc = sum((k - 10) / k for k in range(11, 21)) / 20
    else:
        aurc = (10 + sum(10 / k for k in range(11, 21))) / 20
    cv = aurc / (2 - aurc)  # two values (1, x = 1 − AURC): sd (1 − x)/2, mean (1 + x)/2
    assert f.value == pytest.approx(cv - 1 / 3)


def test_a_confidence_unrelated_to_correctness_is_inconclusive():
    rng = np.random.default_rng(7)
    noise = rng.uniform(size=20).round(3).tolist()
    est = pl.concat([base_on("P1", "P1:c0", [True] * 20, 0.9), base_on("P1", "P1:c1", ALTERNATE, noise)])
    f = only(fd.rcauc_less_template_biased(StoreTables(MODEL, estimates=est, templates=curated({"P1": 2}))))
    assert f.verdict == INCONCLUSIVE and f.ci_low < 0 < f.ci_high


def test_a_relation_never_right_is_left_out_and_named_and_one_template_is_not_testable():
    est = pl.concat(
        [base_on("P1", "P1:c0", [True] * 20, 0.9), base_on("P1", "P1:c1", ALTERNATE, RANKED)]
        + [base_on("P2", f"P2:c{k}", [False] * 4, 0.5) for k in (0, 1)]
    )
    f = only(
        fd.rcauc_less_template_biased(
            StoreTables(MODEL, estimates=est, templates=curated({"P1": 2, "P2": 2}))
        )
    )
    assert f.note == "left out, no correct answer on any template: P2" and f.n == 20
    one = only(fd.rcauc_less_template_biased(store(estimates=base_on("P1", "P1:c0", ALTERNATE, RANKED))))
    assert (
        one.verdict == NOT_TESTABLE
        and "fewer than two curated templates" in one.note
        and "stage bear" in one.note
    )


def test_only_instances_every_template_scored_are_compared():
    # c1 lacks i19: the relation keeps i0 … i18 (19 instances)
    est = pl.concat(
        [base_on("P1", "P1:c0", [True] * 20, 0.9), base_on("P1", "P1:c1", ALTERNATE, RANKED).head(19)]
    )
    f = only(fd.rcauc_less_template_biased(StoreTables(MODEL, estimates=est, templates=curated({"P1": 2}))))
    assert f.n == 19


# --- Sent and Reranking against Token ------------------------------------------------------------


def scores(estimator, correct, confidence, **kw):
    return rows(estimator, correct, confidence, output_kind="score", **kw)


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


# --- the specs -------------------------------------------------------------------------------------


def test_selective_lamas_claims_name_their_stages_tables_and_what_the_abstract_says():
    keys = [k for k, c in CLAIMS.items() if c.paper.seed == "002"]
    assert sorted(keys) == [
        "rcauc_less_template_biased",
        "selective_lama_best_function",
        "sent_reranking_worse_than_token",
    ]
    assert {k: (CLAIMS[k].stage, CLAIMS[k].where) for k in keys} == {
        "selective_lama_best_function": ("selective", "Table 2; abstract"),
        "rcauc_less_template_biased": ("bear", "Table 1; abstract"),
        "sent_reranking_worse_than_token": ("selective", "Table 2"),
    }
    assert all(
        CLAIMS[k].number.text.startswith("no number available to kcal (only the abstract was accessible)")
        for k in keys
    )
    assert all(CLAIMS[k].preconditions for k in keys)
    assert "not always the best choice" in CLAIMS["selective_lama_best_function"].number.text
