"""SCA, SNCA and SFCA (MACE) on hand-worked examples, their properties, tuned τ, and against the
per-instance reference in reference_multi_answer.py."""

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.multi_answer import TAU_GRID, at_threshold
from kcal_pipeline.estimation.registry import ESTIMATORS, FITS_SCHEMA, compute_estimate_tables
from tests.estimation.reference_multi_answer import reference_multi_answer

RELATION = "mace-award"
QUESTION = "Question: Name one person who received [X].\nAnswer: [Y]"
ANSWER_FIRST = "[Y] received [X]."  # curated, answer slot first: its ll_answer_sum ignores the question
TUNED = ["sca_tuned", "snca_tuned", "sfca_tuned"]
AT_ZERO = ["sca_tau0", "snca_tau0", "sfca_tau0"]
MACE = AT_ZERO + TUNED
STATEMENT_SCHEMA = {
    "instance_id": pl.String,
    "template_id": pl.String,
    "option_index": pl.Int32,
    "object_id": pl.String,
    "is_gold": pl.Boolean,
    "ll_answer_sum": pl.Float64,
}


def statements(rows, model="m"):
    """statement_scores from (instance, template, option_index, object, is_gold, ll_answer_sum) rows;
    ll_sum (which every cube needs) is ll_answer_sum − 2, read by none of these estimators."""
    frame = pl.DataFrame(rows, schema=STATEMENT_SCHEMA, orient="row")
    return frame.select(
        pl.lit(model).alias("model_id"),
        pl.lit(RELATION).alias("relation_id"),
        *frame.columns,
        (pl.col("ll_answer_sum") - 2.0).alias("ll_sum"),
    )


def templates(questions=("q0", "q1"), curated=("c0",)):
    """The relation's templates table: question templates (answer last) and answer-first curated ones."""
    ids = [*curated, *questions]
    return pl.DataFrame(
        {
            "relation_id": RELATION,
            "template_id": ids,
            "kind": ["curated"] * len(curated) + ["question"] * len(questions),
            "rank": [*range(len(curated)), *range(len(questions))],
            "text": [ANSWER_FIRST] * len(curated) + [QUESTION] * len(questions),
        },
        schema_overrides={"rank": pl.Int32},
    )


def instances(split: dict[str, str], k: dict[str, int] | None = None, n_options: int = 3):
    """probe_instances: split per instance, answer_space_k and _draw (0 = the full answer space)."""
    ids = list(split)
    return pl.DataFrame(
        {
            "instance_id": ids,
            "n_options": [n_options] * len(ids),
            "split": [split[i] for i in ids],
            "answer_space_k": [(k or {}).get(i, 0) for i in ids],
            "answer_space_draw": [1 if (k or {}).get(i) else 0 for i in ids],
        },
        schema_overrides={"answer_space_k": pl.Int32, "answer_space_draw": pl.Int32},
    )


def rows_of(instance, template, probabilities, gold):
    """Statements of one (instance, template) from absolute answer probabilities a_t(o)."""
    return [
        (instance, template, o, f"{instance}:Q{o}", o in gold, math.log(a))
        for o, a in enumerate(probabilities)
        if a is not None
    ]


# --- by hand ---------------------------------------------------------------------------------------


def hand_cube():
    """i1: options 0 (gold), 1 (gold), 2; question templates q0, q1 and an answer-first curated c0.

    a_q0 = [0.4, 0.3, 0.05]  → ỹ_q0 = 0
    a_q1 = [0.09, 0.25, 0.08] → ỹ_q1 = 1
    a_c0 = [0.01, 0.02, 0.9]  is not conditioned on the question: never read (else option 2 wins)
    SCA_0 = [(0.4 + 0.09)/2, (0.3 + 0.25)/2, (0.05 + 0.08)/2] = [0.245, 0.275, 0.065] → ŷ = 1 (gold)
    SCA_0.1: a > 0.1 kept: [0.4/2, (0.3 + 0.25)/2, 0] = [0.2, 0.275, 0]
    """
    rows = rows_of("i1", "q0", [0.4, 0.3, 0.05], {0, 1})
    rows += rows_of("i1", "q1", [0.09, 0.25, 0.08], {0, 1})
    rows += rows_of("i1", "c0", [0.01, 0.02, 0.9], {0, 1})
    return build_cube(statements(rows), instances({"i1": "test"}), templates())


def test_sca_snca_sfca_by_hand_at_tau_0_and_0_1():
    cube = hand_cube()
    expected = {
        # SCA_0 = 0.245 + 0.275 + 0.065 = 0.585; SCA_0.1 = 0.2 + 0.275 = 0.475 (two golds add up)
        "sca": (0.585, 0.475),
        # SNCA_0 = 0.275 / 0.585 = 0.470085…; SNCA_0.1 = 0.275 / 0.475 = 11/19
        "snca": (0.275 / 0.585, 11 / 19),
        # SFCA: only q1 answers ŷ = 1 (q0 answers 0); a_q1(1) = 0.25 > 0.1 → 1/2 at both τ
        "sfca": (0.5, 0.5),
    }
    for name, (at_zero, at_tenth) in expected.items():
        zero, tenth = at_threshold(cube, name, 0.0), at_threshold(cube, name, 0.1)
        assert zero.predicted.tolist() == tenth.predicted.tolist() == [1]
        assert zero.confidence[0] == pytest.approx(at_zero, rel=1e-12)
        assert tenth.confidence[0] == pytest.approx(at_tenth, rel=1e-12)
        np.testing.assert_array_equal(
            ESTIMATORS[f"{name}_tau0"].fn(cube, "answer_sum").confidence, zero.confidence
        )
    # τ = 0.3: a_q1(1) = 0.25 drops out → SFCA = 0; SCA_0.3 = [0.4/2, 0, 0] → SCA 0.2, SNCA 0/0.2 = 0
    # τ = 0.5: nothing is above → SCA 0, SNCA 0 (0/0 is defined as 0), SFCA 0
    for tau, sca in ((0.3, 0.2), (0.5, 0.0)):
        assert at_threshold(cube, "sca", tau).confidence[0] == pytest.approx(sca, rel=1e-12)
        assert at_threshold(cube, "snca", tau).confidence[0] == 0.0
        assert at_threshold(cube, "sfca", tau).confidence[0] == 0.0


def test_sca_above_one_is_capped_and_snca_is_not():
    # answer strings that extend one another can each get most of the mass: a_q0 = [0.8, 0.7]
    # (one question template) → SCA_0 = 0.8 + 0.7 = 1.5 → C = 1; SNCA = 0.8/1.5 from the uncapped sum
    cube = build_cube(
        statements(rows_of("i1", "q0", [0.8, 0.7], {0})), instances({"i1": "test"}, n_options=2), templates()
    )
    assert at_threshold(cube, "sca", 0.0).confidence.tolist() == [1.0]
    assert at_threshold(cube, "snca", 0.0).confidence[0] == pytest.approx(0.8 / 1.5, rel=1e-12)


def test_rows_and_correctness_through_compute_estimate_tables():
    out = compute_estimate_tables(hand_cube(), AT_ZERO).estimates
    assert out.select(
        "instance_id", "template_id", "estimator", "reduction", "grain", "predicted_id"
    ).rows() == [
        ("i1", None, name, "answer_sum", "instance", "i1:Q1")
        for name in ("sca_tau0", "sfca_tau0", "snca_tau0")
    ]
    assert out["correct"].to_list() == [True, True, True]
    np.testing.assert_allclose(out["confidence"].to_numpy(), [0.585, 0.5, 0.275 / 0.585], rtol=1e-12)


def test_prediction_ties_go_to_the_lowest_option_and_a_padded_slot_never_wins():
    # i1 (one template q0): a = [0.2, 0.2] → SCA_0 tie → option 0; SFCA: ỹ_q0 = 0 too → 1
    # i2: options 1 and 2 only (slot 0 is padding, a = 0); a_q0(1) = e^-800 underflows to 0 like
    #     the padding, a_q0(2) = 0 too: every SCA_0 is 0, and the lowest *scored* option 1 wins.
    rows = rows_of("i1", "q0", [0.2, 0.2], {1})
    rows += [("i2", "q0", 1, "i2:Q1", True, -800.0), ("i2", "q0", 2, "i2:Q2", False, -900.0)]
    cube = build_cube(statements(rows), instances({"i1": "test", "i2": "test"}), templates(("q0",), ()))
    sca, sfca = at_threshold(cube, "sca", 0.0), at_threshold(cube, "sfca", 0.0)
    assert sca.predicted.tolist() == [0, 1]
    assert sca.confidence.tolist() == pytest.approx([0.4, 0.0], rel=1e-12)
    # SFCA: i1 → 1; i2: ỹ_q0 = argmax ll = 1 = ŷ, but a_q0(1) = 0 is not > 0 → 0
    assert sfca.confidence.tolist() == [1.0, 0.0]


# --- τ tuned on the dev split ------------------------------------------------------------------------


def tuning_frames():
    """One question template q0; a_q0 per instance (answer space k = 0 unless said):

    d1 (dev):  [0.6 gold, 0.15]         → ŷ = 0, right. SCA_τ = 0.75 (τ < 0.15), 0.6 (τ < 0.6), then 0
    d2 (dev):  [0.28, 0.005 gold]       → ŷ = 0, wrong. SCA_τ = 0.285 (τ < 0.005), 0.28 (τ < 0.28), 0
    t1 (test): [0.5 gold, 0.008, 0.02]  → ŷ = 0, right. SCA_τ = 0.528 (τ < 0.008), 0.52 (τ < 0.02), …
    t1#k2 (test, k = 2): [0.5 gold, 0.02] → an answer space without dev instances: no tuned row
    """
    rows = rows_of("d1", "q0", [0.6, 0.15], {0})
    rows += rows_of("d2", "q0", [0.28, 0.005], {1})
    rows += rows_of("t1", "q0", [0.5, 0.008, 0.02], {0})
    rows += rows_of("t1#k2", "q0", [0.5, None, 0.02], {0})
    split = {"d1": "dev", "d2": "dev", "t1": "test", "t1#k2": "test"}
    return statements(rows), instances(split, {"t1#k2": 2}), templates(("q0",), ())


def test_tuned_tau_by_hand():
    # Dev Brier of SCA, mean over d1 ((C − 1)²) and d2 (C²):
    #   τ ∈ {0, 1e-4, 1e-3}:        ((0.75 − 1)² + 0.285²) / 2 = (0.0625 + 0.081225) / 2 = 0.0718625
    #   τ ∈ {0.01, 0.02, 0.05, 0.1}: (0.0625 + 0.28²) / 2        = (0.0625 + 0.0784) / 2   = 0.07045
    #   τ = 0.2:                     ((0.6 − 1)² + 0.28²) / 2     = (0.16 + 0.0784) / 2     = 0.1192
    #   τ ∈ {0.3, 0.5}:              ((0.6 − 1)² + 0²) / 2        = 0.08
    # → the lowest, 0.07045, is shared by four τ: the smallest, 0.01, is taken.
    # Rows at τ = 0.01: d1 0.75, d2 0.28, t1 0.5 + 0.02 = 0.52 (0.008 is below τ); t1#k2 none.
    scores, probe, tmpl = tuning_frames()
    tables = compute_estimate_tables(
        build_cube(scores, probe, tmpl), ["sca_tuned", "sca_tau0"], log=lambda _: None
    )
    tuned = tables.estimates.filter(pl.col("estimator") == "sca_tuned")
    assert tuned["instance_id"].to_list() == ["d1", "d2", "t1"]
    np.testing.assert_allclose(tuned["confidence"].to_numpy(), [0.75, 0.28, 0.52], rtol=1e-12)
    # τ = 0 keeps every row: t1 0.528, t1#k2 0.52
    at_zero = tables.estimates.filter(pl.col("estimator") == "sca_tau0")
    assert at_zero["instance_id"].to_list() == ["d1", "d2", "t1", "t1#k2"]
    np.testing.assert_allclose(at_zero["confidence"].to_numpy(), [0.75, 0.285, 0.528, 0.52], rtol=1e-12)
    assert tables.fits.columns == list(FITS_SCHEMA)
    assert tables.fits.schema == pl.Schema(FITS_SCHEMA)
    assert tables.fits.select(
        "estimator", "reduction", "template_id", "answer_space_k", "parameter"
    ).rows() == [
        ("sca_tuned", "answer_sum", None, 0, "tau"),
        ("sca_tuned", "answer_sum", None, 2, "tau"),
    ]
    assert tables.fits.select("value", "n_dev", "note").rows() == [
        (0.01, 2, None),
        (None, 0, "no dev-split instances in this answer space: no rows"),
    ]
    assert tables.fits.select("model_id", "relation_id").unique().rows() == [("m", RELATION)]


def test_tuned_snca_and_sfca_by_hand():
    # SNCA (ŷ = 0 everywhere): d1 = 0.6/0.75 = 0.8 (τ < 0.15), 1 (0.15 ≤ τ < 0.6); d2 = 0.28/0.285
    # (τ < 0.005), 1 (0.005 ≤ τ < 0.28), 0 (τ ≥ 0.28). Brier: τ < 0.005: (0.04 + 0.965²)/2 ≈ 0.486;
    # 0.005 ≤ τ < 0.15: (0.04 + 1)/2 = 0.52; τ = 0.2: (0 + 1)/2 = 0.5; τ ≥ 0.28: (0 + 0)/2 = 0
    # → τ = 0.3. SFCA: d1 1 (τ < 0.6), d2 1 (τ < 0.28), 0 above → Brier 0.5, then (0 + 0)/2 = 0 at
    # τ = 0.3 as well. t1 at τ = 0.3: SNCA 0.5/0.5 = 1, SFCA 1 (0.5 > 0.3).
    scores, probe, tmpl = tuning_frames()
    tables = compute_estimate_tables(build_cube(scores, probe, tmpl), ["snca_tuned", "sfca_tuned"])
    assert tables.fits.filter(pl.col("answer_space_k") == 0)["value"].to_list() == [0.3, 0.3]
    out = tables.estimates.select("instance_id", "estimator", "confidence").rows()
    assert out == [
        ("d1", "sfca_tuned", 1.0),
        ("d1", "snca_tuned", 1.0),
        ("d2", "sfca_tuned", 0.0),
        ("d2", "snca_tuned", 0.0),
        ("t1", "sfca_tuned", 1.0),
        ("t1", "snca_tuned", 1.0),
    ]


def test_missing_inputs_are_skipped_with_a_reason():
    scores, probe, tmpl = tuning_frames()
    logged = []
    # no question template (only the answer-first curated c0): every MACE estimator is skipped
    no_questions = scores.with_columns(template_id=pl.lit("c0"))
    out = compute_estimate_tables(
        build_cube(no_questions, probe, templates((), ("c0",))), MACE, log=logged.append
    )
    assert out.estimates.is_empty()
    assert logged == [
        "skipped, no answer-conditional templates (the answer slot comes first, or no templates table) "
        f"({RELATION}): " + ", ".join(f"{n} (answer_sum)" for n in MACE)
    ]
    # no templates table: kinds unknown, nothing is known to be answer-conditional
    logged.clear()
    compute_estimate_tables(build_cube(scores, probe), AT_ZERO, log=logged.append)
    assert logged[0].startswith("skipped, no answer-conditional templates")
    # no dev split: τ = 0 runs, the tuned ones say why they did not
    logged.clear()
    all_test = probe.with_columns(split=pl.lit("test"))
    out = compute_estimate_tables(build_cube(scores, all_test, tmpl), MACE, log=logged.append)
    assert set(out.estimates["estimator"]) == set(AT_ZERO)
    assert logged == [
        f"skipped, no dev-split instances to tune τ on ({RELATION}): "
        + ", ".join(f"{n} (answer_sum)" for n in TUNED)
    ]
    # no ll_answer_sum scores at all
    logged.clear()
    compute_estimate_tables(
        build_cube(scores.drop("ll_answer_sum"), probe, tmpl), ["sca_tau0"], log=logged.append
    )
    assert logged == [f"skipped, no ll_answer_sum scores ({RELATION}): sca_tau0 (answer_sum)"]


def test_an_instance_without_a_question_template_has_no_row():
    # i2 is scored on the curated c0 only: no sample, no row (the others still get theirs)
    rows = rows_of("i1", "q0", [0.5, 0.1], {0}) + rows_of("i2", "c0", [0.5, 0.1], {0})
    cube = build_cube(statements(rows), instances({"i1": "dev", "i2": "dev"}), templates(("q0",)))
    out = compute_estimate_tables(cube, MACE).estimates
    assert set(out["instance_id"]) == {"i1"}
    assert out.height == 6


# --- properties and the reference ----------------------------------------------------------------------


def random_partition(seed: int):
    """(scores, probe_instances, templates) of a random MACE-style partition, built for edge cases.

    1–3 question templates plus an answer-first curated one (never read); 6–13 instances with 1–8
    options (one with exactly 1), 1–3 golds, option indices sometimes non-contiguous; ~15% of
    (instance, question) pairs missing (an instance can lose them all), ~5% of statements missing;
    ~30% of pairs with integer lls in {−3, −2, −1} (ties), the rest uniform in [−7, −0.02] (a_t from
    0.001 to 0.98, so τ on the grid cuts between them); splits dev/test, answer spaces 0, 2, 3.
    """
    rng = np.random.default_rng(seed)
    questions = [f"q{j}" for j in range(int(rng.integers(1, 4)))]
    n_instances = int(rng.integers(6, 14))
    counts = rng.integers(1, 9, size=n_instances)
    counts[0] = 1
    rows, probe = [], []
    for i, k in enumerate(rng.permutation(counts)):
        inst = f"i{i:02d}"
        options = (
            list(range(k))
            if rng.random() < 0.6
            else sorted(rng.choice(k + 3, size=k, replace=False).tolist())
        )
        gold = set(rng.choice(options, size=int(rng.integers(1, min(3, k) + 1)), replace=False).tolist())
        for t in ["c0", *(q for q in questions if rng.random() > 0.15)]:
            tied = rng.random() < 0.3
            pair = [
                (
                    inst,
                    t,
                    o,
                    f"Q{seed}_{i}_{o}",
                    o in gold,
                    float(rng.integers(-3, 0)) if tied else float(rng.uniform(-7, -0.02)),
                )
                for o in options
            ]
            if len(pair) > 1:
                pair = [r for r in pair if rng.random() > 0.05] or pair[:1]
            rows += pair
        split = "dev" if rng.random() < 0.4 else "test"
        probe.append((inst, k, split, [None, 2, 3][int(rng.choice(3, p=[0.6, 0.2, 0.2]))]))
    scores = statements(rows, model=f"m{seed % 2}").sample(fraction=1.0, shuffle=True, seed=seed)
    probe = pl.DataFrame(
        probe,
        schema={
            "instance_id": pl.String,
            "n_options": pl.Int64,
            "split": pl.String,
            "answer_space_k": pl.Int32,
        },
        orient="row",
    ).with_columns(  # copies in two draws, each its own answer space (without touching rng)
        answer_space_k=pl.col("answer_space_k").fill_null(0),
        answer_space_draw=pl.when(pl.col("answer_space_k").is_not_null())
        .then(1 + pl.int_range(pl.len()) % 2)
        .otherwise(0)
        .cast(pl.Int32),
    )
    return scores, probe, templates(tuple(questions))


SEEDS = range(20)


def test_random_partitions_cover_the_edge_cases():
    stats = {
        "multi_gold": 0,
        "single_option": 0,
        "no_question": 0,
        "ties": 0,
        "no_dev_group": 0,
        "several_q": 0,
    }
    for seed in SEEDS:
        scores, probe, tmpl = random_partition(seed)
        cube = build_cube(scores, probe, tmpl)
        stats["multi_gold"] += int((cube.gold.sum(axis=1) > 1).sum())
        stats["single_option"] += int((cube.n_options == 1).sum())
        questions = tmpl.filter(pl.col("kind") == "question")["template_id"].to_list()
        q = np.isin(cube.template_ids, questions)
        stats["no_question"] += int((~cube.present[:, q].any(axis=1)).sum())
        stats["several_q"] += int(q.sum() > 1)
        ll = cube.ll("answer_sum")[:, q, :]
        top = ll.max(axis=2, keepdims=True)
        stats["ties"] += int(((ll == top).sum(axis=2) > 1).sum())
        for k in np.unique(cube.answer_space_k):
            stats["no_dev_group"] += int(not ((cube.answer_space_k == k) & (cube.split == "dev")).any())
    assert all(v > 0 for v in stats.values()), stats


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorised_equals_the_reference(seed):
    scores, probe, tmpl = random_partition(seed)
    tables = compute_estimate_tables(build_cube(scores, probe, tmpl), MACE, log=lambda _: None)
    estimates, fits = reference_multi_answer(scores, tmpl, probe)
    exact = [c for c in estimates.columns if c != "confidence"]
    assert_frame_equal(tables.estimates.select(exact), estimates.select(exact))
    np.testing.assert_allclose(
        tables.estimates["confidence"].to_numpy(), estimates["confidence"].to_numpy(), rtol=1e-12, atol=1e-15
    )
    sort = ["estimator", "answer_space_k", "answer_space_draw"]
    assert_frame_equal(tables.fits.sort(sort), fits.sort(sort))


@pytest.mark.parametrize("seed", SEEDS)
def test_properties_on_random_partitions(seed):
    scores, probe, tmpl = random_partition(seed)
    cube = build_cube(scores, probe, tmpl)
    zero = {name: at_threshold(cube, name, 0.0) for name in ("sca", "snca", "sfca")}
    rows = zero["sca"].rows
    n_templates = cube.present[:, np.isin(cube.template_kinds, ["question"])].sum(axis=1)
    for tau in TAU_GRID[1:]:
        at_tau = {name: at_threshold(cube, name, tau) for name in ("sca", "snca", "sfca")}
        # the prediction does not depend on τ; SCA_0 ≥ SCA_τ (a threshold only removes mass)
        for name in at_tau:
            np.testing.assert_array_equal(at_tau[name].predicted, zero[name].predicted)
        assert (zero["sca"].confidence[rows] >= at_tau["sca"].confidence[rows]).all()
        assert (zero["sfca"].confidence[rows] >= at_tau["sfca"].confidence[rows]).all()
        for out in (zero, at_tau):
            snca, sfca = out["snca"].confidence[rows], out["sfca"].confidence[rows]
            assert ((snca >= 0) & (snca <= 1)).all()
            # SFCA ∈ {0, 1/T_q, …, 1}
            steps = sfca * n_templates[rows]
            np.testing.assert_allclose(steps, np.round(steps), atol=1e-12)
            assert ((sfca >= 0) & (sfca <= 1)).all()


def test_option_order_changes_nothing():
    # Permute option_index within each instance (gold flags and objects move with their option):
    # every estimate and fitted τ stays. Tie-free lls, so the lowest-index rule cannot interfere.
    rng = np.random.default_rng(11)
    rows, split = [], {}
    for i in range(24):
        k = int(rng.integers(1, 7))
        gold = set(rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False).tolist())
        for t in ("q0", "q1"):
            rows += [
                (f"i{i:02d}", t, o, f"Q{i}_{o}", o in gold, float(rng.uniform(-6, -0.05))) for o in range(k)
            ]
        split[f"i{i:02d}"] = "dev" if i % 3 == 0 else "test"
    df = statements(rows)
    shuffled = df.with_columns(
        option_index=pl.col("option_index").shuffle(seed=3).over("instance_id", "template_id")
    )
    shuffled = shuffled.with_columns(
        option_index=pl.col("option_index").first().over("instance_id", "object_id")
    )
    assert not df["option_index"].equals(shuffled["option_index"])
    exact = ["instance_id", "estimator", "predicted_id", "correct"]
    a = compute_estimate_tables(build_cube(df, instances(split), templates()), MACE)
    b = compute_estimate_tables(build_cube(shuffled, instances(split), templates()), MACE)
    assert a.estimates.select(exact).equals(b.estimates.select(exact))
    np.testing.assert_allclose(
        a.estimates["confidence"].to_numpy(), b.estimates["confidence"].to_numpy(), rtol=1e-12
    )
    assert_frame_equal(a.fits, b.fits)
    assert 0 < a.estimates["correct"].sum() < a.estimates.height
