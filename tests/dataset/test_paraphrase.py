import dataclasses
import os

import polars as pl
import pytest

from kcal_pipeline.dataset.instances.paraphrases import (
    REASONS,
    Candidate,
    build_prompt,
    choose_templates,
    filter_candidates,
    generate_paraphrases,
    paraphrase_rows,
    reason_counts,
)
from kcal_pipeline.dataset.instances.probe import templates_frame
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.dataset.templates import check_template
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

CURATED = ["The capital of [X] is [Y].", "[Y] is the capital of [X]."]


def _cand(text: str, rid: str = "P36") -> Candidate:
    return Candidate(rid, text, "org/model", "org/model@abc", "prompt text")


def test_filter_hand_checked_cases():
    cases = {
        "[X] is governed from [Y].": None,
        "  [Y] serves as the seat of government of [X]!  ": None,
        "The capital of [X] is [Y]": "not_a_sentence",
        "The Capital of [X] is [Y].": "duplicate_of_curated",
        "THE  CAPITAL of [X]   is [Y].": "duplicate_of_curated",
        "[X] is governed  from [Y].": "duplicate",
        "the seat of [X] is [Y].": "not_a_sentence",
        "The capital of [X] is [X].": "slots",
        "The capital of [X] is [Y], not [Y].": "slots",
        "The capital of [Z] is [Y].": "slots",
        "[X]'s capital: [Y] [X1].": "slots",
        "[X] in [Y].": None,
        "[X]:[Y].": "too_short",
        "[X] is " + "very " * 30 + "much governed from [Y].": "too_long",
        "The capital of [X]\nis [Y].": "newline",
        "Here is one: [X] is ruled from [Y].": "chatter",
        'He said "[X] is ruled from [Y]".': "chatter",
    }
    kept, rejected = filter_candidates([_cand(t) for t in cases], CURATED)
    assert [c.text for c in kept] == [
        "[X] is governed from [Y].",
        "[Y] serves as the seat of government of [X]!",
        "[X] in [Y].",
    ]
    assert {c.text: why for c, why in rejected} == {t: w for t, w in cases.items() if w}
    counts = reason_counts(rejected)
    assert list(counts) == list(REASONS) and sum(counts.values()) == len(rejected)
    assert counts["slots"] == 4 and counts["too_long"] == 1
    for c in kept:
        check_template(c.text)
        assert c.generator == "org/model@abc" and c.prompt == "prompt text"


def test_rows_are_generated_kind_with_provenance_and_a_run_chooses():
    kept, _ = filter_candidates(
        [
            _cand("[X] is governed from [Y]."),
            _cand("[X] is ruled from [Y]."),
            _cand("[X] lies in [Y].", "P30"),
        ],
        CURATED,
    )
    generated = paraphrase_rows(kept)
    assert generated["template_id"].to_list() == ["P36:g0", "P36:g1", "P30:g0"]
    assert set(generated["kind"]) == {"generated"} and set(generated["source"]) == {"generated:org/model"}
    assert generated["generator"].to_list() == ["org/model@abc"] * 3
    curated = templates_frame(load_catalog(), 2).filter(pl.col("relation_id").is_in(["P36", "P30"]))
    both = choose_templates(curated, generated, "both").filter(pl.col("relation_id") == "P36")
    assert both["template_id"].to_list() == ["P36:c0", "P36:c1", "P36:g0", "P36:g1"]
    assert both["rank"].to_list() == [0, 1, 2, 3] and both["prompt"].to_list()[:2] == [None, None]
    only = choose_templates(curated, generated, "generated")
    assert set(only["kind"]) == {"generated"}
    assert only.filter(pl.col("rank") == 0)["template_id"].sort().to_list() == ["P30:g0", "P36:g0"]
    assert choose_templates(curated, generated, "curated").equals(
        choose_templates(curated, generated.head(0), "curated")
    )
    with pytest.raises(ValueError, match="no generated templates for relation"):
        choose_templates(curated, generated.head(2), "generated")
    with pytest.raises(ValueError, match="must be one of"):
        choose_templates(curated, generated, "all")


def test_prompt_lists_the_examples_in_the_chat_template():
    plain = build_prompt("capital", CURATED, 5)
    assert "List 5 different ways" in plain and all(f"- {t}" in plain for t in CURATED)

    class ChatTok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"<user>{messages[0]['content']}</user><assistant>"

    assert build_prompt("capital", CURATED, 5, ChatTok()) == f"<user>{plain}</user><assistant>"


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, os.environ.get("KCAL_MODEL_CACHE"))


def test_real_generation_on_one_relation(loaded):
    spec = load_catalog()["P36"]
    args = {"model_id": DEFAULT_MODEL.id, "seed": 1, "samples": 2, "max_new_tokens": 24}
    candidates = generate_paraphrases(loaded, "P36", spec.label, list(spec.templates), **args)
    assert isinstance(candidates, list) and candidates  # the model always writes something
    assert candidates == generate_paraphrases(loaded, "P36", spec.label, list(spec.templates), **args)
    kept, rejected = filter_candidates(candidates, list(spec.templates))
    assert len(kept) + len(rejected) == len(candidates)
    assert all(why in REASONS for _, why in rejected)
    # A small model's lines are often all rejected; one well-formed line with the real candidates'
    # provenance makes sure the provenance checks below run on at least one kept template.
    written = dataclasses.replace(candidates[0], text="[X] is governed from [Y].")
    kept, _ = filter_candidates([*candidates, written], list(spec.templates))
    assert written.text in {c.text for c in kept}
    for cand in kept:
        check_template(cand.text)
    for cand in [*candidates, *kept]:
        assert cand.relation_id == "P36" and cand.model_id == DEFAULT_MODEL.id
        assert cand.generator == f"{DEFAULT_MODEL.id}@{loaded.revision}"
        assert "<|im_start|>" in cand.prompt and spec.templates[0] in cand.prompt
