"""The code location the Celery tests' workers load through each run's code pointer: kcal's assets
and the Celery job, with resources that read KCAL_HOME from the environment (each worker's is the
test's store) and a small checkpoint chunk (KCAL_TEST_CHUNK_SIZE) so a partition has several
chunks to kill a worker between."""

import os

from dagster import Definitions

from assets.definitions import all_assets
from assets.engine import celery_scoring_job
from resources import default_resources

defs = Definitions(
    assets=all_assets,
    jobs=[celery_scoring_job()],
    resources=default_resources(chunk_size=int(os.environ.get("KCAL_TEST_CHUNK_SIZE", "1024"))),
)
