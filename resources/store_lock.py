"""The store-lock resource: a Dagster run writes KCAL_HOME only while it holds the store's lock.

The IO manager depends on it, so every run that writes (every asset step) takes the lock at set-up
and releases it at teardown (a run tagged for partition scope holds only its partition); see
kcal_pipeline/core/store_lock.py. Inside `kcal demo`, which holds
the lock for the whole command, the runs it starts re-enter the lock of their own process.
"""

from __future__ import annotations

from contextlib import ExitStack

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from kcal_pipeline.core.partition_lock import hold_partition_lock
from kcal_pipeline.core.paths import kcal_home
from kcal_pipeline.core.store_lock import hold_store_lock

# A run tagged `kcal/store-lock: partition` (the Celery job's runs) holds its model × relation
# partition's lock and the store's lock shared, so partitions are written side by side on several
# workers; every other run holds the whole store (kcal_pipeline/core/partition_lock.py).
STORE_LOCK_SCOPE_TAG = "kcal/store-lock"


def run_partition(tags) -> dict[str, str] | None:
    """{'model': …, 'relation': …} of a run of one model × relation partition, else None."""
    dims = {d: tags.get(f"dagster/partition/{d}") for d in ("model", "relation")}
    return dims if all(dims.values()) else None


class StoreLock(ConfigurableResource):
    home: str = ""
    wait: bool = Field(
        default=True,
        description="wait while another run or kcal command writes this KCAL_HOME (false: fail at once)",
    )

    _held: ExitStack | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run = context.run
        command = f"dagster run {run.run_id} ({run.job_name})" if run is not None else None
        notify = context.log.warning if context.log is not None else print
        held = ExitStack()
        home = kcal_home(self.home or None)
        partition = run_partition(run.tags) if run is not None else None
        if partition is not None and run.tags.get(STORE_LOCK_SCOPE_TAG) == "partition":
            # A distributed step (assets/engine.py): this partition only, beside other partitions.
            held.enter_context(hold_partition_lock(home, partition, wait=self.wait, notify=notify))
        else:
            held.enter_context(hold_store_lock(home, wait=self.wait, command=command, notify=notify))
        self._held = held

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()
