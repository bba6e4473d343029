"""Sampled open answers (kcal_pipeline/scoring/generation.py) on the embedded model: reproducible,
independent of the other questions of a run, the greedy answer and every log-probability equal to a
slow reference without the key-value cache, and settings refused with their field and value."""

import dataclasses
import os
from pathlib import Path

import polars as pl
import pytest
import torch

from kcal_pipeline.core.options import GenerationOptions, OptionsError
from kcal_pipeline.scoring.generation import GenerationSettings, generate_answers, prompt_ids, stop_token_ids
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

QUESTIONS = ["What is the capital of France? Answer with one word.", "Name one planet of the solar system."]
KEYS = ["capital", "planet"]
SMALL = GenerationSettings(n_samples=3, max_new_tokens=8, seed=5)


@pytest.fixture(scope="module")
def loaded():
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")
    return load_model(DEFAULT_MODEL, cache)


@pytest.fixture(scope="module")
def answers(loaded):
    return generate_answers(loaded, QUESTIONS, KEYS, SMALL)


def reference_greedy(loaded, prompt: list[int], limit: int) -> list[int]:
    """No cache: argmax of a full forward per step, up to `limit` tokens or a stop token."""
    stops, ids, greedy = stop_token_ids(loaded), list(prompt), []
    with torch.inference_mode():
        while len(greedy) < limit:
            token = int(loaded.model(torch.tensor([ids])).logits[0, -1].argmax())
            if token in stops:
                break
            greedy.append(token)
            ids.append(token)
    return greedy


def reference_logprob(loaded, prompt: list[int], continuation: list[int]) -> float:
    """log p(continuation | prompt) from one full forward, float64 log-softmax."""
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([prompt + continuation])).logits[0].double()
    log_p = torch.log_softmax(logits, dim=-1)
    return sum(float(log_p[len(prompt) - 1 + i, t]) for i, t in enumerate(continuation))


def test_one_greedy_and_n_sampled_rows_per_question(answers):
    assert answers.columns[:4] == ["instance_id", "prompt", "sample", "response"]
    assert set(answers["prompt"]) == {"answer"} and answers["p_true"].is_null().all()
    counts = answers.group_by("instance_id").agg(pl.col("sample").sort()).sort("instance_id")
    assert counts.rows() == [("capital", [0, 1, 2, 3]), ("planet", [0, 1, 2, 3])]
    assert answers["n_tokens"].max() <= SMALL.max_new_tokens
    assert set(answers["stop"]) <= {"stop", "length"}
    assert (answers["n_tokens"] == answers["token_ids"].list.len()).all()
    stopped = answers["stop"] == "stop"
    assert stopped.any() and not stopped.all()  # both endings occur, so both are checked below
    assert (answers["n_scored"] == answers["n_tokens"] + stopped.cast(pl.Int64)).all()
    assert (answers["stop_token"].is_null() == ~stopped).all()


def test_the_greedy_answer_and_every_log_probability_match_a_slow_reference(loaded, answers):
    """The two questions decode in one call with prompts of different lengths (one is padded)."""
    assert len({len(prompt_ids(loaded, q)[0]) for q in QUESTIONS}) == 2
    for question, key in zip(QUESTIONS, KEYS, strict=True):
        prompt, kind = prompt_ids(loaded, question)
        assert kind == "chat"  # the embedded model is instruction-tuned: its chat template
        rows = answers.filter(pl.col("instance_id") == key).sort("sample")
        for row in rows.iter_rows(named=True):
            ended = [row["stop_token"]] if row["stop"] == "stop" else []  # its end is part of log p
            scored = reference_logprob(loaded, prompt, row["token_ids"] + ended)
            assert row["logprob_sum"] == pytest.approx(scored, abs=1e-4)
        assert rows["token_ids"][0].to_list() == reference_greedy(loaded, prompt, SMALL.max_new_tokens)


def same_draws(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """The same responses; log-probabilities equal up to the floats padding changes."""
    assert a.select("instance_id", "sample", "token_ids", "stop").equals(
        b.select("instance_id", "sample", "token_ids", "stop")
    )
    assert (a["logprob_sum"] - b["logprob_sum"]).abs().max() < 1e-4  # the scorers' exactness bar


def test_samples_are_reproducible_and_do_not_depend_on_the_other_questions(loaded, answers):
    assert generate_answers(loaded, QUESTIONS, KEYS, SMALL).equals(answers)  # bit for bit
    alone = generate_answers(loaded, QUESTIONS[1:], KEYS[1:], SMALL)  # no padding, no neighbour
    same_draws(alone, answers.filter(pl.col("instance_id") == "planet"))
    other_seed = generate_answers(loaded, QUESTIONS[1:], KEYS[1:], dataclasses.replace(SMALL, seed=6))
    same_draws(other_seed.filter(pl.col("sample") == 0), alone.filter(pl.col("sample") == 0))  # greedy
    assert other_seed["token_ids"].to_list()[1:] != alone["token_ids"].to_list()[1:]


def test_a_nucleus_of_one_token_samples_the_greedy_answer(loaded):
    """top_p → 0 keeps only the most probable token at each step: every sample is the greedy one."""
    narrow = generate_answers(
        loaded, QUESTIONS[:1], KEYS[:1], GenerationSettings(n_samples=2, max_new_tokens=5, top_p=1e-9)
    )
    assert len(set(map(tuple, narrow["token_ids"].to_list()))) == 1


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("n_samples", -1, "n_samples"),
        ("temperature", 0.0, "temperature"),
        ("temperature", 5.5, "temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("max_new_tokens", 0, "max_new_tokens"),
        ("seed", -1, "generation_seed"),
    ],
)
def test_bad_settings_name_the_field_and_value(field, value, named):
    """The sampler's settings are checked by GenerationOptions, the user settings' one validation
    (the Dagster resource is a GenerationOptions too): the same bounds, the same message."""
    with pytest.raises(ValueError, match=f"generation setting {named}={value!r}: ") as sampler:
        GenerationSettings(**{field: value})
    with pytest.raises(OptionsError) as user:
        GenerationOptions(**{named: value})
    assert str(sampler.value).startswith(str(user.value))


def test_a_prompt_may_draw_greedy_only_and_give_an_answer_more_room_than_the_users_cap():
    cap = GenerationOptions.model_fields["max_new_tokens"].metadata
    longest = 3 * next(b.le for b in cap if hasattr(b, "le")) + 16  # verb_topk at the user's cap
    assert GenerationSettings(n_samples=0, max_new_tokens=longest).max_new_tokens == longest
    with pytest.raises(OptionsError):
        GenerationOptions(n_samples=0)  # a user's N: at least one sample (SFCA's |C_m| / N)


def test_one_class_is_named_generation_settings_and_the_resource_is_the_user_options():
    from resources.settings import GenerationResource

    repo = Path(__file__).parents[2]
    named = [
        str(path.relative_to(repo))
        for folder in ("kcal_pipeline", "assets", "resources")
        for path in sorted((repo / folder).rglob("*.py"))
        if "class GenerationSettings" in path.read_text("utf-8")
    ]
    assert named == ["kcal_pipeline/scoring/generation.py"]
    assert GenerationResource.options_class() is GenerationOptions


def test_questions_need_their_own_keys(loaded):
    with pytest.raises(ValueError, match=r"questions \(2\) and keys \(1\)"):
        generate_answers(loaded, QUESTIONS, KEYS[:1], SMALL)
    with pytest.raises(ValueError, match="every question needs its own key"):
        generate_answers(loaded, QUESTIONS, ["same", "same"], SMALL)


def test_sampled_answers_flow_through_matching_into_every_generation_estimator(answers):
    """The sampler's rows, matched against hand-made entity names, are what the estimators read:
    one estimate per question and estimator, probabilities in [0, 1], scores finite, the greedy
    answer's match carried as the prediction of the single-answer methods."""
    from kcal_pipeline.estimation.answer_matching import AnswerIndex, with_matches
    from kcal_pipeline.estimation.generation import GENERATION_ESTIMATORS, estimate_generations

    indexes = {
        "capital": AnswerIndex({"Q90": ["Paris"]}, {"Q64": ["Berlin"], "Q220": ["Rome"]}),
        "planet": AnswerIndex(
            {f"P{i}": [name] for i, name in enumerate(["Mercury", "Venus", "Earth", "Mars"])}
        ),
    }
    matched = with_matches(answers, indexes)
    estimates = estimate_generations(answers, indexes).estimates
    single_turn = [name for name, spec in GENERATION_ESTIMATORS.items() if spec.prompts == ("answer",)]
    assert estimates.height == 2 * len(single_turn)
    probability = estimates.filter(pl.col("output_kind") == "probability")["confidence"]
    assert probability.is_between(0.0, 1.0).all()
    assert estimates["confidence"].is_finite().all()
    greedy = matched.filter(pl.col("sample") == 0).select("instance_id", "cluster").sort("instance_id")
    perplexity = estimates.filter(pl.col("estimator") == "perplexity").sort("instance_id")
    assert perplexity["predicted_id"].to_list() == greedy["cluster"].to_list()


def test_inverse_cdf_sampling_by_hand():
    """probs (0.5, 0.2, 0.3) → cumulative (0.5, 0.7, 1.0): u < 0.5 → 0, 0.5 ≤ u < 0.7 → 1, else 2;
    with top-p 0.6 the nucleus is {0, 2} (0.5, then 0.3 while the mass above it is 0.5 < 0.6),
    renormalised cumulative (0.5, 0.5, 0.8): token 1 is never drawn."""
    from kcal_pipeline.scoring.generation import tokens_at

    logits = torch.log(torch.tensor([[0.5, 0.2, 0.3]] * 6, dtype=torch.float64))
    u = torch.tensor([0.0, 0.49, 0.51, 0.69, 0.71, 0.999], dtype=torch.float64)
    plain = GenerationSettings(n_samples=1)
    assert tokens_at(logits, plain, u).tolist() == [0, 0, 1, 1, 2, 2]
    nucleus = GenerationSettings(n_samples=1, top_p=0.6)
    # targets u · 0.8: 0, 0.392, 0.408, 0.552, 0.568, 0.799 against cumulative (0.5, 0.5, 0.8)
    assert tokens_at(logits, nucleus, u).tolist() == [0, 0, 0, 2, 2, 2]


def test_sampled_frequencies_follow_the_tempered_distribution():
    from kcal_pipeline.scoring.generation import sample_tokens

    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.float64)).expand(20_000, -1)
    generator = torch.Generator().manual_seed(3)
    counts = torch.bincount(sample_tokens(logits, GenerationSettings(n_samples=1), generator), minlength=3)
    assert torch.allclose(counts / 20_000, torch.tensor([0.6, 0.3, 0.1]), atol=0.015)
    # T = 2: p ∝ p^(1/2) = (0.775, 0.548, 0.316) / 1.639 = (0.473, 0.334, 0.193)
    hot = GenerationSettings(n_samples=1, temperature=2.0)
    counts = torch.bincount(sample_tokens(logits, hot, torch.Generator().manual_seed(4)), minlength=3)
    assert torch.allclose(counts / 20_000, torch.tensor([0.473, 0.334, 0.193]), atol=0.015)
