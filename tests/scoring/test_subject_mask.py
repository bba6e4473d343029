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
    assert out.schema == {"ll_sum_masked": pl.Float64, "ll_answer_sum_masked": pl.Float64}
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
