"""Temperature, Platt and isotonic recalibration of Base, Margin and the template marginal: hand-worked
fits, fallbacks, groups, properties, and the per-row reference in reference_recalibration.py."""

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.probabilities import marginal_option_probabilities
from kcal_pipeline.estimation.registry import ESTIMATORS, FITS_SCHEMA, compute_estimate_tables
from tests.estimation.reference_recalibration import reference_recalibration

RELATION = "P36"
UNDERLYING = ("base", "margin", "template_marginal")
METHODS = ("temperature", "platt", "isotonic")
RECALIBRATED = [f"{u}_{m}" for u in UNDERLYING for m in METHODS]
STATEMENT_SCHEMA = {
    "instance_id": pl.String,
    "template_id": pl.String,
    "option_index": pl.Int32,
    "object_id": pl.String,
    "is_gold": pl.Boolean,
    "ll_sum": pl.Float64,
}


def statements(rows, model="m"):
    frame = pl.DataFrame(rows, schema=STATEMENT_SCHEMA, orient="row")
    return frame.select(
        pl.lit(model).alias("model_id"), pl.lit(RELATION).alias("relation_id"), *frame.columns
    )


def rows_of(instance, template, lls, gold):
    return [(instance, template, o, f"{instance}:Q{o}", o == gold, float(ll)) for o, ll in enumerate(lls)]


def templates(curated=("t0",), markers=()):
    """Curated paraphrases (the template marginal's templates) and marker variants (not in it)."""
    ids = [*curated, *markers]
    return pl.DataFrame(
        {
            "relation_id": RELATION,
            "template_id": ids,
            "kind": ["curated"] * len(curated) + ["marker_verbal"] * len(markers),
            "rank": list(range(len(curated))) + [0] * len(markers),
        },
        schema_overrides={"rank": pl.Int32},
    )


def instances(split: dict[str, str], k: dict[str, int] | None = None):
    ids = list(split)
    return pl.DataFrame(
        {
            "instance_id": ids,
            "n_options": 3,
            "split": [split[i] for i in ids],
            "answer_space_k": [(k or {}).get(i, 0) for i in ids],
            "answer_space_draw": [1 if (k or {}).get(i) else 0 for i in ids],
        },
        schema_overrides={"answer_space_k": pl.Int32, "answer_space_draw": pl.Int32},
    )


def tables(rows, split, estimators, tmpl=None, k=None):
    cube = build_cube(statements(rows), instances(split, k), templates() if tmpl is None else tmpl)
    return compute_estimate_tables(cube, estimators, log=lambda _: None)


def confidences(out, estimator):
    return dict(
        out.estimates.filter(pl.col("estimator") == estimator).select("instance_id", "confidence").iter_rows()
    )


# --- temperature scaling ---------------------------------------------------------------------------


def test_temperature_by_hand():
    # Dev: d1…d4, one template, options [0, 1] with lls [0, −1]; gold 0 for d1–d3, 1 for d4.
    # p_T(0) = σ(1/T); NLL(T) = −[3 log σ(1/T) + log(1 − σ(1/T))]/4 is least at σ(1/T) = 3/4
    # → 1/T = log 3, T = 1/log 3 = 0.910239. Base on dev = 3/4 (the dev accuracy), Margin = 3/4 − 1/4.
    # Test t1 with lls [0, −2]: σ(2 log 3) = 9/10 → Base 0.9, Margin 0.9 − 0.1 = 0.8.
    # The template marginal over the one curated template is the same distribution: 0.75 and 0.9.
    rows = [
        r for i, gold in (("d1", 0), ("d2", 0), ("d3", 0), ("d4", 1)) for r in rows_of(i, "t0", [0, -1], gold)
    ]
    rows += rows_of("t1", "t0", [0, -2], 0)
    split = {"d1": "dev", "d2": "dev", "d3": "dev", "d4": "dev", "t1": "test"}
    estimators = ["base_temperature", "margin_temperature", "template_marginal_temperature"]
    out = tables(rows, split, estimators)
    expected = {"base_temperature": (0.75, 0.9), "margin_temperature": (0.5, 0.8)}
    expected["template_marginal_temperature"] = (0.75, 0.9)
    for estimator, (on_dev, on_test) in expected.items():
        got = confidences(out, estimator)
        # the bounded search stops within ~1e-5 of log T: confidences agree to ~1e-5
        assert got == pytest.approx(
            {"d1": on_dev, "d2": on_dev, "d3": on_dev, "d4": on_dev, "t1": on_test}, abs=2e-5
        )
    assert out.fits["parameter"].to_list() == ["temperature"] * 3
    assert out.fits["value"].to_list() == pytest.approx([1 / math.log(3)] * 3, rel=1e-12)
    assert out.fits.select("estimator", "template_id", "answer_space_k", "n_dev", "note").rows() == [
        ("base_temperature", "t0", 0, 4, None),
        ("margin_temperature", "t0", 0, 4, None),
        ("template_marginal_temperature", None, 0, 4, None),
    ]
    # the predictions are the plain estimators': option 0 everywhere; d4 is wrong
    assert out.estimates.filter(pl.col("instance_id") == "d4")["correct"].to_list() == [False] * 3
    assert set(out.estimates["predicted_index"]) == {0}


def test_temperature_keeps_the_template_marginal_prediction():
    # f (test) over three curated templates: t0, t1 lls [0, −0.5], t2 lls [−5, 0].
    #   T = 1: P(0) = (2σ(0.5) + σ(−5))/3 = (2·0.622459 + 0.006693)/3 = 0.417204 → ŷ = option 1
    #   T = 0.05: P(0) = (2σ(10) + σ(−100))/3 = 0.666636: the scaled argmax would be option 0.
    # Dev d1: lls [0, −1] on all three, gold 0 → NLL falls as T → 0, so T ends at the bound 0.05.
    # The prediction stays option 1; C = P_0.05(1) = (2σ(−10) + σ(100))/3 = 0.333364.
    rows = [r for t in ("t0", "t1", "t2") for r in rows_of("d1", t, [0, -1], 0)]
    rows += (
        rows_of("f", "t0", [0, -0.5], 1) + rows_of("f", "t1", [0, -0.5], 1) + rows_of("f", "t2", [-5, 0], 1)
    )
    out = tables(
        rows,
        {"d1": "dev", "f": "test"},
        ["template_marginal_temperature"],
        tmpl=templates(("t0", "t1", "t2")),
    )
    assert out.fits["value"][0] == pytest.approx(0.05, rel=1e-4)
    f = out.estimates.filter(pl.col("instance_id") == "f").row(0, named=True)
    assert (f["predicted_index"], f["correct"]) == (1, True)
    sigma = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert f["confidence"] == pytest.approx((2 * sigma(-10) + sigma(100)) / 3, rel=1e-4)
    cube = build_cube(statements(rows), instances({"d1": "dev", "f": "test"}), templates(("t0", "t1", "t2")))
    scaled, _ = marginal_option_probabilities(cube, "sum", 0.05)
    assert scaled[1].argmax() == 0  # what keeping the plain prediction avoids


# --- Platt and isotonic ----------------------------------------------------------------------------


def platt_rows():
    """Base (one template, three options, prediction option 0):
    d1 p = [0.4, 0.3, 0.3] gold 0 (right), d2 the same p, gold 1 (wrong) → x = 0.4
    d3, d4 p = [0.8, 0.1, 0.1] gold 0 (right)                            → x = 0.8
    t1 p = [0.6, 0.2, 0.2] (test), t2 p = [0.34, 0.33, 0.33] (test, below the dev range)."""
    rows = rows_of("d1", "t0", np.log([0.4, 0.3, 0.3]), 0) + rows_of("d2", "t0", np.log([0.4, 0.3, 0.3]), 1)
    rows += rows_of("d3", "t0", np.log([0.8, 0.1, 0.1]), 0) + rows_of("d4", "t0", np.log([0.8, 0.1, 0.1]), 0)
    rows += rows_of("t1", "t0", np.log([0.6, 0.2, 0.2]), 0) + rows_of(
        "t2", "t0", np.log([0.34, 0.33, 0.33]), 0
    )
    split = {"d1": "dev", "d2": "dev", "d3": "dev", "d4": "dev", "t1": "test", "t2": "test"}
    return rows, split


def logit(p):
    return math.log(p / (1 - p))


def test_platt_by_hand():
    # Platt's targets: N₊ = 3, N₋ = 1 → right 4/5, wrong 1/3. With two distinct x, the two-parameter
    # logistic fit meets the mean target at each: σ(a·0.4 + b) = (4/5 + 1/3)/2 = 17/30, σ(a·0.8 + b) = 4/5
    # → a = (logit 4/5 − logit 17/30)/0.4, b = logit 4/5 − 0.8·a; t1 (x = 0.6) → σ(0.6a + b).
    rows, split = platt_rows()
    out = tables(rows, split, ["base_platt"])
    slope = (logit(0.8) - logit(17 / 30)) / 0.4
    intercept = logit(0.8) - 0.8 * slope
    got = confidences(out, "base_platt")
    expected = {"d1": 17 / 30, "d2": 17 / 30, "d3": 0.8, "d4": 0.8}
    expected |= {
        "t1": 1 / (1 + math.exp(-(0.6 * slope + intercept))),
        "t2": 1 / (1 + math.exp(-(0.34 * slope + intercept))),
    }
    assert got == pytest.approx(expected, abs=1e-7)
    assert out.fits.select("parameter", "value").rows() == [
        ("slope", pytest.approx(slope, rel=1e-6)),
        ("intercept", pytest.approx(intercept, rel=1e-6)),
    ]


def test_isotonic_by_hand_and_monotone():
    # Dev as platt_rows plus d5 (x = 0.6, wrong): sorted by x the right-shares are
    # 0.4 → 1/2, 0.6 → 0, 0.8 → 1; 1/2 > 0 violates monotonicity, so PAVA pools 0.4 and 0.6:
    # (1 + 0 + 0)/3 = 1/3. Fitted: 0.4 → 1/3, 0.6 → 1/3, 0.8 → 1 (two distinct values: n_steps 2).
    # t1 (x = 0.6) → 1/3; t2 (x = 0.34, below the dev range) → clipped to f(0.4) = 1/3;
    # t3 (x = 0.7) → halfway between 1/3 and 1 = 2/3.
    rows, split = platt_rows()
    rows += rows_of("d5", "t0", np.log([0.6, 0.2, 0.2]), 1) + rows_of("t3", "t0", np.log([0.7, 0.2, 0.1]), 0)
    split |= {"d5": "dev", "t3": "test"}
    out = tables(rows, split, ["base_isotonic"])
    got = confidences(out, "base_isotonic")
    third = 1 / 3
    expected = {
        "d1": third,
        "d2": third,
        "d3": 1.0,
        "d4": 1.0,
        "d5": third,
        "t1": third,
        "t2": third,
        "t3": 2 / 3,
    }
    assert got == pytest.approx(expected, rel=1e-12)
    assert out.fits.select("parameter", "value", "n_dev").rows() == [("n_steps", 2.0, 5)]


def test_platt_and_isotonic_equal_sklearn_called_directly():
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(5)
    rows, split = [], {}
    for i in range(40):
        rows += rows_of(f"i{i:02d}", "t0", rng.normal(0, 2, size=4), int(rng.integers(4)))
        split[f"i{i:02d}"] = "dev" if i < 25 else "test"
    out = tables(rows, split, ["margin", "margin_platt", "margin_isotonic"])
    raw = out.estimates.filter(pl.col("estimator") == "margin")
    dev = raw.filter(pl.col("split") == "dev")
    x, y = dev["confidence"].to_numpy(), dev["correct"].to_numpy()
    n_right, n_wrong = int(y.sum()), int((~y).sum())
    target = np.where(y, (n_right + 1) / (n_right + 2), 1 / (n_wrong + 2))
    platt = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=1000).fit(
        np.r_[x, x][:, None],
        np.r_[np.ones(len(x)), np.zeros(len(x))],
        sample_weight=np.r_[target, 1 - target],
    )
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(x, y.astype(float))
    all_x = raw["confidence"].to_numpy()[:, None]
    # sklearn stops at its gradient tolerance (1e-10); kcal's Newton goes on to the last bits
    # (tests/estimation/test_fitting.py checks that its gradient is the smaller)
    np.testing.assert_allclose(
        out.estimates.filter(pl.col("estimator") == "margin_platt")["confidence"].to_numpy(),
        platt.predict_proba(all_x)[:, 1],
        rtol=1e-9,
    )
    np.testing.assert_allclose(
        out.estimates.filter(pl.col("estimator") == "margin_isotonic")["confidence"].to_numpy(),
        iso.predict(all_x[:, 0]),
        rtol=1e-12,
    )


# --- fallbacks, skips, groups ------------------------------------------------------------------------


def test_one_class_on_dev_is_the_identity_with_a_note():
    # Every dev row is right (gold = the top option): Platt and isotonic keep the raw confidence.
    rows = rows_of("d1", "t0", np.log([0.7, 0.3]), 0) + rows_of("d2", "t0", np.log([0.6, 0.4]), 0)
    rows += rows_of("t1", "t0", np.log([0.55, 0.45]), 1)
    out = tables(rows, {"d1": "dev", "d2": "dev", "t1": "test"}, ["base", "base_platt", "base_isotonic"])
    plain = confidences(out, "base")
    assert plain == pytest.approx({"d1": 0.7, "d2": 0.6, "t1": 0.55}, rel=1e-12)
    assert confidences(out, "base_platt") == plain
    assert confidences(out, "base_isotonic") == plain
    assert out.fits.select("estimator", "parameter", "value", "n_dev", "note").rows() == [
        ("base_platt", "slope", None, 2, "one class on dev: identity"),
        ("base_platt", "intercept", None, 2, "one class on dev: identity"),
        ("base_isotonic", "n_steps", None, 2, "one class on dev: identity"),
    ]


def test_isotonic_needs_two_dev_instances():
    rows = rows_of("d1", "t0", np.log([0.7, 0.3]), 0) + rows_of("t1", "t0", np.log([0.55, 0.45]), 1)
    out = tables(rows, {"d1": "dev", "t1": "test"}, ["base_isotonic", "base_platt"])
    assert out.estimates.filter(pl.col("estimator") == "base_isotonic").is_empty()
    assert confidences(out, "base_platt") == pytest.approx({"d1": 0.7, "t1": 0.55}, rel=1e-12)  # one class
    assert out.fits.filter(pl.col("estimator") == "base_isotonic").select("n_dev", "note").rows() == [
        (1, "fewer than 2 dev instances: no rows")
    ]


def test_no_dev_instances_is_a_skip_reason():
    rows = rows_of("t1", "t0", [0, -1], 0) + rows_of("t2", "t0", [0, -1], 1)
    logged = []
    cube = build_cube(statements(rows), instances({"t1": "test", "t2": "test"}), templates())
    out = compute_estimate_tables(cube, RECALIBRATED, log=logged.append)
    assert out.estimates.is_empty() and out.fits.is_empty()
    # (the other lines: this frame has no ll_mean, ll_answer_sum, ll_answer_mean scores)
    assert logged[0] == f"skipped, no dev-split instances to fit on ({RELATION}): " + ", ".join(
        f"{n} (sum)" for n in RECALIBRATED
    )


def test_one_fit_per_template_and_answer_space():
    # Templates t0 and t9 (curated) and m0 (a marker variant: Base runs on it, recalibration and the
    # marginal ignore it);
    # answer spaces 0 (d1, d2 dev; t1 test) and 2 (the #k2 copies: d1#k2 dev, t1#k2 test; no copy of d2).
    # d1 is right (by a margin of 1) and d2 wrong everywhere, by 0.5 on t0 and by 2 on m0: each NLL
    # has its own interior minimum, so each (template, k) group gets its own T. (A gold belongs to
    # an option, so it is the same on every template.)
    rows = (
        rows_of("d1", "t0", [0, -1], 0) + rows_of("d2", "t0", [0, -0.5], 1) + rows_of("t1", "t0", [0, -2], 0)
    )
    rows += (
        rows_of("d1", "t9", [0, -1], 0) + rows_of("d2", "t9", [0, -2], 1) + rows_of("t1", "t9", [0, -2], 0)
    )
    rows += (
        rows_of("d1", "m0", [0, -3], 0) + rows_of("d2", "m0", [0, -3], 1) + rows_of("t1", "m0", [0, -3], 0)
    )
    rows += rows_of("d1#k2", "t0", [0, -1], 0) + rows_of("t1#k2", "t0", [0, -2], 0)
    rows += rows_of("x#k3", "t0", [0, -2], 0)  # an answer space with no dev row at all
    split = {"d1": "dev", "d2": "dev", "t1": "test", "d1#k2": "dev", "t1#k2": "test", "x#k3": "test"}
    k = {"d1#k2": 2, "t1#k2": 2, "x#k3": 3}
    out = tables(
        rows,
        split,
        ["base_temperature", "template_marginal_temperature"],
        tmpl=templates(("t0", "t9"), ("m0",)),
        k=k,
    )
    assert out.fits.columns == list(FITS_SCHEMA)
    keys = out.fits.select("estimator", "template_id", "answer_space_k", "n_dev", "note").rows()
    no_dev = "no dev-split instances in this group: no rows"
    assert keys == [
        ("base_temperature", "t0", 0, 2, None),
        ("base_temperature", "t0", 2, 1, None),
        ("base_temperature", "t0", 3, 0, no_dev),
        ("base_temperature", "t9", 0, 2, None),
        ("template_marginal_temperature", None, 0, 2, None),
        ("template_marginal_temperature", None, 2, 1, None),
        ("template_marginal_temperature", None, 3, 0, no_dev),
    ]
    values = out.fits["value"].to_list()
    assert len({round(v, 6) for v in (values[0], values[1], values[3])}) == 3  # three groups, three T
    assert values[2] is None and values[6] is None
    # the k = 2 copies have t0 only: their marginal is Base on t0
    assert values[5] == pytest.approx(values[1], rel=1e-9)
    # the k = 2 group: d1#k2 alone, gold on top → T at the lower bound 0.05
    assert values[1] == pytest.approx(0.05, rel=1e-4)
    # rows: every (instance, template) of a fitted group; x#k3 has none
    base = out.estimates.filter(pl.col("estimator") == "base_temperature")
    assert base.select("instance_id", "template_id").rows() == [
        ("d1", "t0"),
        ("d1", "t9"),
        ("d1#k2", "t0"),
        ("d2", "t0"),
        ("d2", "t9"),
        ("t1", "t0"),
        ("t1", "t9"),
        ("t1#k2", "t0"),
    ]  # never the marker variant m0
    assert out.fits.select("model_id", "relation_id", "reduction").unique().rows() == [("m", RELATION, "sum")]


def test_registered_under_all_four_reductions():
    for name in RECALIBRATED:
        spec = ESTIMATORS[name]
        assert spec.reductions == ("sum", "mean", "answer_sum", "answer_mean")
        assert (spec.family, spec.output_kind) == ("recalibration", "probability")
        assert spec.grain == ("instance" if name.startswith("template_marginal") else "template")


# --- properties and the reference ----------------------------------------------------------------------


def random_partition(seed: int, tied: float = 0.0):
    """(scores, probe_instances, templates) of a random partition: curated t0–t2 and a marker m0;
    12–30 instances with 1–8 options (one with 1), option indices sometimes non-contiguous, ~15%
    of (instance, template) pairs and ~5% of statements missing (so a gold can be unscored), ll_sum
    and ll_mean; dev ~45%, answer spaces 0 and 2; a share `tied` of pairs with integer lls."""
    rng = np.random.default_rng(seed)
    n_instances = int(rng.integers(12, 31))
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
        gold = int(rng.choice(options))
        kept = [t for t in ("t0", "t1", "t2", "m0") if rng.random() > 0.15] or ["t0"]
        for t in kept:
            pair = []
            for o in options:
                if rng.random() < tied:
                    ll_sum, ll_mean = float(rng.integers(-3, 0)), float(rng.integers(-3, 0))
                else:
                    ll_sum = float(rng.normal(-8, 3))
                    ll_mean = ll_sum / float(rng.integers(2, 6))
                pair.append((inst, t, o, f"Q{seed}_{i}_{o}", o == gold, ll_sum, ll_mean))
            if len(pair) > 1:
                pair = [r for r in pair if rng.random() > 0.05] or pair[:1]
            rows += pair
        probe.append((inst, k, "dev" if rng.random() < 0.45 else "test", 2 if rng.random() < 0.25 else None))
    frame = pl.DataFrame(rows, schema=[*STATEMENT_SCHEMA, "ll_mean"], orient="row")
    scores = frame.select(
        pl.lit(f"m{seed}").alias("model_id"), pl.lit(RELATION).alias("relation_id"), *frame.columns
    )
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
    return scores.sample(fraction=1.0, shuffle=True, seed=seed), probe, templates(("t0", "t1", "t2"), ("m0",))


def test_random_partitions_cover_the_edge_cases():
    # what the reference comparison needs to meet: a one-option instance, an unscored gold, a
    # group without dev rows, groups with one class on dev, Platt and isotonic fits
    seen = {"single_option": 0, "unscored_gold": 0, "no_dev": 0, "one_class": 0, "fitted": 0}
    for seed in SEEDS:
        scores, probe, tmpl = random_partition(seed)
        cube = build_cube(scores, probe, tmpl)
        seen["single_option"] += int((cube.valid.sum(axis=2) == 1).sum())
        seen["unscored_gold"] += int((cube.present & ~(cube.gold[:, None, :] & cube.valid).any(axis=2)).sum())
        fits = compute_estimate_tables(cube, ["base_platt"], log=lambda _: None).fits
        notes = fits["note"].to_list()
        seen["no_dev"] += notes.count("no dev-split instances in this group: no rows")
        seen["one_class"] += notes.count("one class on dev: identity")
        seen["fitted"] += notes.count(None)
    assert all(v > 0 for v in seen.values()), seen


SEEDS = range(12)
TIED_SEEDS = range(12, 18)


def compare_with_the_reference(scores, probe, tmpl, estimators):
    cube = build_cube(scores, probe, tmpl)
    got = compute_estimate_tables(cube, estimators, log=lambda _: None)
    order = ["estimator", "template_id", "answer_space_k", "answer_space_draw", "parameter"]
    for column, reduction in (("ll_sum", "sum"), ("ll_mean", "mean")):
        got_estimates = got.estimates.filter(pl.col("reduction") == reduction)
        got_fits = got.fits.filter(pl.col("reduction") == reduction).sort(order, nulls_last=True)
        # the fits, made here from the reference's own rows: the same groups, n_dev and notes; values
        # to the optimisers' precision (see reference_recalibration.py)
        _, fits = reference_recalibration(scores, tmpl, probe, column)
        fits = fits.filter(pl.col("estimator").is_in(estimators)).sort(order, nulls_last=True)
        assert_frame_equal(got_fits.drop("value"), fits.drop("value"))
        np.testing.assert_allclose(
            got_fits["value"].fill_null(np.nan).to_numpy(),
            fits["value"].fill_null(np.nan).to_numpy(),
            rtol=1e-6,
        )
        # the maps applied: with the same fitted parameters, every row to 1e-12
        given = {tuple(r[:5]): r[5] for r in got_fits.select(*order, "value").iter_rows()}
        estimates, _ = reference_recalibration(scores, tmpl, probe, column, fitted=given)
        estimates = estimates.filter(pl.col("estimator").is_in(estimators))
        exact = [c for c in estimates.columns if c != "confidence"]
        assert_frame_equal(got_estimates.select(exact), estimates.select(exact))
        np.testing.assert_allclose(
            got_estimates["confidence"].to_numpy(), estimates["confidence"].to_numpy(), rtol=1e-12, atol=1e-15
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorised_equals_the_reference(seed):
    compare_with_the_reference(*random_partition(seed), RECALIBRATED)


@pytest.mark.parametrize("seed", TIED_SEEDS)
def test_vectorised_equals_the_reference_with_tied_options(seed):
    # 40% integer lls: argmax ties (the lowest option index wins) and equal confidences. Isotonic is
    # left out here: it pools exactly equal confidences, so two sums equal in one implementation and
    # a last bit apart in the other give a different (equally valid) step function.
    names = [n for n in RECALIBRATED if not n.endswith("_isotonic")]
    compare_with_the_reference(*random_partition(seed, tied=0.4), names)


@pytest.mark.parametrize("seed", range(4))
def test_predictions_kept_and_isotonic_monotone(seed):
    scores, probe, tmpl = random_partition(seed, tied=0.3)
    cube = build_cube(scores, probe, tmpl)
    out = compute_estimate_tables(cube, ["base", "margin", *RECALIBRATED], log=lambda _: None).estimates
    keys = ["instance_id", "template_id", "reduction"]
    for name in ("base", "margin"):
        plain = out.filter(pl.col("estimator") == name).select(*keys, "predicted_index", raw="confidence")
        for method in METHODS:
            recalibrated = out.filter(pl.col("estimator") == f"{name}_{method}")
            joined = recalibrated.join(plain, on=keys, how="left", suffix="_plain")
            assert joined.height > 0 and joined["predicted_index_plain"].null_count() == 0
            # the map changes the confidence, never the prediction
            assert (joined["predicted_index"] == joined["predicted_index_plain"]).all()
            if method == "isotonic":
                # within a fitted group, a higher raw confidence never gets a lower calibrated one
                for _, group in joined.group_by(
                    "template_id", "answer_space_k", "answer_space_draw", "reduction"
                ):
                    ordered = group.sort("raw", "confidence")["confidence"].to_numpy()
                    assert (np.diff(ordered) >= 0).all()
    # the template marginal's prediction: argmax of the plain marginal, under every method
    for reduction in ("sum", "mean"):
        marginal, has_templates = marginal_option_probabilities(cube, reduction)
        expected = dict(
            zip(cube.instance_ids[has_templates], marginal.argmax(axis=1)[has_templates], strict=True)
        )
        for method in METHODS:
            rows = out.filter(
                (pl.col("estimator") == f"template_marginal_{method}") & (pl.col("reduction") == reduction)
            )
            assert rows.height > 0
            assert all(expected[i] == p for i, p in rows.select("instance_id", "predicted_index").iter_rows())


def test_option_order_changes_nothing():
    # Permute option_index within each instance (gold flags and objects move with their option).
    # Sums are then taken in another order, and the fitted values move by what the optimisers make of
    # a last-bit difference (≤ ~1e-7, see reference_recalibration.py): compared at 1e-6.
    scores, probe, tmpl = random_partition(3)
    mapping = (
        scores.select("instance_id", "object_id", "option_index")
        .unique()
        .with_columns(new_index=pl.col("option_index").shuffle(seed=1).over("instance_id"))
    )
    assert (mapping["new_index"] != mapping["option_index"]).any()
    shuffled = scores.join(mapping.drop("option_index"), on=["instance_id", "object_id"]).with_columns(
        option_index=pl.col("new_index")
    )
    keys = ["instance_id", "template_id", "estimator", "reduction"]
    a = compute_estimate_tables(build_cube(scores, probe, tmpl), RECALIBRATED, log=lambda _: None)
    b = compute_estimate_tables(
        build_cube(shuffled.drop("new_index"), probe, tmpl), RECALIBRATED, log=lambda _: None
    )
    a_est, b_est = a.estimates.sort(keys, nulls_last=True), b.estimates.sort(keys, nulls_last=True)
    assert a_est.select(*keys, "predicted_id", "correct").equals(
        b_est.select(*keys, "predicted_id", "correct")
    )
    np.testing.assert_allclose(a_est["confidence"].to_numpy(), b_est["confidence"].to_numpy(), rtol=1e-6)
    assert_frame_equal(a.fits.drop("value"), b.fits.drop("value"))
    np.testing.assert_allclose(
        a.fits["value"].fill_null(np.nan).to_numpy(), b.fits["value"].fill_null(np.nan).to_numpy(), rtol=1e-6
    )
    assert 0 < a_est["correct"].sum() < a_est.height
