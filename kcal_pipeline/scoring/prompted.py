"""The prompts of MACE's verbal and double-turn confidence methods (issue 33; MACE §4.1, App. B.1),
asked of the model after its answers (scoring/generation.py), and an LM judge of answer equivalence.

Each prompt is built from the question, the model's greedy answer and its candidate answers (the
distinct non-empty responses of the "answer" prompt, greedy first, at most MAX_CANDIDATES):

- generate prompts (verb, verb_topk, self_ask, self_ask_cand) decode like the answers, with their
  own stop policy and length; the verbal ones sampled (greedy + N), Self-Ask greedy only;
- judge prompts (p_true, p_true_cand; Kadavath et al. 2022) pre-fill the assistant turn with "The
  proposed answer is" and read the next token once: p_true = p(" True") / (p(" True") + p(" False"))
  on every row of the question; row 0 is the argmax token's class, rows 1 … N tokens drawn from the
  full next-token distribution at the generation temperature / top-p ("true", "false" or "other").

Rows follow generation.SCHEMA, so the lead concatenates them with the answer rows. Samples are seeded
by (seed, prompt, key): each prompt draws independently of the others and of the answer prompt.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from kcal_pipeline.scoring.answering import generate_answers, next_token_readings
from kcal_pipeline.scoring.generation import (
    ANSWER_PROMPT,
    GREEDY,
    SCHEMA,
    GenerationSettings,
    check_keys,
    generator_seed,
    prompt_ids,
)

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

MAX_CANDIDATES = 10
JUDGE_PREFILL = "The proposed answer is"
JUDGED = "judged"  # the `stop` of a judge prompt's rows: one token read, nothing decoded
Conversation = list[dict[str, str]]


@dataclass(frozen=True)
class PromptSpec:
    """A prompt: its conversation from (question, greedy answer, candidates); "generate" decodes a
    response, "judge" reads one next token; sampled: greedy + N rows, else the greedy row only."""

    name: str
    build: Callable[[str, str, Sequence[str]], Conversation]
    kind: str  # "generate" | "judge"
    sampled: bool
    stop: str | None  # generation.STOP_POLICIES for "generate", None for "judge"
    answers: int  # answers the response's format holds (verb 1, verb_topk 3, self_ask none)
    format_tokens: int  # the tokens of the format around them ("Answer: …\nConfidence: 80%")

    def max_new_tokens(self, answer_tokens: int) -> int:
        """The response's length limit: room for its answers (each as long as an answer may be,
        the setting max_new_tokens) and its format; a judge reads one token."""
        return 1 if self.kind == "judge" else self.answers * answer_tokens + self.format_tokens


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def _possible(candidates: Sequence[str]) -> str:
    return "Possible answers: " + "; ".join(candidates)


def _verb(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return [
        _user(
            f"{question}\nGive your answer and how confident you are, from 0 to 100, that it is correct, "
            "in exactly this form:\nAnswer: <answer>\nConfidence: <number>%"
        )
    ]


def _verb_topk(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return [
        _user(
            f"{question}\nGive your 3 best guesses and, for each, the probability from 0 to 100 that it "
            "is correct, one per line in exactly this form:\n"
            + "\n".join(f"G{k}: <answer> P{k}: <probability>%" for k in (1, 2, 3))
        )
    ]


SELF_ASK = "How likely is it that your answer is correct? Reply with a number from 0 to 100."


def _self_ask(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return [_user(question), _assistant(greedy), _user(SELF_ASK)]


def _self_ask_cand(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return [_user(question), _assistant(greedy), _user(f"{_possible(candidates)}\n{SELF_ASK}")]


def _judge_turns(question: str, greedy: str, listed: str) -> Conversation:
    return [
        _user(
            f"{question}\n{listed}Proposed answer: {greedy}\nIs the proposed answer (A) True or (B) False?"
        ),
        _assistant(JUDGE_PREFILL),
    ]


def _p_true(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return _judge_turns(question, greedy, "")


def _p_true_cand(question: str, greedy: str, candidates: Sequence[str]) -> Conversation:
    return _judge_turns(question, greedy, _possible(candidates) + "\n")


PROMPTS: dict[str, PromptSpec] = {
    spec.name: spec
    for spec in (
        # at the default 16 answer tokens: verb 32, verb_topk 64, self_ask 12 new tokens
        PromptSpec("verb", _verb, "generate", sampled=True, stop="turn", answers=1, format_tokens=16),
        PromptSpec(
            "verb_topk", _verb_topk, "generate", sampled=True, stop="turn", answers=3, format_tokens=16
        ),
        PromptSpec(
            "self_ask", _self_ask, "generate", sampled=False, stop="turn", answers=0, format_tokens=12
        ),
        PromptSpec(
            "self_ask_cand",
            _self_ask_cand,
            "generate",
            sampled=False,
            stop="turn",
            answers=0,
            format_tokens=12,
        ),
        PromptSpec("p_true", _p_true, "judge", sampled=True, stop=None, answers=0, format_tokens=0),
        PromptSpec("p_true_cand", _p_true_cand, "judge", sampled=True, stop=None, answers=0, format_tokens=0),
    )
}


def candidate_answers(responses: Sequence[str | None]) -> list[str]:
    """The distinct non-empty responses (stripped), in order of first appearance, at most
    MAX_CANDIDATES: pass them greedy first."""
    seen: dict[str, None] = {}
    for response in responses:
        text = (response or "").strip()
        if text:
            seen.setdefault(text)
    return list(seen)[:MAX_CANDIDATES]


def answer_context(answers: pl.DataFrame, keys: Sequence[str]) -> dict[str, tuple[str, list[str]]]:
    """Per key, the greedy answer and the candidates, from the "answer" prompt's rows."""
    if "prompt" in answers.columns:
        answers = answers.filter(pl.col("prompt") == ANSWER_PROMPT)
    ordered = answers.filter(pl.col("instance_id").is_in(list(keys))).sort("instance_id", "sample")
    context = {}
    for (key,), rows in ordered.group_by("instance_id", maintain_order=True):
        if rows["sample"][0] == GREEDY:
            context[key] = (rows["response"][0] or "").strip(), candidate_answers(rows["response"].to_list())
    missing = [key for key in keys if key not in context]
    if missing:
        raise ValueError(
            f"answers: no greedy row of the 'answer' prompt for {len(missing)} key(s), e.g. {missing[:5]}"
        )
    return context


def generate_prompted(
    loaded: LoadedModel,
    questions: Sequence[str],
    keys: Sequence[str],
    answers: pl.DataFrame,
    settings: GenerationSettings,
    prompts: Sequence[str] = tuple(PROMPTS),
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """The rows (generation.SCHEMA) of every named prompt for every question. `answers` holds the
    "answer" prompt's rows of these keys. A prompt's length limit is its own
    (PromptSpec.max_new_tokens of the settings' answer length); a prompt that is not sampled has
    its greedy row only. progress(done, total) counts questions over all prompts."""
    check_keys(questions, keys)
    unknown = [name for name in prompts if name not in PROMPTS]
    if unknown:
        raise ValueError(f"unknown prompt(s) {unknown}: the prompts are {list(PROMPTS)}")
    context = answer_context(answers, keys)
    frames = [pl.DataFrame(schema=SCHEMA)]
    for done, name in enumerate(prompts):
        spec = PROMPTS[name]
        conversations = [spec.build(q, *context[k]) for q, k in zip(questions, keys, strict=True)]
        prompt_settings = dataclasses.replace(
            settings,
            n_samples=settings.n_samples if spec.sampled else 0,
            max_new_tokens=spec.max_new_tokens(settings.max_new_tokens),
        )
        step = _offset(progress, done * len(questions), len(prompts) * len(questions))
        if spec.kind == "generate":
            frame = generate_answers(
                loaded, conversations, keys, prompt_settings, step, prompt=name, stop=spec.stop
            )
        else:
            frame = _judge_rows(loaded, conversations, keys, prompt_settings, name, step)
        frames.append(frame)
    return pl.concat(frames)


def _offset(
    progress: Callable[[int, int], None] | None, before: int, total: int
) -> Callable[[int, int], None] | None:
    """A prompt's progress(done, of its questions) reported as progress(before + done, total)."""
    if progress is None:
        return None
    return lambda done, _of_prompt: progress(before + done, total)


def single_token_id(loaded: LoadedModel, text: str) -> int:
    """The one token id of `text` (e.g. " True"); a tokenizer that splits it is an error, since the
    judges read one next token."""
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{text!r} is {len(ids)} tokens {ids} for this tokenizer: a judge reads one token")
    return ids[0]


def _pair_probability(pair: tuple[float, float]) -> float:
    """p(yes) / (p(yes) + p(no)) from their log-probabilities, computed stably."""
    return float(1.0 / (1.0 + math.exp(pair[1] - pair[0])))


def _judge_rows(
    loaded: LoadedModel,
    conversations: Sequence[Conversation],
    keys: Sequence[str],
    settings: GenerationSettings,
    prompt: str,
    progress: Callable[[int, int], None] | None,
) -> pl.DataFrame:
    """Per question the greedy row and N sampled rows of one next-token reading."""
    true_id, false_id = single_token_id(loaded, " True"), single_token_id(loaded, " False")
    classes = {true_id: "true", false_id: "false"}
    readings = next_token_readings(
        loaded,
        [prompt_ids(loaded, c)[0] for c in conversations],
        (true_id, false_id),
        settings,
        seeds=[generator_seed(settings.seed, key, prompt) for key in keys],
        progress=progress,
    )
    rows: list[dict] = []
    for key, reading in zip(keys, readings, strict=True):
        p_true = _pair_probability(reading.pair)
        for sample, (token, logprob) in enumerate(zip(reading.tokens, reading.logprobs, strict=True)):
            rows.append(
                {
                    "instance_id": key,
                    "prompt": prompt,
                    "sample": sample,
                    "response": classes.get(token, "other"),
                    "token_ids": [token],
                    "n_tokens": 1,
                    "n_scored": 1,
                    "logprob_sum": logprob,
                    "logprob_mean": logprob,
                    "entropy_mean": reading.entropy,
                    "stop": JUDGED,
                    "stop_token": None,
                    "p_true": p_true,
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA)


EQUIVALENCE_QUESTION = (
    "Question: {question}\nResponse: {response}\nAnswers: {answers}\n"
    "Does the response name one of these answers? Reply Yes or No."
)
EQUIVALENCE_PREFILL = "Answer:"


def judge_equivalence(loaded: LoadedModel, items: Sequence[tuple[str, str, Sequence[str]]]) -> list[float]:
    """An LM judge of answer matching (the paper's GPT-4o judge, here any registered model), to compare
    with the rule of estimation/answer_matching.py: for each (question, response, gold labels) the
    model is asked EQUIVALENCE_QUESTION, its answer pre-filled with "Answer:", and the next token read:
    p(" Yes") / (p(" Yes") + p(" No"))."""
    yes, no = single_token_id(loaded, " Yes"), single_token_id(loaded, " No")
    conversations = [
        [
            _user(EQUIVALENCE_QUESTION.format(question=q, response=r, answers="; ".join(golds))),
            _assistant(EQUIVALENCE_PREFILL),
        ]
        for q, r, golds in items
    ]
    prompts = [prompt_ids(loaded, c)[0] for c in conversations]
    readings = next_token_readings(loaded, prompts, (yes, no), GenerationSettings(n_samples=0))
    return [_pair_probability(reading.pair) for reading in readings]


def judge_agreement(
    rule_correct: Sequence[bool], judge_p: Sequence[float], threshold: float = 0.5
) -> dict[str, float | int]:
    """How the rule and the judge (correct where judge_p ≥ threshold) agree on the same responses:
    n, the fraction agreeing, Cohen's kappa (agreement beyond chance; NaN when both are constant, so
    chance agreement is 1), and the counts only the rule (rule_only) or only the judge calls correct."""
    if len(rule_correct) != len(judge_p):
        raise ValueError(f"rule_correct ({len(rule_correct)}) and judge_p ({len(judge_p)}) differ in length")
    if not rule_correct:
        raise ValueError("judge_agreement needs at least one response")
    n = len(rule_correct)
    judge = [p >= threshold for p in judge_p]
    rule = [bool(r) for r in rule_correct]
    agreement = sum(r == j for r, j in zip(rule, judge, strict=True)) / n
    rule_yes, judge_yes = sum(rule) / n, sum(judge) / n
    chance = rule_yes * judge_yes + (1 - rule_yes) * (1 - judge_yes)
    kappa = (agreement - chance) / (1 - chance) if chance < 1 else float("nan")
    return {
        "n": n,
        "agreement": agreement,
        "cohen_kappa": kappa,
        "rule_only": sum(r and not j for r, j in zip(rule, judge, strict=True)),
        "judge_only": sum(j and not r for r, j in zip(rule, judge, strict=True)),
    }
