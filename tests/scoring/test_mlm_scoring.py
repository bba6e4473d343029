"""MLM pseudo-log-likelihood scoring against a slow plain reference, on a tiny real BERT
(bench/_data.py)."""

import random
import shutil
import threading

import numpy as np
import polars as pl
import pytest
import torch
from transformers import AutoConfig, AutoTokenizer, BartConfig, BertConfig, GPT2Config

from bench._data import build_tiny_mlm
from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring import ROLE_OBJECT, ROLE_SUBJECT, ROLE_TEMPLATE
from kcal_pipeline.scoring.clm import SCHEMA
from kcal_pipeline.scoring.mlm import score_mlm
from kcal_pipeline.scoring.models import (
    ModelConfigError,
    ModelEntry,
    ModelLoadError,
    detect_kind,
    load_model,
)

T, S, OBJ = ROLE_TEMPLATE, ROLE_SUBJECT, ROLE_OBJECT
VARIANTS = ("original", "within_word_l2r")

TEMPLATES = [
    "The capital of [X] is [Y].",  # object at the end
    "[Y] is the capital of [X].",  # object first
    "People in [X] speak [Y], they say.",  # object in the middle
    "Everyone who has studied [X] knows that its capital city is called [Y], a fact taught in schools.",
    "[X]: [Y]",
    "[X][Y]",  # adjacent spans, glued into one word
]
SUBJECTS = [
    "France",
    "Switzerland",
    "Côte d'Ivoire",
    "São Tomé and Príncipe",
    "Iceland",
    "Paraguay",
    "Bosnia and Herzegovina",
    "United Arab Emirates",
    "Marie Curie",
    "Québec",
]
OBJECTS = [
    "Paris",
    "Bern",
    "Zürich",
    "Yamoussoukro",
    "São Tomé",
    "Reykjavík",
    "Asunción",
    "Abu Dhabi",
    "Sarajevo",
    "Warsaw",
    "Portuguese",
    "French",
]


def random_statements(n: int, seed: int):
    rng = random.Random(seed)
    return [fill(rng.choice(TEMPLATES), rng.choice(SUBJECTS), rng.choice(OBJECTS)) for _ in range(n)]


FILLED = random_statements(30, seed=3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A 30k-parameter model gains nothing from threads, and on a busy 2-core machine two threads
    waiting for each other made every forward ~50x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return build_tiny_mlm(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def loaded(tiny_dir, tmp_path_factory):
    return load_model(
        ModelEntry(id="kcal-test/tiny-bert", source="local", path=str(tiny_dir)),
        tmp_path_factory.mktemp("cache"),
    )


def score(loaded, filled, **kw) -> pl.DataFrame:
    return score_mlm(
        loaded,
        [f.text for f in filled],
        [f.subject_span for f in filled],
        [f.object_span for f in filled],
        **kw,
    )


def reference_pll(model, tokenizer, text: str, variant: str, context_end: int = 0) -> np.ndarray:
    """The definition, slowly: one masked copy per forward, batch of one, plain loops. Tokens of a
    context (ending at or before context_end) stay in every copy and are never masked or scored."""
    enc = tokenizer(text, return_special_tokens_mask=True, return_offsets_mapping=True)
    ids, words = enc["input_ids"], enc.word_ids()
    scored = [
        p
        for p, (special, (_, end)) in enumerate(
            zip(enc["special_tokens_mask"], enc["offset_mapping"], strict=True)
        )
        if not special and end > context_end
    ]
    out = []
    for p in scored:
        masked = list(ids)
        masked[p] = tokenizer.mask_token_id
        if variant == "within_word_l2r" and words[p] is not None:
            for q in scored:
                if q > p and words[q] == words[p]:
                    masked[q] = tokenizer.mask_token_id
        with torch.inference_mode():
            logits = model(torch.tensor([masked])).logits[0, p].double()
        out.append(logits.log_softmax(-1)[ids[p]].item())
    return np.array(out)


@pytest.fixture(scope="module")
def batched(loaded):
    return {v: score(loaded, FILLED, variant=v, batch_size=16) for v in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_scores_match_the_slow_reference(loaded, batched, variant):
    multi_piece = 0
    for f, row in zip(FILLED, batched[variant].iter_rows(named=True), strict=True):
        ref = reference_pll(loaded.model, loaded.tokenizer, f.text, variant)
        assert row["n_tokens"] == len(ref)
        np.testing.assert_allclose(row["token_logprobs"], ref, atol=1e-4, rtol=0, err_msg=f.text)
        assert abs(row["ll_sum"] - ref.sum()) < 1e-4, f.text
        words = loaded.tokenizer(f.text).word_ids()
        multi_piece += len(words) - 2 > len(set(words) - {None})
    assert multi_piece >= 20  # the within-word masking was really exercised


def test_reductions_follow_the_token_roles(batched):
    for frame in batched.values():
        assert dict(frame.schema) == SCHEMA
        for row in frame.iter_rows(named=True):
            lp, roles = np.array(row["token_logprobs"], dtype=np.float64), np.array(row["token_roles"])
            assert len(lp) == len(roles) == row["n_tokens"]
            assert row["ll_mean"] == pytest.approx(lp.sum() / len(lp))
            assert row["ll_answer_sum"] == pytest.approx(lp[roles == OBJ].sum())
            assert row["ll_answer_mean"] == pytest.approx(lp[roles == OBJ].mean())


def test_context_tokens_are_in_every_copy_never_masked_or_scored(loaded):
    """Statements after a context against the slow reference over the statement's own positions:
    the statement's tokens and roles are those it has alone, its scores are not (the context is
    visible to every masked copy)."""
    context = "The capital of Peru is Lima.\n"
    filled = [fill(TEMPLATES[0], "France", "Paris"), fill(TEMPLATES[1], "Côte d'Ivoire", "Yamoussoukro")]
    texts = [context + f.text for f in filled]
    shift = len(context)
    subj = [(f.subject_span[0] + shift, f.subject_span[1] + shift) for f in filled]
    obj = [(f.object_span[0] + shift, f.object_span[1] + shift) for f in filled]
    for variant in VARIANTS:
        after = score_mlm(loaded, texts, subj, obj, variant=variant, context_ends=[shift] * len(texts))
        alone = score(loaded, filled, variant=variant)
        for text, row, a in zip(texts, after.iter_rows(named=True), alone.iter_rows(named=True), strict=True):
            ref = reference_pll(loaded.model, loaded.tokenizer, text, variant, context_end=shift)
            roles = np.array(a["token_roles"])
            assert row["n_tokens"] == len(ref) == a["n_tokens"] and row["token_roles"] == a["token_roles"]
            np.testing.assert_allclose(row["token_logprobs"], ref, atol=1e-4, rtol=0, err_msg=text)
            assert row["ll_sum"] == pytest.approx(ref.sum(), abs=1e-4)
            assert row["ll_mean"] == pytest.approx(ref.mean(), abs=1e-4)
            assert row["ll_answer_sum"] == pytest.approx(ref[roles == OBJ].sum(), abs=1e-4)
            assert row["ll_answer_mean"] == pytest.approx(ref[roles == OBJ].mean(), abs=1e-4)
            assert abs(row["ll_sum"] - a["ll_sum"]) > 1e-3, text  # the context is seen


def test_within_word_equals_original_exactly_where_words_are_single_tokens(loaded):
    texts = ["The capital of Québec is Paris.", "Iceland: Bern", "IcelandParis is the capital of Iceland."]
    spans = [((15, 21), (25, 30)), ((0, 7), (9, 13)), ((0, 7), (7, 12))]
    frames = {
        v: score_mlm(loaded, texts, [s for s, _ in spans], [o for _, o in spans], variant=v) for v in VARIANTS
    }
    for i in (0, 1):  # every word one token (bench/_data.py WHOLE_WORDS): nothing else to mask
        assert len(loaded.tokenizer.tokenize(texts[i])) == len(
            texts[i].replace(":", " :").replace(".", " .").split()
        )
        original, l2r = (frames[v]["token_logprobs"][i].to_list() for v in VARIANTS)
        assert original == l2r
    # "IcelandParis" = Iceland ##P… (one word): its pieces but the last are predicted without the later
    # ones; the last piece and the single-token words that follow are scored exactly as before.
    pieces = loaded.tokenizer.tokenize("IcelandParis")
    assert (
        pieces[0] == "Iceland"
        and len(pieces) >= 2
        and loaded.tokenizer.tokenize(texts[2])[len(pieces)] == "is"
    )
    pieces = len(pieces)
    original, l2r = (np.array(frames[v]["token_logprobs"][2]) for v in VARIANTS)
    assert np.all(np.abs(original[: pieces - 1] - l2r[: pieces - 1]) > 1e-6)  # exact elsewhere, so not noise
    assert np.array_equal(original[pieces - 1 :], l2r[pieces - 1 :])


def test_one_token_statement_is_log_softmax_at_the_mask(loaded):
    tok = loaded.tokenizer
    assert tok.tokenize("Paris") == ["Paris"]
    ids = [tok.cls_token_id, tok.mask_token_id, tok.sep_token_id]
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ids])).logits[0, 1].double()
    expected = logits.log_softmax(-1)[tok.convert_tokens_to_ids("Paris")].item()
    for variant in VARIANTS:
        row = score_mlm(loaded, ["Paris"], [(0, 0)], [(0, 5)], variant=variant).row(0, named=True)
        assert row["n_tokens"] == 1 and row["token_roles"] == [OBJ]
        assert row["ll_sum"] == pytest.approx(expected, abs=1e-5)
        assert row["ll_answer_mean"] == pytest.approx(expected, abs=1e-5)


def test_scores_do_not_depend_on_batch_size_or_order(loaded, batched):
    order = list(range(len(FILLED)))
    random.Random(7).shuffle(order)
    order = order[:12]  # batch size 1 runs one forward per token
    for variant in VARIANTS:
        expected = list(batched[variant].iter_rows(named=True))
        for bs in (1, 3, 64):
            shuffled = score(loaded, [FILLED[i] for i in order], variant=variant, batch_size=bs)
            for i, row in zip(order, shuffled.iter_rows(named=True), strict=True):
                assert row["token_roles"] == expected[i]["token_roles"]
                np.testing.assert_allclose(
                    row["token_logprobs"], expected[i]["token_logprobs"], atol=1e-5, rtol=0
                )
                # float32 kernels round differently per batch shape: each token may move by
                # up to 1e-5, so the sum by up to that per token (a real batching bug moves it by >1e-2)
                tolerance = 1e-5 * len(row["token_roles"])
                assert abs(row["ll_sum"] - expected[i]["ll_sum"]) < tolerance


def forward_sizes(model):
    """Record the number of rows of every forward pass; returns (sizes, hook handle)."""
    sizes = []
    handle = model.register_forward_pre_hook(
        lambda _m, args, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    return sizes, handle


def test_chunks_are_bounded_and_repeated_statements_scored_once(loaded):
    long = fill(
        "Everyone who has studied [X] knows that its capital is [Y], a fact taught in schools "
        "from Paraguay to Iceland.",
        "São Tomé and Príncipe",
        "Yamoussoukro",
    )
    n_tokens = len(loaded.tokenizer.tokenize(long.text))
    assert n_tokens > 40
    sizes, handle = forward_sizes(loaded.model)
    try:
        frame = score(loaded, [long, long, long], variant="within_word_l2r", batch_size=5)
    finally:
        handle.remove()
    assert max(sizes) <= 5
    assert sum(sizes) == n_tokens  # one masked copy per token, for the three identical statements together
    assert frame["n_tokens"].to_list() == [n_tokens] * 3 and frame["ll_sum"].n_unique() == 1


def test_out_of_memory_halves_the_chunk_and_keeps_the_scores(loaded, batched, monkeypatch):
    original_forward = loaded.model.forward
    sizes = []

    def tight_memory(*args, **kw):
        """Fault injection only: the real forward runs whenever the chunk fits."""
        sizes.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return original_forward(*args, **kw)

    monkeypatch.setattr(loaded.model, "forward", tight_memory)
    frame = score(loaded, FILLED[:6], variant="within_word_l2r", batch_size=8)
    monkeypatch.undo()
    assert sizes[:3] == [8, 4, 2] and max(sizes[3:]) == 2
    expected = batched["within_word_l2r"].head(6)
    for got, want in zip(frame.iter_rows(named=True), expected.iter_rows(named=True), strict=True):
        np.testing.assert_allclose(got["token_logprobs"], want["token_logprobs"], atol=1e-5, rtol=0)


def test_vocabulary_projection_runs_on_the_scored_positions_only(loaded, batched, monkeypatch):
    """Only one position per row is scored, so only it goes through the vocabulary projection; a
    model whose projection cannot be found is run whole, with the same scores. Meanwhile a forward
    of the same model in another thread is left alone."""
    projection = loaded.model.get_output_embeddings()
    seen, other_thread = [], []

    def in_another_thread(_module, args, kw):
        if not other_thread:
            other_thread.append(None)
            ids = torch.tensor([[loaded.tokenizer.cls_token_id] + [7] * 5 + [loaded.tokenizer.sep_token_id]])

            def forward():
                with torch.inference_mode():
                    other_thread.append(loaded.model(input_ids=ids).logits.shape)

            worker = threading.Thread(target=forward)
            worker.start()
            worker.join()

    handles = [
        projection.register_forward_hook(lambda _m, _args, out: seen.append(tuple(out.shape))),
        loaded.model.register_forward_pre_hook(in_another_thread, with_kwargs=True),
    ]
    try:
        restricted = score(loaded, FILLED[:8], variant="within_word_l2r", batch_size=16)
    finally:
        for handle in handles:
            handle.remove()
    assert other_thread[1] == (1, 7, projection.out_features)
    assert seen and all(shape[1] == 1 for shape in seen[1:])  # seen[0] is the other thread's
    monkeypatch.setattr(loaded.model, "get_output_embeddings", lambda: None)
    whole = score(loaded, FILLED[:8], variant="within_word_l2r", batch_size=16)
    for a, b, c in zip(
        restricted.iter_rows(named=True),
        whole.iter_rows(named=True),
        batched["within_word_l2r"].iter_rows(named=True),
        strict=False,
    ):
        np.testing.assert_allclose(a["token_logprobs"], b["token_logprobs"], atol=1e-5, rtol=0)
        np.testing.assert_allclose(a["token_logprobs"], c["token_logprobs"], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "text,subject,obj,roles",
    [
        ("The capital of Québec is Paris.", (15, 21), (25, 30), [T, T, T, S, T, OBJ, T]),
        ("Paris is the capital of Québec.", (24, 30), (0, 5), [OBJ, T, T, T, T, S, T]),  # object first
        ("Québec Paris", (0, 6), (7, 12), [S, OBJ]),  # no template tokens
    ],
)
def test_token_roles_by_hand(loaded, text, subject, obj, roles):
    row = score_mlm(loaded, [text], [subject], [obj]).row(0, named=True)
    assert row["token_roles"] == roles


def pieces_of(tokenizer, text: str, start: int, end: int) -> int:
    return len(tokenizer.tokenize(text[start:end]))


def test_token_roles_on_tricky_spans(loaded):
    """Multi-piece unicode words in the middle and glued to each other; how those words split
    depends on the trained vocabulary (not the same from run to run: bench/_data.py), so counts come
    from tokenizing each part alone, "speak" included."""
    tok = loaded.tokenizer
    middle = fill("People in [X] speak [Y], they say.", "São Tomé and Príncipe", "Côte d'Ivoire")
    before = pieces_of(tok, middle.text, 0, middle.subject_span[0])
    subject = pieces_of(tok, middle.text, *middle.subject_span)
    between = pieces_of(tok, middle.text, middle.subject_span[1], middle.object_span[0])  # " speak "
    obj = pieces_of(tok, middle.text, *middle.object_span)
    roles = score(loaded, [middle])["token_roles"][0].to_list()
    assert roles == [T] * before + [S] * subject + [T] * between + [OBJ] * obj + [T] * (
        len(roles) - before - subject - between - obj
    )
    assert obj >= 4  # "Côte d'Ivoire" is four words (punctuation is a word of its own)
    glued = fill(
        "[X][Y]", "Iceland", "Paris"
    )  # one word: Iceland ##P…; a piece across the boundary is the object's
    roles = score(loaded, [glued])["token_roles"][0].to_list()
    assert tok.tokenize(glued.text)[0] == "Iceland"
    assert roles == [S] + [OBJ] * (len(tok.tokenize(glued.text)) - 1)


def test_progress_counts_input_statements(loaded):
    calls = []
    score(
        loaded,
        FILLED[:4] + FILLED[:1],
        batch_size=7,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls[-1] == (5, 5) and all(t == 5 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_bad_inputs_are_rejected(loaded):
    f = FILLED[0]
    with pytest.raises(ValueError, match=r"variant must be one of original, within_word_l2r, got 'l2r'"):
        score(loaded, [f], variant="l2r")
    with pytest.raises(ValueError, match="equal lengths"):
        score_mlm(loaded, [f.text], [], [f.object_span])
    with pytest.raises(ValueError, match="text #1 has no tokens"):
        score_mlm(loaded, [f.text, " "], [f.subject_span, (0, 0)], [f.object_span, (0, 0)])
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        score(loaded, [f], batch_size=0)
    for variant in VARIANTS:
        assert score_mlm(loaded, [], [], [], variant=variant).schema == pl.Schema(SCHEMA)


def test_a_causal_model_is_refused(loaded):
    import dataclasses

    with pytest.raises(ValueError, match=r"score_mlm needs a masked LM, got model .* of kind 'clm'"):
        score(dataclasses.replace(loaded, kind="clm"), FILLED[:1])


# --- kinds in the registry ------------------------------------------------------------------------


def test_tiny_bert_directory_is_detected_as_mlm(loaded, tiny_dir):
    assert loaded.kind == "mlm" and not loaded.model.training
    assert loaded.start_token_id == loaded.tokenizer.cls_token_id  # informational for an MLM
    assert detect_kind(AutoConfig.from_pretrained(tiny_dir), "x") == "mlm"


@pytest.mark.parametrize(
    "config,kind",
    [
        (BertConfig(), "mlm"),  # encoder-only family, no architectures
        (BertConfig(is_decoder=True), "clm"),  # BERT trained as a decoder
        (BertConfig(architectures=["BertLMHeadModel"]), "clm"),
        (GPT2Config(), "clm"),  # only a causal head exists for gpt2
        (GPT2Config(architectures=["GPT2LMHeadModel"]), "clm"),
        (BertConfig(architectures=["BertForMaskedLM"]), "mlm"),
    ],
)
def test_kind_detection_from_config(config, kind):
    assert detect_kind(config, "org/model") == kind


def test_undecidable_kind_names_the_model_and_says_to_set_kind():
    with pytest.raises(
        ModelLoadError, match=r"model 'org/seq2seq': cannot tell .* set kind to 'clm' or 'mlm'"
    ):
        detect_kind(BartConfig(architectures=["BartForConditionalGeneration"]), "org/seq2seq")


def test_explicit_kind_overrides_detection(tiny_dir, tmp_path):
    """BERT also has a causal head class; an explicit kind is obeyed (detection is a heuristic)."""
    entry = ModelEntry(
        id="kcal-test/tiny-bert-as-clm", source="local", path=str(tiny_dir), kind="clm", start_token="[CLS]"
    )
    forced = load_model(entry, tmp_path)
    assert forced.kind == "clm" and type(forced.model).__name__ == "BertLMHeadModel"


@pytest.mark.parametrize(
    "kw,field,value",
    [
        ({"kind": "seq2seq"}, "kind", "seq2seq"),
        ({"kind": None}, "kind", None),
        ({"kind": "mlm", "start_token": "[CLS]"}, "start_token", "[CLS]"),
        ({"kind": "mlm", "source": "gguf_package", "package": "pkg", "file": "m.gguf"}, "kind", "mlm"),
    ],
)
def test_registry_rejects_bad_kinds_naming_field_and_value(kw, field, value):
    with pytest.raises(ModelConfigError) as err:
        ModelEntry(**{"id": "org/model", "source": "hf", **kw})
    assert str(err.value).startswith(f"{field} must be") and repr(value) in str(err.value)


def test_detected_mlm_with_a_start_token_is_an_error(tiny_dir, tmp_path):
    entry = ModelEntry(
        id="kcal-test/tiny-bert-start", source="local", path=str(tiny_dir), start_token="[CLS]"
    )
    with pytest.raises(ModelLoadError, match=r"start_token '\[CLS\]' does not apply to a masked LM"):
        load_model(entry, tmp_path)


def test_mlm_tokenizer_without_mask_token_is_an_error(tiny_dir, tmp_path):
    folder = tmp_path / "no-mask"
    shutil.copytree(tiny_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokenizer.mask_token = None
    tokenizer.save_pretrained(folder)
    with pytest.raises(
        ModelLoadError, match="'kcal-test/no-mask': kind 'mlm' needs a tokenizer with a mask token"
    ):
        load_model(ModelEntry(id="kcal-test/no-mask", source="local", path=str(folder)), tmp_path)
