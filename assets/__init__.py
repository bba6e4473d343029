"""Dagster assets of kcal: thin wrappers over kcal_pipeline. A stage is an asset group (the
`group_name` each asset declares); the jobs and `kcal demo`'s run order follow from the groups and
the asset graph (assets/jobs.py, assets/runner.py)."""
