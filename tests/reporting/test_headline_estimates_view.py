"""Issue 35: the headline_estimates view and what docs/sql.md says of it agree. It holds one row per
instance, estimator and reduction (the report queries group by reduction, and `summary` lists every
one), the documented filter leaves one answer per instance and estimator, and the SQL view and its
Python twin (estimation.registry.headline_estimates) select the same rows.

The store is small and made by kcal's own code: a probe of P36 (sampled answer spaces, dev and
test splits), its catalog templates, random log-likelihoods for every statement (four reductions),
every registered estimator and the metrics table over them, written where the pipeline writes
them, and the views kcal creates."""

import re

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.core.options import ProbeOptions
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from kcal_pipeline.core.warehouse import query, refresh_views
from kcal_pipeline.dataset.instances.probe import build_instances, templates_frame
from kcal_pipeline.dataset.relations import load_catalog
from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.catalog import estimator_catalog
from kcal_pipeline.estimation.registry import compute_estimate_tables, headline_estimates
from kcal_pipeline.evaluation.tables import metrics_table
from tests.conftest import REPO

MODEL, RELATION = "m", "P36"
INSTANCE = ["model_id", "relation_id", "instance_id"]


def statement_scores(instances: pl.DataFrame, templates: pl.DataFrame) -> pl.DataFrame:
    """A score for every (instance, template, option), under the four reductions."""
    rng = np.random.default_rng(0)
    rows = []
    for inst in instances.iter_rows(named=True):
        for template_id in templates["template_id"]:
            for index, object_id in enumerate(inst["option_ids"]):
                ll_sum = float(rng.normal(-20, 3))
                ll_mean = ll_sum / float(rng.integers(3, 9))
                rows.append({
                    "model_id": MODEL, "relation_id": RELATION, "instance_id": inst["instance_id"],
                    "template_id": template_id, "option_index": index, "object_id": object_id,
                    "is_gold": object_id in inst["gold_ids"], "ll_sum": ll_sum, "ll_mean": ll_mean,
                    "ll_answer_sum": ll_sum - ll_mean, "ll_answer_mean": 0.5 * ll_mean + 0.25 * ll_sum,
                })  # fmt: skip
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    home = tmp_path_factory.mktemp("headline") / "kcal"
    facts = pl.DataFrame(
        [(RELATION, f"s{i}", f"Country {i}", f"o{i}", f"City {i}") for i in range(24)],
        schema=["relation_id", "subject_id", "subject_label", "object_id", "object_label"],
        orient="row",
    )
    options = ProbeOptions(answer_space="sampled", n_negatives=3, max_instances=0, dev_fraction=0.3)
    instances = build_instances(facts, RELATION, options)
    templates = templates_frame(load_catalog()).filter(pl.col("relation_id") == RELATION)
    cube = build_cube(statement_scores(instances, templates), instances, templates)
    estimates = compute_estimate_tables(cube, log=lambda m: None).estimates
    metrics = metrics_table(estimates, templates, n_resamples=20)
    for table, frame, dims in (
        ("probe_instances", instances, {"relation": RELATION}),
        ("templates", templates, {}),
        ("estimates", estimates, {"model": MODEL, "relation": RELATION}),
        ("metrics", metrics, {"model": MODEL}),
        ("estimator_catalog", estimator_catalog(), {}),  # headline_reductions reads its column
    ):
        write_parquet_atomic(frame, partition_path(home, table, dims))
    assert {"headline_estimates", "headline_reductions"} <= set(refresh_views(home))
    return home, estimates, templates


def frame_of(home, sql: str) -> pl.DataFrame:
    columns, rows = query(home, sql)
    return pl.DataFrame(rows, schema=columns, orient="row")


def documented_filter() -> str:
    """The query docs/sql.md gives for one answer per instance and estimator."""
    text = (REPO / "docs" / "sql.md").read_text("utf-8")
    (sql,) = re.findall(r"`(SELECT [^`]*FROM headline_estimates[^`]*)`", text)
    return sql


def test_the_view_holds_one_row_per_instance_estimator_and_reduction(store):
    home, estimates, _ = store
    view = frame_of(home, "SELECT * FROM headline_estimates")
    per_reduction = view.select(*INSTANCE, "estimator", "reduction")
    assert view.height == per_reduction.n_unique()  # never two rows for one instance × estimator × reduction
    pairs = view.select(*INSTANCE, "estimator").n_unique()
    assert view["reduction"].n_unique() == 4 and view.height > pairs  # so not one per instance × estimator
    assert set(view["split"]) == {"test"} and set(view["answer_space_k"]) == {0}
    # every test instance is answered by every estimator under every reduction it ran under
    test_instances = estimates.filter(pl.col("split") == "test")["instance_id"].n_unique()
    ran = estimates.select("estimator", "reduction").n_unique()
    assert view.height == test_instances * ran
    text = (REPO / "docs" / "sql.md").read_text("utf-8")
    assert "one row per instance, estimator and\nreduction" in text  # what the docs say of the view


def test_the_documented_filter_leaves_one_answer_per_instance_and_estimator(store):
    home, _, _ = store
    view = frame_of(home, "SELECT * FROM headline_estimates")
    headline = frame_of(home, documented_filter())
    assert headline.height == view.select(*INSTANCE, "estimator").n_unique()
    assert headline.select(*INSTANCE, "estimator").n_unique() == headline.height
    chosen = dict(frame_of(home, "SELECT estimator, reduction FROM headline_reductions").iter_rows())
    assert {chosen[e] for e in headline["estimator"]} <= {"sum", "answer_sum"}
    assert all(chosen[e] == r for e, r in headline.select("estimator", "reduction").iter_rows())


def test_the_view_and_its_python_twin_select_the_same_rows(store):
    home, estimates, templates = store
    keys = [*INSTANCE, "template_id", "estimator", "reduction"]
    expected = headline_estimates(estimates, templates).sort(keys, nulls_last=True)
    view = frame_of(home, "SELECT * FROM headline_estimates").select(expected.columns)
    got = view.sort(keys, nulls_last=True)
    assert got.height == expected.height
    assert (
        got.select(*keys, "confidence", "correct").rows()
        == expected.select(*keys, "confidence", "correct").rows()
    )
