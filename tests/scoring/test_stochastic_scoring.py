"""Monte-Carlo dropout scoring on the real embedded model (SmolLM2, no dropout of its own)."""

import os
from pathlib import Path

import polars as pl
import pytest
import torch
from torch import nn

from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring.clm import score_clm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.stochastic import dropout_enabled, dropout_scores, dropout_sites

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
    }
    assert first.height == len(FILLED)
    assert first["ll_sum_dropout"].list.len().to_list() == [M] * len(FILLED)


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


def test_own_dropout_is_used_and_overridden_then_restored():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.3)).eval()
    with dropout_enabled(net) as sites:
        assert [(s.name, s.attribute) for s in sites] == [("1", "p")] and net[1].p == 0.3 and net[1].training
        assert not net[0].training
    with dropout_enabled(net, rate=0.6):
        assert net[1].p == 0.6
    assert net[1].p == 0.3 and not net.training and not net[1].training


def test_no_dropout_without_a_rate_is_a_clear_error(loaded):
    with pytest.raises(ValueError, match=r"no active dropout.*set a dropout rate"):
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
