"""Scale-out: scoring and estimation of model × relation partitions on Dagster's Celery executor.

`kcal_scoring_celery` materializes statement_scores and the estimation multi-asset of one
partition per run; a backfill over many partitions gives many runs, whose steps go to Celery
workers on other processes or hosts. Scoring steps carry the op tag `dagster-celery/queue:
scoring` (assets/scoring.py), so only the workers started with `-q scoring` (the GPU hosts) take
them; estimation steps go to the default queue `dagster`. Workers rebuild the job from the run's
code pointer (the code location, workspace.yaml), so every worker needs this repository, the
same KCAL_HOME (a shared filesystem) and the same DAGSTER_HOME (deploy/postgres/dagster.yaml for
several hosts). The runs are tagged for partition-scoped store locking
(resources/store_lock.py): partitions are written side by side, one run per partition at a time.
The executor's settings are deploy/celery/celery.yaml, the file the workers start with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from dagster import AssetSelection, define_asset_job
from dagster_celery import celery_executor

from resources.store_lock import STORE_LOCK_SCOPE_TAG

CELERY_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "celery" / "celery.yaml"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
JOB_NAME = "kcal_scoring_celery"
# The stages whose assets are written per model × relation (assets/jobs.py: a stage is an asset group).
PARTITION_STAGES = ("scoring", "estimation")


def celery_config(path: Path | None = None) -> dict[str, Any]:
    """The executor config of deploy/celery/celery.yaml (or KCAL_CELERY_CONFIG). Its `{env: …}`
    values are resolved when a run starts, so a run uses the broker its process is told about."""
    path = Path(path or os.environ.get("KCAL_CELERY_CONFIG") or CELERY_CONFIG)
    return (yaml.safe_load(path.read_text("utf-8")) or {}).get("execution", {}).get("config", {})


# The defaults deploy/celery/worker.sh gives the workers: a local redis, results on the broker.
os.environ.setdefault("KCAL_CELERY_BROKER", DEFAULT_BROKER)
os.environ.setdefault("KCAL_CELERY_BACKEND", os.environ["KCAL_CELERY_BROKER"])


def celery_scoring_job(name: str = JOB_NAME):
    """The job over statement_scores and the estimation multi-asset, one partition per run."""
    return define_asset_job(
        name,
        selection=AssetSelection.groups(*PARTITION_STAGES),
        executor_def=celery_executor.configured(celery_config(), name="kcal_celery"),
        tags={STORE_LOCK_SCOPE_TAG: "partition"},
        description="Optional scale-out: scoring and estimates of one model × relation partition "
        "on Celery workers (scoring steps on the `scoring` queue: the GPU hosts). Not needed on one "
        "machine (the `scoring` and `estimation` jobs and `kcal demo` do the same in-process); it "
        "needs a broker and workers: deploy/celery/ says how to start them, then launch a backfill "
        "of this job.",
    )


kcal_scoring_celery = celery_scoring_job()
