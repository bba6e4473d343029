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
    TEXT,
    TOKEN_IDS,
    OpenAIClient,
    PromptForm,
    ServerError,
    echo_params,
    prompt_logprobs,
    token_pieces,
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
    """What the checks found: the endpoint (host only), the served model, the tokens compared, the
    largest self-consistency gap and the form prompts are sent in."""

    engine: str
    endpoint: str
    model: str
    root: str | None
    max_self_gap: float
    n_probes: int
    n_tokens_compared: int
    prompt_form: PromptForm

    def describe(self) -> str:
        return (
            f"engine {self.engine} at {self.endpoint} (model {self.model!r}): prompt log-probabilities "
            f"agree with the server's own generation within {self.max_self_gap:.2g} nats on "
            f"{self.n_probes} probes (tolerance {SELF_CONSISTENCY_TOLERANCE}), tokenization equal to "
            f"kcal's on {self.n_tokens_compared} tokens; prompts sent as {self.prompt_form.form}"
        )

    def fingerprint_values(self) -> dict:
        """What scores depend on: the server, its model and the prompt form, not the probe's noise."""
        return {"engine": self.engine, "endpoint": self.endpoint, "model": self.model, "root": self.root,
                "prompts": self.prompt_form.form}  # fmt: skip


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
    form = _prompt_form(client, tokenizer, start_token_id, ids)
    compared = _same_tokens(client, tokenizer, ids)
    worst = 0.0
    for prompt in PROBE_PROMPTS:
        gap, echoed, generated, token = _self_gap(client, tokenizer, start_token_id, form, prompt)
        if gap > SELF_CONSISTENCY_TOLERANCE:
            raise ServerRefused(
                f"{host}: this server's prompt log-probabilities disagree with its own generation "
                f"({echoed:.3f} vs {generated:.3f} for {token!r} after {prompt!r}, |Δ| {gap:.3g} > "
                f"{SELF_CONSISTENCY_TOLERANCE}): it cannot score statements"
            )
        worst = max(worst, gap)
    model, root = client.endpoint.model, served.get("root")
    return ServerCheck(ENGINE, host, model, root, worst, len(PROBE_PROMPTS), compared, form)


def _prompt_form(client: OpenAIClient, tokenizer, start_token_id: int, ids: Sequence[int]) -> PromptForm:
    """Check 2, in the first form the server takes: token ids, else text (a server that refuses
    token-id prompts, as llama-cpp-python's does with an HTTP 500)."""
    start_text = tokenizer.convert_ids_to_tokens(start_token_id)
    refusals = []
    for form in (PromptForm(TOKEN_IDS, start_text), PromptForm(TEXT, start_text)):
        prompt = form.prompt(start_token_id, ids, PROBE_STATEMENT)
        try:
            (choice,) = client.completions([prompt], **echo_params())
        except ServerError as error:
            refusals.append(f"as {form.form}: {error}")
            continue
        try:
            prompt_logprobs(choice, len(ids) + 1, client.endpoint.host, form.expected_pieces(tokenizer, ids))
        except ServerError as error:
            raise ServerRefused(f"{error}: it cannot score statements") from None
        return form
    raise ServerRefused(f"{client.endpoint.host} refused the echo probe {'; '.join(refusals)}")


def _same_tokens(client: OpenAIClient, tokenizer, ids: Sequence[int]) -> int:
    """Check 3: the server's tokenization of the probe statement (sent as text) against kcal's."""
    (choice,) = client.completions([PROBE_STATEMENT], **echo_params())
    tokens = list((choice.get("logprobs") or {}).get("tokens") or [])
    mine = token_pieces(tokenizer, ids)
    # After the pieces may come the generated token (none where the model ended at once); before
    # them, a start token the server adds to a text prompt.
    if not any(
        tokens[lead : lead + len(mine)] == mine and len(tokens) - lead - len(mine) <= 1 for lead in (0, 1)
    ):
        raise ServerRefused(
            f"{client.endpoint.host}: the server tokenizes {PROBE_STATEMENT!r} as {tokens} (with what it "
            f"generated) and kcal's tokenizer as {mine}: give kcal the served model's tokenizer (--tokenizer)"
        )
    return len(mine)


def _self_gap(client: OpenAIClient, tokenizer, start_token_id: int, form: PromptForm, text: str):
    """Check 4: (|e − g|, e, g, t) for the greedy token t after `text`."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    (generated,) = client.completions(
        [form.prompt(start_token_id, ids, text)], max_tokens=1, temperature=0.0, logprobs=1
    )
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
    longer = [*ids, token_ids[0]]
    (echoed,) = client.completions([form.prompt(start_token_id, longer, text + token_text)], **echo_params())
    e = prompt_logprobs(
        echoed, len(longer) + 1, client.endpoint.host, form.expected_pieces(tokenizer, longer)
    )[-1]
    return abs(e - g), float(e), float(g), token_text
