"""Confidence from generated answers (kcal_pipeline/estimation/generation.py), by hand on a
constructed set of responses: two questions, the second with a tie between two clusters. The
single-turn methods alone and through the entry point (estimate_generations); the prompted methods
are in test_prompted_estimators.py."""

import math

import polars as pl
import pytest

from kcal_pipeline.estimation.answer_matching import AnswerIndex
from kcal_pipeline.estimation.generation import (
    GENERATION_ESTIMATORS,
    check_responses,
    estimate_generations,
    knowledge_coverage,
    multi_answer,
)

E = math.exp
# instance, sample (0 = greedy), response, logprob_sum, n_scored, cluster, correct
ROWS = [
    ("q1", 0, "Martin Perl", -0.5, 2, "Q1", True),
    ("q1", 1, "Martin Perl", -0.5, 2, "Q1", True),
    ("q1", 2, "Martin Perl", -0.5, 2, "Q1", True),  # the same string again: counts once in Sem Entropy
    ("q1", 3, "Frederick Reines", -1.0, 3, "Q2", True),
    ("q1", 4, "Einstein", -2.0, 1, "Q9", False),
    ("q2", 0, "dunno", -3.0, 2, "text:dunno", False),
    ("q2", 1, "dunno", -3.0, 2, "text:dunno", False),
    ("q2", 2, "Lyon", -3.0, 1, "Q7", True),
]
COLUMNS = ["instance_id", "sample", "response", "logprob_sum", "n_scored", "cluster", "correct"]


# The names that make the matcher give ROWS' clusters.
INDEXES = {
    "q1": AnswerIndex({"Q1": ["Martin Perl"], "Q2": ["Frederick Reines"]}, {"Q9": ["Einstein"]}),
    "q2": AnswerIndex({"Q7": ["Lyon"]}),
}


def responses(rows=ROWS) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


def generations(rows=ROWS) -> pl.DataFrame:
    """ROWS as the "answer" prompt's generations rows (unmatched: no cluster, no correct)."""
    return (
        responses(rows)
        .drop("cluster", "correct")
        .with_columns(prompt=pl.lit("answer"), p_true=pl.lit(None, pl.Float64))
    )


def plogp(*masses):
    total = sum(masses)
    return sum(m / total * math.log(m / total) for m in masses)


# Per estimator: {instance: (predicted cluster, correct, confidence)}, worked out by hand.
EXPECTED = {
    "prob_entropy": {"q1": ("Q1", True, (-0.5 - 0.5 - 1.0 - 2.0) / 4), "q2": ("text:dunno", False, -3.0)},
    "nprob_entropy": {
        "q1": ("Q1", True, (-0.25 - 0.25 - 1.0 / 3 - 2.0) / 4),
        "q2": ("text:dunno", False, (-1.5 - 3.0) / 2),
    },
    "sem_entropy": {
        "q1": ("Q1", True, plogp(E(-0.5), E(-1.0), E(-2.0))),  # distinct strings only
        "q2": ("text:dunno", False, math.log(0.5)),
    },
    "perplexity": {"q1": ("Q1", True, E(-0.25)), "q2": ("text:dunno", False, E(-1.5))},
    "consis": {"q1": ("Q1", True, 2 / 4), "q2": ("text:dunno", False, 1 / 2)},
    # ŷ = argmax SCA_0; q2's two clusters tie at e^-3/2: the smaller name, Q7, wins.
    "gen_sca_tau0": {"q1": ("Q1", True, (2 * E(-0.5) + E(-1.0) + E(-2.0)) / 4), "q2": ("Q7", True, E(-3.0))},
    "gen_snca_tau0": {
        "q1": ("Q1", True, 2 * E(-0.5) / (2 * E(-0.5) + E(-1.0) + E(-2.0))),
        "q2": ("Q7", True, 0.5),
    },
    "gen_sfca_tau0": {"q1": ("Q1", True, 2 / 4), "q2": ("Q7", True, 1 / 2)},
}


def as_dict(frame: pl.DataFrame) -> dict:
    return {
        r["instance_id"]: (r["predicted_id"], r["correct"], r["confidence"])
        for r in frame.iter_rows(named=True)
    }


def assert_close(got: dict, expected: dict):
    assert got.keys() == expected.keys()
    for key, (cluster, correct, confidence) in expected.items():
        assert got[key][:2] == (cluster, correct), key
        assert got[key][2] == pytest.approx(confidence, rel=1e-12, abs=1e-15), key


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_estimator_by_hand(name):
    got = GENERATION_ESTIMATORS[name].fn({"answer": check_responses(responses())})
    assert_close(as_dict(got), EXPECTED[name])


def test_every_single_turn_estimator_has_a_hand_computed_case():
    single_turn = {name for name, spec in GENERATION_ESTIMATORS.items() if spec.prompts == ("answer",)}
    assert single_turn == set(EXPECTED)


def test_the_entry_point_matches_the_responses_and_gives_the_same_estimates():
    result = estimate_generations(generations(), INDEXES)
    for name, expected in EXPECTED.items():
        got = result.estimates.filter(pl.col("estimator") == name)
        assert got["refusal"].null_count() == got.height, name
        assert_close(as_dict(got), expected)


def test_the_entry_point_returns_each_answer_matched_once_for_the_matches_table():
    """The matches the estimators used are the generation_matches table's rows: every answer row,
    with its status, entity and cluster as ROWS give them; without answer rows, none."""
    matches = estimate_generations(generations(), INDEXES).matches
    rows = matches.iter_rows(named=True)
    got = {(r["instance_id"], r["sample"]): (r["cluster"], r["correct"]) for r in rows}
    assert got == {(row[0], row[1]): (row[5], row[6]) for row in ROWS}
    assert set(matches["status"]) <= {"correct", "wrong_known_entity", "unmatched"}
    assert matches.filter(pl.col("correct"))["status"].unique().to_list() == ["correct"]
    no_answers = generations().with_columns(prompt=pl.lit("verb")).head(0)
    assert estimate_generations(no_answers, INDEXES).matches.is_empty()


def test_without_prompted_rows_the_prompted_estimators_are_skipped_and_say_why():
    status = estimate_generations(generations(), INDEXES).status
    ran = status.filter(pl.col("status") == "ran")
    assert ran["estimator"].to_list() == [n for n in GENERATION_ESTIMATORS if n in EXPECTED]
    assert (ran["rows"] == 2).all() and (ran["answered"] == 2).all() and (ran["refusals"] == "").all()
    verb = status.filter(pl.col("estimator") == "verb").row(0, named=True)
    assert verb["status"] == "skipped" and verb["rows"] == 0
    assert verb["reason"] == "no 'verb' rows: the generations were made without the prompted methods"


def test_the_threshold_drops_samples_below_it():
    """τ = 0.2: Einstein (e^-2 ≈ 0.135) and all of q2 (e^-3 ≈ 0.050) fall below it."""
    got = {name: as_dict(frame) for name, frame in multi_answer(check_responses(responses()), 0.2).items()}
    kept = 2 * E(-0.5) / 4 + E(-1.0) / 4
    assert_close(got["sca"], {"q1": ("Q1", True, kept), "q2": ("Q7", True, 0.0)})
    assert_close(got["snca"], {"q1": ("Q1", True, 2 * E(-0.5) / 4 / kept), "q2": ("Q7", True, 0.0)})
    assert_close(got["sfca"], {"q1": ("Q1", True, 0.5), "q2": ("Q7", True, 0.0)})


def test_estimates_do_not_depend_on_row_order():
    shuffled = generations().sample(fraction=1.0, shuffle=True, seed=7)
    assert estimate_generations(shuffled, INDEXES).estimates.equals(
        estimate_generations(generations(), INDEXES).estimates
    )


def test_the_estimates_table_has_one_row_per_instance_and_estimator_with_its_output_kind():
    table = estimate_generations(generations(), INDEXES).estimates
    assert table.height == 2 * len(EXPECTED)
    kinds = dict(table.select("estimator", "output_kind").unique().iter_rows())
    assert kinds["prob_entropy"] == "score" and kinds["perplexity"] == "probability"


def test_knowledge_coverage_by_hand():
    """τ = 0.1: q1's gold clusters Q1 (SCA_0 = 2e^-0.5/4 ≈ 0.30) and Q2 (e^-1/4 ≈ 0.09) — one of its
    two golds covered; q2's Q7 (e^-3/2 ≈ 0.02) — none of one; q3 has no responses at all."""
    golds = pl.DataFrame({"instance_id": ["q1", "q2"], "n_gold": [2, 1]})
    got = knowledge_coverage(responses(), golds, tau=0.1)
    assert got.rows() == [("q1", 2, 0.5), ("q2", 1, 0.0)]


LOG = math.log  # a(r) = exp(log p): exactly p for p = 1/2 and 1/4 (checked where it matters)


def test_sem_entropy_ignores_a_greedy_answer_that_no_sample_gave():
    """Semantic entropy is over the sampled answers' clusters only: the greedy answer adds none."""
    rows = [
        ("q3", 0, "Paris", LOG(0.5), 1, "Qp", True),  # greedy: predicts Qp, but is not in S
        ("q3", 1, "Lyon", LOG(0.5), 1, "Ql", False),
        ("q3", 2, "Nice", LOG(0.25), 1, "Qn", False),
    ]
    got = GENERATION_ESTIMATORS["sem_entropy"].fn({"answer": check_responses(responses(rows))})
    # S's masses: Ql 0.5, Qn 0.25 → p = 2/3, 1/3 → C = (2/3)·ln(2/3) + (1/3)·ln(1/3) ≈ −0.6365
    # (counting the greedy Qp's 0.5 too would give p = 0.4, 0.4, 0.2 → C ≈ −1.0549)
    assert_close(as_dict(got), {"q3": ("Qp", True, 2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))})


def test_a_sample_exactly_at_the_threshold_is_not_above_it():
    """SCA / SNCA / SFCA keep a sample only when a(r) > τ: at a(r) = τ it is dropped."""
    rows = [
        ("q3", 0, "Paris", LOG(0.5), 1, "Qp", True),
        ("q3", 1, "Paris", LOG(0.5), 1, "Qp", True),
        ("q3", 2, "Paris, France", LOG(0.25), 2, "Qp", True),  # a = τ
        ("q3", 3, "Lyon", LOG(0.25), 1, "Ql", False),  # a = τ
    ]
    assert pl.Series([LOG(0.25)]).exp().to_list() == [0.25]  # the premise: a(r) is τ exactly
    got = {
        name: as_dict(frame) for name, frame in multi_answer(check_responses(responses(rows)), 0.25).items()
    }
    # N = 3; SCA_0: Qp (0.5 + 0.25)/3 = 0.25, Ql 0.25/3 → ŷ = Qp. τ = 0.25 keeps only the 0.5:
    # SCA = 0.5/3 = 1/6; SNCA = (1/6)/(1/6) = 1; SFCA = 1/3 (with ≥: 1/3, 0.75 and 2/3)
    assert_close(got["sca"], {"q3": ("Qp", True, 1 / 6)})
    assert_close(got["snca"], {"q3": ("Qp", True, 1.0)})
    assert_close(got["sfca"], {"q3": ("Qp", True, 1 / 3)})


def test_knowledge_coverage_does_not_cover_a_gold_exactly_at_the_threshold():
    """A gold cluster is covered only when its SCA_0 exceeds τ (>): at SCA_0 = τ it is not."""
    rows = [
        ("q3", 0, "Paris", LOG(0.5), 1, "Qp", True),
        ("q3", 1, "Paris", LOG(0.5), 1, "Qp", True),
        ("q3", 2, "Paris", LOG(0.5), 1, "Qp", True),
        ("q3", 3, "Lyon", LOG(0.5), 1, "Ql", True),
        ("q3", 4, "Nice", LOG(0.25), 1, "Qn", False),
    ]
    golds = pl.DataFrame({"instance_id": ["q3"], "n_gold": [2]})
    assert pl.Series([LOG(0.5)]).exp().to_list() == [0.5]  # the premise: SCA_0(Ql) is τ exactly
    # N = 4; SCA_0: Qp (0.5 + 0.5)/4 = 0.25 > τ, Ql 0.5/4 = 0.125 = τ (not covered) → 1 of 2 golds
    got = knowledge_coverage(responses(rows), golds, tau=0.125)
    assert got.rows() == [("q3", 2, 0.5)]


@pytest.mark.parametrize(
    ("rows", "drop", "message"),
    [
        (ROWS, "cluster", r"responses: missing column\(s\) \['cluster'\]"),
        ([r for r in ROWS if not (r[0] == "q2" and r[1] == 0)], None, "instance 'q2' has 0 greedy answer"),
        (
            [r for r in ROWS if not (r[0] == "q2" and r[1] > 0)],
            None,
            "instance 'q2' has 1 greedy answer.* and 0 sampled",
        ),
        ([(*ROWS[0][:4], 0, *ROWS[0][5:]), *ROWS[1:]], None, "n_scored 0 of instance 'q1' is not positive"),
    ],
)
def test_bad_responses_are_refused_naming_the_instance_or_column(rows, drop, message):
    frame = responses(rows)
    with pytest.raises(ValueError, match=message):
        check_responses(frame.drop(drop) if drop else frame)
