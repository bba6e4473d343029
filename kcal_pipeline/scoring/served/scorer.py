"""Closed-set statements scored from a server's prompt log-probabilities (engine "openai").

kcal tokenizes every statement with the tokenizer it holds for the model (the server's own, checked
at load by checks.py), puts the model's start token in front exactly as the torch engine does, and
sends the token ids as the prompt: `/v1/completions` with `echo`, `logprobs` and one generated
token (servers refuse zero), whose log-probability is dropped. The echoed log-probabilities are
then those of the statement's tokens given the start token and everything before them, and token
roles and reductions are clm.py's, from kcal's own character offsets. Several statements go in one
request, several requests are in flight (client.py); a reply that does not give exactly one finite
log-probability per statement token fails the partition, naming the statement: no score is ever
silently 0, null or shifted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from kcal_pipeline.scoring.clm import SCHEMA, Span, _frame, check_context_ends, encode_inputs, roles_of
from kcal_pipeline.scoring.served.client import (
    OpenAIClient,
    PromptForm,
    echo_params,
    index_chunks,
    prompt_logprobs,
)

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

STATEMENTS_PER_REQUEST = 16


def score_clm_served(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """clm.score_clm's rows, the log-probabilities from the server (batch_size: statements per
    request; None: the entry's batch_size)."""
    enc = encode_inputs(loaded, texts, subject_spans, object_spans, batch_size)
    if enc is None:
        return pl.DataFrame(schema=SCHEMA)
    texts, subject_spans, object_spans, batch_size, ids, offsets = enc
    ends = check_context_ends(context_ends, texts, subject_spans, object_spans)
    client: OpenAIClient = loaded.native
    form: PromptForm = loaded.engine_check.prompt_form
    prompts = [form.prompt(loaded.start_token_id, seq, text) for seq, text in zip(ids, texts, strict=True)]
    width = batch_size or loaded.batch_size or STATEMENTS_PER_REQUEST
    chunks = index_chunks(len(prompts), width)

    def run(chunk: list[int]) -> list[np.ndarray]:
        choices = client.completions([prompts[i] for i in chunk], **echo_params())
        out = []
        for choice, i in zip(choices, chunk, strict=True):
            where = f"{client.endpoint.host}, statement #{i} {texts[i]!r}"
            pieces = form.expected_pieces(loaded.tokenizer, ids[i])
            out.append(prompt_logprobs(choice, len(ids[i]) + 1, where, pieces))
        return out

    per_chunk = client.map(chunks, run, progress=_scaled(progress, chunks, len(prompts)))
    logprobs = [lp for chunk in per_chunk for lp in chunk]
    return _frame(logprobs, roles_of(offsets, subject_spans, object_spans, ends))


def _scaled(progress, chunks, total):
    if progress is None:
        return None
    sizes = [len(c) for c in chunks]
    return lambda done, _n: progress(sum(sizes[:done]), total)
