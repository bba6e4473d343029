"""Open answers through a server (engine "openai"): greedy rows and p(True) equal the torch engine's,
sampled rows are the model's own log-probabilities of the tokens drawn, kcal's stop rule holds on
every row, and a server that cannot draw them truthfully is refused before any answer is drawn.

The server is tests/serving/server.py over the embedded SmolLM2 (a real LM, float64 log-softmax);
vLLM's CPU build draws them in `make test-serving` (tests/real_servers/test_vllm.py)."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from kcal_pipeline.core.options import GenerationOptions
from kcal_pipeline.scoring import answering, generation, prompted
from kcal_pipeline.scoring.models.loading import load_served
from kcal_pipeline.scoring.open_answers import generate_partition
from kcal_pipeline.scoring.served.checks import ServerRefused
from kcal_pipeline.scoring.served.client import ServerError
from kcal_pipeline.scoring.served.generation import ENTROPY_UNAVAILABLE, check_generation
from tests.conftest import run_kcal
from tests.serving.server import Faults, ReferenceServer
from tests.serving.test_served_engine import folder, served, torch_model  # noqa: F401 (fixtures)

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?"]
KEYS = ["q1", "q2"]
SETTINGS = generation.GenerationSettings(n_samples=2, max_new_tokens=5, temperature=0.9, top_p=0.95)
EXACT = ["response", "token_ids", "n_tokens", "n_scored", "stop", "stop_token"]


@pytest.fixture(scope="module")
def running(torch_model, folder):  # noqa: F811
    with ReferenceServer(torch_model, "smol", root=folder) as server:
        yield server, load_served(served(server))  # checked once for the module


@pytest.fixture
def server(running):
    running[0].faults = Faults()  # each test sets its own
    return running[0]


@pytest.fixture
def loaded(running):
    return running[1]


def _model_logprob(model, prompt: list[int], continuation: list[int]) -> float:
    """Reference: log p(continuation | prompt) from one plain forward of the torch model."""
    with torch.inference_mode():
        logits = model.model(input_ids=torch.tensor([prompt + continuation])).logits[0].double()
    log_p = torch.log_softmax(logits, dim=-1)
    return sum(float(log_p[len(prompt) - 1 + k, t]) for k, t in enumerate(continuation))


def test_greedy_answers_through_the_server_equal_the_torch_engines(loaded, torch_model):  # noqa: F811
    got = answering.generate_answers(loaded, QUESTIONS, KEYS, SETTINGS)
    want = generation.generate_answers(torch_model, QUESTIONS, KEYS, SETTINGS)
    assert got.schema == want.schema
    assert got.select("instance_id", "sample").rows() == want.select("instance_id", "sample").rows()
    greedy_got, greedy_want = (f.filter(pl.col("sample") == 0) for f in (got, want))
    assert greedy_got.select(EXACT).rows() == greedy_want.select(EXACT).rows()
    assert (greedy_got["logprob_sum"] - greedy_want["logprob_sum"]).abs().max() < 1e-4
    assert got["entropy_mean"].null_count() == got.height  # never approximated
    assert want["entropy_mean"].null_count() == 0


def test_sampled_answers_are_the_models_own_and_stop_by_kcals_rule(loaded, torch_model, server):  # noqa: F811
    rows = answering.generate_answers(loaded, QUESTIONS, KEYS, SETTINGS)
    stops = generation.stop_token_ids(torch_model, "line")
    assert rows.group_by("instance_id").len().sort("instance_id")["len"].to_list() == [3, 3]
    for row in rows.iter_rows(named=True):
        prompt = generation.prompt_ids(torch_model, QUESTIONS[KEYS.index(row["instance_id"])])[0]
        scored = row["token_ids"] + ([row["stop_token"]] if row["stop"] == "stop" else [])
        assert row["n_scored"] == len(scored) and not set(row["token_ids"]) & stops
        assert row["stop"] == "stop" or row["n_tokens"] == SETTINGS.max_new_tokens
        assert row["stop"] != "stop" or row["stop_token"] in stops
        assert row["logprob_sum"] == pytest.approx(_model_logprob(torch_model, prompt, scored), abs=1e-4)
        assert row["logprob_mean"] == pytest.approx(row["logprob_sum"] / row["n_scored"])
    assert rows.filter(pl.col("sample") > 0)["response"].n_unique() > 1  # drawn, not greedy repeated
    # The same seed draws the same samples again; another seed others.
    assert answering.generate_answers(loaded, QUESTIONS, KEYS, SETTINGS).equals(rows)
    reseeded = answering.generate_answers(loaded, QUESTIONS, KEYS, generation.GenerationSettings(
        n_samples=2, max_new_tokens=5, temperature=0.9, top_p=0.95, seed=1))  # fmt: skip
    assert reseeded["token_ids"].to_list() != rows["token_ids"].to_list()


def test_judge_and_double_turn_prompts_equal_the_torch_engines(loaded, torch_model):  # noqa: F811
    answers = generation.generate_answers(torch_model, QUESTIONS, KEYS, SETTINGS)
    asked = ("p_true", "self_ask")  # a judge (one next token) and a greedy double-turn prompt
    got = prompted.generate_prompted(loaded, QUESTIONS, KEYS, answers, SETTINGS, prompts=asked)
    want = prompted.generate_prompted(torch_model, QUESTIONS, KEYS, answers, SETTINGS, prompts=asked)
    keys = ["instance_id", "prompt", "sample"]
    assert got.select(keys).rows() == want.select(keys).rows()
    self_ask = pl.col("prompt") == "self_ask"
    assert got.filter(self_ask).select(EXACT).rows() == want.filter(self_ask).select(EXACT).rows()
    got, want = got.filter(~self_ask), want.filter(~self_ask)
    assert (got["p_true"] - want["p_true"]).abs().max() < 1e-5
    greedy = pl.col("sample") == 0
    assert got.filter(greedy)["token_ids"].to_list() == want.filter(greedy)["token_ids"].to_list()
    assert got["response"].is_in(["true", "false", "other"]).all()
    assert got["entropy_mean"].null_count() == got.height
    items = [(QUESTIONS[0], "Paris", ["Paris"]), (QUESTIONS[1], "Dickens", ["William Shakespeare"])]
    assert prompted.judge_equivalence(loaded, items) == pytest.approx(
        prompted.judge_equivalence(torch_model, items), abs=1e-5
    )


def test_generate_partition_through_the_server_checks_it_first_and_says_what_is_null(
    loaded, server, tmp_path
):
    questions = pl.DataFrame({"instance_id": KEYS[:1], "question": QUESTIONS[:1]})
    options = GenerationOptions(n_samples=1, max_new_tokens=2, prompted=False)
    result = generate_partition(loaded, questions, options, tmp_path, "P36")
    meta = result.metadata
    assert meta["engine"] == "openai" and meta["endpoint"] == server.url.removesuffix("/v1")
    assert "sampled tokens' log-probabilities equal the server's echo" in meta["engine_check"]
    assert meta["entropy_mean"] == ENTROPY_UNAVAILABLE
    assert result.frame.select("prompt", "sample").rows() == [("answer", 0), ("answer", 1)]
    assert result.frame["logprob_sum"].is_between(-1e3, 0).all()


def test_a_server_reporting_the_samplers_log_probabilities_is_refused_for_open_answers(
    loaded, server, tmp_path
):
    assert check_generation(loaded).max_gap < 1e-4
    server.faults.processed_logprobs = True
    with pytest.raises(ServerRefused, match=r"not the model's own \(-\d+\.\d+ reported vs -\d+\.\d+ echoed"):
        check_generation(loaded)
    questions = pl.DataFrame({"instance_id": ["q1"], "question": [QUESTIONS[0]]})
    drawn = server.seen.completions
    with pytest.raises(ServerRefused, match="cannot draw open answers"):
        options = GenerationOptions(n_samples=1, max_new_tokens=2)
        generate_partition(loaded, questions, options, tmp_path, "P36")
    assert server.seen.completions == drawn + 2  # the check's draw and echo, then nothing


def test_tokens_as_text_or_a_text_only_server_are_refused_naming_why(loaded, server):
    server.faults.text_tokens = True
    with pytest.raises(ServerRefused, match=r"come back as text .*return_tokens_as_token_ids"):
        answering.generate_answers(loaded, QUESTIONS[:1], KEYS[:1], SETTINGS)
    server.faults.text_tokens, server.faults.no_tokens = False, True
    with pytest.raises(ServerRefused, match=r"asked for 6 sampled tokens, the server returned none"):
        check_generation(loaded)
    server.faults.no_tokens, server.faults.ids_refused = False, True
    text_only = load_served(served(server))
    with pytest.raises(ServerRefused, match="takes text prompts only"):
        check_generation(text_only)


def test_models_add_says_whether_a_served_model_can_draw_open_answers(server, tmp_path):
    add = ("models", "add", "smol", "--engine", "openai", "--endpoint", server.url, "--start-token",
           "<|endoftext|>")  # fmt: skip
    able = run_kcal(tmp_path / "able", *add)
    assert able.returncode == 0, able.stderr
    assert "scoring: engine openai at" in able.stdout
    assert "open answers: sampled tokens' log-probabilities equal the server's echo" in able.stdout
    server.faults.processed_logprobs = True  # it still scores: registered, and told why it cannot draw
    unable = run_kcal(tmp_path / "unable", *add)
    assert unable.returncode == 0, unable.stderr
    assert "open answers: refused: " in unable.stdout and "cannot draw open answers" in unable.stdout


def test_a_generation_the_server_fails_midway_resumes_without_lost_or_doubled_rows(loaded, server, tmp_path):
    questions = pl.DataFrame({"instance_id": KEYS, "question": QUESTIONS})
    options = GenerationOptions(n_samples=2, max_new_tokens=3, prompted=False)
    # The check's 2 requests and the first question's 2 (greedy, samples); then HTTP 500.
    server.faults.fail_after = server.seen.completions + 4
    with pytest.raises(ServerError, match=r"HTTP 500"):
        generate_partition(loaded, questions, options, tmp_path, "P36", chunk_size=1)
    server.faults.fail_after = None
    said: list[str] = []
    result = generate_partition(loaded, questions, options, tmp_path, "P36", log=said.append, chunk_size=1)
    assert "P36: resumed 1 of 2 chunks from an interrupted run" in said
    assert result.metadata["chunks_resumed"] == 1
    assert result.frame.select("instance_id", "sample").rows() == [(k, s) for k in KEYS for s in range(3)]
    # The resumed chunk's rows are those a fresh run draws (the server honours the seeds).
    fresh = generate_partition(loaded, questions, options, tmp_path / "fresh", "P36", chunk_size=1)
    assert fresh.frame.equals(result.frame)
