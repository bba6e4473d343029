"""MACE's verbal and double-turn prompts (kcal_pipeline/scoring/prompted.py) on the embedded model:
rows per prompt, seeded reproducibility, p(True) against a slow unpadded reference, batched judges
equal to one at a time, the greedy answer inside the multi-turn prompts, the two stop policies, the
candidate list, the rule/judge agreement by hand, and clear errors."""

import dataclasses
import hashlib
import math
import os
from pathlib import Path

import polars as pl
import pytest
import torch

import kcal_pipeline.scoring.prompted as prompted
from kcal_pipeline.scoring.generation import (
    COMPLETION_PROMPT,
    SCHEMA,
    GenerationSettings,
    completion_transcript,
    generate_answers,
    generator_seed,
    prompt_ids,
    stop_token_ids,
)
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.prompted import (
    JUDGE_PREFILL,
    MAX_CANDIDATES,
    PROMPTS,
    answer_context,
    candidate_answers,
    generate_prompted,
    judge_agreement,
    judge_equivalence,
    single_token_id,
)

QUESTIONS = ["What is the capital of France? Answer with one word.", "Name one planet of the solar system."]
KEYS = ["capital", "planet"]
SMALL = GenerationSettings(n_samples=2, max_new_tokens=6, seed=5)
JUDGES = tuple(name for name, spec in PROMPTS.items() if spec.kind == "judge")


@pytest.fixture(scope="module")
def loaded():
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")
    return load_model(DEFAULT_MODEL, cache)


@pytest.fixture(scope="module")
def short_prompts():
    """The prompts with at most 6 new tokens, so the file stays fast (lengths are tested by hand)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, spec in PROMPTS.items():
            patch.setitem(
                PROMPTS, name, dataclasses.replace(spec, answers=0, format_tokens=min(spec.format_tokens, 6))
            )
        yield


@pytest.fixture(scope="module")
def answers(loaded):
    return generate_answers(loaded, QUESTIONS, KEYS, SMALL)


@pytest.fixture(scope="module")
def rows(loaded, answers, short_prompts):
    return generate_prompted(loaded, QUESTIONS, KEYS, answers, SMALL)


def conversation(answers, name: str, key: str):
    greedy, candidates = answer_context(answers, [key])[key]
    return PROMPTS[name].build(QUESTIONS[KEYS.index(key)], greedy, candidates)


def test_every_prompt_gives_greedy_and_sampled_rows_in_the_generations_schema(rows):
    assert rows.schema == pl.Schema(SCHEMA)
    samples = rows.group_by("prompt", "instance_id").agg(pl.col("sample").sort())
    for name, spec in PROMPTS.items():
        expected = list(range(SMALL.n_samples + 1)) if spec.sampled else [0]
        got = samples.filter(pl.col("prompt") == name)
        assert sorted(got["instance_id"]) == sorted(KEYS) and all(
            s.to_list() == expected for s in got["sample"]
        )
    judged = rows.filter(pl.col("prompt").is_in(JUDGES))
    assert (
        judged["p_true"].is_between(0.0, 1.0).all()
        and rows.filter(~pl.col("prompt").is_in(JUDGES))["p_true"].is_null().all()
    )
    assert (
        judged.group_by("prompt", "instance_id").agg(pl.col("p_true").n_unique())["p_true"].to_list()
        == [1] * 4
    )
    assert set(judged["response"]) <= {"true", "false", "other"} and set(judged["stop"]) == {"judged"}
    assert (judged["n_tokens"] == 1).all() and (judged["logprob_sum"] <= 0).all()


def test_each_prompt_kind_is_reproducible_and_draws_by_its_own_seed(loaded, answers, rows, short_prompts):
    assert generate_prompted(loaded, QUESTIONS, KEYS, answers, SMALL).equals(rows)  # bit for bit
    other = generate_prompted(
        loaded, QUESTIONS, KEYS, answers, dataclasses.replace(SMALL, seed=6), prompts=("verb", "p_true")
    )
    for name in ("verb", "p_true"):  # one generate and one judge prompt: the samples move, greedy not
        a, b = (f.filter(pl.col("prompt") == name).sort("instance_id", "sample") for f in (rows, other))
        greedy = pl.col("sample") == 0
        assert a.filter(greedy)["token_ids"].to_list() == b.filter(greedy)["token_ids"].to_list()
        assert a.filter(~greedy)["token_ids"].to_list() != b.filter(~greedy)["token_ids"].to_list()
    # the answer prompt keeps today's seed, (seed, key); the others add their name
    today = int.from_bytes(hashlib.sha256(b"5\x00capital").digest()[:8], "little") & ((1 << 63) - 1)
    assert generator_seed(5, "capital") == today
    assert len({generator_seed(5, "capital", name) for name in ["answer", *PROMPTS]}) == len(PROMPTS) + 1


def reference_pair(loaded, ids: list[int], yes: str, no: str) -> tuple[float, int]:
    """p(yes) / (p(yes) + p(no)) from one full forward of the unpadded prompt (float64 softmax over
    the vocabulary), and the argmax token."""
    with torch.inference_mode():
        probs = torch.softmax(loaded.model(torch.tensor([ids])).logits[0, -1].double(), dim=-1)
    p_yes, p_no = float(probs[single_token_id(loaded, yes)]), float(probs[single_token_id(loaded, no)])
    return p_yes / (p_yes + p_no), int(probs.argmax())


def test_p_true_equals_a_slow_reference_of_the_unpadded_prompt(loaded, answers, rows):
    for name in JUDGES:
        lengths = {len(prompt_ids(loaded, conversation(answers, name, k))[0]) for k in KEYS}
        assert len(lengths) == 2  # the two questions share a padded forward
        for key in KEYS:
            expected, argmax = reference_pair(
                loaded, prompt_ids(loaded, conversation(answers, name, key))[0], " True", " False"
            )
            greedy = rows.filter(
                (pl.col("prompt") == name) & (pl.col("instance_id") == key) & (pl.col("sample") == 0)
            )
            assert greedy["p_true"].item() == pytest.approx(expected, abs=1e-5)
            assert greedy["token_ids"].item().to_list() == [argmax]


def test_batched_judges_equal_one_question_at_a_time(loaded, answers, rows):
    batched = rows.filter(pl.col("prompt").is_in(JUDGES)).sort("prompt", "instance_id", "sample")
    alone = pl.concat(
        generate_prompted(loaded, [q], [k], answers, SMALL, prompts=JUDGES)
        for q, k in zip(QUESTIONS, KEYS, strict=True)
    ).sort("prompt", "instance_id", "sample")
    assert batched.select("instance_id", "prompt", "sample", "response", "token_ids").equals(
        alone.select("instance_id", "prompt", "sample", "response", "token_ids")
    )
    assert (batched["p_true"] - alone["p_true"]).abs().max() < 1e-5


def test_the_equivalence_judge_is_batched_and_equals_a_slow_reference(loaded):
    items = [
        (QUESTIONS[0], "Paris", ["Paris"]),
        (QUESTIONS[1], "It is Mars, I think", ["Mars", "Venus", "Earth"]),
    ]
    together = judge_equivalence(loaded, items)
    assert together == pytest.approx([judge_equivalence(loaded, [item])[0] for item in items], abs=1e-5)
    for (question, response, golds), p in zip(items, together, strict=True):
        turns = [
            {
                "role": "user",
                "content": prompted.EQUIVALENCE_QUESTION.format(
                    question=question, response=response, answers="; ".join(golds)
                ),
            },
            {"role": "assistant", "content": prompted.EQUIVALENCE_PREFILL},
        ]
        assert p == pytest.approx(
            reference_pair(loaded, prompt_ids(loaded, turns)[0], " Yes", " No")[0], abs=1e-5
        )


def test_the_multi_turn_prompts_carry_the_greedy_answer_in_an_assistant_turn(loaded, answers):
    greedy = answers.filter((pl.col("instance_id") == "planet") & (pl.col("sample") == 0))["response"].item()
    assert greedy
    for name in ("self_ask", "self_ask_cand"):
        text = loaded.tokenizer.decode(prompt_ids(loaded, conversation(answers, name, "planet"))[0])
        assert f"<|im_start|>assistant\n{greedy}<|im_end|>" in text
        assert text.endswith("<|im_start|>assistant\n")  # the model answers a new turn
    judge = loaded.tokenizer.decode(prompt_ids(loaded, conversation(answers, "p_true", "planet"))[0])
    assert judge.endswith(f"<|im_start|>assistant\n{JUDGE_PREFILL}")  # pre-filled, continued
    assert f"Proposed answer: {greedy}\n" in judge


def test_the_completion_transcript_of_a_model_without_a_chat_template():
    question = [{"role": "user", "content": "Who?"}]
    assert completion_transcript(question) == COMPLETION_PROMPT.format(question="Who?")
    turns = [*question, {"role": "assistant", "content": "Curie"}, {"role": "user", "content": "Sure?"}]
    assert completion_transcript(turns) == "Question: Who?\nAnswer: Curie\nSure?\nAnswer:"
    assert completion_transcript(turns[:2]) == "Question: Who?\nAnswer: Curie"  # continued


def test_the_turn_policy_lets_a_response_span_a_line_break_where_line_stops_it(loaded, answers):
    line_stops, turn_stops = stop_token_ids(loaded, "line"), stop_token_ids(loaded, "turn")
    newline = single_token_id(loaded, "\n")
    assert turn_stops < line_stops and newline in line_stops and newline not in turn_stops
    greedy = GenerationSettings(n_samples=0, max_new_tokens=16)
    topk = [conversation(answers, "verb_topk", "capital")]
    line = generate_answers(loaded, topk, ["capital"], greedy, stop="line").row(0, named=True)
    turn = generate_answers(loaded, topk, ["capital"], greedy, stop="turn").row(0, named=True)
    assert line["stop"] == "stop" and line["stop_token"] in line_stops - turn_stops
    assert "\n" not in line["response"] and "\n" in turn["response"]
    assert turn["token_ids"][: line["n_tokens"] + 1] == [*line["token_ids"], line["stop_token"]]


def test_candidates_are_distinct_non_empty_in_order_and_at_most_ten(answers):
    responses = ["Paris", " paris ", "", None, "Paris ", "Rome", *[f"city {i}" for i in range(12)]]
    expected = ["Paris", "paris", "Rome", *[f"city {i}" for i in range(7)]]
    assert candidate_answers(responses) == expected and MAX_CANDIDATES == 10
    shuffled = answers.sample(fraction=1.0, shuffle=True, seed=1)  # greedy first whatever the row order
    greedy, candidates = answer_context(shuffled, ["planet"])["planet"]
    ordered = answers.filter(pl.col("instance_id") == "planet").sort("sample")["response"].to_list()
    assert greedy == ordered[0] and candidates == candidate_answers(ordered)
    asked = conversation(answers, "self_ask_cand", "planet")[-1]["content"]
    assert asked.startswith("Possible answers: " + "; ".join(candidates) + "\n")


def test_judge_agreement_by_hand():
    result = judge_agreement([True, True, False, False, True], [0.9, 0.2, 0.6, 0.1, 0.5])
    # judge (≥ 0.5): T F T F T. Agree on 3 of 5; chance 0.6·0.6 + 0.4·0.4 = 0.52; κ = 0.08 / 0.48 = 1/6
    assert result == {
        "n": 5,
        "agreement": pytest.approx(0.6),
        "cohen_kappa": pytest.approx(1 / 6),
        "rule_only": 1,
        "judge_only": 1,
    }
    assert judge_agreement([True, False], [0.9, 0.1])["cohen_kappa"] == pytest.approx(1.0)
    assert math.isnan(judge_agreement([True, True], [0.9, 0.8])["cohen_kappa"])  # chance agreement is 1


def test_clear_errors(loaded, answers):
    with pytest.raises(ValueError, match=r"unknown prompt\(s\) \['verbal'\]"):
        generate_prompted(loaded, QUESTIONS, KEYS, answers, SMALL, prompts=["verbal"])
    without_planet = answers.filter(pl.col("instance_id") != "planet")
    with pytest.raises(
        ValueError, match=r"no greedy row of the 'answer' prompt for 1 key\(s\), e.g. \['planet'\]"
    ):
        generate_prompted(loaded, QUESTIONS, KEYS, without_planet, SMALL, prompts=["self_ask"])
    with pytest.raises(ValueError, match="is 2 tokens"):
        single_token_id(loaded, " Truthfully")
    with pytest.raises(ValueError, match="starts with a user turn"):
        prompt_ids(loaded, [{"role": "assistant", "content": "Paris"}])
    with pytest.raises(ValueError, match="stop policy 'word'"):
        stop_token_ids(loaded, "word")
    with pytest.raises(ValueError, match=r"rule_correct \(2\) and judge_p \(1\)"):
        judge_agreement([True, False], [0.5])
