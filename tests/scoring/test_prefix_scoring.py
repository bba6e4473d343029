"""Prefix-packed CLM scoring against the plain path (score_clm) on many random candidate sets."""

import dataclasses
import random
import weakref

import numpy as np
import polars as pl
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring import prefix as prefix_mod
from kcal_pipeline.scoring import score_clm, token_roles
from kcal_pipeline.scoring.clm import SCHEMA
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.prefix import (
    _ancestor_matrix,
    pack_rows,
    packing_supported,
    score_clm_shared_prefix,
)
from tests.faults.injection import oom_above
from tests.scoring.test_clm_scoring import model_cache

TEMPLATES = [
    "The capital of [X] is [Y].",  # object at the end
    "[Y] is the capital of [X].",  # object first (plain fallback)
    "People in [X] often say that [Y] is where the government sits, at least officially.",  # middle
    "[X]: [Y]",  # short, no punctuation
    "[X][Y] is cold.",  # adjacent slots: BPE merges across
]
SUBJECTS = ["France", "Côte d'Ivoire", "São Tomé and Príncipe", "Bosnia and Herzegovina", "Iceland", "Zürich"]
OPTIONS = [
    "Paris",
    "New York",
    "New Delhi",
    "Zürich",
    "São Tomé",
    "Côte d'Ivoire",
    "Reykjavík",
    "land",
    "Abu Dhabi",
    "Asunción",
]
ATOL = 1e-4


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


def random_cases(seed: int, n_sets: int) -> list:
    """Candidate sets: one (template, subject) with 2-5 random options, sometimes a duplicate."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_sets):
        t, s = rng.choice(TEMPLATES), rng.choice(SUBJECTS)
        options = rng.sample(OPTIONS, rng.randint(2, 5))
        if rng.random() < 0.3:
            options.append(rng.choice(options))  # duplicate statement
        out += [fill(t, s, o) for o in options]
    rng.shuffle(out)  # members of one group are not adjacent
    return out


CASES = random_cases(seed=11, n_sets=17)  # 71 statements


def args(filled):
    return [f.text for f in filled], [f.subject_span for f in filled], [f.object_span for f in filled]


@pytest.fixture(scope="module")
def counted():
    """Sequences that went through packed rows, to prove the fast path was exercised."""
    return []


@pytest.fixture(scope="module")
def both(loaded, counted):
    packing_supported(loaded)  # the once-per-model probe runs before the spy counts
    original = prefix_mod._forward_rows

    def spy(loaded_, rows):
        counted.extend(u for row in rows for u, _ in row.members)
        return original(loaded_, rows)

    prefix_mod._forward_rows = spy
    try:
        # small rows and calls, so candidate sets straddle rows and calls
        fast = score_clm_shared_prefix(loaded, *args(CASES), batch_size=4, row_tokens=40)
    finally:
        prefix_mod._forward_rows = original
    return score_clm(loaded, *args(CASES)), fast


def assert_same(plain: pl.DataFrame, fast: pl.DataFrame, labels) -> None:
    assert dict(fast.schema) == SCHEMA
    assert fast.height == plain.height
    for label, p, f in zip(labels, plain.iter_rows(named=True), fast.iter_rows(named=True), strict=True):
        assert f["n_tokens"] == p["n_tokens"], label
        assert f["token_roles"] == p["token_roles"], label
        np.testing.assert_allclose(f["token_logprobs"], p["token_logprobs"], atol=ATOL, rtol=0, err_msg=label)
        for col in ("ll_sum", "ll_mean", "ll_answer_sum"):
            assert abs(f[col] - p[col]) < ATOL, (label, col)
        assert (f["ll_answer_mean"] is None) == (p["ll_answer_mean"] is None), label
        if p["ll_answer_mean"] is not None:
            assert abs(f["ll_answer_mean"] - p["ll_answer_mean"]) < ATOL, label


def test_matches_the_plain_path_on_random_candidate_sets(both, counted):
    plain, fast = both
    assert len(CASES) >= 60
    texts = [f.text for f in CASES]
    assert len(set(texts)) < len(texts)  # duplicates are in the set
    assert any(f.object_span[0] == 0 for f in CASES)  # object first
    assert any(f.object_span[0] > 0 and f.object_span[1] < len(f.text) - 1 for f in CASES)  # middle
    assert any(f.object_span[1] == len(f.text) for f in CASES)  # object last
    assert_same(plain, fast, texts)
    # every distinct sequence went through packed rows, once
    assert sorted(counted) == list(range(len(set(texts))))


def test_packing_builds_the_prefix_tree_by_hand():
    """[1,2,3], [1,2,4], [1,5] and a duplicate-free [6]: one row, nodes start,1,2,3,4,5,6."""
    rows = pack_rows([(1, 2, 4), (6,), (1, 2, 3), (1, 5)], start_token=0, row_tokens=100)
    assert len(rows) == 1
    row = rows[0]
    assert row.tokens == [0, 1, 2, 3, 4, 5, 6]
    assert row.parents == [-1, 0, 1, 2, 2, 1, 0]
    assert row.depths == [0, 1, 2, 3, 3, 2, 1]
    assert dict(row.members) == {2: [1, 2, 3], 0: [1, 2, 4], 3: [1, 5], 1: [6]}
    m = _ancestor_matrix(row.parents)
    assert m[4].tolist() == [True, True, True, False, True, False, False]  # 4 sees start,1,2 and itself
    assert m[6].tolist() == [True, False, False, False, False, False, True]


def test_rows_close_when_full_and_long_sequences_get_their_own_row():
    rows = pack_rows([(1, 2, 3), (1, 2, 4), (7, 8, 9, 10, 11, 12)], start_token=0, row_tokens=5)
    assert [r.tokens for r in rows] == [[0, 1, 2, 3, 4], [0, 7, 8, 9, 10, 11, 12]]
    assert [len(r.members) for r in rows] == [2, 1]


def test_packing_is_checked_once_and_supported_by_smollm2(loaded):
    assert packing_supported(loaded) is True
    assert prefix_mod._decisions[loaded.model].used is True


class Wrapped(torch.nn.Module):
    """The loaded model behind a forward that may drop what packing needs: the 4D attention mask
    (as an attention kernel that ignores custom masks would) and/or the explicit position ids."""

    def __init__(self, inner, *, drop_mask: bool, drop_positions: bool):
        super().__init__()
        self.inner, self.drop_mask, self.drop_positions = inner, drop_mask, drop_positions

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        if self.drop_mask and attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None  # plain causal attention over the whole packed row
        if self.drop_positions:
            position_ids = None  # positions 0, 1, 2, … along the row instead of trie depths
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kw)


def tiny_llama(loaded):
    """A random 2-layer Llama with SmolLM2's tokenizer: fast, and with weights large enough
    (initializer_range 0.2) that a wrong mask or position moves log-probs by ~2, while the packed
    and plain paths of the honest model agree to ~1e-6 (the probe's tolerance is 1e-4)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(loaded.tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2,
    )  # fmt: skip
    return dataclasses.replace(loaded, model=LlamaForCausalLM(config).eval(), key="tiny-llama")


@pytest.fixture(scope="module")
def tiny(loaded):
    return tiny_llama(loaded)


def wrapped(loaded, **drop):
    model = Wrapped(loaded.model, **drop).eval()  # eval: a model in training mode is not probed
    return dataclasses.replace(loaded, model=model, key=f"{loaded.key}+{drop}")


def test_a_model_that_honours_mask_and_positions_passes_the_probe(tiny, monkeypatch):
    monkeypatch.setattr(
        prefix_mod, "_decisions", weakref.WeakKeyDictionary()
    )  # a fresh cache, no verdict planted
    honest = wrapped(tiny, drop_mask=False, drop_positions=False)
    assert packing_supported(honest) is True
    assert {k: d.used for k, d in prefix_mod._decisions.items()} == {honest.model: True}


@pytest.mark.parametrize(
    "drop", [{"drop_mask": True, "drop_positions": True}, {"drop_mask": True, "drop_positions": False},
             {"drop_mask": False, "drop_positions": True}],
    ids=["ignores-mask-and-positions", "ignores-mask", "ignores-positions"],
)  # fmt: skip
def test_a_model_that_ignores_mask_or_positions_fails_the_probe_and_takes_the_plain_path(
    tiny, monkeypatch, drop
):
    """The real probe (no verdict planted) sends such a model to score_clm, and decides it once."""
    monkeypatch.setattr(prefix_mod, "_decisions", weakref.WeakKeyDictionary())
    bad = wrapped(tiny, **drop)
    assert packing_supported(bad) is False
    assert {k: d.used for k, d in prefix_mod._decisions.items()} == {bad.model: False}  # cached
    monkeypatch.setattr(prefix_mod, "_forward_rows", lambda *a: pytest.fail("packed path used"))
    filled = CASES[:6]
    assert_same(
        score_clm(tiny, *args(filled)),
        score_clm_shared_prefix(bad, *args(filled)),
        [f.text for f in filled],
    )


def test_oom_in_a_packed_call_halves_the_rows_and_keeps_the_scores(loaded, monkeypatch):
    """Fault injection: every call with more than one row runs out of memory."""
    seen = []
    monkeypatch.setattr(prefix_mod, "_forward_rows", oom_above(prefix_mod._forward_rows, 1, seen))
    filled = CASES[:30]
    fast = score_clm_shared_prefix(loaded, *args(filled), batch_size=8, row_tokens=40)
    assert max(seen) > 1 and seen[-1] == 1
    assert_same(score_clm(loaded, *args(filled)), fast, [f.text for f in filled])


def test_input_order_is_preserved(loaded, both):
    plain, _ = both
    order = list(range(24))
    random.Random(3).shuffle(order)
    shuffled = [CASES[i] for i in order]
    fast = score_clm_shared_prefix(loaded, *args(shuffled), batch_size=4)  # groups split over calls
    assert_same(plain[order], fast, [f.text for f in shuffled])


def test_options_order_does_not_change_scores(loaded):
    t = "People in [X] often say that [Y] is where the government sits, at least officially."
    options = ["New York", "New Delhi", "São Tomé", "Paris", "Zürich"]
    forward = score_clm_shared_prefix(loaded, *args([fill(t, "Côte d'Ivoire", o) for o in options]))
    backward = score_clm_shared_prefix(loaded, *args([fill(t, "Côte d'Ivoire", o) for o in options[::-1]]))
    np.testing.assert_allclose(
        forward["ll_sum"].to_numpy(), backward["ll_sum"].to_numpy()[::-1], atol=1e-5, rtol=0
    )


def test_a_group_of_one_and_duplicates(loaded):
    one = [fill("The capital of [X] is [Y].", "Iceland", "Reykjavík")]
    alone = score_clm_shared_prefix(loaded, *args(one))
    assert_same(score_clm(loaded, *args(one)), alone, ["alone"])
    twice = score_clm_shared_prefix(loaded, *args(one * 3))  # duplicates only: still one sequence
    assert twice["ll_sum"].to_list() == alone["ll_sum"].to_list() * 3


def test_empty_object_span_and_progress(loaded):
    filled = [fill("The capital of [X] is [Y].", "France", o) for o in ("Paris", "Lyon", "Paris")]
    texts, subj, obj = args(filled)
    texts.append("The capital of France.")
    subj.append((15, 21))
    obj.append((22, 22))  # empty object span: null answer mean
    calls = []
    fast = score_clm_shared_prefix(loaded, texts, subj, obj, progress=lambda d, t: calls.append((d, t)))
    assert_same(score_clm(loaded, texts, subj, obj), fast, texts)
    assert fast["ll_answer_mean"][3] is None
    assert calls[-1] == (3, 3)  # distinct sequences: "... Paris.", "... Lyon.", "The capital of France."


def test_bad_inputs_are_rejected(loaded):
    f = CASES[0]
    with pytest.raises(ValueError, match="equal lengths"):
        score_clm_shared_prefix(loaded, [f.text], [], [f.object_span])
    with pytest.raises(ValueError, match="text #1 has no tokens"):
        score_clm_shared_prefix(loaded, [f.text, ""], [f.subject_span, (0, 0)], [f.object_span, (0, 0)])
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        score_clm_shared_prefix(loaded, *args([f]), batch_size=0)
    assert score_clm_shared_prefix(loaded, [], [], []).schema == pl.Schema(SCHEMA)


# --- a context: conditioned on, never scored (issue 29 §5) ----------------------------------------

CONTEXTS = [
    "The capital of Peru is Lima.\n",
    "What is 2+2? 4\n",
    "The capital of Japan is Tokyo.\nThe capital of Kenya is Nairobi.\n",
]
IN_CONTEXT = [
    *((CONTEXTS[0], fill("The capital of [X] is [Y].", "France", o)) for o in ("Paris", "Lyon")),
    (CONTEXTS[1], fill("[Y] is the capital of [X].", "Iceland", "Reykjavík")),  # the answer opens it
    (CONTEXTS[2], fill("The capital of [X] is [Y].", "France", "Paris")),  # two demonstrations
]  # 4 statements, two options after the first context


def after_context(cases):
    """(texts, subject spans, object spans, context ends) of each statement behind its context."""
    texts = [c + f.text for c, f in cases]
    shift = [len(c) for c, _ in cases]
    subj = [(f.subject_span[0] + k, f.subject_span[1] + k) for (_, f), k in zip(cases, shift, strict=True)]
    obj = [(f.object_span[0] + k, f.object_span[1] + k) for (_, f), k in zip(cases, shift, strict=True)]
    return texts, subj, obj, shift


def by_hand(loaded, context: str, filled) -> tuple[np.ndarray, np.ndarray]:
    """The definition: context and statement tokenized apart, one forward of [start] + context +
    statement, log P(x_t | start, context, x_<t) at the statement's tokens; and which are answer."""
    tok = loaded.tokenizer
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    enc = tok(filled.text, add_special_tokens=False, return_offsets_mapping=True)
    # the line break keeps the two tokenizations apart: the whole text is exactly their concatenation
    assert tok(context + filled.text, add_special_tokens=False)["input_ids"] == ctx + enc["input_ids"]
    ids = [loaded.start_token_id, *ctx, *enc["input_ids"]]
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ids])).logits[0, :-1].double()
    lp = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).numpy()
    o0, o1 = filled.object_span
    answer = np.array([a < o1 and o0 < b for a, b in enc["offset_mapping"]])
    return lp[len(ctx) :], answer


def test_context_tokens_condition_the_statement_and_count_in_no_reduction(loaded):
    """Plain and packed paths against the hand-computed log P(statement | start, context): n_tokens,
    Sum, Mean, Sum(A), Mean(A) and the per-token columns cover the statement's own tokens only."""
    texts, subj, obj, ends = after_context(IN_CONTEXT)
    plain = score_clm(loaded, texts, subj, obj, context_ends=ends)
    packed = score_clm_shared_prefix(loaded, texts, subj, obj, context_ends=ends)
    for (context, f), p, k in zip(
        IN_CONTEXT, plain.iter_rows(named=True), packed.iter_rows(named=True), strict=True
    ):
        lp, answer = by_hand(loaded, context, f)
        offsets = loaded.tokenizer(f.text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
        for row in (p, k):
            assert row["n_tokens"] == len(lp), f.text
            # the statement's own roles, as without a context: the context's tokens are dropped
            assert row["token_roles"] == token_roles(offsets, f.subject_span, f.object_span)
            np.testing.assert_allclose(row["token_logprobs"], lp, atol=ATOL, rtol=0, err_msg=f.text)
            assert row["ll_sum"] == pytest.approx(lp.sum(), abs=ATOL)
            assert row["ll_mean"] == pytest.approx(lp.mean(), abs=ATOL)
            assert row["ll_answer_sum"] == pytest.approx(lp[answer].sum(), abs=ATOL)
            assert row["ll_answer_mean"] == pytest.approx(lp[answer].mean(), abs=ATOL)
    # the packed rows hold the first context once for the two options that follow it
    ids = [tuple(loaded.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    nodes = sum(len(r.tokens) - 1 for r in pack_rows(ids, loaded.start_token_id, prefix_mod.ROW_TOKENS))
    assert nodes <= sum(map(len, ids)) - len(
        loaded.tokenizer(CONTEXTS[0], add_special_tokens=False)["input_ids"]
    )


def test_context_ends_are_checked(loaded):
    texts, subj, obj, _ = after_context(IN_CONTEXT[:1])  # the subject starts at 44
    with pytest.raises(
        ValueError, match=r"context_end #0 = 50 is after the start of subject_span \(44, 50\)"
    ):
        score_clm(loaded, texts, subj, obj, context_ends=[50])
    with pytest.raises(ValueError, match="leaves no statement after the context"):
        score_clm(loaded, texts, [(0, 0)], [(0, 0)], context_ends=[60])
    with pytest.raises(ValueError, match=r"context_end #0 must be an integer in \[0, 60\].*got -1"):
        score_clm_shared_prefix(loaded, texts, subj, obj, context_ends=[-1])
    with pytest.raises(ValueError, match="one entry per text"):
        score_clm(loaded, texts, subj, obj, context_ends=[])


def test_a_call_of_one_short_row_scores_like_any_other(loaded):
    """A packed call holding one short row (a set's last few nodes) is padded to MIN_ROWS positions,
    as the plain path pads tiny batches: with fewer rows the GEMM takes another kernel, and SmolLM2's
    ~2e4 start-token activations turned that into ~1.2e-4 on the first token (one thread)."""
    import copy

    from tests.scoring.test_clm_scoring import reference_logprobs

    float64 = copy.deepcopy(loaded.model).double()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the kernel switch showed on one thread (the suite's per-worker setting)
    try:
        for text in ["Paris.", "Rome is", "Oslo"]:
            got = score_clm_shared_prefix(loaded, [text], [(0, 0)], [(0, 0)], batch_size=1, row_tokens=2)
            want = reference_logprobs(float64, loaded.tokenizer, loaded.start_token_id, text)
            np.testing.assert_allclose(
                got["token_logprobs"][0].to_numpy(), want, atol=6e-5, rtol=0, err_msg=text
            )
    finally:
        torch.set_num_threads(threads)


def test_the_lm_head_runs_at_parents_only_and_scores_stay(loaded, monkeypatch):
    """The vocabulary projection skips padding and leaves (nothing is read there): the same scores
    as projecting every position (up to the smaller GEMM's rounding), on fewer positions."""
    seen = []
    head = loaded.model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, args, _out: seen.append(args[0].shape[:-1].numel()))
    try:
        monkeypatch.setattr(prefix_mod, "HEAD_AT_PARENTS", False)
        everywhere = score_clm_shared_prefix(loaded, *args(CASES), batch_size=4, row_tokens=40)
        projected_everywhere = sum(seen)
        seen.clear()
        monkeypatch.setattr(prefix_mod, "HEAD_AT_PARENTS", True)
        at_parents = score_clm_shared_prefix(loaded, *args(CASES), batch_size=4, row_tokens=40)
    finally:
        handle.remove()
    assert sum(seen) < 0.9 * projected_everywhere  # leaves and padding: 15 % of these small rows
    for a, b in zip(
        at_parents["token_logprobs"].to_list(), everywhere["token_logprobs"].to_list(), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)
