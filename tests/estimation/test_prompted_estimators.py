"""The verbal and double-turn generation estimators (kcal_pipeline/estimation/prompted.py) by hand,
through the entry point (generation.estimate_generations), on a constructed generations frame:
three questions, every prompt, a few samples each."""

import polars as pl
import pytest

from kcal_pipeline.estimation.answer_matching import AnswerIndex
from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS, estimate_generations

INDEXES = {
    "q1": AnswerIndex({"Q1": ["Martin Perl"], "Q2": ["Frederick Reines"]}, {"Q9": ["Einstein"]}),
    "q2": AnswerIndex({"Q7": ["Lyon"]}, {"Q8": ["Paris"]}),
    "q3": AnswerIndex({"Q5": ["Mars"]}),
}
# instance, prompt, sample (0 = greedy), response, p_true (the p_true* prompts only)
ROWS = [
    # ŷ_ans: q1 Q1 (gold), q2 Q8 (a wrong known entity), q3 "text:venus" (unmatched)
    ("q1", "answer", 0, "Martin Perl", None),
    ("q1", "answer", 1, "Einstein", None),
    ("q2", "answer", 0, "Paris", None),
    ("q2", "answer", 1, "Lyon", None),
    ("q3", "answer", 0, "Venus", None),
    ("q3", "answer", 1, "Mars", None),
    # verb
    ("q1", "verb", 0, "Answer: Martin Perl\nConfidence: 80%", None),
    ("q1", "verb", 1, "Answer: Martin Perl\nConfidence: 60%", None),
    ("q1", "verb", 2, "Answer: Einstein\nConfidence: 20%", None),
    ("q1", "verb", 3, "Answer: Frederick Reines\nConfidence: high", None),  # no number: left out
    ("q2", "verb", 0, "Answer: Lyon Confidence: 0.9", None),
    ("q2", "verb", 1, "I think Paris", None),  # no confidence: left out
    ("q2", "verb", 2, "Answer: Lyon\nConfidence: 0%", None),  # parses, weight 0
    ("q3", "verb", 0, "Confidence: 50%", None),  # no answer
    ("q3", "verb", 1, "Answer: Mars\nConfidence: 40%", None),
    # verb_topk
    (
        "q1",
        "verb_topk",
        0,
        "G1: Martin Perl P1: 70%\nG2: Frederick Reines P2: 20%\nG3: Einstein P3: 10%",
        None,
    ),
    ("q1", "verb_topk", 1, "G1: Einstein P1: 50%\nG2: Martin Perl P2: 40%", None),
    ("q1", "verb_topk", 2, "1. Martin Perl (0.9)\n2. Frederick Reines (0.1)", None),
    ("q2", "verb_topk", 0, "No idea.", None),
    ("q2", "verb_topk", 1, "G1: Lyon P1: 80%", None),
    ("q3", "verb_topk", 0, "G1: Venus P1: 60%", None),
    ("q3", "verb_topk", 1, "G1: Venus P1: 200%", None),  # out of range: no parseable sample
    # p_true: the judgement class, p(True) / (p(True) + p(False)) on every row of an instance
    ("q1", "p_true", 0, "true", 0.9),
    ("q1", "p_true", 1, "true", 0.9),
    ("q1", "p_true", 2, "false", 0.9),
    ("q1", "p_true", 3, "true", 0.9),
    ("q2", "p_true", 0, "false", 0.3),
    ("q2", "p_true", 1, "other", 0.3),
    ("q2", "p_true", 2, "false", 0.3),
    ("q3", "p_true", 0, "true", None),  # no p_true
    ("q3", "p_true", 1, "true", None),
    ("q1", "p_true_cand", 0, "true", 0.6),
    ("q1", "p_true_cand", 1, "true", 0.6),
    ("q1", "p_true_cand", 2, "false", 0.6),
    ("q2", "p_true_cand", 0, "false", 0.1),  # no sampled judgement
    ("q3", "p_true_cand", 0, "true", 0.75),
    ("q3", "p_true_cand", 1, "other", 0.75),
    # self_ask (greedy only)
    ("q1", "self_ask", 0, "80", None),
    ("q2", "self_ask", 0, "I'd say 65%.", None),
    ("q3", "self_ask", 0, "Between 60 and 80.", None),
    ("q1", "self_ask_cand", 0, "0.5", None),
    ("q2", "self_ask_cand", 0, "I don't know", None),
    ("q3", "self_ask_cand", 0, "Confidence: 30 percent", None),
]

# {estimator: {instance: (predicted_id, correct, confidence, refusal)}}, by hand
EXPECTED = {
    "verb": {
        "q1": ("Q1", True, 0.8, None),
        "q2": ("Q7", True, 0.9, None),
        "q3": (None, False, None, "no_answer"),
    },
    "verb_topk": {
        "q1": ("Q1", True, 0.7, None),
        "q2": (None, False, None, "no_guess"),
        "q3": ("text:venus", False, 0.6, None),
    },
    "consis_verb": {
        # samples that parse: Q1 0.6, Q9 0.2 → 0.6 / (0.6 + 0.2)
        "q1": ("Q1", True, 0.6 / 0.8, None),
        # only sample 2 parses (Q7, v = 0): Σ v = 0 → 0
        "q2": ("Q7", True, 0.0, None),
        # the greedy answer did not parse: its reason
        "q3": (None, False, None, "no_answer"),
    },
    "consis_verb_topk": {
        # every guess of samples 1, 2: Q9 0.5, Q1 0.4, Q1 0.9, Q2 0.1 → (0.4 + 0.9) / 1.9
        "q1": ("Q1", True, 1.3 / 1.9, None),
        "q2": (None, False, None, "no_guess"),
        "q3": (None, False, None, "no_parseable_sample"),
    },
    "p_true_prob": {
        "q1": ("Q1", True, 0.9, None),
        "q2": ("Q8", False, 0.3, None),
        "q3": (None, False, None, "no_p_true"),
    },
    "p_true_consis": {
        "q1": ("Q1", True, 2 / 3, None),  # samples 1..3: true, false, true
        "q2": ("Q8", False, 0.0, None),  # other, false
        "q3": ("text:venus", False, 1.0, None),  # p_true is missing, the judgements are not
    },
    "p_true_prob_cand": {
        "q1": ("Q1", True, 0.6, None),
        "q2": ("Q8", False, 0.1, None),
        "q3": ("text:venus", False, 0.75, None),
    },
    "p_true_consis_cand": {
        "q1": ("Q1", True, 0.5, None),  # true, false
        "q2": (None, False, None, "no_sample"),
        "q3": ("text:venus", False, 0.0, None),  # other
    },
    "self_ask": {
        "q1": ("Q1", True, 0.8, None),
        "q2": ("Q8", False, 0.65, None),
        "q3": (None, False, None, "ambiguous"),
    },
    "self_ask_cand": {
        "q1": ("Q1", True, 0.5, None),
        "q2": (None, False, None, "no_number"),
        "q3": ("text:venus", False, 0.3, None),
    },
}


def generations(rows=ROWS) -> pl.DataFrame:
    frame = pl.DataFrame(
        rows,
        schema={
            "instance_id": pl.String,
            "prompt": pl.String,
            "sample": pl.Int64,
            "response": pl.String,
            "p_true": pl.Float64,
        },
        orient="row",
    )
    return frame.with_columns(logprob_sum=pl.lit(-1.0), n_scored=pl.lit(2, pl.Int64))


def estimates_of(result, name) -> dict:
    rows = result.estimates.filter(pl.col("estimator") == name)
    return {
        r["instance_id"]: (r["predicted_id"], r["correct"], r["confidence"], r["refusal"])
        for r in rows.iter_rows(named=True)
    }


@pytest.fixture(scope="module")
def result():
    return estimate_generations(generations(), INDEXES)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_prompted_estimator_by_hand(result, name):
    got = estimates_of(result, name)
    assert got.keys() == EXPECTED[name].keys()
    for instance, (predicted, correct, confidence, refusal) in EXPECTED[name].items():
        assert got[instance][0:2] == (predicted, correct), instance
        assert got[instance][3] == refusal, instance
        if confidence is None:
            assert got[instance][2] is None, instance
        else:
            assert got[instance][2] == pytest.approx(confidence, rel=1e-12), instance


def test_every_prompted_estimator_has_a_hand_computed_case():
    prompted = {name for name, spec in GENERATION_ESTIMATORS.items() if spec.prompts != ("answer",)}
    assert prompted == set(EXPECTED)


def test_every_estimator_runs_and_all_are_probabilities_but_the_entropies(result):
    assert (result.status["status"] == "ran").all()
    kinds = dict(result.estimates.select("estimator", "output_kind").unique().iter_rows())
    assert {name for name, kind in kinds.items() if kind == "score"} == {
        "prob_entropy",
        "nprob_entropy",
        "sem_entropy",
    }
    assert result.estimates.height == 3 * len(GENERATION_ESTIMATORS)


def test_registry_follows_mace_table_order_with_its_labels():
    assert [spec.label for spec in GENERATION_ESTIMATORS.values()] == [
        "Prob Entropy",
        "N-Prob Entropy",
        "Sem Entropy",
        "Verb",
        "Verb-Topk",
        "Consis",
        "Consis-Verb",
        "Consis-Verb-Topk",
        "Perplexity",
        "P_True-Consis",
        "P_True-Prob",
        "P_True-Consis-Cand",
        "P_True-Prob-Cand",
        "Self-Ask",
        "Self-Ask-Cand",
        "SCA (τ=0, generated)",
        "SNCA (τ=0, generated)",
        "SFCA (τ=0, generated)",
    ]


def test_status_counts_answered_and_refused_instances_by_reason(result):
    status = {row["estimator"]: row for row in result.status.iter_rows(named=True)}
    verb = status["verb"]
    assert (verb["rows"], verb["answered"], verb["refused"], verb["refusals"]) == (3, 2, 1, "no_answer: 1")
    assert status["consis_verb_topk"]["refusals"] == "no_guess: 1; no_parseable_sample: 1"
    assert status["self_ask"]["prompts"] == "answer, self_ask"
    assert status["consis"]["refusals"] == "" and status["consis"]["reason"] == ""


def test_refusal_reasons_are_counted_most_first():
    """Three self-ask answers: two without a number, one ambiguous."""
    rows = [r for r in ROWS if r[1] == "answer"] + [
        ("q1", "self_ask", 0, "no idea", None),
        ("q2", "self_ask", 0, "not sure", None),
        ("q3", "self_ask", 0, "60 or 70", None),
    ]
    status = estimate_generations(generations(rows), INDEXES).status
    row = status.filter(pl.col("estimator") == "self_ask").row(0, named=True)
    assert (row["answered"], row["refused"], row["refusals"]) == (0, 3, "no_number: 2; ambiguous: 1")


def test_a_greedy_verb_answer_without_its_confidence_still_anchors_consis_verb():
    """Verb needs the greedy confidence, Consis-Verb only the greedy answer: q3's greedy "Mars" with
    an unreadable confidence is refused by Verb (no_number) and scored by Consis-Verb over the one
    sample that parses (Mars, 0.4 → 0.4 / 0.4 = 1)."""
    rows = [r for r in ROWS if r[1] == "answer"] + [
        (instance, "verb", 0, "Answer: Mars\nConfidence: lots", None) for instance in ("q1", "q2", "q3")
    ]
    rows += [("q3", "verb", 1, "Answer: Mars\nConfidence: 40%", None)]
    result = estimate_generations(generations(rows), INDEXES)
    assert estimates_of(result, "verb")["q3"] == (None, False, None, "no_number")
    assert estimates_of(result, "consis_verb")["q3"] == ("Q5", True, 1.0, None)
    # q1 has a greedy answer (Mars: unmatched for q1) but no sampled verb answer at all
    assert estimates_of(result, "consis_verb")["q1"] == (None, False, None, "no_parseable_sample")


def test_estimates_do_not_depend_on_row_order(result):
    shuffled = generations().sample(fraction=1.0, shuffle=True, seed=11)
    again = estimate_generations(shuffled, INDEXES)
    assert again.estimates.equals(result.estimates) and again.status.equals(result.status)


def test_a_missing_prompt_skips_only_the_estimators_that_need_it():
    result = estimate_generations(generations([r for r in ROWS if r[1] != "p_true_cand"]), INDEXES)
    skipped = result.status.filter(pl.col("status") == "skipped")
    assert skipped["estimator"].to_list() == ["p_true_consis_cand", "p_true_prob_cand"]
    assert set(skipped["reason"]) == {
        "no 'p_true_cand' rows: the generations were made without the prompted methods"
    }
    assert not result.estimates["estimator"].is_in(skipped["estimator"].to_list()).any()


def test_without_answer_rows_the_methods_that_need_the_greedy_answer_are_skipped():
    result = estimate_generations(generations([r for r in ROWS if r[1] != "answer"]), INDEXES)
    ran = result.status.filter(pl.col("status") == "ran")["estimator"].to_list()
    assert ran == ["verb", "verb_topk", "consis_verb", "consis_verb_topk"]
    reason = result.status.filter(pl.col("estimator") == "self_ask")["reason"].item()
    assert reason == "no 'answer' rows: the generations were made without the answer prompt"


@pytest.mark.parametrize(
    ("rows", "drop", "message"),
    [
        (ROWS, "prompt", r"generations: missing column\(s\) \['prompt'\]"),
        ([*ROWS, ("q1", "verbal", 0, "x", None)], None, "unknown prompt 'verbal'"),
        (
            [r for r in ROWS if (r[0], r[1], r[2]) != ("q2", "verb", 0)],
            None,
            "instance 'q2' has 0 greedy row.* of prompt 'verb'",
        ),
        ([r for r in ROWS if (r[0], r[1]) != ("q3", "self_ask")], None, "instance 'q3' has 0 greedy row"),
        ([*ROWS, ("q1", "self_ask", 0, "90", None)], None, "instance 'q1' has 2 greedy row"),
        ([*ROWS, ("q4", "answer", 0, "x", None)], None, "instance 'q4' has no answer index"),
    ],
)
def test_bad_generations_are_refused_naming_the_column_prompt_or_instance(rows, drop, message):
    frame = generations(rows)
    with pytest.raises(ValueError, match=message):
        estimate_generations(frame.drop(drop) if drop else frame, INDEXES)
