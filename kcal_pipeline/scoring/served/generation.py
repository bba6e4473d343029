"""Open answers through a server (engine "openai"): generation.SCHEMA's rows drawn by the server,
exact where the server allows and marked where it cannot be.

Each question is asked exactly as the torch sampler asks it (generation.prompt_ids: the model's
chat template, or the completion prompt, tokenized by kcal) and sent as token ids. The greedy rows
of several questions share a request (temperature 0); each question's N samples are one request
(`n`, `temperature`, `top_p`, and `seed` = the torch sampler's per-question seed, so a server that
honours seeds, as vLLM does, draws the same samples again). Every generated token comes back as its
id (`return_tokens_as_token_ids`) with its log-probability; kcal's own stop rule (stop_token_ids,
also sent as `stop_token_ids` so the server stops early) is applied to those ids, so a row ends at
the same token as on torch, its stop token counted in logprob_sum, whatever the server does after.

What a server cannot give is never approximated: entropy_mean needs the whole next-token
distribution at every step and a server returns its top few log-probabilities, so it is null
(ENTROPY_UNAVAILABLE says why, in the partition's metadata). The judge prompts' p(True) is exact:
the two continuations " True" and " False" are echo-scored, with the prompt log-probabilities
checks.py vouched for.

check_generation runs before any answer is drawn: sampled tokens' log-probabilities must be the
model's own (temperature 1, before top-p), i.e. equal to what the same server echoes for the same
tokens within SELF_CONSISTENCY_TOLERANCE. A server that reports tempered or filtered
log-probabilities, or no ids, is refused for open answers, naming why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from kcal_pipeline.scoring.generation import (
    ANSWER_PROMPT,
    SCHEMA,
    GenerationSettings,
    NextTokenReading,
    Question,
    check_keys,
    generator_seed,
    prompt_ids,
    stop_token_ids,
)
from kcal_pipeline.scoring.served.checks import SELF_CONSISTENCY_TOLERANCE, ServerRefused
from kcal_pipeline.scoring.served.client import (
    TOKEN_IDS,
    OpenAIClient,
    ServerError,
    echo_params,
    index_chunks,
    prompt_logprobs,
)

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

ENTROPY_UNAVAILABLE = (
    "null: a server returns the top few log-probabilities of each step, not the whole distribution "
    "an entropy needs (never approximated)"
)
GREEDY_PROMPTS_PER_REQUEST = 16
TOKEN_ID_PREFIX = "token_id:"  # vLLM's and SGLang's spelling of a token under return_tokens_as_token_ids
PROBE_QUESTION = "What is the capital of France?"
# The check's draws: tempered and filtered, so a server reporting the sampler's log-probabilities
# instead of the model's differs from its echo by far more than the tolerance.
PROBE_SAMPLING = {"n": 2, "temperature": 0.7, "top_p": 0.95, "seed": 0}
PROBE_TOKENS = 6


@dataclass(frozen=True)
class GenerationCheck:
    """What check_generation found: the largest |generated − echoed| log-probability over its tokens."""

    max_gap: float
    n_tokens: int

    def describe(self) -> str:
        return (
            f"sampled tokens' log-probabilities equal the server's echo of them within {self.max_gap:.2g} "
            f"nats on {self.n_tokens} tokens (tolerance {SELF_CONSISTENCY_TOLERANCE}); entropy_mean "
            f"{ENTROPY_UNAVAILABLE}"
        )


def _client(loaded: LoadedModel) -> OpenAIClient:
    """The model's client, for token-id prompts only: a question is its chat template's ids."""
    client: OpenAIClient = loaded.native
    if loaded.engine_check.prompt_form.form != TOKEN_IDS:
        raise ServerRefused(
            f"{client.endpoint.host} takes text prompts only: open answers are asked as token ids "
            "(the model's chat template as kcal tokenizes it), so this server cannot draw them"
        )
    return client


def _sampling(max_tokens: int, stops: set[int] | None = None) -> dict:
    """What every generation request asks besides its prompts and sampler."""
    return {"max_tokens": max_tokens, "logprobs": 1, "return_tokens_as_token_ids": True,
            "stop_token_ids": sorted(stops or ())}  # fmt: skip


def check_generation(loaded: LoadedModel) -> GenerationCheck:
    """Draw PROBE_SAMPLING's tokens after PROBE_QUESTION, echo-score them, compare; ServerRefused
    naming the token that disagrees."""
    client = _client(loaded)
    host = client.endpoint.host
    ids = prompt_ids(loaded, PROBE_QUESTION)[0]
    drawn = client.completions([ids], **_sampling(PROBE_TOKENS), **PROBE_SAMPLING)
    samples = [_generated(choice, host) for choice in drawn]
    echoed = client.completions([ids + tokens for tokens, _ in samples], **echo_params())
    worst, count = 0.0, 0
    for (tokens, values), echo in zip(samples, echoed, strict=True):
        if not tokens:
            continue
        echo_values = prompt_logprobs(echo, len(ids) + len(tokens), host)[-len(tokens) :]
        gaps = np.abs(echo_values - np.asarray(values))
        at = int(np.argmax(gaps))
        if gaps[at] > SELF_CONSISTENCY_TOLERANCE:
            token = loaded.tokenizer.decode([tokens[at]])
            raise ServerRefused(
                f"{host}: this server's log-probabilities of sampled tokens are not the model's own "
                f"({values[at]:.3f} reported vs {echo_values[at]:.3f} echoed for {token!r}, |Δ| "
                f"{gaps[at]:.3g} > {SELF_CONSISTENCY_TOLERANCE}; tempered or top-p-filtered?): it "
                "cannot draw open answers"
            )
        worst, count = max(worst, float(gaps[at])), count + len(tokens)
    if not count:
        raise ServerRefused(f"{host}: asked for {PROBE_TOKENS} sampled tokens, the server returned none")
    return GenerationCheck(worst, count)


def served_abilities(loaded: LoadedModel) -> list[str]:
    """What `kcal models add` says of a served model it registers: how its statements are scored
    (checks.py passed, or the model was refused before this), and whether it can draw open answers
    (check_generation), with the reason where not: a server that scores but cannot draw is still
    registered, and `kcal demo --generate` refuses it by the same reason."""
    lines = [f"scoring: {loaded.engine_check.describe()}"]
    try:
        lines.append(f"open answers: {check_generation(loaded).describe()}")
    except ServerError as error:
        lines.append(f"open answers: refused: {error}")
    return lines


def _generated(choice: dict, where: str) -> tuple[list[int], list[float]]:
    """The generated tokens' ids and log-probabilities of one choice, or ServerError saying why."""
    logprobs = choice.get("logprobs") or {}
    pieces, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if not isinstance(pieces, list) or not isinstance(values, list) or len(pieces) != len(values):
        raise ServerError(f"{where}: generated tokens without one log-probability each: {logprobs!r:.160}")
    ids = []
    for piece in pieces:
        if not (isinstance(piece, str) and piece.startswith(TOKEN_ID_PREFIX)):
            raise ServerRefused(
                f"{where}: generated tokens come back as text ({piece!r}), not as ids: kcal needs ids "
                "to apply its stop rule and decode answers (`return_tokens_as_token_ids`, as vLLM and "
                "SGLang give)"
            )
        ids.append(int(piece.removeprefix(TOKEN_ID_PREFIX)))
    bad = [v for v in values if not isinstance(v, (int, float)) or isinstance(v, bool) or not v <= 0]
    if bad:
        raise ServerError(f"{where}: a generated token has log-probability {bad[0]!r} (expected <= 0)")
    return ids, [float(v) for v in values]


def _one_token(choice: dict, where: str) -> tuple[int, float]:
    """The one token (and its log-probability) a judge reads: max_tokens 1, no stop tokens."""
    ids, values = _generated(choice, where)
    if len(ids) != 1:
        raise ServerError(f"{where}: {len(ids)} tokens for one next token (max_tokens 1)")
    return ids[0], values[0]


def generate_answers_served(
    loaded: LoadedModel,
    questions: Sequence[Question],
    keys: Sequence[str],
    settings: GenerationSettings,
    progress: Callable[[int, int], None] | None = None,
    *,
    prompt: str = ANSWER_PROMPT,
    stop: str = "line",
) -> pl.DataFrame:
    """generation.generate_answers' rows (entropy_mean null), drawn by the server."""
    check_keys(questions, keys)
    client = _client(loaded)
    stops = stop_token_ids(loaded, stop)
    prompts = [prompt_ids(loaded, q)[0] for q in questions]
    common = _sampling(settings.max_new_tokens, stops)
    requests = [("greedy", chunk) for chunk in index_chunks(len(prompts), GREEDY_PROMPTS_PER_REQUEST)]
    if settings.n_samples:
        requests += [("sampled", [i]) for i in range(len(prompts))]

    def run(request: tuple[str, list[int]]) -> list[tuple[int, int, dict]]:
        kind, chosen = request
        batch = [prompts[i] for i in chosen]
        if kind == "greedy":
            choices = client.completions(batch, temperature=0.0, **common)
            return [(i, 0, choice) for i, choice in zip(chosen, choices, strict=True)]
        (i,) = chosen
        choices = client.completions(
            batch, n=settings.n_samples, temperature=settings.temperature, top_p=settings.top_p,
            seed=generator_seed(settings.seed, keys[i], prompt), **common,
        )  # fmt: skip
        return [(i, sample, choice) for sample, choice in enumerate(choices, start=1)]

    drawn = client.map(requests, run, progress=_per_question(progress, len(requests), len(prompts)))
    rows = []
    for i, sample, choice in sorted((item for part in drawn for item in part), key=_order):
        where = f"{client.endpoint.host}, question {keys[i]!r} ({prompt}), sample {sample}"
        rows.append(_row(loaded, choice, stops, settings.max_new_tokens, keys[i], prompt, sample, where))
    return pl.DataFrame(rows, schema=SCHEMA)


def _order(item: tuple[int, int, dict]) -> tuple[int, int]:
    return item[0], item[1]


def _per_question(progress, requests: int, questions: int):
    if progress is None:
        return None
    return lambda done, _total: progress(round(done / requests * questions), questions)


def _row(
    loaded: LoadedModel, choice: dict, stops: set[int], max_tokens: int, key: str, prompt: str,
    sample: int, where: str,
) -> dict:  # fmt: skip
    """One SCHEMA row: the tokens up to kcal's first stop token (scored, not kept), as on torch."""
    ids, values = _generated(choice, where)
    tokens, total, scored, ended, stop_token = [], 0.0, 0, "length", None
    for token, value in zip(ids, values, strict=True):
        total, scored = total + value, scored + 1
        if token in stops:
            ended, stop_token = "stop", token
            break
        tokens.append(token)
    if len(tokens) > max_tokens or (ended == "length" and len(tokens) < max_tokens):
        raise ServerError(
            f"{where}: the server returned {len(ids)} tokens for max_tokens {max_tokens}, ending "
            f"{choice.get('finish_reason')!r} (stop_reason {choice.get('stop_reason')!r}) without a "
            "stop token kcal knows: the answer's end is not the model's"
        )
    return {
        "instance_id": key,
        "prompt": prompt,
        "sample": sample,
        "response": loaded.tokenizer.decode(tokens, skip_special_tokens=True).strip(),
        "token_ids": tokens,
        "n_tokens": len(tokens),
        "n_scored": scored,
        "logprob_sum": total,
        "logprob_mean": total / scored,
        "entropy_mean": None,
        "stop": ended,
        "stop_token": stop_token,
        "p_true": None,
    }


def next_token_readings_served(
    loaded: LoadedModel,
    prompts: Sequence[Sequence[int]],
    pair: tuple[int, int],
    settings: GenerationSettings,
    seeds: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[NextTokenReading]:
    """generation.next_token_readings through the server: the pair's log-probabilities echo-scored
    (exact), the greedy token at temperature 0, settings.n_samples tokens drawn per prompt with
    its seed; no entropy."""
    client = _client(loaded)
    host = client.endpoint.host
    chunks = index_chunks(len(prompts), GREEDY_PROMPTS_PER_REQUEST)
    requests = [("pair", c) for c in chunks] + [("greedy", c) for c in chunks]
    if settings.n_samples and seeds is not None:
        requests += [("sampled", [i]) for i in range(len(prompts))]

    def run(request: tuple[str, list[int]]) -> list[tuple[str, int, object]]:
        kind, chosen = request
        if kind == "pair":
            sequences = [[*prompts[i], token] for i in chosen for token in pair]
            choices = client.completions(sequences, **echo_params())
            values = [prompt_logprobs(c, len(s), host)[-1] for c, s in zip(choices, sequences, strict=True)]
            return [(kind, i, (values[2 * k], values[2 * k + 1])) for k, i in enumerate(chosen)]
        if kind == "greedy":
            choices = client.completions([prompts[i] for i in chosen], temperature=0.0, **_sampling(1))
            return [(kind, i, _one_token(c, host)) for i, c in zip(chosen, choices, strict=True)]
        (i,) = chosen
        choices = client.completions(
            [prompts[i]], n=settings.n_samples, temperature=settings.temperature, top_p=settings.top_p,
            seed=seeds[i], **_sampling(1),
        )  # fmt: skip
        return [(kind, i, [_one_token(c, host) for c in choices])]

    found: dict[tuple[str, int], object] = {}
    for part in client.map(requests, run, progress=_per_question(progress, len(requests), len(prompts))):
        found.update({(kind, i): value for kind, i, value in part})
    readings = []
    for i in range(len(prompts)):
        drawn = [found[("greedy", i)], *found.get(("sampled", i), [])]
        readings.append(
            NextTokenReading(
                pair=found[("pair", i)],
                tokens=[token for token, _ in drawn],
                logprobs=[value for _, value in drawn],
                entropy=None,
            )
        )
    return readings
