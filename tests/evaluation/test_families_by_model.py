"""family_comparison_by_model (one scan per model's metrics file, a pair at a time: the asset's
path) gives what family_comparison (every model stacked: the reference) gives, errors included,
on 2 causal + 2 masked models."""

import polars as pl
import pytest

from kcal_pipeline.evaluation import family_comparison, model_families
from kcal_pipeline.evaluation.families import family_comparison_by_model, model_families_by_file
from tests.evaluation.test_families import FAMILIES, METRICS, metrics_frame, row

# METRICS' A, B (causal) and X (masked), and a second masked model Y close to A
FOUR = pl.concat(
    [
        METRICS,
        metrics_frame(
            [
                row("Y", "accuracy", 0.4375, n=16, ci=(0.25, 0.625)),
                row("Y", "ace", 0.5),
                row("Y", "accuracy", 0.25, scope="relation", scope_value="P36", n=8),
            ]
        ),
    ]
)
FOUR_FAMILIES = {**FAMILIES, "Y": "mlm"}


def files(tmp_path, metrics: pl.DataFrame) -> list[pl.LazyFrame]:
    """One Parquet file per model, scanned lazily (as the IO manager's `lazy` input hands them)."""
    scans = []
    for (model,), frame in metrics.group_by("model_id", maintain_order=True):
        path = tmp_path / f"{model}.parquet"
        frame.write_parquet(path)
        scans.append(pl.scan_parquet(path))
    return scans


def assert_same(left, right):
    assert left.pairs.equals(right.pairs)
    assert left.unpaired.equals(right.unpaired)
    assert left.table.equals(right.table)


def test_two_causal_and_two_masked_models_file_by_file_equal_the_stacked_reference(tmp_path):
    by_model = family_comparison_by_model(files(tmp_path, FOUR), FOUR_FAMILIES)
    reference = family_comparison(FOUR, FOUR_FAMILIES)
    assert_same(by_model, reference)
    # gaps |A − Y| = |B − X| = 0.0625: the tie goes to the smaller ids
    assert by_model.pairs.select("causal_model_id", "masked_model_id").rows() == [("A", "Y"), ("B", "X")]
    # (A, Y) share accuracy and ace over all relations (A has no P36); (B, X) the four of test_families
    assert by_model.table.height == 2 + 4
    assert by_model.unpaired.is_empty()


def test_unpaired_models_and_a_family_without_metrics_file_by_file(tmp_path):
    families = {**FOUR_FAMILIES, "W": "mlm"}  # W has no metrics file
    only = FOUR.filter(pl.col("model_id") != "Y")
    assert_same(
        family_comparison_by_model(files(tmp_path, only), families), family_comparison(only, families)
    )
    causal = FOUR.filter(pl.col("model_id") == "A")
    result = family_comparison_by_model(files(tmp_path, causal), {"A": "clm"})
    assert_same(result, family_comparison(causal, {"A": "clm"}))
    assert result.table.is_empty() and result.unpaired["reason"].to_list() == [
        "no masked model (mlm) to pair with"
    ]


@pytest.mark.parametrize("twice", ["X", "A"])  # in a pair's file, and in an unpaired model's file
def test_duplicate_keys_in_any_file_are_an_error_naming_the_key(tmp_path, twice):
    doubled = pl.concat([METRICS, METRICS.filter(pl.col("model_id") == twice).head(1)])
    with pytest.raises(ValueError, match=rf"metrics: several rows for \{{'model_id': '{twice}'"):
        family_comparison(doubled, FAMILIES)
    with pytest.raises(ValueError, match=rf"metrics: several rows for \{{'model_id': '{twice}'"):
        family_comparison_by_model(files(tmp_path, doubled), FAMILIES)


def test_bad_families_missing_columns_and_a_model_in_two_files_are_errors(tmp_path):
    scans = files(tmp_path, METRICS)
    with pytest.raises(ValueError, match=r"model 'X': family 'auto' is not 'clm' or 'mlm'"):
        family_comparison_by_model(scans, {**FAMILIES, "X": "auto"})
    with pytest.raises(ValueError, match=r"metrics: model 'X' has no family"):
        family_comparison_by_model(scans, {"A": "clm", "B": "clm"})
    with pytest.raises(ValueError, match=r"metrics.*ci_low"):
        family_comparison_by_model([s.drop("ci_low") for s in scans], FAMILIES)
    with pytest.raises(ValueError, match=r"metrics: model 'X' is in two files"):
        family_comparison_by_model([*scans, scans[-1]], FAMILIES)


def test_model_families_from_each_files_distinct_kinds(tmp_path):
    scores = pl.DataFrame({"model_id": ["A", "A", "X", "B"], "model_kind": ["clm", "clm", "mlm", "clm"]})
    paths = []
    for index, part in enumerate(scores.iter_slices(2)):
        paths.append(tmp_path / f"scores{index}.parquet")
        part.write_parquet(paths[-1])
    assert model_families_by_file(pl.scan_parquet(p) for p in paths) == model_families(scores)
    old = tmp_path / "old.parquet"  # a file from before model_kind was recorded
    pl.DataFrame({"model_id": ["C"]}).write_parquet(old)
    with pytest.raises(ValueError, match=r"model 'C': no model_kind recorded"):
        model_families_by_file(pl.scan_parquet(p) for p in [*paths, old])
    assert model_families_by_file([]) == {}
