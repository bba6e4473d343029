"""Subject masking for TemplateDiff: span arithmetic by hand, capitalisation, validation."""

import os
from pathlib import Path

import polars as pl
import pytest

from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring.clm import score_clm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.subject_mask import (
    mask_subject,
    mask_subjects,
    starts_sentence,
    subject_masked_scores,
)


def test_subject_before_object_shifts_the_object():
    # "The capital of France is Paris." subject [15, 21), object [25, 30)
    text, subj, obj = mask_subject("The capital of France is Paris.", (15, 21), (25, 30))
    assert text == "The capital of something is Paris."
    assert subj == (15, 24) and obj == (28, 33)  # +3: "something" (9) replaces "France" (6)
    assert text[slice(*subj)] == "something" and text[slice(*obj)] == "Paris"


def test_object_before_subject_keeps_the_object_span():
    # "Paris is the capital of France." object [0, 5), subject [24, 30)
    text, subj, obj = mask_subject("Paris is the capital of France.", (24, 30), (0, 5))
    assert text == "Paris is the capital of something."
    assert subj == (24, 33) and obj == (0, 5)


def test_a_longer_subject_shifts_the_object_left():
    # "Bosnia and Herzegovina" is 22 characters: the object moves by 9 − 22 = −13.
    text, subj, obj = mask_subject("Bosnia and Herzegovina has the capital Sarajevo.", (0, 22), (39, 47))
    assert text == "Something has the capital Sarajevo."
    assert subj == (0, 9) and obj == (26, 34) and text[26:34] == "Sarajevo"


def test_sentence_initial_subject_is_capitalised_elsewhere_not():
    assert mask_subject("France: Paris", (0, 6), (8, 13)) == ("Something: Paris", (0, 9), (11, 16))
    assert mask_subject("Paris? France!", (7, 13), (0, 5))[0] == "Paris? Something!"
    assert mask_subject("Q: Paris? A: France", (13, 19), (3, 8))[0] == "Q: Paris? A: something"  # after ':'
    assert mask_subject('"France" is Paris.', (1, 7), (12, 17))[0] == '"Something" is Paris.'
    assert mask_subject("Paris, France", (7, 13), (0, 5))[0] == "Paris, something"
    # The placeholder is never lower-cased.
    assert mask_subject("Paris is in France.", (12, 18), (0, 5), placeholder="X")[0] == "Paris is in X."
    assert starts_sentence("One. Two", 5) and not starts_sentence("One, two", 5)


def test_unicode_spans_count_characters():
    filled = fill("[Y] est la capitale de [X].", "São Tomé and Príncipe", "São Tomé")
    text, subj, obj = mask_subject(filled.text, filled.subject_span, filled.object_span, placeholder="ça")
    assert text == "São Tomé est la capitale de ça."
    assert subj == (28, 30) and obj == (0, 8)
    filled = fill("[X] — capitale : [Y]", "Côte d'Ivoire", "Yamoussoukro")
    text, subj, obj = mask_subject(filled.text, filled.subject_span, filled.object_span, placeholder="ça")
    assert text == "Ça — capitale : Yamoussoukro" and subj == (0, 2) and obj == (16, 28)
    assert text[slice(*obj)] == "Yamoussoukro"


def test_adjacent_spans_are_fine_overlapping_ones_are_not():
    assert mask_subject("FranceParis", (0, 6), (6, 11)) == ("SomethingParis", (0, 9), (9, 14))
    with pytest.raises(ValueError, match="overlap"):
        mask_subject("France Paris", (0, 8), (7, 12))
    with pytest.raises(ValueError, match="placeholder"):
        mask_subject("France is Paris", (0, 6), (10, 15), placeholder="")
    with pytest.raises(ValueError, match="placeholder"):
        mask_subject("France is Paris", (0, 6), (10, 15), placeholder="  ")
    with pytest.raises(ValueError, match=r"subject_span.*empty"):
        mask_subject("France is Paris", (3, 3), (10, 15))
    with pytest.raises(ValueError, match="object_span"):
        mask_subject("France is Paris", (0, 6), (10, 16))


def statements_frame(rows) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "statement_id": [chr(ord("a") + i) for i in range(len(rows))],
            "text": [f.text for f in rows],
            "subject_start": [f.subject_span[0] for f in rows],
            "subject_end": [f.subject_span[1] for f in rows],
            "object_start": [f.object_span[0] for f in rows],
            "object_end": [f.object_span[1] for f in rows],
        },
        schema_overrides=dict.fromkeys(
            ("subject_start", "subject_end", "object_start", "object_end"), pl.Int32
        ),
    )


TWO = [fill("The capital of [X] is [Y].", "France", "Paris"), fill("[Y] is in [X].", "Peru", "Lima")]


def test_frame_helper_keeps_rows_columns_and_dtypes():
    frame = statements_frame(TWO)
    masked = mask_subjects(frame)
    assert masked.schema == frame.schema
    assert masked.rows() == [
        ("a", "The capital of something is Paris.", 15, 24, 28, 33),
        ("b", "Lima is in something.", 11, 20, 0, 4),
    ]
    bad = frame.with_columns(object_start=pl.Series([16, 0], dtype=pl.Int32))
    with pytest.raises(ValueError, match=r"statement_id 'a'.*overlap"):
        mask_subjects(bad)
    with pytest.raises(ValueError, match="lacks column"):
        mask_subjects(frame.drop("object_end"))


def test_masked_scores_are_the_scores_of_the_masked_statements():
    cache = os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models"
    loaded = load_model(DEFAULT_MODEL, Path(cache))
    frame = statements_frame(TWO)
    out = subject_masked_scores(loaded, frame)
    assert out.schema == {
        "ll_sum_masked": pl.Float64,
        "ll_answer_sum_masked": pl.Float64,
        "subject_mask_method": pl.String,
        "subject_mask_text": pl.String,
    }
    expected = score_clm(
        loaded,
        ["The capital of something is Paris.", "Lima is in something."],
        [(15, 24), (11, 20)],
        [(28, 33), (0, 4)],
    )
    assert out["ll_sum_masked"].to_list() == expected["ll_sum"].to_list()
    assert out["ll_answer_sum_masked"].to_list() == expected["ll_answer_sum"].to_list()
    plain = score_clm(
        loaded,
        frame["text"].to_list(),
        list(zip(frame["subject_start"], frame["subject_end"], strict=True)),
        list(zip(frame["object_start"], frame["object_end"], strict=True)),
    )
    # Knowing the subject is France makes "Paris" likelier than knowing nothing about it.
    assert plain["ll_answer_sum"][0] > out["ll_answer_sum_masked"][0]
    # The record: causal LMs keep the placeholder, as written in each statement.
    assert out["subject_mask_method"].to_list() == ["placeholder", "placeholder"]
    assert out["subject_mask_text"].to_list() == ["something", "something"]


def test_causal_lm_records_the_placeholder_as_it_stands_in_the_statement():
    cache = os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models"
    loaded = load_model(DEFAULT_MODEL, Path(cache))
    frame = statements_frame([fill("[X] is in [Y].", "Peru", "South America")])
    out = subject_masked_scores(loaded, frame, placeholder="it")
    assert out.row(0, named=True)["subject_mask_text"] == "It"  # sentence start: capitalised
    expected = score_clm(loaded, ["It is in South America."], [(0, 2)], [(9, 22)])
    assert out["ll_sum_masked"].to_list() == expected["ll_sum"].to_list()


# --- masked LMs: the subject becomes mask tokens (as Selective-LAMA does), never scored ----------

MLM_VARIANTS = ("original", "within_word_l2r")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    import torch

    from bench._data import build_tiny_mlm
    from kcal_pipeline.scoring.models import ModelEntry

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 30k-parameter model gains nothing from threads on a busy machine
    folder = build_tiny_mlm(tmp_path_factory.mktemp("tiny-bert"))
    yield load_model(
        ModelEntry(id="kcal-test/tiny-bert", source="local", path=str(folder)),
        tmp_path_factory.mktemp("cache"),
    )
    torch.set_num_threads(threads)


def _overlaps(token, span) -> bool:
    return token[0] < token[1] and span[0] < span[1] and token[0] < span[1] and span[0] < token[1]


def reference_masked_pll(loaded, text, subject_span, object_span, variant, context_end=0):
    """The definition, slowly: (sum, answer sum, subject tokens). The subject's tokens (overlapping
    its span, not the object's) are [MASK] in every copy; every other non-special token gets its own
    copy with itself (and, within_word_l2r, its word's later tokens) masked; batch of one. Tokens of
    a context (ending at or before context_end) are in every copy, never masked or scored."""
    import torch

    tok = loaded.tokenizer
    enc = tok(text, return_special_tokens_mask=True, return_offsets_mapping=True)
    ids, words, offsets, special = (
        enc["input_ids"],
        enc.word_ids(),
        enc["offset_mapping"],
        enc["special_tokens_mask"],
    )
    subject = {
        p
        for p in range(len(ids))
        if not special[p] and _overlaps(offsets[p], subject_span) and not _overlaps(offsets[p], object_span)
    }
    base = [tok.mask_token_id if p in subject else t for p, t in enumerate(ids)]
    scored = [
        p for p in range(len(ids)) if not special[p] and p not in subject and offsets[p][1] > context_end
    ]
    total = answer = 0.0
    for p in scored:
        copy = list(base)
        copy[p] = tok.mask_token_id
        if variant == "within_word_l2r" and words[p] is not None:
            for q in scored:
                if q > p and words[q] == words[p]:
                    copy[q] = tok.mask_token_id
        with torch.inference_mode():
            logits = loaded.model(torch.tensor([copy])).logits[0, p].double()
        value = logits.log_softmax(-1)[ids[p]].item()
        total += value
        answer += value if _overlaps(offsets[p], object_span) else 0.0
    return total, answer, len(subject)


MLM_FILLED = [
    fill("The capital of [X] is [Y].", "Zürich Bern", "Paris"),  # two whole-word tokens: 2 masks
    fill("[Y] is the capital of [X].", "Québec", "Bern"),  # one token, at the end
    fill("The capital of [X] is [Y].", "Côte d'Ivoire", "Yamoussoukro"),  # several word pieces
    fill("People in [X] speak [Y], they say.", "São Tomé and Príncipe", "Portuguese"),
    fill("[X][Y]", "Iceland", "Paris"),  # glued into one word: "Iceland" ##… (subject, then object)
]


@pytest.mark.parametrize("variant", MLM_VARIANTS)
def test_masked_lm_masks_the_subject_token_by_token_and_scores_the_rest(tiny_bert, variant):
    from kcal_pipeline.scoring.mlm import score_mlm

    frame = statements_frame(MLM_FILLED)
    out = subject_masked_scores(
        tiny_bert,
        frame,
        scorer=lambda *a, **k: score_mlm(*a, variant=variant, **k),
        placeholder="something",  # not used for a masked LM
    )
    assert out.schema == {
        "ll_sum_masked": pl.Float64,
        "ll_answer_sum_masked": pl.Float64,
        "subject_mask_method": pl.String,
        "subject_mask_text": pl.String,
    }
    assert out["subject_mask_method"].unique().to_list() == ["mask_tokens"]
    texts = out["subject_mask_text"].to_list()
    assert texts[:2] == ["[MASK] [MASK]", "[MASK]"]  # "Zürich Bern" is two tokens, "Québec" one
    assert len(texts[2].split()) >= 4 and set(texts[2].split()) == {"[MASK]"}  # Côte / d / ' / Ivoire
    assert texts[4] == "[MASK]"  # "Iceland" of "IcelandParis"
    for f, row, text in zip(MLM_FILLED, out.iter_rows(named=True), texts, strict=True):
        total, answer, n_subject = reference_masked_pll(
            tiny_bert, f.text, f.subject_span, f.object_span, variant
        )
        assert len(text.split()) == n_subject
        assert row["ll_sum_masked"] == pytest.approx(total, abs=1e-4), f.text
        assert row["ll_answer_sum_masked"] == pytest.approx(answer, abs=1e-4), f.text


def test_the_subject_masks_are_not_scored_and_the_other_tokens_are(tiny_bert):
    from kcal_pipeline.scoring.clm import ROLE_SUBJECT
    from kcal_pipeline.scoring.mlm import score_mlm

    args = (
        [f.text for f in MLM_FILLED],
        [f.subject_span for f in MLM_FILLED],
        [f.object_span for f in MLM_FILLED],
    )
    plain = score_mlm(tiny_bert, *args)
    masked = score_mlm(tiny_bert, *args, mask_subject=True)
    for p, m in zip(plain.iter_rows(named=True), masked.iter_rows(named=True), strict=True):
        n_subject = p["token_roles"].count(ROLE_SUBJECT)
        assert n_subject >= 1 and ROLE_SUBJECT not in m["token_roles"]
        assert m["n_tokens"] == p["n_tokens"] - n_subject
        assert m["token_roles"] == [r for r in p["token_roles"] if r != ROLE_SUBJECT]
    # "The capital of [MASK] [MASK] is Paris.": The, capital, of, is, Paris, "." are scored, not the masks
    assert masked["n_tokens"][0] == 6 and plain["n_tokens"][0] == 8


def test_a_context_is_kept_and_only_the_statement_is_masked_and_scored(tiny_bert):
    """statements.context_end: the causal placeholder is capitalised as the statement alone would
    have it (the context ends in "4", not a sentence end), the context stays in front; a masked LM
    masks the statement's subject and scores the statement's other tokens only (slow reference)."""
    context = "What is 2+2? 4\n"
    filled = [
        fill("[X] is in [Y].", "Peru", "South America"),
        fill("The capital of [X] is [Y].", "Québec", "Bern"),
    ]
    shifted = [
        type(f)(
            context + f.text,
            *((a + len(context), b + len(context)) for a, b in (f.subject_span, f.object_span)),
        )
        for f in filled
    ]
    frame = statements_frame(shifted).with_columns(context_end=pl.lit(len(context), pl.Int32))
    masked = mask_subjects(frame)
    assert masked["text"].to_list() == [
        context + "Something is in South America.",
        context + "The capital of something is Bern.",
    ]
    assert masked["context_end"].to_list() == [len(context)] * 2
    assert mask_subjects(frame.drop("context_end"))["text"][0] == context + "something is in South America."
    from kcal_pipeline.scoring.mlm import score_mlm

    for variant in MLM_VARIANTS:
        out = subject_masked_scores(
            tiny_bert, frame, scorer=lambda *a, v=variant, **k: score_mlm(*a, variant=v, **k)
        )
        for f, row in zip(shifted, out.iter_rows(named=True), strict=True):
            total, answer, _ = reference_masked_pll(
                tiny_bert, f.text, f.subject_span, f.object_span, variant, context_end=len(context)
            )
            assert row["ll_sum_masked"] == pytest.approx(total, abs=1e-4), f.text
            assert row["ll_answer_sum_masked"] == pytest.approx(answer, abs=1e-4), f.text


def test_masked_lm_subject_masking_checks_its_spans(tiny_bert):
    frame = statements_frame([fill("The capital of [X] is [Y].", "France", "Paris")])
    empty = frame.with_columns(subject_end=pl.col("subject_start"))
    with pytest.raises(ValueError, match=r"statement_id 'a'.*subject_span.*empty"):
        subject_masked_scores(tiny_bert, empty)
    glued = frame.with_columns(object_start=pl.col("subject_end") - 1)
    with pytest.raises(ValueError, match=r"statement_id 'a'.*overlap"):
        subject_masked_scores(tiny_bert, glued)
