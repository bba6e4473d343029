"""What `kcal demo` prints per model after a run: the headline summary and which estimators ran.

The command line runs the pipeline; reading the store's tables back into lines for a terminal is
reporting's job, so it lives here, beside the HTML report that shows the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kcal_pipeline.core.storage import partition_path, read_partition, read_partitions
from kcal_pipeline.reporting.coverage import estimator_coverage_lines
from kcal_pipeline.reporting.html import format_summary, summary_table, summary_title


def model_summary_lines(home: Path, model_id: str, model_key: str, relations: Sequence[str]) -> list[str]:
    """The model's headline table and its estimator coverage on `relations`, or nothing when it
    has no metrics yet (a failed or skipped model)."""
    try:
        metrics = read_partition(home, "metrics", {"model": model_key})
    except FileNotFoundError:
        return []
    lines = ["", summary_title(model_id), format_summary(summary_table(metrics))]
    status = [
        {"model": model_key, "relation": r}
        for r in relations
        if partition_path(home, "estimator_status", {"model": model_key, "relation": r}).exists()
    ]
    if status:
        lines += estimator_coverage_lines(read_partitions(home, "estimator_status", status))
    return lines
