"""Monte-Carlo dropout scoring: the real embedded model (SmolLM2, no dropout of its own, so a user
rate) and a tiny real BERT (dropout 0.1 of its own, which is always what it runs with)."""

import json
import os
from pathlib import Path

import polars as pl
import pytest
import torch
from torch import nn

from bench._data import build_tiny_mlm
from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring.clm import score_clm
from kcal_pipeline.scoring.engine import score_statements
from kcal_pipeline.scoring.mlm import score_mlm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, load_model
from kcal_pipeline.scoring.stochastic import dropout_enabled, dropout_plan, dropout_scores, dropout_sites

FILLED = [
    fill("The capital of [X] is [Y].", "France", "Paris"),
    fill("[Y] is the capital of [X].", "Peru", "Lima"),
    fill("The capital of [X] is [Y].", "Iceland", "Reykjavík"),
]
M = 3


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


def run(loaded, seed=7, rate=0.1, passes=M, **kw) -> pl.DataFrame:
    return dropout_scores(
        loaded,
        [f.text for f in FILLED],
        [f.subject_span for f in FILLED],
        [f.object_span for f in FILLED],
        passes=passes,
        seed=seed,
        rate=rate,
        **kw,
    )


def attention_dropouts(model) -> list[float]:
    return [s.module.attention_dropout for s in dropout_sites(model)]


@pytest.fixture(scope="module")
def first(loaded):
    return run(loaded)


def test_shape_and_columns(first):
    assert first.schema == {
        "ll_sum_dropout": pl.List(pl.Float64),
        "ll_answer_sum_dropout": pl.List(pl.Float64),
        "dropout_rate": pl.Float64,
        "dropout_source": pl.String,
    }
    assert first.height == len(FILLED)
    assert first["ll_sum_dropout"].list.len().to_list() == [M] * len(FILLED)
    # SmolLM2 has no dropout of its own: the passes ran at the user's rate, and the rows say so.
    assert first["dropout_rate"].to_list() == [0.1] * 3 and first["dropout_source"].to_list() == ["user"] * 3


def test_same_seed_same_values_other_seed_other_values_and_rng_untouched(loaded, first):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    again = run(loaded)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's RNG stream is not consumed
    assert again.equals(first)
    other = run(loaded, seed=8, passes=1)
    # Pass p is seeded with seed + p: seed 8's first pass is seed 7's second, not its first.
    assert [v[0] for v in other["ll_sum_dropout"].to_list()] == [
        v[1] for v in first["ll_sum_dropout"].to_list()
    ]
    assert [v[0] for v in other["ll_sum_dropout"].to_list()] != [
        v[0] for v in first["ll_sum_dropout"].to_list()
    ]


def test_passes_differ_from_each_other_and_from_eval_mode(loaded, first):
    plain = score_clm(
        loaded, [f.text for f in FILLED], [f.subject_span for f in FILLED], [f.object_span for f in FILLED]
    )
    for values, eval_score in zip(first["ll_sum_dropout"].to_list(), plain["ll_sum"].to_list(), strict=True):
        assert len(set(values)) == M and eval_score not in values
    dropout_answers = first["ll_answer_sum_dropout"].to_list()
    for total, answer in zip(first["ll_sum_dropout"].to_list(), dropout_answers, strict=True):
        # the answer is part of the sentence
        assert all(a < 0 and t < a for t, a in zip(total, answer, strict=True))


def test_model_is_restored_after_the_passes(loaded, first):
    assert not loaded.model.training and not any(m.training for m in loaded.model.modules())
    assert set(attention_dropouts(loaded.model)) == {0.0}


def test_restored_after_an_error_inside_the_context(loaded):
    with pytest.raises(RuntimeError, match="boom"), dropout_enabled(loaded.model, rate=0.25) as sites:
        assert len(sites) == loaded.model.config.num_hidden_layers  # one per attention block
        assert {s.attribute for s in sites} == {"attention_dropout"}
        assert set(attention_dropouts(loaded.model)) == {0.25} and all(s.module.training for s in sites)
        assert not loaded.model.training  # only the dropout sites are switched to training
        raise RuntimeError("boom")
    assert not any(m.training for m in loaded.model.modules())
    assert set(attention_dropouts(loaded.model)) == {0.0}

    def failing_scorer(*args, **kwargs):
        raise RuntimeError("scorer failed")

    with pytest.raises(RuntimeError, match="scorer failed"):
        run(loaded, scorer=failing_scorer)
    assert not any(m.training for m in loaded.model.modules()) and set(attention_dropouts(loaded.model)) == {
        0.0
    }


def test_dropout_applies_under_inference_mode():
    layer = nn.Dropout(0.5).eval()
    with dropout_enabled(layer), torch.inference_mode():
        assert (layer(torch.ones(1000)) == 0).any()
    assert not layer.training and layer.p == 0.5
    with torch.inference_mode():
        assert (layer(torch.ones(1000)) == 1).all()


def test_own_dropout_is_used_whatever_the_rate_a_rate_only_without_dropout_then_restored():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.3)).eval()
    with dropout_enabled(net) as sites:
        assert [(s.name, s.attribute) for s in sites] == [("1", "p")] and net[1].p == 0.3 and net[1].training
        assert not net[0].training
    with dropout_enabled(net, rate=0.6):
        assert net[1].p == 0.3  # the model's own dropout; a rate is for models without any
    plan = dropout_plan(net, rate=0.6)
    assert (plan.source, plan.rate, plan.probabilities) == ("model", 0.3, (0.3,))
    assert net[1].p == 0.3 and not net.training and not net[1].training
    off = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.0), nn.Dropout(0.0)).eval()
    with dropout_enabled(off, rate=0.6):
        assert off[1].p == off[2].p == 0.6 and off[1].training and off[2].training
    assert (dropout_plan(off, rate=0.6).source, dropout_plan(off, rate=0.6).rate) == ("user", 0.6)
    assert off[1].p == off[2].p == 0.0 and not any(m.training for m in off.modules())
    # Sites that differ: each keeps its own probability (0 stays 0); the largest is the recorded rate.
    mixed = nn.Sequential(nn.Dropout(0.1), nn.Dropout(0.0), nn.Dropout(0.25)).eval()
    with dropout_enabled(mixed, rate=0.6):
        assert [m.p for m in mixed] == [0.1, 0.0, 0.25]
    plan = dropout_plan(mixed, rate=0.6)
    assert (plan.source, plan.rate, plan.probabilities) == ("model", 0.25, (0.1, 0.25))
    assert plan.describe() == "model's own: 0.1, 0.25 at 2 of 3 sites"


def test_no_dropout_without_a_rate_is_a_clear_error(loaded):
    with pytest.raises(ValueError, match=r"LlamaForCausalLM has no dropout of its own.*--dropout-rate 0.1"):
        run(loaded, rate=None)
    with pytest.raises(ValueError, match="no dropout modules"), dropout_enabled(nn.Linear(2, 2), rate=0.1):
        pass
    assert not loaded.model.training


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"passes": 0}, "passes=0"),
        ({"passes": 2.0}, "passes=2.0"),
        ({"rate": 0.0}, "rate=0.0"),
        ({"rate": 1.0}, "rate=1.0"),
        ({"rate": -0.1}, "rate=-0.1"),
        ({"seed": "7"}, "seed='7'"),
    ],
)
def test_arguments_are_validated(loaded, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(loaded, **kwargs)


def test_progress_counts_statements_over_all_passes_and_the_scorer_is_pluggable(loaded):
    seen, seeds = [], []

    def fake_scorer(loaded, texts, subject_spans, object_spans, batch_size=None, progress=None):
        seeds.append(torch.initial_seed())
        for done in range(batch_size, len(texts), batch_size):
            progress(done, len(texts))
        progress(len(texts), len(texts))
        return pl.DataFrame(
            {"ll_sum": [-1.0 * len(seeds)] * len(texts), "ll_answer_sum": [-0.5] * len(texts)}
        )

    out = run(
        loaded,
        seed=40,
        passes=2,
        batch_size=2,
        scorer=fake_scorer,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(2, 6), (3, 6), (5, 6), (6, 6)] and seeds == [40, 41]
    assert out["ll_sum_dropout"].to_list() == [[-1.0, -2.0]] * 3
    assert out["ll_answer_sum_dropout"].to_list() == [[-0.5, -0.5]] * 3


# --- the scoring engine: M = 30 by default, the rate used and its source on every row ------------

STATEMENTS = pl.DataFrame(
    {
        "statement_id": ["a", "b"],
        "text": [f.text for f in FILLED[:2]],
        "subject_start": [f.subject_span[0] for f in FILLED[:2]],
        "subject_end": [f.subject_span[1] for f in FILLED[:2]],
        "object_start": [f.object_span[0] for f in FILLED[:2]],
        "object_end": [f.object_span[1] for f in FILLED[:2]],
    }
)


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 30k-parameter model gains nothing from threads on a busy machine
    yield
    torch.set_num_threads(threads)


def tiny_bert(folder: Path, cache: Path, **config):
    """The tiny BERT of bench/_data.py (dropout 0.1 in its config, as BERT's), with
    `config` changed in its config.json."""
    build_tiny_mlm(folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return load_model(ModelEntry(id=f"kcal-test/{folder.name}", source="local", path=str(folder)), cache)


@pytest.fixture(scope="module")
def bert(tmp_path_factory, one_thread):
    return tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert", tmp_path_factory.mktemp("cache"))


def test_a_model_with_dropout_runs_its_own_30_passes_by_default_and_ignores_a_rate(bert):
    assert bert.model.config.hidden_dropout_prob == bert.model.config.attention_probs_dropout_prob == 0.1
    options = ScoringOptions(dropout=True)
    assert options.dropout_passes == 30 and options.dropout_rate is None
    own = score_statements(bert, STATEMENTS, options)
    assert own["ll_sum_dropout"].list.len().to_list() == [30, 30]
    assert own["dropout_rate"].to_list() == [0.1, 0.1] and own["dropout_source"].to_list() == ["model"] * 2
    # A user rate is for models without dropout: BERT keeps its 0.1, so the passes are the same.
    rated = score_statements(bert, STATEMENTS, ScoringOptions(dropout=True, dropout_rate=0.5))
    assert rated.equals(own)
    assert [len(set(v)) for v in own["ll_sum_dropout"].to_list()] == [30, 30]


def test_bert_attention_dropout_is_on_in_the_passes(tmp_path, one_thread):
    """BERT's self-attention applies its attention-probability dropout only while the attention
    module itself is training (`dropout=0.0 if not self.training else self.dropout.p`); with every
    other dropout at 0 the passes must still differ from the eval-mode score."""
    loaded = tiny_bert(tmp_path / "attention-only", tmp_path / "cache", hidden_dropout_prob=0.0)
    active = [s.name for s in dropout_sites(loaded.model) if getattr(s.module, s.attribute) > 0]
    assert active and all(name.endswith("attention.self.dropout") for name in active)
    texts, subjects, objects = (
        [f.text for f in FILLED],
        [f.subject_span for f in FILLED],
        [f.object_span for f in FILLED],
    )
    plain = score_mlm(loaded, texts, subjects, objects)["ll_sum"].to_list()
    passes = dropout_scores(loaded, texts, subjects, objects, passes=2, seed=0, scorer=score_mlm)
    for values, eval_score in zip(passes["ll_sum_dropout"].to_list(), plain, strict=True):
        assert all(abs(v - eval_score) > 1e-6 for v in values) and values[0] != values[1]
    assert passes["dropout_rate"].to_list() == [0.1] * 3 and set(passes["dropout_source"]) == {"model"}
    assert not any(m.training for m in loaded.model.modules())


def test_a_model_without_dropout_needs_a_rate_before_any_scoring(loaded):
    calls = []
    with pytest.raises(ValueError, match=r"no dropout of its own.*dropout_rate=0.1"):
        score_statements(
            loaded, STATEMENTS, ScoringOptions(dropout=True), progress=lambda *a: calls.append(a)
        )
    assert calls == []  # refused before the first (eval-mode) pass
    out = score_statements(
        loaded, STATEMENTS, ScoringOptions(dropout=True, dropout_passes=2, dropout_rate=0.2)
    )
    assert out["dropout_rate"].to_list() == [0.2, 0.2] and out["dropout_source"].to_list() == ["user"] * 2
    off = score_statements(loaded, STATEMENTS, ScoringOptions())
    assert off.select("ll_sum_dropout", "dropout_rate", "dropout_source").null_count().row(0) == (2, 2, 2)
