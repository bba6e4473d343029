"""Causal vs masked models: the pairing by accuracy and the side-by-side table, on hand-built
metrics frames whose every expected number is written out below."""

import math

import polars as pl
import pytest

from kcal_pipeline.evaluation import family_comparison, model_families
from kcal_pipeline.evaluation.families import COMPARISON_SCHEMA, UNPAIRED_SCHEMA, pair_models_by_accuracy

# --- pairing -------------------------------------------------------------------------------------


def test_models_paired_closest_first():
    # gaps: (B, X) 0.0625, (A, X) 0.1875, (A, Y) 0.25, (B, Y) 0.5 → (B, X) first, then (A, Y);
    # pairing A with its nearest (X) first would have left B with Y at 0.5.
    acc = {"A": 0.5, "B": 0.75, "X": 0.6875, "Y": 0.25, "C": 1.0}
    fam = {"A": "clm", "B": "clm", "C": "clm", "X": "mlm", "Y": "mlm"}
    pairs = pair_models_by_accuracy(acc, fam)
    assert pairs.rows() == [("B", "X", 0.75, 0.6875, 0.0625), ("A", "Y", 0.5, 0.25, 0.25)]  # C unpaired


def test_model_pairing_ties_and_errors():
    # (A, Y) and (B, X) both 0.125 apart: the smaller ids first
    acc = {"A": 0.25, "B": 0.75, "X": 0.625, "Y": 0.375}
    pairs = pair_models_by_accuracy(acc, {"A": "clm", "B": "clm", "X": "mlm", "Y": "mlm"})
    assert pairs.select("causal_model_id", "masked_model_id").rows() == [("A", "Y"), ("B", "X")]
    assert pair_models_by_accuracy({"A": 0.5}, {"A": "clm"}).is_empty()  # one family only: no pairs
    with pytest.raises(ValueError, match=r"model 'A': family 'auto' is not 'clm' or 'mlm'"):
        pair_models_by_accuracy({"A": 0.5}, {"A": "auto"})
    with pytest.raises(ValueError, match=r"model 'B': no family given"):
        pair_models_by_accuracy({"A": 0.5, "B": 0.4}, {"A": "clm"})
    with pytest.raises(ValueError, match=r"model 'A': accuracy nan"):
        pair_models_by_accuracy({"A": float("nan")}, {"A": "clm"})


# --- the comparison table ------------------------------------------------------------------------

METRIC_COLUMNS = {
    "model_id": pl.String,
    "estimator": pl.String,
    "reduction": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "scope": pl.String,
    "scope_value": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "n": pl.Int64,
    "higher_is_better": pl.Boolean,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
}
HIGHER = {"accuracy": True, "ace": False, "brier": False}


def row(model, metric, value, *, estimator="base", split="test", scope="all", scope_value="all", n=16, ci=()):
    """One metrics row (reduction sum, answer_space_k 0); ci = (low, high) or none."""
    low, high = ci or (None, None)
    keys = (model, estimator, "sum", split, 0, scope, scope_value, metric)
    return (*keys, value, n, HIGHER[metric], low, high)


def metrics_frame(rows) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=METRIC_COLUMNS, orient="row")


# Two causal models (A, B), one masked (X). Pairing accuracies (Base, test, all): A 0.5, B 0.8125,
# X 0.75 → gaps |B − X| = 0.0625 < |A − X| = 0.25: the pair is (B, X), A is left over.
METRICS = metrics_frame(
    [
        row("A", "accuracy", 0.5, ci=(0.25, 0.75)),
        row("A", "ace", 0.375),
        row("B", "accuracy", 0.8125, n=16, ci=(0.625, 0.9375)),
        row("B", "ace", 0.25, ci=(0.125, 0.375)),
        row("B", "accuracy", 1.0, scope="relation", scope_value="P36", n=8),
        row("B", "accuracy", 0.625, scope="relation", scope_value="P30", n=8),  # X has no P30
        row("B", "brier", 0.1875, estimator="margin", split="dev", n=4),
        row("X", "brier", 0.3125, estimator="margin", split="dev", n=4),
        row("X", "accuracy", 0.5, scope="relation", scope_value="P36", n=8),
        row("X", "ace", 0.125, n=12, ci=(0.0625, 0.25)),
        row("X", "accuracy", 0.75, n=12, ci=(0.5, 0.875)),
    ]
)
FAMILIES = {"A": "clm", "B": "clm", "X": "mlm"}


def test_pairs_and_values_side_by_side_by_hand():
    result = family_comparison(METRICS, FAMILIES)
    assert result.pairs.rows() == [("B", "X", 0.8125, 0.75, 0.0625)]
    assert result.table.schema == pl.Schema(COMPARISON_SCHEMA)
    # Keys both B and X have, sorted (estimator, reduction, split, k, scope, scope_value, metric);
    # P30 (B only) is left out. masked_minus_causal = X − B:
    #   accuracy all: 0.75 − 0.8125 = −0.0625;  ace all: 0.125 − 0.25 = −0.125
    #   accuracy P36: 0.5 − 1.0 = −0.5;          margin brier dev: 0.3125 − 0.1875 = 0.125
    cols = ["estimator", "split", "scope", "scope_value", "metric", "higher_is_better"]
    cols += ["causal_value", "masked_value", "masked_minus_causal", "causal_n", "masked_n"]
    assert result.table.select(cols).rows() == [
        ("base", "test", "all", "all", "accuracy", True, 0.8125, 0.75, -0.0625, 16, 12),
        ("base", "test", "all", "all", "ace", False, 0.25, 0.125, -0.125, 16, 12),
        ("base", "test", "relation", "P36", "accuracy", True, 1.0, 0.5, -0.5, 8, 8),
        ("margin", "dev", "all", "all", "brier", False, 0.1875, 0.3125, 0.125, 4, 4),
    ]
    assert set(result.table["causal_model_id"]) == {"B"} and set(result.table["masked_model_id"]) == {"X"}
    assert set(result.table["accuracy_gap"]) == {0.0625}
    assert set(result.table["reduction"]) == {"sum"} and set(result.table["answer_space_k"]) == {0}
    intervals = ["causal_ci_low", "causal_ci_high", "masked_ci_low", "masked_ci_high"]
    assert result.table.select(intervals).rows() == [
        (0.625, 0.9375, 0.5, 0.875),
        (0.125, 0.375, 0.0625, 0.25),
        (None, None, None, None),
        (None, None, None, None),
    ]
    assert result.unpaired.rows() == [
        ("A", "clm", 0.5, "all 1 masked model(s) paired with closer causal ones")
    ]


def test_only_causal_models_give_an_empty_table_and_say_why():
    # the demo: one causal model
    result = family_comparison(METRICS.filter(pl.col("model_id") == "A"), {"A": "clm"})
    assert result.table.is_empty() and result.table.schema == pl.Schema(COMPARISON_SCHEMA)
    assert result.pairs.is_empty()
    assert result.unpaired.rows() == [("A", "clm", 0.5, "no masked model (mlm) to pair with")]


def test_models_without_a_usable_pairing_accuracy_are_unpaired_with_the_reason():
    metrics = pl.concat(
        [
            METRICS,
            metrics_frame([row("Y", "accuracy", 0.75, split="dev"), row("Z", "accuracy", math.nan)]),
        ]
    )
    families = {**FAMILIES, "Y": "mlm", "Z": "mlm", "W": "mlm"}
    result = family_comparison(metrics, families)
    assert result.pairs.rows() == [("B", "X", 0.8125, 0.75, 0.0625)]  # Y, Z, W cannot be paired
    where = "estimator base, reduction sum, split test, answer_space_k 0, scope all"
    reasons = {m: (acc, reason) for m, _, acc, reason in result.unpaired.rows()}
    assert reasons == {
        "A": (0.5, "all 1 masked model(s) paired with closer causal ones"),
        "W": (None, "no metrics"),
        "Y": (None, f"no accuracy at {where}"),
        "Z": (reasons["Z"][0], f"accuracy at {where} is nan"),
    }
    assert math.isnan(reasons["Z"][0])
    assert result.unpaired.schema == pl.Schema(UNPAIRED_SCHEMA)


def test_bad_families_and_metrics_are_errors_naming_the_model():
    with pytest.raises(ValueError, match=r"model 'X': family 'auto' is not 'clm' or 'mlm'"):
        family_comparison(METRICS, {**FAMILIES, "X": "auto"})
    with pytest.raises(ValueError, match=r"metrics: model 'X' has no family"):
        family_comparison(METRICS, {"A": "clm", "B": "clm"})
    twice = pl.concat([METRICS, METRICS.filter(pl.col("model_id") == "X").head(1)])
    with pytest.raises(
        ValueError, match=r"metrics: several rows for \{'model_id': 'X', 'estimator': 'margin'"
    ):
        family_comparison(twice, FAMILIES)
    with pytest.raises(ValueError, match=r"metrics.*ci_low"):
        family_comparison(METRICS.drop("ci_low"), FAMILIES)


# --- the family of a model, from statement_scores ------------------------------------------------


def test_model_families_read_the_recorded_kind():
    scores = pl.DataFrame({"model_id": ["A", "A", "X", "B"], "model_kind": ["clm", "clm", "mlm", "clm"]})
    assert model_families(scores) == {"A": "clm", "B": "clm", "X": "mlm"}


def test_model_families_refuse_a_missing_an_unknown_or_a_double_kind():
    old = pl.DataFrame({"model_id": ["A", "B"], "model_kind": ["clm", None]})
    with pytest.raises(
        ValueError, match=r"model 'B': no model_kind recorded .* re-materialize statement_scores"
    ):
        model_families(old)
    with pytest.raises(ValueError, match=r"model 'A': no model_kind recorded"):
        model_families(pl.DataFrame({"model_id": ["A"]}))  # files from before the column existed
    with pytest.raises(ValueError, match=r"model 'A': several model kinds \['clm', 'mlm'\]"):
        model_families(pl.DataFrame({"model_id": ["A", "A"], "model_kind": ["clm", "mlm"]}))
    with pytest.raises(ValueError, match=r"model 'A': family 'auto' is not 'clm' or 'mlm'"):
        model_families(pl.DataFrame({"model_id": ["A"], "model_kind": ["auto"]}))
