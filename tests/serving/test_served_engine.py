"""Engine "openai": statements scored through a server's completions API equal the torch engine's,
and a server whose prompt log-probabilities cannot be trusted is refused before any scoring.

The server is tests/serving/server.py over the embedded SmolLM2 (a real LM; faults injected on
demand); vLLM's CPU build is tested by `make test-serving`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.scoring.engine import score_statements, scorer_for, scoring_choices
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, load_model
from kcal_pipeline.scoring.models.gguf import gguf_cache
from kcal_pipeline.scoring.models.loading import check_loadable, load_served
from kcal_pipeline.scoring.models.registry import ModelConfigError, ModelLoadError
from kcal_pipeline.scoring.served.checks import SELF_CONSISTENCY_TOLERANCE
from kcal_pipeline.scoring.served.client import Endpoint, OpenAIClient, ServerError, retry_after_s
from tests.serving.server import ReferenceServer

NAME = "smol"
ROWS = [  # text, subject, object, the statement proper's first words (after a context) or ""
    ("The capital of France is Paris.", "France", "Paris", ""),
    ("The capital of France is Rome.", "France", "Rome", ""),
    ("Iceland's capital is Reykjavík.", "Iceland", "Reykjavík", ""),
    ("Q: Where is Rome? A: Italy. The capital of Peru is Lima.", "Peru", "Lima", "The capital of Peru"),
    ("Abu Dhabi is the capital of the United Arab Emirates.", "United Arab Emirates", "Abu Dhabi", ""),
]


def _statement(i: int, text: str, subject: str, obj: str, proper: str) -> dict:
    start = text.index(proper) if proper else 0
    s, o = text.index(subject, start), text.index(obj, start)
    return {"statement_id": f"s{i}", "text": text, "subject_start": s, "subject_end": s + len(subject),
            "object_start": o, "object_end": o + len(obj), "context_end": start}  # fmt: skip


STATEMENTS = pl.DataFrame([_statement(i, *row) for i, row in enumerate(ROWS)])


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")


@pytest.fixture(scope="module")
def torch_model():
    return load_model(DEFAULT_MODEL, model_cache())


@pytest.fixture(scope="module")
def folder() -> str:
    return str(gguf_cache(DEFAULT_MODEL, model_cache())[0])


@pytest.fixture
def server(torch_model, folder):
    with ReferenceServer(torch_model, NAME, root=folder) as running:
        yield running


def served(server, **fields) -> ModelEntry:
    return ModelEntry(id=NAME, source="server", engine="openai", endpoint=server.url,
                      start_token="<|endoftext|>", **fields)  # fmt: skip


def test_scores_through_the_server_equal_the_torch_engines(server, torch_model):
    loaded = load_served(served(server))
    assert scorer_for(loaded, ScoringOptions())[0] == "clm-openai"
    choices = scoring_choices(loaded, ScoringOptions())  # the partition's metadata in the UI
    assert choices["endpoint"] == server.url.removesuffix("/v1") and "tokenization equal" in choices["engine"]
    got = score_statements(loaded, STATEMENTS, ScoringOptions(fast_path=False))
    want = score_statements(torch_model, STATEMENTS, ScoringOptions(fast_path=False))
    assert got["n_tokens"].to_list() == want["n_tokens"].to_list()
    assert got["token_roles"].to_list() == want["token_roles"].to_list()  # the context's 26 chars unscored
    for column in ("ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean"):
        np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(), atol=2e-4, err_msg=column)
    # The checks' 8 prompts (an echo, a text prompt, 3 × generate-then-echo), then 5 statements
    # in one request (32 a request: the entry's batch size).
    assert (server.seen.prompts, server.seen.completions) == (13, 9)
    assert loaded.engine_check.n_tokens_compared == 7  # The| capital| of| France| is| Paris|.
    assert loaded.engine_check.max_self_gap < 1e-4


def test_a_server_that_takes_only_text_gets_text_prompts_and_scores_alike(server, torch_model):
    server.faults.ids_refused = True
    loaded = load_served(served(server))
    assert loaded.engine_check.prompt_form.form == "text"
    assert loaded.engine_check.prompt_form.start_text == "<|endoftext|>"
    got = score_statements(loaded, STATEMENTS, ScoringOptions(fast_path=False))
    want = score_statements(torch_model, STATEMENTS, ScoringOptions(fast_path=False))
    np.testing.assert_allclose(got["ll_sum"].to_numpy(), want["ll_sum"].to_numpy(), atol=2e-4)
    server.faults.char_tokens = True  # now it splits statements otherwise: refused by name, not shifted
    with pytest.raises(ServerError, match=r"statement #0 'The capital of France is Paris\.'.*would not be"):
        score_statements(loaded, STATEMENTS, ScoringOptions(fast_path=False))


def test_a_text_only_server_with_wrong_prompt_logprobs_is_refused_as_llama_cpp_pythons_is(server):
    server.faults.ids_refused = server.faults.wrong_prompt_logprobs = True
    with pytest.raises(ModelLoadError, match=r"disagree with its own generation \(-\d+\.\d+ vs -0\.\d+"):
        load_served(served(server))


def test_a_server_refusing_both_forms_is_refused_naming_both(server):
    server.faults.ids_refused = True
    server.faults.fail_after = 0
    with pytest.raises(
        ModelLoadError, match=r"refused the echo probe as token ids: .*HTTP 500.*; as text: .*HTTP 500"
    ):
        load_served(served(server))


def test_a_server_failing_midway_fails_the_call_naming_the_status(server):
    loaded = load_served(served(server, batch_size=2))
    server.faults.fail_after = server.seen.completions + 1  # the first request of 2 statements only
    with pytest.raises(ServerError, match=r"POST /completions: HTTP 500: internal error"):
        score_statements(loaded, STATEMENTS, ScoringOptions())


def test_many_statements_go_in_few_requests_in_input_order(server):
    loaded = load_served(served(server, batch_size=2))
    before = server.seen.completions
    got = score_statements(loaded, STATEMENTS, ScoringOptions(fast_path=False))
    assert server.seen.completions - before == 3  # 5 statements, 2 per request
    alone = [score_statements(loaded, STATEMENTS[i : i + 1], ScoringOptions())["ll_sum"][0] for i in range(5)]
    np.testing.assert_allclose(got["ll_sum"].to_numpy(), alone, atol=1e-9)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            "wrong_prompt_logprobs",
            r"prompt log-probabilities disagree with its own generation \(-\d+\.\d+ vs -\d",
        ),
        ("no_prompt_logprobs", r"prompt token 2 of 8 has log-probability None .*it cannot score statements"),
        (
            "char_tokens",
            r"tokenizes 'The capital of France is Paris\.' as .* give kcal the served model's tokenizer",
        ),
    ],
)
def test_a_server_that_would_score_wrong_is_refused_before_scoring(server, fault, message):
    setattr(server.faults, fault, True)
    with pytest.raises(ModelLoadError, match=message):
        load_served(served(server))
    assert server.seen.prompts <= 8  # the checks' probes only


def test_a_model_the_server_does_not_serve_is_refused(server):
    entry = ModelEntry(id="other", source="server", engine="openai", endpoint=server.url, tokenizer="x")
    with pytest.raises(ModelLoadError, match=r"serves \['smol'\], not 'other'"):
        load_served(entry)


def test_without_a_readable_tokenizer_the_model_is_refused_naming_the_flag(torch_model):
    refused = pytest.raises(ModelLoadError, match=r"root '/nowhere/smol'.*--tokenizer PATH_OR_HUB_ID")
    with ReferenceServer(torch_model, NAME, root="/nowhere/smol") as server, refused:
        load_served(served(server))


def test_check_loadable_refuses_a_wrong_server_so_it_is_never_registered(server):
    server.faults.wrong_prompt_logprobs = True
    with pytest.raises(ModelLoadError, match="cannot score statements"):
        check_loadable(served(server))
    server.faults.wrong_prompt_logprobs = False
    assert check_loadable(served(server)) == "clm"


def test_429_with_retry_after_is_honoured_and_503_backs_off(server):
    waits: list[float] = []
    client = OpenAIClient(Endpoint(server.url, NAME, backoff_s=0.25), sleep=waits.append)
    server.faults.retry_after, server.faults.retry_after_s = 2, 7
    assert client.models()[0]["id"] == NAME
    assert waits == [7.0, 7.0] and client.retries == 2 and client.requests == 3
    server.faults.unavailable = 3
    client.models()
    assert waits[2:] == [0.25, 0.5, 1.0]  # no Retry-After: exponential backoff


def test_dropped_connections_and_timeouts_are_retried(server):
    waits: list[float] = []
    client = OpenAIClient(Endpoint(server.url, NAME, timeout_s=0.5), sleep=waits.append)
    server.faults.drop = 1
    assert client.models()[0]["id"] == NAME
    server.faults.slow_s = 2.0
    assert client.models()[0]["id"] == NAME
    assert len(waits) == 2


def test_a_server_that_keeps_failing_gives_up_naming_the_host_and_the_status(server):
    client = OpenAIClient(Endpoint(server.url, NAME, max_retries=2), sleep=lambda s: None)
    server.faults.unavailable = 10
    with pytest.raises(
        ServerError, match=r"http://127\.0\.0\.1:\d+ GET /models: gave up after 3 attempts; last: HTTP 503"
    ):
        client.models()


def test_a_final_status_is_raised_at_once_with_the_servers_message(server):
    client = OpenAIClient(Endpoint(server.url, "nope"), sleep=lambda s: None)
    with pytest.raises(ServerError, match=r"HTTP 404: model 'nope' does not exist"):
        client.completions(["x"], max_tokens=1)
    assert client.retries == 0


def test_the_api_key_is_read_from_the_environment_and_sent_never_shown(server, monkeypatch):
    server.faults.api_key = "s3cret-key-123"
    entry = served(server, api_key_env="KCAL_TEST_KEY")
    monkeypatch.delenv("KCAL_TEST_KEY", raising=False)
    with pytest.raises(ModelLoadError, match="the environment variable KCAL_TEST_KEY is not set") as info:
        load_served(entry)
    monkeypatch.setenv("KCAL_TEST_KEY", "wrong")
    with pytest.raises(ModelLoadError, match="HTTP 401: invalid API key") as info:
        load_served(entry)
    assert "wrong" not in str(info.value)
    monkeypatch.setenv("KCAL_TEST_KEY", "s3cret-key-123")
    loaded = load_served(entry)
    assert "s3cret" not in repr(loaded.engine_check) and "s3cret" not in loaded.revision
    assert server.seen.headers[-1]["Authorization"] == "Bearer s3cret-key-123"
    assert "s3cret" not in entry.to_dict().__repr__()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), ("0.5", 0.5), ("-3", 0.0), ("100000", 300.0), ("soon", None), (None, None),
     ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0)],
)  # fmt: skip
def test_retry_after_reads_seconds_and_http_dates(value, expected):
    now = 1445412480.0  # 2015-10-21 07:28:00 UTC
    assert retry_after_s(value, now=now) == expected


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"endpoint": "ftp://host/v1"}, r"endpoint must be an http\(s\) URL"),
        (
            {"endpoint": "http://user:pw@host/v1"},
            r"endpoint must be a URL without credentials.*got 'http://…@host'",
        ),
        ({"endpoint": "http://host/v1?key=x"}, r"endpoint must be an http\(s\) URL"),
        (
            {"endpoint": "http://host/v1", "api_key_env": "MY-KEY"},
            r"api_key_env must be the name of an environment",
        ),
        ({"endpoint": "http://host/v1", "engine": "torch"}, r"engine must be 'openai' for source 'server'"),
        ({"endpoint": "http://host/v1", "kind": "mlm"}, r"kind must be 'clm' or 'auto' for source 'server'"),
    ],
)
def test_a_bad_served_entry_names_the_field_and_the_value(fields, message):
    with pytest.raises(ModelConfigError, match=message):
        ModelEntry(id="smol", source="server", **{"engine": "openai", **fields})


def test_an_endpoint_on_a_local_model_is_refused():
    with pytest.raises(ModelConfigError, match=r"endpoint must be unset for source 'hf'"):
        ModelEntry(id="a/b", endpoint="http://host/v1")
    with pytest.raises(ModelConfigError, match=r"engine must be 'torch' or 'llama.cpp' for source 'hf'"):
        ModelEntry(id="a/b", engine="openai")


def test_the_tolerance_is_what_the_docs_say():
    text = (Path(__file__).parents[2] / "docs" / "scoring.md").read_text()
    assert f"{SELF_CONSISTENCY_TOLERANCE} nats" in text
