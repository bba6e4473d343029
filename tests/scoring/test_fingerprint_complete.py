"""Issue 35 #3: the scoring fingerprint is complete. Every ScoringOptions field that can change a
score changes the fingerprint (so a changed setting is rescored, never served stale scores) and is
among the settings statement_scores declares it reads (so its data version changes too). Fields
are enumerated from the class: a new field fails here until it is given a change and classified."""

import polars as pl
import pytest

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.scoring.engine import fingerprint
from kcal_pipeline.scoring.loaded_model import LoadedModel

# Fields that provably do not change a score, each with why. Only these may stay out of the
# fingerprint and the declared reads (ScoringOptions.NOT_IN_FINGERPRINT must be exactly this).
# fast_path is NOT here: packed and plain scores agree to a tolerance, not bit for bit.
NO_EFFECT_ON_SCORES = {
    "chunk_size": "statements per checkpoint: how the work is cut into resumable pieces, not what "
    "any statement's score is (scoring/partition.py scores each statement once, whatever the chunk)",
}
# One valid change per field: (the switches it needs on, both sides, to be valid; its other value).
SCORING_CHANGES = {
    "fast_path": ({}, False),
    "mlm_variant": ({}, "original"),
    "dropout": ({}, True),
    "dropout_passes": ({"dropout": True}, 5),
    "dropout_rate": ({"dropout": True}, 0.1),
    "dropout_seed": ({"dropout": True}, 7),
    "subject_mask": ({}, True),
    "placeholder": ({"subject_mask": True}, "someone"),
    "chunk_size": ({}, 64),
}
FIELDS = sorted(ScoringOptions.model_fields)
LOADED = LoadedModel(
    model=None, tokenizer=None, start_token_id=1, device="cpu", dtype="float32", revision="r1",
    n_params=1, key="m",
)  # fmt: skip
STATEMENTS = pl.DataFrame(
    {"statement_id": ["s1"], "text": ["Paris is the capital of France."], "subject_start": [24],
     "subject_end": [30], "object_start": [0], "object_end": [5]}
)  # fmt: skip


def pair(field: str) -> tuple[ScoringOptions, ScoringOptions]:
    """Two valid option sets that differ in `field` alone."""
    switches, other = SCORING_CHANGES[field]
    base, changed = ScoringOptions(**switches), ScoringOptions(**{**switches, field: other})
    assert {k for k in FIELDS if getattr(base, k) != getattr(changed, k)} == {field}
    return base, changed


def statement_scores_reads() -> list[str]:
    """What the scoring asset declares it reads (its @reads, registered when its module is imported)."""
    import assets.scoring  # noqa: F401
    from resources.settings import declared_reads

    return declared_reads("statement_scores")


def test_every_field_has_a_change_and_a_class():
    assert sorted(SCORING_CHANGES) == FIELDS, "classify the new ScoringOptions field here"
    assert set(NO_EFFECT_ON_SCORES) <= set(FIELDS)
    assert frozenset(NO_EFFECT_ON_SCORES) == ScoringOptions.NOT_IN_FINGERPRINT


@pytest.mark.parametrize("field", [f for f in FIELDS if f not in NO_EFFECT_ON_SCORES])
def test_a_field_that_changes_scores_changes_the_fingerprint_and_is_a_declared_read(field):
    base, changed = pair(field)
    assert base.fingerprint_values() != changed.fingerprint_values()
    assert fingerprint(LOADED, STATEMENTS, base) != fingerprint(LOADED, STATEMENTS, changed)
    assert f"scoring.{field}" in statement_scores_reads()


@pytest.mark.parametrize("field", sorted(NO_EFFECT_ON_SCORES))
def test_a_field_that_does_not_change_scores_does_not_rescore(field):
    base, changed = pair(field)
    assert fingerprint(LOADED, STATEMENTS, base) == fingerprint(LOADED, STATEMENTS, changed)
    assert f"scoring.{field}" not in statement_scores_reads()
