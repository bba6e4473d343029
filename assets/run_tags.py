"""The names of the run tags kcal sets for its own bookkeeping, hidden from the UI.

The runs list shows every user tag of a run in its row (Dagster's own `dagster/...` tags only under
"View all tags"), so a CLI run showed 5-6 tags and about 5 runs fitted on a screen. A tag whose key
starts with Dagster's hidden prefix (`.dagster/`) is stored, and filters runs (RunsFilter(tags=...)),
like any other, but the webserver's GraphQL API never returns it (dagster_graphql resolve_tags drops
TagType.HIDDEN), so the UI does not show it anywhere. The runner's host and pid (what
fail_abandoned_runs reads) and the stage (the job's name already says it) are such bookkeeping;
`kcal/source` and `kcal/assets` say who started a run and what it did, so they stay visible.
"""

from assets.dagster_internals import hidden_tag

RUNNER_HOST_TAG = hidden_tag("kcal_host")  # the host of the kcal process that ran the run
RUNNER_PID_TAG = hidden_tag("kcal_pid")  # its pid: a run left started by a dead pid is abandoned
STAGE_TAG = hidden_tag("kcal_stage")  # the stage of a stage job's runs (assets/jobs.py)
# The same two tags as kcal set them before they were hidden: (host, pid) pairs still looked up
LEGACY_RUNNER_TAGS = (("kcal/host", "kcal/pid"),)
