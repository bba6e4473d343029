"""Issue 35 #2: a subject's distractors are ranked by a hash that includes the subject
(sampling.negative_rank), so subjects that share a gold object still get their own distractors.
Every stability property of test_sampling_probe also holds when all subjects share one ranking;
these tests fail then."""

import polars as pl

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.dataset.instances.probe import build_instances
from kcal_pipeline.dataset.instances.sampling import sample_negatives

POOL = {f"o{i}": f"City {i}" for i in range(200)}  # far more candidates than k
SHARING = [f"s{i}" for i in range(12)]  # subjects whose gold is the same object, o0
K = 5


def distractors(subject_id: str, pool=POOL) -> frozenset[str]:
    return frozenset(
        sample_negatives(
            gold_ids=["o0"], pool=pool, k=K, seed=13, relation_id="P36", subject_id=subject_id, labels=pool
        )
    )


def test_subjects_sharing_a_gold_get_their_own_distractors():
    sets = {s: distractors(s) for s in SHARING}
    assert all(len(d) == K and "o0" not in d for d in sets.values())
    # 12 draws of 5 from 199 candidates: two equal sets by chance is ~1e-8, one shared ranking gives 1
    assert len(set(sets.values())) == len(SHARING), "subjects share one distractor ranking"
    # each subject's set is still its own: the same on every call, whatever the pool's order
    reversed_pool = dict(reversed(list(POOL.items())))
    assert all(distractors(s) == distractors(s, reversed_pool) == sets[s] for s in SHARING)


def test_built_instances_of_subjects_sharing_a_gold_differ_in_their_options():
    """The same through build_instances (answer_space 'sampled'): the subject reaches the ranking."""
    rows = [("P36", s, f"Country {s}", "o0", POOL["o0"]) for s in SHARING]
    rows += [("P36", f"t{i}", f"Country t{i}", f"o{i}", POOL[f"o{i}"]) for i in range(1, 200)]
    facts = pl.DataFrame(
        rows, schema=["relation_id", "subject_id", "subject_label", "object_id", "object_label"], orient="row"
    )
    options = ProbeOptions(answer_space="sampled", n_negatives=K, max_instances=0)
    built = build_instances(facts, "P36", options)
    by_subject = {r["subject_id"]: frozenset(r["option_ids"]) for r in built.iter_rows(named=True)}
    shared = {s: by_subject[s] for s in SHARING}
    assert all(len(o) == K + 1 and "o0" in o for o in shared.values())
    assert len(set(shared.values())) == len(SHARING)
    again = build_instances(facts.reverse(), "P36", options)  # another row order: the same options
    assert {r["subject_id"]: frozenset(r["option_ids"]) for r in again.iter_rows(named=True)} == by_subject
