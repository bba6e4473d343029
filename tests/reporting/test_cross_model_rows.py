"""The page across models reads only OVERALL_ROWS of every model's metrics file (the IO manager's
`where` input filter: core/storage.py read_partitions(where=...)): its leaderboard, figure data
and page are the same as from every row of every model."""

import itertools

import matplotlib
import numpy as np
import polars as pl
import pytest

from kcal_pipeline.core.storage import partition_path, read_partitions, write_parquet_atomic
from kcal_pipeline.evaluation.registry import OUTPUT_SCHEMA
from kcal_pipeline.reporting.cross_model import (
    ace_accuracy_points,
    cross_model_figures,
    cross_model_page,
    leaderboard,
    overall_headline,
)
from kcal_pipeline.reporting.selection import ACCURACY, CALIBRATION, OVERALL_ROWS, PROPER_SCORE, RANKING

MODELS = ("m-a", "m-b", "m-c")
# four main estimators (registry reductions: 'sum' first) and one the registry does not know
ESTIMATORS = ("base", "margin", "entropy", "template_marginal", "custom")
REDUCTIONS = ("sum", "mean")
METRIC_NAMES = (ACCURACY, CALIBRATION, PROPER_SCORE, RANKING)
SCHEMA = {**OUTPUT_SCHEMA, "ci_low": pl.Float64, "ci_high": pl.Float64}  # the metrics table's columns


def model_metrics(model: str, seed: int) -> pl.DataFrame:
    """Every estimator × reduction × split × answer space × scope × metric of one model, random
    values with an interval around them; 'entropy' answers fewer instances (n 90, not Base's 100),
    so the leaderboard's candidates filter has something to leave out."""
    rng = np.random.default_rng(seed)
    scopes = [("all", "all"), ("relation", "P36"), ("relation", "P30"), ("domain", "geo")]
    rows = []
    for estimator, reduction, split, k, (scope, value), metric in itertools.product(
        ESTIMATORS, REDUCTIONS, ("test", "dev"), (0, 5), scopes, METRIC_NAMES
    ):
        point = float(rng.uniform(0.05, 0.95))
        n = 90 if estimator == "entropy" else 100
        draw = 0 if k == 0 else 1
        higher = metric in (ACCURACY, RANKING)
        keys = (model, estimator, reduction, split, k, draw, scope, value, metric)
        rows.append((*keys, point, n, higher, point - 0.04, point + 0.05))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One metrics file per model, as the evaluation stage writes them; and the stacked table."""
    home = tmp_path_factory.mktemp("cross_model")
    frames = [model_metrics(m, seed) for seed, m in enumerate(MODELS)]
    for model, frame in zip(MODELS, frames, strict=True):
        write_parquet_atomic(frame, partition_path(home, "metrics", {"model": model}))
    return home, pl.concat(frames)


def filtered(home) -> pl.DataFrame:
    return read_partitions(home, "metrics", [{"model": m} for m in MODELS], where=OVERALL_ROWS)


def test_only_the_overall_headline_rows_are_read(store):
    home, full = store
    rows = filtered(home)
    assert rows.height == len(MODELS) * len(ESTIMATORS) * len(REDUCTIONS) * len(METRIC_NAMES)
    assert rows.height * 16 == full.height  # of 2 splits × 2 answer spaces × 4 scopes
    assert rows.select("split", "answer_space_k", "scope").unique().rows() == [("test", 0, "all")]


def test_the_leaderboard_and_figure_data_from_the_read_rows_equal_those_from_every_row(store):
    home, full = store
    overall = overall_headline(filtered(home))
    board = leaderboard(overall)
    assert board.height == len(MODELS)
    assert board.equals(leaderboard(full))
    assert "entropy" not in board["best_calibrated"].to_list()  # it answers fewer instances
    assert ace_accuracy_points(overall).equals(ace_accuracy_points(full))
    # the headline reduction computed once is enough: applying it again changes nothing
    assert overall_headline(overall).equals(overall)


def test_the_page_from_the_read_rows_is_the_page_from_every_row(store):
    home, full = store
    overall = overall_headline(filtered(home))
    meta = {"models": len(MODELS)}
    with matplotlib.rc_context({"svg.hashsalt": "kcal"}):  # the SVG ids, fixed
        from_rows = cross_model_page(overall, meta, leaderboard(overall), cross_model_figures(overall))
        from_all = cross_model_page(full, meta)
    assert from_rows == from_all
    assert all(m in from_rows for m in MODELS)


def test_the_input_filter_names_a_column_the_file_lacks_or_a_value_that_is_not_a_literal(store):
    home, _ = store
    partitions = [{"model": MODELS[0]}]
    with pytest.raises(ValueError, match=r"input filter on column 'scope_kind', which the file lacks"):
        read_partitions(home, "metrics", partitions, where={"scope_kind": "all"})
    with pytest.raises(ValueError, match=r"input filter 'split' = \['test'\]: only str, int, float or bool"):
        read_partitions(home, "metrics", partitions, where={"split": ["test"]})
    with pytest.raises(ValueError, match=r"'answer_space_k' = '0': a str cannot equal the column's Int32"):
        read_partitions(home, "metrics", partitions, where={"answer_space_k": "0"})
    with pytest.raises(ValueError, match=r"'where' must be a non-empty mapping"):
        read_partitions(home, "metrics", partitions, where={})
    # with `columns` as well: only those of the matching rows
    dev_accuracy = {"metric": ACCURACY, "split": "dev"}
    two = read_partitions(home, "metrics", partitions, ["model_id", "value"], where=dev_accuracy)
    assert two.columns == ["model_id", "value"] and two.height == 80  # 5 × 2 × 2 × 4
