"""Before any scoring: does this server give prompt log-probabilities kcal can trust?

Servers differ in ways that silently ruin scores (issue 54): llama.cpp's `llama-server` echoes no
prompt log-probabilities, and llama-cpp-python's server echoes wrong ones (` of` −9.67 where the
model gives −0.247), while its *generated* tokens' log-probabilities are right. So, with no
reference model at hand, kcal checks the server against itself and against the tokenizer it holds:

1. the model name is one the server serves (/v1/models);
2. an echo request returns one finite log-probability per prompt token but the first;
3. the server tokenizes a statement as kcal's tokenizer does (same pieces, in order);
4. self-consistency: after a prompt P the server generates one token t greedily, with its
   log-probability g; then P + t is scored with `echo`, and the echoed log-probability e of t
   must equal g within SELF_CONSISTENCY_TOLERANCE. A server whose prompt log-probabilities
   disagree with its own generation cannot score statements.

Any failure refuses the model with the reason, before a single statement is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kcal_pipeline.scoring.served.client import (
    ENGINE,
    OpenAIClient,
    ServerError,
    echo_params,
    prompt_logprobs,
)

# |echoed − generated| log-probability of the same token after the same prompt, in nats. Prefill
# and decode run different kernels, so the two differ by float rounding (vLLM's CPU build in
# float32: ~1e-4); the failures this catches are off by nats (llama-cpp-python: −8.21 vs −0.210).
SELF_CONSISTENCY_TOLERANCE = 0.05
# Prompts whose greedy continuation is one common word; their plain statements for checks 2 and 3.
PROBE_PROMPTS = ("The capital of France is", "Water is made of hydrogen and", "One, two, three,")
PROBE_STATEMENT = "The capital of France is Paris."


class ServerRefused(ServerError):
    """The server cannot score statements for kcal; the message says why."""


@dataclass(frozen=True)
class ServerCheck:
    """What the checks found: the endpoint (host only), the served model, the tokens compared and
    the largest self-consistency gap."""

    engine: str
    endpoint: str
    model: str
    root: str | None
    max_self_gap: float
    n_probes: int
    n_tokens_compared: int

    def describe(self) -> str:
        return (
            f"engine {self.engine} at {self.endpoint} (model {self.model!r}): prompt log-probabilities "
            f"agree with the server's own generation within {self.max_self_gap:.2g} nats on "
            f"{self.n_probes} probes (tolerance {SELF_CONSISTENCY_TOLERANCE}), tokenization equal to "
            f"kcal's on {self.n_tokens_compared} tokens"
        )

    def fingerprint_values(self) -> dict:
        """What scores depend on: the server and its model, not the probe's float noise."""
        return {"engine": self.engine, "endpoint": self.endpoint, "model": self.model, "root": self.root}


def served_model(client: OpenAIClient) -> dict:
    """Check 1: the server's entry for the model (/v1/models), or ServerRefused."""
    served = {m.get("id"): m for m in client.models()}
    name = client.endpoint.model
    if name not in served:
        raise ServerRefused(f"{client.endpoint.host} serves {sorted(map(str, served))}, not {name!r}")
    return served[name]


def check_server(client: OpenAIClient, tokenizer, start_token_id: int, served: dict) -> ServerCheck:
    """Checks 2–4 (module doc) on the model `served` (served_model's); raises ServerRefused naming
    the first that fails."""
    host = client.endpoint.host
    ids = tokenizer(PROBE_STATEMENT, add_special_tokens=False)["input_ids"]
    _echoes_every_token(client, [start_token_id, *ids])
    compared = _same_tokens(client, tokenizer, ids)
    worst = 0.0
    for prompt in PROBE_PROMPTS:
        gap, echoed, generated, token = _self_gap(client, tokenizer, start_token_id, prompt)
        if gap > SELF_CONSISTENCY_TOLERANCE:
            raise ServerRefused(
                f"{host}: this server's prompt log-probabilities disagree with its own generation "
                f"({echoed:.3f} vs {generated:.3f} for {token!r} after {prompt!r}, |Δ| {gap:.3g} > "
                f"{SELF_CONSISTENCY_TOLERANCE}): it cannot score statements"
            )
        worst = max(worst, gap)
    return ServerCheck(
        ENGINE, host, client.endpoint.model, served.get("root"), worst, len(PROBE_PROMPTS), compared
    )


def _echoes_every_token(client: OpenAIClient, prompt: list[int]) -> None:
    (choice,) = client.completions([prompt], **echo_params())
    try:
        prompt_logprobs(choice, len(prompt), client.endpoint.host)
    except ServerError as error:
        raise ServerRefused(f"{error}: it cannot score statements") from None


def _same_tokens(client: OpenAIClient, tokenizer, ids: Sequence[int]) -> int:
    """The server's tokenization of the probe statement (sent as text) against kcal's."""
    (choice,) = client.completions([PROBE_STATEMENT], **echo_params())
    tokens = list((choice.get("logprobs") or {}).get("tokens") or [])
    mine = [tokenizer.decode([i]) for i in ids]
    theirs = tokens[-len(mine) - 1 : -1] if len(tokens) > len(mine) else tokens  # drop the generated token
    lead = tokens[: len(tokens) - len(mine) - 1]  # a BOS the server may add to a text prompt
    if theirs != mine or len(lead) > 1:
        raise ServerRefused(
            f"{client.endpoint.host}: the server tokenizes {PROBE_STATEMENT!r} as {tokens[:-1]} and kcal's "
            f"tokenizer as {mine}: give kcal the served model's tokenizer (--tokenizer)"
        )
    return len(mine)


def _self_gap(client: OpenAIClient, tokenizer, start_token_id: int, text: str):
    """(|e − g|, e, g, t) for the greedy token t after `text` (module doc, check 4)."""
    prompt = [start_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    (generated,) = client.completions([prompt], max_tokens=1, temperature=0.0, logprobs=1)
    logprobs = generated.get("logprobs") or {}
    token_text = (logprobs.get("tokens") or [None])[0]
    g = (logprobs.get("token_logprobs") or [None])[0]
    if token_text is None or g is None:
        raise ServerRefused(
            f"{client.endpoint.host}: a generated token came without its log-probability: it cannot "
            "sample open answers or be checked"
        )
    token_ids = tokenizer(token_text, add_special_tokens=False)["input_ids"]
    if len(token_ids) != 1:
        raise ServerRefused(
            f"{client.endpoint.host}: the generated token {token_text!r} is not one token of kcal's "
            "tokenizer: the server's vocabulary differs (give kcal the served model's --tokenizer)"
        )
    (echoed,) = client.completions([[*prompt, token_ids[0]]], **echo_params())
    e = prompt_logprobs(echoed, len(prompt) + 1, client.endpoint.host)[-1]
    return abs(e - g), float(e), float(g), token_text
