"""The scoring engine and one partition's scoring: scorer choice, optional columns, fingerprints,
conditional answer scores, skip-if-unchanged and resume after a crash (real SmolLM2, real Parquet)."""

import dataclasses
import re

import numpy as np
import polars as pl
import pytest
import torch

from bench._data import build_tiny_mlm
from kcal_pipeline.core.options import OptionsError
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.dataset.templates import fill
from kcal_pipeline.scoring import engine as engine_mod
from kcal_pipeline.scoring import partition as partition_mod
from kcal_pipeline.scoring.checkpoints import discard_partition
from kcal_pipeline.scoring.clm import ROLE_SUBJECT, SCHEMA, score_clm
from kcal_pipeline.scoring.engine import (
    OPTIONAL_SCHEMA,
    ScoringOptions,
    fingerprint,
    score_statements,
    scorer_for,
)
from kcal_pipeline.scoring.mlm import score_mlm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, load_model
from kcal_pipeline.scoring.partition import FINGERPRINT_COLUMN, score_partition
from kcal_pipeline.scoring.subject_mask import mask_subjects
from tests.scoring.test_clm_scoring import model_cache

TEMPLATES = [
    "The capital of [X] is [Y].",
    "[Y] is the capital of [X].",
    "In [X], the seat of government is [Y].",
]
PAIRS = [("France", o) for o in ("Paris", "Lyon", "Zürich")] + [("Iceland", o) for o in ("Reykjavík", "Oslo")]


def statements_frame(filled) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "statement_id": [f"st{i:03d}" for i in range(len(filled))],
            "instance_id": [f"i{i // 3}" for i in range(len(filled))],
            "relation_id": ["P36"] * len(filled),
            "template_id": ["t0"] * len(filled),
            "option_index": [i % 3 for i in range(len(filled))],
            "object_id": ["Q1"] * len(filled),
            "is_gold": [i % 3 == 0 for i in range(len(filled))],
            "text": [f.text for f in filled],
            "subject_start": [f.subject_span[0] for f in filled],
            "subject_end": [f.subject_span[1] for f in filled],
            "object_start": [f.object_span[0] for f in filled],
            "object_end": [f.object_span[1] for f in filled],
        }
    )


STATEMENTS = statements_frame([fill(t, s, o) for t in TEMPLATES for s, o in PAIRS])  # 15


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


def spans(frame, a, b):
    return list(zip(frame[a], frame[b], strict=True))


def plain_scores(loaded, frame):
    return score_clm(
        loaded,
        frame["text"].to_list(),
        spans(frame, "subject_start", "subject_end"),
        spans(frame, "object_start", "object_end"),
    )


def test_default_scoring_is_the_packed_path_with_null_optional_columns(loaded):
    assert scorer_for(loaded, ScoringOptions())[0] == "clm-packed"
    assert scorer_for(loaded, ScoringOptions(fast_path=False))[0] == "clm-plain"
    fast = score_statements(loaded, STATEMENTS, ScoringOptions())
    assert dict(fast.schema) == {**SCHEMA, **OPTIONAL_SCHEMA}
    assert all(fast[c].null_count() == fast.height for c in OPTIONAL_SCHEMA)
    plain = plain_scores(loaded, STATEMENTS)
    np.testing.assert_allclose(fast["ll_sum"].to_numpy(), plain["ll_sum"].to_numpy(), atol=1e-4, rtol=0)


def test_answer_scores_are_conditional_on_the_prefix(loaded):
    """ll_answer_sum = log P(answer tokens | start + text before them), from one direct forward pass
    of the prefix followed by the answer (SCA and Token confidence use it)."""
    f = fill("The capital of [X] is [Y].", "France", "Paris")
    row = score_statements(loaded, statements_frame([f]), ScoringOptions()).row(0, named=True)
    tok = loaded.tokenizer
    prefix = tok(f.text[: f.object_span[0]].rstrip(), add_special_tokens=False)["input_ids"]
    answer = tok(f.text, add_special_tokens=False)["input_ids"][len(prefix) :][:1]  # " Paris"
    assert tok.decode(answer) == " Paris"
    ids = torch.tensor([[loaded.start_token_id, *prefix, *answer]])
    with torch.inference_mode():
        logits = loaded.model(input_ids=ids).logits[0].double()
    expected = float(torch.log_softmax(logits[len(prefix)], -1)[answer[0]])
    assert row["ll_answer_sum"] == pytest.approx(expected, abs=1e-4)


def test_dropout_passes_and_subject_masked_columns(loaded):
    opts = ScoringOptions(dropout=True, dropout_passes=2, dropout_rate=0.1, dropout_seed=5, subject_mask=True)
    first = score_statements(loaded, STATEMENTS, opts)
    again = score_statements(loaded, STATEMENTS, opts)
    assert first.equals(again)  # seeded: the same numbers every time
    assert all(len(v) == 2 and v[0] != v[1] for v in first["ll_sum_dropout"].to_list())
    assert not any(m.training for m in loaded.model.modules())  # dropout switched off again
    masked = mask_subjects(STATEMENTS)
    assert masked["text"][0] == "The capital of something is Paris."
    # How each row was made: SmolLM2 has no dropout (the user's rate); a causal LM gets the placeholder.
    assert set(first["dropout_rate"]) == {0.1} and set(first["dropout_source"]) == {"user"}
    assert set(first["subject_mask_method"]) == {"placeholder"}
    assert first["subject_mask_text"].to_list() == ["something"] * 15  # no subject starts a sentence
    np.testing.assert_allclose(
        first["ll_sum_masked"].to_numpy(),
        plain_scores(loaded, masked)["ll_sum"].to_numpy(),
        atol=1e-4,
        rtol=0,
    )


def test_progress_counts_every_pass(loaded):
    calls = []
    score_statements(
        loaded,
        STATEMENTS.head(3),
        ScoringOptions(dropout=True, dropout_passes=2, dropout_rate=0.1, subject_mask=True),
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls[-1] == (12, 12) and all(t == 12 for _, t in calls)  # 3 statements × (1 + 2 + 1)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_fingerprint_follows_statements_options_and_weights(loaded):
    base = fingerprint(loaded, STATEMENTS, ScoringOptions())
    assert base == fingerprint(loaded, STATEMENTS.with_columns(is_gold=pl.lit(True)), ScoringOptions())
    assert base != fingerprint(
        loaded, STATEMENTS.with_columns(pl.col("text").str.replace("France", "Spain")), ScoringOptions()
    )
    assert base != fingerprint(loaded, STATEMENTS, ScoringOptions(subject_mask=True))
    # Every dropout setting a score depends on rescores when it changes.
    dropout = fingerprint(loaded, STATEMENTS, ScoringOptions(dropout=True, dropout_rate=0.1))
    assert len({base, dropout}) == 2
    for changed in ({"dropout_rate": 0.2}, {"dropout_passes": 10}, {"dropout_seed": 1}):
        options = ScoringOptions(dropout=True, **{"dropout_rate": 0.1, **changed})
        assert fingerprint(loaded, STATEMENTS, options) != dropout, changed
    assert ScoringOptions().fingerprint_values().keys() >= {
        "dropout", "dropout_passes", "dropout_rate", "dropout_seed", "subject_mask", "placeholder"
    }  # fmt: skip
    other = dataclasses.replace(loaded, revision=loaded.revision + "-other")
    assert base != fingerprint(other, STATEMENTS, ScoringOptions())


def test_a_context_reaches_every_pass_and_the_fingerprint(loaded):
    """statements.context_end goes to the main pass, each dropout pass (the same seeded pass run by
    hand with the context) and the subject-masked pass; none counts the context's tokens. A frame
    without any context keeps the fingerprint it had before context_end existed."""
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix
    from kcal_pipeline.scoring.stochastic import dropout_enabled, seeded

    context = "What is 2+2? 4\n"
    shift = [pl.col(c) + len(context) for c in ("subject_start", "subject_end", "object_start", "object_end")]
    frame = STATEMENTS.head(3).with_columns(
        (pl.lit(context) + pl.col("text")).alias("text"), *shift, context_end=len(context)
    )
    opts = ScoringOptions(dropout=True, dropout_passes=1, dropout_rate=0.1, dropout_seed=5, subject_mask=True)
    out = score_statements(loaded, frame, opts)
    texts, subj, obj = (
        frame["text"].to_list(),
        spans(frame, "subject_start", "subject_end"),
        spans(frame, "object_start", "object_end"),
    )
    ends = [len(context)] * 3
    statement_tokens = [
        len(loaded.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in STATEMENTS["text"][:3]
    ]
    assert out["n_tokens"].to_list() == statement_tokens  # the context's tokens are not counted
    with dropout_enabled(loaded.model, 0.1), seeded(5, loaded.device):
        by_hand = score_clm_shared_prefix(loaded, texts, subj, obj, context_ends=ends)
    assert [v[0] for v in out["ll_sum_dropout"]] == by_hand["ll_sum"].to_list()
    masked = mask_subjects(frame)
    assert masked["text"][0] == context + "The capital of something is Paris."
    expected = score_clm_shared_prefix(
        loaded,
        masked["text"].to_list(),
        spans(masked, "subject_start", "subject_end"),
        spans(masked, "object_start", "object_end"),
        context_ends=ends,
    )
    np.testing.assert_allclose(
        out["ll_sum_masked"].to_numpy(), expected["ll_sum"].to_numpy(), atol=1e-4, rtol=0
    )
    base = fingerprint(loaded, STATEMENTS, ScoringOptions())
    assert fingerprint(loaded, STATEMENTS.with_columns(context_end=pl.lit(0)), ScoringOptions()) == base
    assert fingerprint(loaded, frame, ScoringOptions()) != fingerprint(
        loaded, frame.with_columns(context_end=pl.lit(0)), ScoringOptions()
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"mlm_variant": "l2r"},
            "scoring setting mlm_variant='l2r': Input should be 'original' or 'within_word_l2r'",
        ),
        (
            {"dropout": True, "dropout_passes": 0},
            "scoring setting dropout_passes=0: Input should be greater than or equal to 1",
        ),
        (
            {"dropout": True, "dropout_rate": 1.5},
            "scoring setting dropout_rate=1.5: Input should be less than 1",
        ),
        (
            {"dropout_passes": 10},
            "dropout_passes=10 has no effect while dropout is off; switch it on (dropout=True, --dropout)",
        ),
        ({"dropout_rate": 0.1}, "dropout_rate=0.1 has no effect while dropout is off"),
        ({"dropout_seed": 3}, "dropout_seed=3 has no effect while dropout is off"),
        (
            {"placeholder": "it"},
            "placeholder='it' has no effect while subject_mask is off; switch it on "
            "(subject_mask=True, --subject-mask)",
        ),
        (
            {"subject_mask": True, "placeholder": ""},
            "scoring setting placeholder='': String should have at least 1 char",
        ),
        ({"subject_mask": True, "placeholder": "  "}, "placeholder='  ' must contain a non-space character"),
        ({"chunk_size": 0}, "scoring setting chunk_size=0: Input should be greater than or equal to 1"),
        (
            {"fast_path": True, "unknown_flag": 1},
            "scoring setting unknown_flag=1: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_options_are_rejected(kwargs, message):
    with pytest.raises(OptionsError, match=re.escape(message)):
        ScoringOptions(**kwargs)


def test_masked_lms_take_the_pseudo_log_likelihood(tmp_path):
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mlm = load_model(
            ModelEntry(id="kcal-test/tiny-bert", source="local", path=str(build_tiny_mlm(tmp_path / "bert"))),
            tmp_path / "cache",
        )
        for variant in ("original", "within_word_l2r"):
            name, _ = scorer_for(mlm, ScoringOptions(mlm_variant=variant))
            assert name == f"mlm-{variant}"
            got = score_statements(mlm, STATEMENTS, ScoringOptions(mlm_variant=variant))
            want = score_mlm(
                mlm,
                STATEMENTS["text"].to_list(),
                spans(STATEMENTS, "subject_start", "subject_end"),
                spans(STATEMENTS, "object_start", "object_end"),
                variant=variant,
            )
            assert got.select(list(SCHEMA)).equals(want)
        # TemplateDiff on a masked LM: the subject becomes mask tokens, whatever the placeholder.
        masked = score_statements(mlm, STATEMENTS, ScoringOptions(subject_mask=True, placeholder="it"))
        assert set(masked["subject_mask_method"]) == {"mask_tokens"}
        plain_roles = score_statements(mlm, STATEMENTS, ScoringOptions())["token_roles"]
        assert [t.split() for t in masked["subject_mask_text"]] == [
            ["[MASK]"] * roles.count(ROLE_SUBJECT) for roles in plain_roles.to_list()
        ]  # one mask per subject token
        want = score_mlm(
            mlm,
            STATEMENTS["text"].to_list(),
            spans(STATEMENTS, "subject_start", "subject_end"),
            spans(STATEMENTS, "object_start", "object_end"),
            variant="within_word_l2r",
            mask_subject=True,
        )
        assert masked["ll_sum_masked"].to_list() == want["ll_sum"].to_list()
    finally:
        torch.set_num_threads(torch_threads)


# --- one partition -----------------------------------------------------------------------------


def run_partition(loaded, home, **kw):
    return score_partition(
        loaded,
        DEFAULT_MODEL.id,
        STATEMENTS,
        ScoringOptions(),
        home,
        "P36",
        chunk_size=kw.pop("chunk_size", 4),
        **kw,
    )


def store(home, frame, key):
    write_parquet_atomic(frame, partition_path(home, "statement_scores", {"model": key, "relation": "P36"}))


def test_a_crashed_partition_resumes_to_the_uninterrupted_result(loaded, tmp_path, monkeypatch):
    clean = run_partition(loaded, tmp_path / "clean")
    assert clean.metadata["chunks"] == 4 and clean.metadata["rescored"] is True
    original, calls = engine_mod.score_statements, []

    def crash_on_third(loaded_, chunk, options, progress=None):
        calls.append(chunk["statement_id"].to_list())
        if len(calls) == 3:
            raise KeyboardInterrupt("killed (injected)")
        return original(loaded_, chunk, options, progress=progress)

    monkeypatch.setattr(engine_mod, "score_statements", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        run_partition(loaded, tmp_path / "home")
    monkeypatch.setattr(engine_mod, "score_statements", original)
    resumed = run_partition(loaded, tmp_path / "home")
    assert (resumed.metadata["chunks_resumed"], resumed.metadata["chunks"]) == (2, 4)
    assert resumed.frame["statement_id"].to_list() == STATEMENTS["statement_id"].to_list()
    assert resumed.frame.drop(FINGERPRINT_COLUMN).equals(clean.frame.drop(FINGERPRINT_COLUMN))
    # The checkpoints stay until the result is stored; the IO manager drops them after its write.
    checkpoints = partition_mod.checkpoint_dir(tmp_path / "home", loaded.key, "P36")
    assert checkpoints.exists()
    store(tmp_path / "home", resumed.frame, loaded.key)
    discard_partition(tmp_path / "home", partition_mod.TABLE, {"model": loaded.key, "relation": "P36"})
    assert not checkpoints.exists()


def test_partition_progress_goes_to_the_log_and_the_bar(loaded, tmp_path):
    import io

    lines, stream = [], io.StringIO()
    scored = run_partition(loaded, tmp_path, log=lines.append, stream=stream)
    assert lines[0].startswith("P36: prefix packing on (float32, |Δ| per token against the float32 plain")
    assert lines[-1].startswith(f"scoring {loaded.key} × P36 (clm-packed): 15/15 statements, ")
    # the packing decision and the token budget the partition ran with are in its metadata
    assert scored.metadata["packing"] == lines[0].removeprefix("P36: ")
    assert scored.metadata["token_budget_packed"].startswith(
        "1024 positions per call (CPU: batch size 32 × 32"
    )
    assert stream.getvalue().endswith("\x1b[K\n") and "[" + "#" * 24 + "]" in stream.getvalue()


def test_an_unchanged_partition_is_not_rescored(loaded, tmp_path, monkeypatch):
    first = run_partition(loaded, tmp_path)
    assert first.frame.columns[:7] == [
        "statement_id",
        "instance_id",
        "relation_id",
        "template_id",
        "option_index",
        "object_id",
        "is_gold",
    ]
    assert first.frame["model_id"].unique().to_list() == [DEFAULT_MODEL.id]
    store(tmp_path, first.frame, loaded.key)
    monkeypatch.setattr(engine_mod, "score_statements", lambda *a, **k: pytest.fail("rescored"))
    again = run_partition(loaded, tmp_path)
    assert again.metadata["rescored"] is False and again.frame.equals(first.frame)
    for key in ("statements", "tokens", "device", "model_revision", "scorer", "fingerprint"):
        assert key in again.metadata


def test_the_partition_records_the_kind_loading_resolved(loaded, tmp_path, monkeypatch):
    # SmolLM2 (kind "clm" in the registry): model_kind right after model_id
    first = run_partition(loaded, tmp_path)
    assert first.frame["model_kind"].unique().to_list() == ["clm"]
    assert first.frame.columns[first.frame.columns.index("model_id") + 1] == "model_kind"
    # a partition stored before the column existed gets it, and is not rescored
    store(tmp_path, first.frame.drop("model_kind"), loaded.key)
    monkeypatch.setattr(engine_mod, "score_statements", lambda *a, **k: pytest.fail("rescored"))
    again = run_partition(loaded, tmp_path)
    assert again.metadata["rescored"] is False and again.frame.equals(first.frame)
    monkeypatch.undo()
    # a masked LM registered with kind "auto": the kind detected at load, never "auto"
    entry = ModelEntry(id="kcal-test/tiny-bert", source="local", path=str(build_tiny_mlm(tmp_path / "bert")))
    assert entry.kind == "auto"
    mlm = load_model(entry, tmp_path / "cache")
    scored = score_partition(
        mlm, entry.id, STATEMENTS.head(3), ScoringOptions(), tmp_path / "m", "P36", chunk_size=4
    )
    assert scored.frame["model_kind"].to_list() == ["mlm"] * 3


def test_changed_statements_are_rescored(loaded, tmp_path):
    first = run_partition(loaded, tmp_path)
    store(tmp_path, first.frame, loaded.key)
    changed = STATEMENTS.with_columns(pl.col("text").str.replace("Lyon", "Nice"))
    second = score_partition(
        loaded, DEFAULT_MODEL.id, changed, ScoringOptions(), tmp_path, "P36", chunk_size=4
    )
    assert second.metadata["rescored"] is True
    assert second.frame[FINGERPRINT_COLUMN][0] != first.frame[FINGERPRINT_COLUMN][0]


def test_partition_metadata_says_which_dropout_and_subject_mask_were_used(loaded, tmp_path):
    def score(options):
        return score_partition(
            loaded, DEFAULT_MODEL.id, STATEMENTS.head(3), options, tmp_path, "P36", chunk_size=4
        )

    with pytest.raises(ValueError, match="no dropout of its own"):
        score(ScoringOptions(dropout=True))  # SmolLM2 needs a rate: refused before any chunk
    assert not partition_mod.checkpoint_dir(tmp_path, loaded.key, "P36").exists()
    meta = score(ScoringOptions(dropout=True, dropout_passes=2, dropout_rate=0.1, subject_mask=True)).metadata
    assert meta["dropout"] == "2 passes, user rate 0.1 at all 30 sites (the model has no dropout)"
    assert meta["subject_mask"] == "placeholder 'something'"
    assert "dropout" not in score(ScoringOptions()).metadata
