"""The llama.cpp engine (scoring/native.py): the embedded Q4_1 GGUF run natively, against the float32
torch reference; its trie of sequence ids against scoring each statement alone; and what happens
without the optional package.

The engine's own tests need `llama-cpp-python` (`make llama-cpp`, an ~8 min build the default
install leaves out); where it is absent they are skipped with that reason. The packing rule and the
refusal without the package run everywhere.
"""

import dataclasses
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelLoadError, load_model
from kcal_pipeline.scoring.models.loading import check_loadable
from kcal_pipeline.scoring.prefix import pack_rows

NATIVE = dataclasses.replace(DEFAULT_MODEL, engine="llama.cpp")
needs_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed (make llama-cpp)"
)

PAIRS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Japan", "Tokyo")]
TEMPLATES = ["The capital of [X] is [Y].", "[Y] is the capital of [X].", "[X]'s capital city: [Y]"]
FILLED = [fill(t, x, y) for t in TEMPLATES for x, _ in PAIRS for _, y in PAIRS]  # every option


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")


def test_rows_hold_at_most_max_members_sequences():
    seqs = [(1, 2, 100 + i) for i in range(10)] + [(1, 3)]
    rows = pack_rows(seqs, 0, row_tokens=1_000, max_members=4)
    assert [len(r.members) for r in rows] == [4, 4, 3]
    assert sorted(u for r in rows for u, _ in r.members) == list(range(11))
    for row in rows:  # each row still a trie: the shared (1, 2) once per row
        assert row.tokens.count(1) == 1 and row.tokens.count(2) == 1
        for u, path in row.members:
            assert [row.tokens[node] for node in path] == list(seqs[u])


def test_without_the_package_the_entry_is_refused_with_the_remedy(monkeypatch):
    real = importlib.util.find_spec
    hidden = lambda name, *a: None if name == "llama_cpp" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hidden)
    remedy = r"engine 'llama.cpp' needs the optional package llama-cpp-python.*make llama-cpp"
    with pytest.raises(ModelLoadError, match=remedy):
        check_loadable(NATIVE)


@pytest.fixture(scope="module")
def engines():
    return load_model(DEFAULT_MODEL, model_cache()), load_model(NATIVE, model_cache())


def score_texts(loaded, texts, subject_spans, object_spans):
    from kcal_pipeline.scoring.native import score_clm_native

    return score_clm_native(loaded, texts, subject_spans, object_spans)


def score(loaded, filled, scorer=None):
    from kcal_pipeline.core.options import ScoringOptions
    from kcal_pipeline.scoring.engine import scorer_for

    scorer = scorer or scorer_for(loaded, ScoringOptions())[1]
    spans = [f.subject_span for f in filled], [f.object_span for f in filled]
    return scorer(loaded, [f.text for f in filled], *spans)


@needs_llama_cpp
def test_native_scores_stay_near_the_float32_reference(engines):
    """Q4_1 weights on llama.cpp's kernels: same tokens and roles, log-probs within quantisation
    noise of the dequantized float32 model, and the same best option for most candidate sets."""
    exact, native = engines
    assert native.engine == "llama.cpp" and native.engine_check.n_tokens > 0
    ref, got = score(exact, FILLED), score(native, FILLED)
    assert got["n_tokens"].to_list() == ref["n_tokens"].to_list()
    assert got["token_roles"].to_list() == ref["token_roles"].to_list()
    tokens = lambda f: np.concatenate(f["token_logprobs"].to_list())  # noqa: E731
    diff = np.abs(tokens(got) - tokens(ref))
    assert 0 < diff.mean() < 0.15 and diff.max() < 2.0  # quantisation moves every token a little
    best = lambda f: f["ll_sum"].to_numpy().reshape(-1, len(PAIRS)).argmax(1)  # noqa: E731
    assert (best(got) == best(ref)).mean() >= 0.75


# llama.cpp's matmul kernels depend on how many tokens a call holds (small calls and large ones take
# different paths, and SmolLM2's ~2e4 start-token activations make 8-bit activation blocks coarse),
# so one statement's scores move by up to ~0.1 nats per token with the call it is in. A token that
# saw another branch's cells would be off by whole nats; these bounds tell the two apart.
SHAPE_TOKEN_MAX, SHAPE_TOKEN_MEAN = 1.0, 0.1


def assert_same_up_to_call_shape(got: list, want: list) -> None:
    diff = np.abs(np.concatenate(got) - np.concatenate(want))
    assert diff.max() < SHAPE_TOKEN_MAX and diff.mean() < SHAPE_TOKEN_MEAN, (diff.max(), diff.mean())


@needs_llama_cpp
def test_the_trie_of_sequence_ids_equals_scoring_each_statement_alone(engines):
    """Shared prefixes computed once give each statement the scores it gets in a call of its own (up
    to the kernels' call-shape rounding); the same call twice gives identical scores; input order
    changes nothing but the call's layout."""
    _, native = engines
    together = score(native, FILLED)
    alone = [score(native, [f])["token_logprobs"][0].to_numpy() for f in FILLED]
    assert_same_up_to_call_shape(together["token_logprobs"].to_list(), alone)
    assert score(native, FILLED)["ll_sum"].to_list() == together["ll_sum"].to_list()
    shuffled = score(native, FILLED[::-1])["token_logprobs"].to_list()[::-1]
    assert_same_up_to_call_shape(shuffled, together["token_logprobs"].to_list())


@needs_llama_cpp
def test_a_statement_sees_only_its_own_branch(engines):
    """Same call layout, different sibling text: the statement's scores are bit for bit the same,
    so no token attends to another branch's cells (call-shape effects cannot hide a leak here)."""
    _, native = engines
    a = "The capital of France is Paris, a city on the Seine."
    siblings = [
        "The capital of France is Berlin, a city on the Spree.",
        "The capital of France is Tokyo, a city on the Sumida.",
    ]
    tokens = [len(native.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in siblings]
    assert tokens[0] == tokens[1]
    spans = [(0, 3), (0, 3)], [(25, 30), (25, 30)]
    first = score_texts(native, [a, siblings[0]], *spans)
    second = score_texts(native, [a, siblings[1]], *spans)
    assert first["token_logprobs"][0].to_list() == second["token_logprobs"][0].to_list()
    assert first["ll_sum"][1] != second["ll_sum"][1]


@needs_llama_cpp
def test_calls_split_at_the_sequence_limit(engines, monkeypatch):
    """More distinct statements than llama.cpp's sequence ids per call: split, nothing lost."""
    import kcal_pipeline.scoring.native as native_module

    _, native = engines
    base = score(native, FILLED)
    monkeypatch.setattr(native_module, "MAX_SEQUENCES", 5)
    split = score(native, FILLED)
    assert split["n_tokens"].to_list() == base["n_tokens"].to_list()
    assert_same_up_to_call_shape(split["token_logprobs"].to_list(), base["token_logprobs"].to_list())


@needs_llama_cpp
def test_the_engine_is_in_the_fingerprint_and_refuses_dropout(engines):
    import polars as pl

    from kcal_pipeline.core.options import ScoringOptions
    from kcal_pipeline.scoring.engine import fingerprint, score_statements, scorer_for, scoring_choices

    exact, native = engines
    frame = pl.DataFrame(
        {
            "statement_id": ["s0"],
            "text": [FILLED[0].text],
            "subject_start": [FILLED[0].subject_span[0]],
            "subject_end": [FILLED[0].subject_span[1]],
            "object_start": [FILLED[0].object_span[0]],
            "object_end": [FILLED[0].object_span[1]],
        }
    )
    options = ScoringOptions()
    assert fingerprint(native, frame, options) != fingerprint(exact, frame, options)
    assert scorer_for(native, options)[0] == "clm-llama.cpp"
    assert "not float32" in scoring_choices(native, options)["engine"]
    with pytest.raises(ValueError, match=r"engine = 'llama.cpp', which has no dropout"):
        score_statements(native, frame, ScoringOptions(dropout=True, dropout_rate=0.1))
