"""Blocking asset checks: bad data stops at the asset that made it, before anything reads it.

Each check reads the partition just written (only the columns it needs) and runs one check of the
library (kcal_pipeline/*/checks.py). `blocking=True`: when a check fails, the run's later steps
(estimates after scores, the report after metrics, ...) do not run, and the UI shows the check's
summary and first offending rows.

A check runs after the materialization it checks is stored (a step of its own, downstream of the
asset's), yet the UI's check page shows an earlier "Timestamp": Dagster records every check of a
run as planned when the run is created, and that page shows the planned time. Each check's
description says so (TIMESTAMP_NOTE).
"""

import inspect
import warnings
from collections.abc import Mapping

from dagster import AssetCheckExecutionContext, AssetCheckResult, MetadataValue, PreviewWarning, asset_check

from assets.partitions import model_partitions, model_relation_partitions, relation_partitions
from kcal_pipeline.core.checks import CheckOutcome
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.storage import read_partition
from kcal_pipeline.dataset.checks import gold_among_options, statements_cover_the_probe
from kcal_pipeline.dataset.instances.open_questions import full_answer_spaces
from kcal_pipeline.estimation.checks import (
    estimator_coverage,
    every_answer_matched,
    generation_confidences_valid,
    probabilities_in_unit_interval,
)
from kcal_pipeline.evaluation.checks import metrics_within_their_ranges
from kcal_pipeline.scoring.checks import (
    LL_COLUMNS,
    finite_log_likelihoods,
    generations_are_complete,
    scores_match_statements,
)
from resources import GenerationResource, ProbeSettings
from resources.parquet_io import partition_dims

# Partitioned asset checks are marked preview in Dagster 1.13, yet they are how a check of a
# partitioned asset checks the partition just written; the warning would fill every CLI run's output.
# Matched by its words (Dagster's own: tests/assets/test_dagster_internals.py checks them), not by
# the private module that issues it.
PARTITIONED_CHECK_PREVIEW = "Specifying a partitions_def on an AssetCheckSpec"
warnings.filterwarnings("ignore", message=PARTITIONED_CHECK_PREVIEW, category=PreviewWarning)


TIMESTAMP_NOTE = (
    'The UI\'s "Timestamp" of this check is when its run was created (Dagster records the checks '
    'of a run as planned then), so it precedes the "Target materialization": the check itself '
    "runs after that materialization is stored, as the run's event log shows."
)


def blocking_check(asset: str, partitions_def):
    """@asset_check, blocking, described by the function's docstring and TIMESTAMP_NOTE."""

    def decorate(fn):
        description = f"{inspect.cleandoc(fn.__doc__)}\n\n{TIMESTAMP_NOTE}"
        return asset_check(
            asset=asset, blocking=True, partitions_def=partitions_def, description=description
        )(fn)

    return decorate


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _metadata_value(value: object) -> object:
    """How the UI shows one detail: a list of plain values as text, a dict of plain values or a
    list of rows (the first offending rows) as a Markdown table, anything else as JSON."""
    if isinstance(value, list) and not any(isinstance(v, Mapping | list) for v in value):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping) and not any(isinstance(v, Mapping | list) for v in value.values()):
        rows = "".join(f"| {_cell(k)} | {_cell(v)} |\n" for k, v in value.items())
        return MetadataValue.md(f"| name | value |\n|:---|---:|\n{rows}")
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        columns = list(dict.fromkeys(k for row in value for k in row))
        lines = [
            "| " + " | ".join(_cell(c) for c in columns) + " |",
            "|" + "|".join(":---" for _ in columns) + "|",
        ]
        lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in value]
        return MetadataValue.md("\n".join(lines))
    return MetadataValue.json(value) if isinstance(value, Mapping | list) else value


def _result(outcome: CheckOutcome) -> AssetCheckResult:
    metadata = {key: _metadata_value(value) for key, value in outcome.details.items()}
    return AssetCheckResult(passed=outcome.passed, description=outcome.summary, metadata=metadata)


def _reader(context: AssetCheckExecutionContext, settings: ProbeSettings, partitions_def):
    """read(table, columns, dims=None): a partition of the checked asset's partition (or of `dims`)."""
    home = kcal_home(settings.home or None)
    own = partition_dims(partitions_def, context.partition_key)

    def read(table: str, columns=None, dims: dict | None = None):
        return read_partition(home, table, own if dims is None else dims, columns)

    return read, own


@blocking_check(asset="probe_instances", partitions_def=relation_partitions)
def gold_is_among_the_options(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """Every gold object is one of its instance's options, and every instance has a gold."""
    read, _ = _reader(context, probe_settings, relation_partitions)
    return _result(gold_among_options(read("probe_instances", ["instance_id", "gold_ids", "option_ids"])))


@blocking_check(asset="statements", partitions_def=relation_partitions)
def statements_are_instances_by_templates_by_options(
    context: AssetCheckExecutionContext, probe_settings: ProbeSettings
):
    """statements = instances × templates × options, each once, gold ones marked (a context template:
    the instances with a valid demonstration)."""
    read, _ = _reader(context, probe_settings, relation_partitions)
    columns = ["statement_id", "instance_id", "template_id", "option_index", "is_gold", "context_end"]
    statements = read("statements", columns)
    instances = read("probe_instances", ["instance_id", "n_options", "n_gold"])
    return _result(statements_cover_the_probe(statements, instances))


@blocking_check(asset="statement_scores", partitions_def=model_relation_partitions)
def log_likelihoods_are_finite(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """No NaN, +inf or positive log-likelihood."""
    read, _ = _reader(context, probe_settings, model_relation_partitions)
    return _result(finite_log_likelihoods(read("statement_scores", ["statement_id", *LL_COLUMNS])))


@blocking_check(asset="statement_scores", partitions_def=model_relation_partitions)
def one_score_per_statement(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """As many score rows as the relation has statements, matched by id: none lost, none twice."""
    read, dims = _reader(context, probe_settings, model_relation_partitions)
    statements = read("statements", ["statement_id"], {"relation": dims["relation"]})
    return _result(scores_match_statements(read("statement_scores", ["statement_id"]), statements))


@blocking_check(asset="estimates", partitions_def=model_relation_partitions)
def probabilities_are_in_the_unit_interval(
    context: AssetCheckExecutionContext, probe_settings: ProbeSettings
):
    """Every probability-kind confidence in [0, 1], no confidence NaN."""
    read, _ = _reader(context, probe_settings, model_relation_partitions)
    columns = ["estimator", "reduction", "instance_id", "template_id", "output_kind", "confidence"]
    return _result(probabilities_in_unit_interval(read("estimates", columns)))


@blocking_check(asset="estimates", partitions_def=model_relation_partitions)
def every_estimator_ran_or_says_why_not(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """Every registered estimator whose inputs exist has its rows; the others a skip reason."""
    read, _ = _reader(context, probe_settings, model_relation_partitions)
    status = read("estimator_status", ["estimator", "reduction", "status", "rows", "reason"])
    return _result(estimator_coverage(status, read("estimates", ["estimator", "reduction"])))


@blocking_check(asset="metrics", partitions_def=model_partitions)
def metrics_are_within_their_ranges(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """Every value and interval bound within its metric's declared range."""
    read, _ = _reader(context, probe_settings, model_partitions)
    columns = [
        "estimator",
        "reduction",
        "split",
        "scope",
        "scope_value",
        "metric",
        "value",
        "ci_low",
        "ci_high",
    ]
    return _result(metrics_within_their_ranges(read("metrics", columns)))


@blocking_check(asset="generations", partitions_def=model_relation_partitions)
def every_question_answered_with_finite_log_probs(
    context: AssetCheckExecutionContext,
    probe_settings: ProbeSettings,
    generation_settings: GenerationResource,
):
    """Each question of the probe: one greedy and N sampled answers; every log-probability finite."""
    read, dims = _reader(context, probe_settings, model_relation_partitions)
    columns = ["instance_id", "prompt", "sample", "logprob_sum"]
    asked = full_answer_spaces(read("probe_instances", None, {"relation": dims["relation"]}))
    return _result(
        generations_are_complete(read("generations", columns), asked, generation_settings.n_samples)
    )


@blocking_check(asset="generation_matches", partitions_def=model_relation_partitions)
def every_answer_is_matched_or_counted_unmatched(
    context: AssetCheckExecutionContext, probe_settings: ProbeSettings
):
    """Every answer-prompt response once: correct, a wrong known entity, or unmatched."""
    read, _ = _reader(context, probe_settings, model_relation_partitions)
    generations = read("generations", ["instance_id", "prompt", "sample"])
    return _result(
        every_answer_matched(
            read("generation_matches", ["instance_id", "sample", "status", "cluster"]), generations
        )
    )


@blocking_check(asset="generation_estimates", partitions_def=model_relation_partitions)
def generation_confidences_are_valid(context: AssetCheckExecutionContext, probe_settings: ProbeSettings):
    """Probabilities in [0, 1], no NaN; a missing confidence has its refusal reason."""
    read, _ = _reader(context, probe_settings, model_relation_partitions)
    columns = ["estimator", "instance_id", "output_kind", "confidence", "refusal"]
    return _result(generation_confidences_valid(read("generation_estimates", columns)))


ASSET_CHECKS = [
    gold_is_among_the_options,
    statements_are_instances_by_templates_by_options,
    log_likelihoods_are_finite,
    one_score_per_statement,
    probabilities_are_in_the_unit_interval,
    every_estimator_ran_or_says_why_not,
    metrics_are_within_their_ranges,
    every_question_answered_with_finite_log_probs,
    every_answer_is_matched_or_counted_unmatched,
    generation_confidences_are_valid,
]
