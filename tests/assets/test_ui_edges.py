"""The UI's rough edges answered in the definitions (issue 34): where to start and a note on long
names in the descriptions, the stages' order in the jobs' descriptions, metric words as asset tags
(the asset selection box suggests tags; the global search matches names only), and `dagster dev`
started without its SupersessionWarning."""

import subprocess
import sys

from assets.definitions import (
    LONG_NAME_NOTE,
    METRIC_ASSETS,
    STAGE_ASSETS,
    STAGE_JOBS,
    all_assets,
)
from assets.jobs import ON_DEMAND
from assets.ui import NO_SUPERSESSION_WARNING, dagster_dev

SPECS = {key.to_user_string(): spec for a in all_assets for key, spec in a.specs_by_key.items()}


def test_the_reports_say_start_here_and_long_names_say_why_they_stay():
    for name in ("report", "cross_model_report"):
        assert SPECS[name].description.startswith("Start here "), name
    assert "The per-relation summary table" in SPECS["report"].description  # its own text kept
    assert SPECS["decision_thresholds"].description.endswith(LONG_NAME_NOTE)
    assert LONG_NAME_NOTE not in SPECS["metrics"].description
    assert not SPECS["metrics"].description.startswith("Start here ")


def test_the_stage_jobs_number_the_stages_and_say_where_results_are():
    jobs = {job.name: job for job in STAGE_JOBS}
    order = ["dataset", "facts", "probe", "scoring", "estimation", "evaluation", "cross_model"]
    assert sorted(order) == sorted(stage for stage in STAGE_ASSETS if stage not in ON_DEMAND)
    for number, stage in enumerate(order, 1):
        assert jobs[stage].description.startswith(f"Stage {number} of 7"), stage
    assert "Where to start reading results: the `report` asset" in jobs["evaluation"].description
    for stage in ON_DEMAND:
        assert jobs[stage].description.startswith("Optional, on demand"), stage


def test_the_metric_assets_carry_metric_words_as_tags():
    for name in METRIC_ASSETS:
        assert {"accuracy", "ace", "brier", "calibration", "selective"} <= set(SPECS[name].tags), name
        assert all(SPECS[name].tags[word] == "" for word in ("accuracy", "ace"))  # key-only tags
    assert "accuracy" not in SPECS["statement_scores"].tags


DEV_COMMAND = """
from dagster._symbol_annotations.lifecycle import superseded

@superseded(additional_warn_text="Use 'dg dev' instead.", emit_runtime_warning=True)
def dev_command():
    pass

dev_command()
"""


def test_the_launcher_silences_only_dagster_devs_supersession_warning():
    """The pinned Dagster's own decorator makes the warning `dagster dev` prints; the launcher's -W
    filter silences it (and nothing else: another FutureWarning still shows)."""
    command = dagster_dev()
    assert command[1:3] == ["-W", NO_SUPERSESSION_WARNING] and command[3:6] == ["-m", "dagster", "dev"]

    def stderr(*flags: str, code: str = DEV_COMMAND) -> str:
        done = subprocess.run(
            [sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "SupersessionWarning: Function `dev_command` is superseded" in stderr()
    assert "Supersession" not in stderr("-W", NO_SUPERSESSION_WARNING)
    other = "import warnings; warnings.warn('Function `other` is superseded', FutureWarning)"
    assert "FutureWarning" in stderr("-W", NO_SUPERSESSION_WARNING, code=other)


def test_only_rates_and_sizes_of_a_scoring_partition_are_charted():
    """The UI's "Plots" toggle charts numeric metadata across partitions: the run's counters are
    text (assets/scoring.py), the rates and sizes stay numbers."""
    from dagster import MetadataValue

    from assets.scoring import plotted_fairly

    shown = plotted_fairly(
        {"chunks": 4, "chunks_resumed": 1, "seconds": 12.5, "statements_per_s": 80.1, "tokens": 9}
    )
    assert shown["chunks"] == MetadataValue.text("4") and shown["seconds"] == MetadataValue.text("12.5")
    assert shown["chunks_resumed"] == MetadataValue.text("1")
    assert (shown["statements_per_s"], shown["tokens"]) == (80.1, 9)
