"""One run of the Celery job over one model × relation partition, coordinated from a process of its
own, as Dagster's daemon launches each run of a backfill: `python -m tests.engine.launch RELATION`
(DAGSTER_HOME, KCAL_CELERY_BROKER/BACKEND from the environment). Prints the run id and its status
as one JSON line."""

import json
import sys

from dagster import DagsterInstance, execute_job


def main(relation: str) -> int:
    from tests.engine.conftest import celery_job, partition_keys, partition_tags

    (key,) = partition_keys([relation])
    with DagsterInstance.get() as instance:
        result = execute_job(celery_job(), instance, tags=partition_tags(key))
        print(json.dumps({"run_id": result.run_id, "success": result.success}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
