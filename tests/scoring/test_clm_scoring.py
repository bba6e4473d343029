"""CLM scoring against a slow one-statement-at-a-time reference, batching invariance and token roles."""

import copy
import os
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring import (
    ROLE_CONTEXT,
    ROLE_OBJECT,
    ROLE_SUBJECT,
    ROLE_TEMPLATE,
    score_clm,
    token_roles,
)
from kcal_pipeline.scoring.clm import SCHEMA
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

T, S, OBJ, C = ROLE_TEMPLATE, ROLE_SUBJECT, ROLE_OBJECT, ROLE_CONTEXT

TEMPLATES = [
    "The capital of [X] is [Y].",  # object at the end
    "[Y] is the capital of [X].",  # object first
    "Everyone who has studied the geography of [X] knows that its capital city is called [Y], a fact "
    "taught in schools.",  # long, object in the middle
    "[X]: [Y]",  # short, no final punctuation
    "[X][Y]",  # adjacent spans, no space
]
PAIRS = [
    ("France", "Paris"),
    ("Switzerland", "Zürich"),
    ("São Tomé and Príncipe", "São Tomé"),
    ("Côte d'Ivoire", "Yamoussoukro"),
    ("Bosnia and Herzegovina", "Sarajevo"),
    ("Iceland", "Reykjavík"),
    ("Paraguay", "Asunción"),
    ("United Arab Emirates", "Abu Dhabi"),
]
FILLED = [fill(t, x, y) for t in TEMPLATES for x, y in PAIRS]  # 40 statements


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


def score(loaded, filled, **kw) -> pl.DataFrame:
    return score_clm(
        loaded,
        [f.text for f in filled],
        [f.subject_span for f in filled],
        [f.object_span for f in filled],
        **kw,
    )


def reference_logprobs(model, tokenizer, start_token_id: int, text: str) -> np.ndarray:
    """The definition, slowly: one plain forward of [start] + tokens, no batching, no padding."""
    ids = [start_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1].double()
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).numpy()


@pytest.fixture(scope="module")
def batched(loaded):
    return score(loaded, FILLED)


def test_batched_scores_match_the_one_at_a_time_reference(loaded, batched):
    compared = 0
    for f, row in zip(FILLED, batched.iter_rows(named=True), strict=True):
        ref = reference_logprobs(loaded.model, loaded.tokenizer, loaded.start_token_id, f.text)
        assert row["n_tokens"] == len(ref)  # the first token is scored too
        if len(ref) <= 2:  # a plain forward this small takes another CPU kernel: see the next test
            continue
        np.testing.assert_allclose(row["token_logprobs"], ref, atol=1e-4, rtol=0, err_msg=f.text)
        assert abs(row["ll_sum"] - ref.sum()) < 1e-4, f.text
        compared += 1
    assert compared >= 30


def test_tiny_statements_are_scored_like_any_other(loaded, batched):
    """A 2-token statement alone is padded to MIN_ROWS, so it gets the scores it gets in a big batch;
    a float64 forward (the exact value) confirms that path is the accurate one."""
    index = next(i for i, f in enumerate(FILLED) if f.text == "FranceParis")
    alone = score(loaded, [FILLED[index]], batch_size=1)
    in_batch = batched.row(index, named=True)
    assert alone["n_tokens"][0] == in_batch["n_tokens"] == 2
    np.testing.assert_allclose(alone["token_logprobs"][0], in_batch["token_logprobs"], atol=1e-5, rtol=0)
    exact = reference_logprobs(
        copy.deepcopy(loaded.model).double(), loaded.tokenizer, loaded.start_token_id, "FranceParis"
    )
    np.testing.assert_allclose(in_batch["token_logprobs"], exact, atol=1e-4, rtol=0)


def test_reductions_follow_the_token_roles(batched):
    assert dict(batched.schema) == SCHEMA
    for row in batched.iter_rows(named=True):
        lp, roles = np.array(row["token_logprobs"], dtype=np.float64), np.array(row["token_roles"])
        assert len(lp) == len(roles) == row["n_tokens"]
        assert row["ll_mean"] == pytest.approx(lp.sum() / len(lp))
        answer = lp[roles == OBJ]
        assert len(answer) > 0
        assert row["ll_answer_sum"] == pytest.approx(answer.sum())
        assert row["ll_answer_mean"] == pytest.approx(answer.mean())


def test_scores_do_not_depend_on_batch_composition_or_order(loaded, batched):
    """Shuffled, in batches of 3 and 64 (all 40 statements), and alone (batch size 1, which pads each
    statement to MIN_ROWS rows: a short and a long pair in every template, 10 calls instead of 40)."""
    order = list(range(len(FILLED)))
    random.Random(7).shuffle(order)
    expected = dict(zip((f.text for f in FILLED), batched.iter_rows(named=True), strict=True))
    short_and_long = {fill(t, *PAIRS[k]).text for t in TEMPLATES for k in (0, 2)}  # France, São Tomé
    alone = [i for i in order if FILLED[i].text in short_and_long]
    assert len(alone) == 2 * len(TEMPLATES)
    for bs, subset in ((1, alone), (3, order), (64, order)):
        shuffled = score(loaded, [FILLED[i] for i in subset], batch_size=bs)
        for i, row in zip(subset, shuffled.iter_rows(named=True), strict=True):
            want = expected[FILLED[i].text]
            assert row["token_roles"] == want["token_roles"]
            np.testing.assert_allclose(row["token_logprobs"], want["token_logprobs"], atol=1e-4, rtol=0)
            assert abs(row["ll_sum"] - want["ll_sum"]) < 1e-4


def test_same_inputs_give_identical_scores(loaded, batched):
    assert score(loaded, FILLED).equals(batched)


def test_model_prefers_the_true_capital(loaded):
    good, bad = score(
        loaded, [fill(TEMPLATES[0], "France", "Paris"), fill(TEMPLATES[0], "France", "Berlin")]
    )["ll_sum"]
    assert good > bad


def test_progress_reports_every_batch(loaded):
    calls = []
    score(loaded, FILLED[:10], batch_size=4, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(4, 10), (8, 10), (10, 10)]


def test_bad_inputs_are_rejected(loaded):
    f = FILLED[0]
    with pytest.raises(ValueError, match="equal lengths"):
        score_clm(loaded, [f.text], [], [f.object_span])
    with pytest.raises(ValueError, match=r"object_span #0 .* got \(20, 999\)"):
        score_clm(loaded, [f.text], [f.subject_span], [(20, 999)])
    with pytest.raises(ValueError, match="text #1 has no tokens"):
        score_clm(loaded, [f.text, ""], [f.subject_span, (0, 0)], [f.object_span, (0, 0)])
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        score(loaded, [f], batch_size=0)
    assert score_clm(loaded, [], [], []).schema == pl.Schema(SCHEMA)


# --- token roles ----------------------------------------------------------------------------------


def test_token_roles_pure_cases():
    # "Paris is the capital of France." with a leading-space subject token " France"
    offsets = [(0, 5), (5, 8), (8, 12), (12, 20), (20, 23), (23, 30), (30, 31)]
    assert token_roles(offsets, (24, 30), (0, 5)) == [OBJ, T, T, T, T, S, T]
    # one token straddling adjacent subject and object counts as object
    assert token_roles([(0, 1), (1, 7), (7, 10)], (0, 3), (3, 7)) == [S, OBJ, T]
    # empty spans and empty tokens match nothing
    assert token_roles([(0, 3), (3, 3)], (3, 3), (0, 0)) == [T, T]


def test_token_roles_mark_exactly_the_context():
    """ "What is 2+2? 4\nFrance: Paris" with context_end 15: every token before the line break's end
    is context, none after; a token straddling the end (a tokenizer that glued "\nFrance") is the
    statement's, and so is a zero-width token at the end itself."""
    offsets = [(0, 4), (4, 7), (7, 9), (9, 10), (10, 11), (11, 12), (12, 14), (14, 15), (15, 21), (21, 22),
               (22, 28)]  # fmt: skip
    roles = token_roles(offsets, (15, 21), (23, 28), context_end=15)
    assert roles == [C] * 8 + [S, T, OBJ]
    assert token_roles(offsets, (15, 21), (23, 28)) == [T] * 8 + [S, T, OBJ]  # no context: as before
    assert token_roles([(0, 14), (14, 21), (15, 15)], (15, 21), (23, 28), context_end=15) == [C, S, T]


def roles_of(loaded, template, subject, obj):
    f = fill(template, subject, obj)
    enc = loaded.tokenizer(f.text, add_special_tokens=False, return_offsets_mapping=True)
    pieces = [f.text[a:b] for a, b in enc["offset_mapping"]]
    return list(zip(pieces, token_roles(enc["offset_mapping"], f.subject_span, f.object_span), strict=True))


def test_roles_with_the_real_tokenizer(loaded):
    """Hand-checked against the SmolLM2 tokenizer's pieces."""
    assert roles_of(loaded, "The capital of [X] is [Y].", "France", "Paris") == [
        ("The", T),
        (" capital", T),
        (" of", T),
        (" France", S),
        (" is", T),
        (" Paris", OBJ),
        (".", T),
    ]
    assert roles_of(loaded, "[Y] is the capital of [X].", "France", "Paris") == [
        ("Paris", OBJ),
        (" is", T),
        (" the", T),
        (" capital", T),
        (" of", T),
        (" France", S),
        (".", T),
    ]
    assert roles_of(loaded, "[X][Y] is cold.", "Ice", "land") == [  # BPE merges across the boundary
        ("I", S),
        ("celand", OBJ),
        (" is", T),
        (" cold", T),
        (".", T),
    ]
    assert roles_of(loaded, "[X]: [Y].", "Zürich", "Switzerland") == [
        ("Z", S),
        ("ü", S),
        ("rich", S),
        (":", T),
        (" Switzerland", OBJ),
        (".", T),
    ]
    assert roles_of(loaded, "The capital of [X] is [Y].", "São Tomé and Príncipe", "São Tomé") == [
        ("The", T),
        (" capital", T),
        (" of", T),
        (" São", S),
        (" Tom", S),
        ("é", S),
        (" and", S),
        (" Pr", S),
        ("ín", S),
        ("cipe", S),
        (" is", T),
        (" São", OBJ),
        (" Tom", OBJ),
        ("é", OBJ),
        (".", T),
    ]
    assert roles_of(loaded, "[X] ([Y])", "Côte d'Ivoire", "Yamoussoukro") == [
        ("C", S),
        ("ô", S),
        ("te", S),
        (" d", S),
        ("'", S),
        ("I", S),
        ("vo", S),
        ("ire", S),
        (" (", T),
        ("Y", OBJ),
        ("amous", OBJ),
        ("s", OBJ),
        ("ou", OBJ),
        ("k", OBJ),
        ("ro", OBJ),
        (")", T),
    ]


def test_log_normaliser_matches_a_float64_logsumexp():
    """The float32 exponentials and sum, joined in float64, against the definition in float64: a
    peaked row (one logit far above the rest, as a confident LM gives), a flat row (49,152 equal
    logits: log 49152 exactly), large magnitudes and more rows than one step holds."""
    from kcal_pipeline.scoring.clm import NORMALISER_ROWS, log_normaliser

    gen = torch.Generator().manual_seed(7)
    vocab = 49_152
    rows = torch.randn(2 * NORMALISER_ROWS + 5, vocab, generator=gen) * 4
    rows[0, 123] = 60.0  # peaked
    rows[1] = 3.0  # flat: 3 + log(vocab)
    rows[2] -= 1_000.0  # far from zero
    got = log_normaliser(rows.reshape(-1, 1, vocab))
    assert got.dtype == torch.float64 and got.shape == (rows.shape[0], 1)
    want = torch.logsumexp(rows.double(), -1)
    assert torch.allclose(got[:, 0], want, rtol=0, atol=1e-6)
    assert got[1, 0].item() == pytest.approx(3.0 + np.log(vocab), abs=1e-6)
    assert abs((got[:, 0] - want).mean().item()) < 1e-7  # no drift to one side
    assert log_normaliser(torch.zeros(0, vocab)).shape == (0,)
