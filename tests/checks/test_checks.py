"""The data checks behind the blocking asset checks: each passes on a sound table and fails,
naming the problem and its count, on the one fault injected by hand."""

import math

import polars as pl
import pytest

from kcal_pipeline.dataset.checks import gold_among_options, statements_cover_the_probe
from kcal_pipeline.estimation.checks import estimator_coverage, probabilities_in_unit_interval
from kcal_pipeline.estimation.registry import ESTIMATORS
from kcal_pipeline.evaluation.checks import metrics_within_their_ranges
from kcal_pipeline.scoring.checks import finite_log_likelihoods, scores_match_statements

# Two instances: a has options x, y, z (gold x); b has options x, y (golds x and y).
INSTANCES = pl.DataFrame(
    {
        "instance_id": ["a", "b"],
        "gold_ids": [["x"], ["x", "y"]],
        "option_ids": [["x", "y", "z"], ["x", "y"]],
        "n_options": [3, 2],
        "n_gold": [1, 2],
    }
)


def statements(templates=("t1", "t2")) -> pl.DataFrame:
    rows = [
        (f"{i}:{t}:{k}", i, t, k, o in gold)
        for t in templates
        for i, options, gold in [("a", "xyz", "x"), ("b", "xy", "xy")]
        for k, o in enumerate(options)
    ]
    return pl.DataFrame(
        rows, schema=["statement_id", "instance_id", "template_id", "option_index", "is_gold"], orient="row"
    )


def test_gold_among_options():
    assert gold_among_options(INSTANCES).passed
    bad = INSTANCES.with_columns(pl.Series("gold_ids", [["w"], []]))
    out = gold_among_options(bad)
    assert not out.passed
    assert out.summary == "1 gold objects not among the options; 1 instances without a gold object"
    assert out.details["first gold objects not among the options"] == [{"instance_id": "a", "gold_id": "w"}]


def test_statements_are_instances_times_templates_times_options():
    ok = statements_cover_the_probe(statements(), INSTANCES)
    assert ok.passed and ok.details == {"statements": 10, "expected": 10, "templates": 2}  # 2 × (3 + 2)
    lost = statements().filter(pl.col("statement_id") != "a:t2:2")
    out = statements_cover_the_probe(lost, INSTANCES)
    assert out.summary == "1 prompts whose statements are not exactly their options"
    assert out.details["expected"] == 10 and out.details["statements"] == 9
    one_template = statements().filter(~((pl.col("instance_id") == "b") & (pl.col("template_id") == "t2")))
    assert statements_cover_the_probe(one_template, INSTANCES).summary == "1 instances missing some templates"
    no_gold = statements().with_columns(is_gold=pl.lit(False))
    assert statements_cover_the_probe(no_gold, INSTANCES).summary == (
        "4 prompts with a wrong number of gold statements"
    )
    extra = pl.concat([statements(), statements().head(1).with_columns(instance_id=pl.lit("c"))])
    assert "1 statements of no instance" in statements_cover_the_probe(extra, INSTANCES).summary


def test_a_context_template_covers_the_instances_with_a_demonstration_only():
    """t2 a context template with a demonstration for instance a only (b's is left out and logged):
    no instance misses a template; a context prompt must still be exactly its options."""
    both = statements().with_columns(context_end=pl.when(pl.col("template_id") == "t2").then(20).otherwise(0))
    only_a = both.filter(~((pl.col("instance_id") == "b") & (pl.col("template_id") == "t2")))
    ok = statements_cover_the_probe(only_a, INSTANCES)
    assert ok.passed and ok.details == {
        "statements": 8,
        "expected": 8,
        "templates": 2,
        "context_templates": 1,
    }
    assert statements_cover_the_probe(both, INSTANCES).details["expected"] == 10
    lost = only_a.filter(pl.col("statement_id") != "a:t2:2")
    assert (
        statements_cover_the_probe(lost, INSTANCES).summary
        == "1 prompts whose statements are not exactly their options"
    )
    context_only = only_a.filter(
        pl.col("template_id") == "t2"
    )  # b has no statement at all: logged, not a fault
    assert statements_cover_the_probe(context_only, INSTANCES).passed
    plain_lost = only_a.filter(~((pl.col("instance_id") == "b") & (pl.col("template_id") == "t1")))
    assert statements_cover_the_probe(plain_lost, INSTANCES).summary == "1 instances without statements"


def scores(ll_sum) -> pl.DataFrame:
    n = len(ll_sum)
    return pl.DataFrame(
        {
            "statement_id": [f"s{i}" for i in range(n)],
            "ll_sum": ll_sum,
            "ll_mean": [-1.0] * n,
            "ll_answer_sum": [-1.0] * n,
            "ll_answer_mean": [-1.0] * n,
        }
    )


def test_log_likelihoods_are_finite_and_not_positive():
    ok = finite_log_likelihoods(scores([-3.0, -math.inf, -0.0, 5e-5]))  # −inf counted; 5e-5 is rounding
    assert ok.passed and ok.details["negative_infinity_counts"]["ll_sum"] == 1
    out = finite_log_likelihoods(scores([math.nan, math.inf, 0.5, -2.0]))
    assert out.summary == "1 NaN ll_sum; 2 +inf or positive ll_sum"
    assert out.details["first NaN ll_sum"][0]["statement_id"] == "s0"


def test_one_score_per_statement():
    ids = pl.DataFrame({"statement_id": ["s0", "s1", "s2"]})
    assert scores_match_statements(ids, ids).passed
    out = scores_match_statements(pl.DataFrame({"statement_id": ["s0", "s0", "s9"]}), ids)
    assert out.summary == "2 statements without a score; 1 scores of no statement; 1 statements scored twice"


def estimates(confidences, kinds) -> pl.DataFrame:
    n = len(confidences)
    return pl.DataFrame(
        {
            "estimator": ["base"] * n,
            "reduction": ["sum"] * n,
            "instance_id": [f"i{k}" for k in range(n)],
            "template_id": ["t"] * n,
            "output_kind": kinds,
            "confidence": confidences,
        }
    )


def test_probabilities_in_the_unit_interval_scores_anywhere():
    assert probabilities_in_unit_interval(
        estimates([0.0, 1.0, -7.5, 12.0], ["probability"] * 2 + ["score"] * 2)
    ).passed
    out = probabilities_in_unit_interval(
        estimates([1.5, -0.1, math.nan, None], ["probability"] * 3 + ["score"])
    )
    assert out.summary == "2 probabilities outside [0, 1]; 2 confidences that are NaN or missing"


def status_of_every_estimator(rows: int = 2) -> pl.DataFrame:
    return pl.DataFrame(
        [(s.name, r, "ran", rows, None) for s in ESTIMATORS.values() for r in s.reductions],
        schema={
            "estimator": pl.String,
            "reduction": pl.String,
            "status": pl.String,
            "rows": pl.Int64,
            "reason": pl.String,
        },
        orient="row",
    )


def test_every_registered_estimator_ran_with_its_rows_or_says_why_not():
    status = status_of_every_estimator()
    rows = status.select("estimator", "reduction").join(pl.DataFrame({"copy": [1, 2]}), how="cross")
    assert estimator_coverage(status, rows).passed
    first = status.row(0, named=True)
    skipped = status.with_columns(
        status=pl.when(pl.col("estimator") == first["estimator"]).then(pl.lit("skipped")).otherwise("status"),
        reason=pl.when(pl.col("estimator") == first["estimator"]).then(pl.lit("no dropout scores")),
    )
    kept = rows.filter(pl.col("estimator") != first["estimator"])
    assert estimator_coverage(skipped, kept).passed  # skipped with a reason, and no rows
    out = estimator_coverage(skipped.with_columns(reason=pl.lit(None, pl.String)), kept)
    assert out.summary.startswith(
        f"{skipped.filter(pl.col('status') == 'skipped').height} estimators skipped without"
    )
    forgotten = status.filter(pl.col("estimator") != first["estimator"])
    lost_rows = kept.filter(pl.col("copy") == 1)
    out = estimator_coverage(forgotten, lost_rows)
    n_forgotten = status.height - forgotten.height
    assert out.summary == (
        f"{n_forgotten} registered estimators with no status; "
        f"{forgotten.height} estimators that ran without their rows"
    )


def metrics(values, metric="ace", ci=(0.1, 0.2)) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "estimator": ["base"] * n,
            "reduction": ["sum"] * n,
            "split": ["test"] * n,
            "scope": ["all"] * n,
            "scope_value": ["all"] * n,
            "metric": [metric] * n,
            "value": values,
            "ci_low": [ci[0]] * n,
            "ci_high": [ci[1]] * n,
        }
    )


@pytest.mark.parametrize(
    ("metric", "good", "bad"),
    [("ace", [0.0, 1.0, math.nan], [1.2, -0.01]), ("prr", [-3.5, 1.0, math.nan], [1.01, math.inf])],
)
def test_metrics_within_their_registered_ranges(metric, good, bad):
    assert metrics_within_their_ranges(metrics(good, metric)).passed  # NaN: undefined, allowed
    out = metrics_within_their_ranges(metrics(bad, metric))
    assert out.summary == "2 values outside their metric's range"


def test_interval_bounds_and_unknown_metrics_are_refused():
    assert metrics_within_their_ranges(metrics([0.5], ci=(-0.2, 0.6))).summary == (
        "1 interval bounds outside their metric's range"
    )
    assert metrics_within_their_ranges(metrics([0.5], metric="accuracy_typo")).summary == (
        "1 metrics not in the registry"
    )


def test_check_metadata_has_tidy_keys_and_shows_details_as_tables_or_text_not_json():
    """Issue 34 #7: the UI shows a check's details as readable values, under readable keys."""
    from dagster import MarkdownMetadataValue

    from assets.checks import _result

    passed = _result(finite_log_likelihoods(scores([-3.0, -math.inf, -1.0, -2.0])))
    assert all(key[0].isalpha() for key in passed.metadata), list(passed.metadata)
    assert passed.metadata["statements"].value == 4
    assert passed.metadata["columns"].value == "ll_sum, ll_mean, ll_answer_sum, ll_answer_mean"
    counts = passed.metadata["negative_infinity_counts"]
    assert isinstance(counts, MarkdownMetadataValue)
    assert "| ll_sum | 1 |" in counts.value and "| ll_mean | 0 |" in counts.value

    failed = _result(gold_among_options(INSTANCES.with_columns(gold_ids=pl.Series([["w|v"], ["x"]]))))
    rows = failed.metadata["first gold objects not among the options"]
    assert isinstance(rows, MarkdownMetadataValue)
    lines = rows.value.splitlines()
    assert lines[0] == "| instance_id | gold_id |" and lines[2] == "| a | w\\|v |"  # '|' in a cell escaped
