"""bench/evaluation.py's pandas re-implementation agrees with kcal's evaluation stage on every table,
and its comparison catches what it must (no timing: the bench itself prints those)."""

import dataclasses

import polars as pl
import pytest

from bench import evaluation as bench

# Both paths read the same resample index matrices, so agreement does not depend on B; the pandas
# path loops over the resamples in Python (most of this module's time), so B is small.
RESAMPLES = 20
# A subset that still feeds every kind of row, one estimator per kind: a score (Gap), template and
# instance grain (with option estimates), a marker estimator (no cross pairs), a recalibrated one,
# MACE's SNCA, and Base (a probability; every paired difference is against it). The evaluation
# reads an estimator's rows, not its formula, so a second estimator of a kind (Margin beside Base,
# Token beside Gap) only repeats rows: it cost this module ~22 % more. The whole registry takes
# minutes on this data: both paths pay per (group, scope, metric), and smECE's Brent search dominates.
ESTIMATORS = ("base", "gap", "template_marginal", "vote3_average", "marker_certainly", "base_isotonic",
              "snca_tau0")  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    """One model, bench/estimators.py's compact layout (4 relations × 10 instances: markers, a
    MACE-like relation with 1/2/4/6 golds), ≈ 4,000 statements; both paths in this process, with the
    same B = 20 resample index matrices."""
    inputs = bench.build_inputs(3_000, seed=5, models=1)
    inputs = dataclasses.replace(
        inputs, estimates=inputs.estimates.filter(pl.col("estimator").is_in(ESTIMATORS))
    )
    models = inputs.models
    kcal, _ = bench.kcal_stage(inputs, models, RESAMPLES, seed=5)
    order, markers, _ = bench.registry_facts()
    pandas, _ = bench.pandas_stage(bench.to_pandas(inputs), models, RESAMPLES, 5, order, markers)
    return inputs, kcal, pandas


def test_the_bench_implements_every_registered_metric():
    _, _, registered = bench.registry_facts()
    assert sorted(bench.METRIC_DEFS) == sorted(registered)


def test_pandas_path_agrees_with_kcal_on_every_table(tiny):
    inputs, kcal, pandas = tiny
    agreements = bench.compare(kcal, pandas, inputs.models)
    assert all(a.ok for a in agreements.values()), "\n".join(bench.disagreement_lines(agreements))
    for part, agreement in agreements.items():
        assert agreement.rows > 0, part
        assert agreement.max_delta <= bench.TOLERANCE
    metrics = bench.kcal_parts(kcal)["metrics"]
    # every breakdown scope of the headline selection is there, and the MACE mixtures
    assert {"all", "relation", "domain", "n_gold", "mixture_domain", "mixture", "n_options", "template_kind",
            "template", "relation_template_mean", "all_template_mean",
            "bear_domain"} <= set(metrics["scope"])  # fmt: skip
    assert set(bench.METRIC_DEFS) <= set(metrics["metric"])
    assert set(metrics["estimator"]) == set(ESTIMATORS)
    consistency = kcal["consistency"]
    assert set(consistency["kind"]) == {"intra", "cross"}


def test_compare_flags_missing_rows_and_differences_but_not_equal_nans(tiny):
    inputs, kcal, pandas = tiny
    metrics = pandas["metrics"]
    first = pl.int_range(pl.len()) == 0
    nan_row = pl.col("value").is_nan() & (
        pl.int_range(pl.len()) == pl.int_range(pl.len()).filter(pl.col("value").is_nan()).first()
    )
    assert metrics["value"].is_nan().any()  # some metric is undefined somewhere (AUROC with one class)
    changed = dict(pandas)
    changed["metrics"] = metrics.with_columns(
        value=pl.when(first).then(pl.col("value") + 1e-8).otherwise(pl.col("value"))  # 10 × TOLERANCE
    ).filter(~nan_row)  # a NaN row dropped: only in kcal
    changed["curves"] = pandas["curves"].with_columns(
        n=pl.when(first).then(pl.col("n") + 1).otherwise(pl.col("n"))
    )
    agreements = bench.compare(kcal, changed, inputs.models)
    assert not agreements["metrics"].ok
    assert agreements["metrics"].mismatches.height == 1
    assert agreements["metrics"].only_kcal.height == 1
    assert agreements["metrics"].max_delta == pytest.approx(1e-8, rel=1e-3)
    assert agreements["curves"].mismatches.height == 1
    assert all(agreements[p].ok for p in ("intervals", "differences", "thresholds", "consistency"))


def test_pandas_consistency_mirrors_each_perturbation_seed_and_the_summary_over_seeds():
    """The tiny data has no seeded perturbations: the hand-worked three-seed example of
    test_consistency, through both paths."""
    from kcal_pipeline.evaluation.consistency import compute_consistency
    from tests.evaluation.test_consistency import SEEDED, SEEDED_TEMPLATES, frame, rows

    estimates = frame(*SEEDED, rows("margin", "P1:c0", "test", [0.5, 0.6, 0.9, 0.2]))
    kcal = compute_consistency(estimates, SEEDED_TEMPLATES, seed=13)
    pandas = bench.as_polars(
        bench.pd_consistency(estimates.to_pandas(), SEEDED_TEMPLATES.to_pandas(), 13, []), "consistency"
    )
    agreement = bench.compare_part("consistency", kcal, pandas)
    assert agreement.ok, "\n".join(bench.disagreement_lines({"consistency": agreement}))
    assert agreement.rows == kcal.height == pandas.height
    assert set(kcal["statistic"]) == {"value", "mean", "std"}
    assert set(kcal["seed"].drop_nulls()) == {4, 44, 99, 13}
