"""Issue 35 #1: each relation's resamples come from its own stream, keyed by its name
(bootstrap.relation_seed), as resample_plan's docstring promises. One stream shared by every
relation also leaves a relation undisturbed by the others (test_bootstrap checks that), so these
tests pin what only a per-name stream gives: same-sized relations differ, a renamed one changes."""

import numpy as np

from kcal_pipeline.evaluation.resamples import instance_resamples, relation_seed, resample_plan

N_RESAMPLES = 50


def relation_scopes(relation_ids, seed=0):
    """{relation: its resample indices, shifted to start at row 0} of one resample plan."""
    plan = resample_plan(np.array(relation_ids), n_resamples=N_RESAMPLES, seed=seed)
    return {s.scope_value: s.resamples.indices - s.rows.start for s in plan if s.scope == "relation"}


def test_two_relations_of_the_same_size_in_one_plan_draw_different_rows():
    scopes = relation_scopes(["P17"] * 6 + ["P36"] * 6 + ["P37"] * 6)
    assert {k: v.shape for k, v in scopes.items()} == dict.fromkeys(("P17", "P36", "P37"), (N_RESAMPLES, 6))
    patterns = [v.tobytes() for v in scopes.values()]
    assert len(set(patterns)) == 3, "relations of one size share their resamples"
    # not merely shifted copies of one draw: the row-by-row agreement is what chance gives (1/6)
    agreement = (scopes["P17"] == scopes["P36"]).mean()
    assert agreement < 0.4, agreement


def test_renaming_a_relation_changes_its_resamples_and_nothing_else_does():
    before = relation_scopes(["P17"] * 5 + ["P36"] * 7)
    renamed = relation_scopes(["P17"] * 5 + ["P1376"] * 7)
    assert not np.array_equal(renamed["P1376"], before["P36"])
    assert np.array_equal(renamed["P17"], before["P17"])  # the other relation keeps its own
    again = relation_scopes(["P17"] * 5 + ["P36"] * 7)
    assert all(np.array_equal(again[r], before[r]) for r in before)  # seeded: reproducible


def test_a_relations_resamples_are_its_named_stream():
    """The documented stream, exactly: instance_resamples of the relation's rows, seeded by
    relation_seed(seed, name); so another plan seed gives other resamples too."""
    for seed in (0, 3):
        scopes = relation_scopes(["Q1"] * 4 + ["Q2"] * 9, seed=seed)
        for name, size in (("Q1", 4), ("Q2", 9)):
            own = instance_resamples(size, N_RESAMPLES, relation_seed(seed, name)).indices
            assert np.array_equal(scopes[name], own)
    assert not np.array_equal(
        relation_scopes(["Q1"] * 4, seed=0)["Q1"], relation_scopes(["Q1"] * 4, seed=3)["Q1"]
    )
