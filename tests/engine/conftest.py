"""Real parts for the distributed path: Debian's redis-server on a free port with its data in a
temporary folder, dagster-celery workers started with the shipped deploy/celery/worker.sh (each in
its own process group), persistent temporary Dagster instances, and one small probe (the embedded
SmolLM2, 4 relations × 4 instances × 1 template) that every store of these tests copies.

Every server and worker is stopped by a finalizer, also when a test fails."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from dagster import DagsterInstance, DynamicPartitionsDefinition, MultiPartitionKey

from tests.conftest import REPO, copy_facts_store

RELATIONS = ["P30", "P37", "P36", "P47"]
SETTINGS = {"max_instances": 4, "max_templates": 1}
# Checkpoint chunks of 8 statements everywhere (workers and the in-process reference): a partition
# has a middle to kill a worker in, and equal chunking gives bit-identical scores (the packed rows
# of different chunkings differ by float32 rounding, up to ~7e-5 nats on P36).
CHUNK = 8
TABLES = ("statement_scores", "estimates", "option_estimates", "estimator_fits", "estimator_status")
INSTALL_REDIS = "apt-get install -y redis-server (scripts/system-deps.sh does it for `make test`)"


def redis_binary() -> str:
    """redis-server, or a LOUD skip naming the binary and how to install it."""
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.skip(
            f"SKIPPED LOUDLY: the binary `redis-server` is not installed; install it with: {INSTALL_REDIS}"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """Stop a process started with start_new_session=True and everything in its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group's leftovers (celery pool children)
    proc.wait(5)


class Redis:
    """redis-server on 127.0.0.1:<free port>, append-only file in `directory` (so a restart keeps
    the queued and unacknowledged messages, as a Debian service's restart does)."""

    def __init__(self, directory: Path) -> None:
        self.binary, self.directory, self.port = redis_binary(), directory, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        args += ["--appendonly", "yes", "--save", "", "--daemonize", "no"]
        log = (self.directory / "redis.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.exceptions.RedisError as error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server did not start: {(self.directory / 'redis.log').read_text()}"
                    ) from error
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)  # SIGTERM: redis flushes its append-only file and exits


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen
    log: Path

    def pids(self) -> list[int]:
        """Every live process of this worker (its process group: dagster-celery, celery, pool)."""
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.proc.pid:
                        out.append(int(entry.name))
                except ProcessLookupError:
                    pass
        return out


def start_worker(name: str, queues: str, env: dict[str, str], logs: Path) -> Worker:
    """deploy/celery/worker.sh QUEUES NAME in a process group of its own; returns once celery
    says it is ready."""
    log = logs / f"{name}.log"
    proc = subprocess.Popen(
        ["bash", str(REPO / "deploy" / "celery" / "worker.sh"), queues, name],
        cwd=REPO,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(name, proc, log)
    deadline = time.monotonic() + 180
    while " ready." not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc)
            raise RuntimeError(
                f"celery worker {name} did not start:\n{log.read_text(errors='replace')[-4000:]}"
            )
        time.sleep(0.2)
    return worker


@dataclass
class Store:
    """A KCAL_HOME with the probe and the default model, and its own persistent Dagster instance."""

    home: Path
    dagster_home: Path
    instance: DagsterInstance

    def env(self, redis: Redis | None = None, **extra: str) -> dict[str, str]:
        env = {**os.environ, "KCAL_HOME": str(self.home), "DAGSTER_HOME": str(self.dagster_home)}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env["KCAL_TEST_CHUNK_SIZE"] = str(CHUNK)
        if redis is not None:
            env["KCAL_CELERY_BROKER"] = env["KCAL_CELERY_BACKEND"] = redis.url
        return {**env, **extra}

    def table(self, table: str) -> pl.DataFrame:
        files = sorted((self.home / table).rglob("*.parquet"))
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical")


def partition_keys(relations: Sequence[str] = RELATIONS) -> list[MultiPartitionKey]:
    from kcal_pipeline.scoring.models import DEFAULT_MODEL

    return [MultiPartitionKey({"model": DEFAULT_MODEL.key, "relation": r}) for r in relations]


def partition_tags(key: MultiPartitionKey) -> dict[str, str]:
    """The run tags of one model × relation partition, as Dagster's backfills set them."""
    dims = key.keys_by_dimension
    return {"dagster/partition": str(key), **{f"dagster/partition/{d}": v for d, v in dims.items()}}


@pytest.fixture(scope="session")
def probe_store(tmp_path_factory, facts_store) -> Path:
    """The dataset stages of a small probe on the local oxigraph endpoint, no model registered
    (an empty models.toml), so copies of it start with nothing scored."""
    from assets.runner import run_missing

    home = copy_facts_store(facts_store, tmp_path_factory.mktemp("probe") / "kcal")
    (home / "models.toml").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("probe-dagster")))
        run_missing(home, relations=RELATIONS, settings=SETTINGS, log=lambda m: None)
    assert not (home / "statement_scores").exists()
    return home


def make_store(probe: Path, root: Path, instance_yaml: str = "nux:\n  enabled: false\n") -> Store:
    """A copy of the probe with the default model registered, and a fresh instance that knows the
    model and relation partitions."""
    from assets.partitions import model_relation_partitions
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, Registry

    home, dagster_home = root / "kcal", root / "dagster"
    shutil.copytree(probe, home)
    Registry(home / "models.toml").add(DEFAULT_MODEL)
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text(instance_yaml)
    instance = DagsterInstance.from_config(str(dagster_home))
    keys = {"model": [DEFAULT_MODEL.key], "relation": RELATIONS}
    for dim in model_relation_partitions.partitions_defs:
        if isinstance(dim.partitions_def, DynamicPartitionsDefinition):
            instance.add_dynamic_partitions(dim.partitions_def.name, keys[dim.name])
    return Store(home, dagster_home, instance)


@pytest.fixture(scope="session")
def in_process(probe_store, tmp_path_factory) -> tuple[Store, float]:
    """The reference: the same partitions materialized one after another with the in-process
    executor (what `kcal demo` does), and their wall time."""
    from dagster import AssetKey, materialize

    from assets.definitions import all_assets
    from assets.runner import QUIET_LOGS
    from resources import default_resources

    store = make_store(probe_store, tmp_path_factory.mktemp("in-process"))
    started = time.perf_counter()
    for key in partition_keys():
        result = materialize(
            all_assets,
            selection=[AssetKey(t) for t in TABLES],
            partition_key=key,
            instance=store.instance,
            resources=default_resources(home=str(store.home), chunk_size=CHUNK),
            run_config=QUIET_LOGS,
        )
        assert result.success
    return store, time.perf_counter() - started


@dataclass
class Cluster:
    """One store served by redis and two workers (w1, w2, both queues): what every test here runs on."""

    store: Store
    redis: Redis
    workers: list[Worker]
    logs: Path


@pytest.fixture(scope="session")
def cluster(probe_store, tmp_path_factory) -> Iterator[Cluster]:
    """Started once for the engine tests (a worker takes ~20 s to start and its first step another
    ~20 s to load the code location on 2 shared cores); each test works on partitions of its own or
    forgets them first. Everything is stopped at the end, also after a failure."""
    root = tmp_path_factory.mktemp("cluster")
    redis = Redis(root / "redis")
    workers: list[Worker] = []
    try:
        redis.start()
        store = make_store(probe_store, root)
        env = store.env(redis)
        workers += [start_worker(f"w{i}", "scoring,dagster", env, root) for i in (1, 2)]
        yield Cluster(store, redis, workers, root)
    finally:
        for worker in workers:
            stop_group(worker.proc)
        redis.stop()


def forget(store: Store, relation: str) -> None:
    """Delete one partition's scoring and estimation files and checkpoints: the next run starts over."""
    for directory in (store.home / t for t in TABLES):
        for path in directory.glob(f"*/relation={relation}"):
            shutil.rmtree(path)
    for path in (store.home / ".checkpoints").glob(f"*/*/relation={relation}"):
        shutil.rmtree(path)


def celery_job():
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    from assets.engine import JOB_NAME

    repo = ReconstructableRepository.for_module(
        "tests.engine.celery_defs", "defs", working_directory=str(REPO)
    )
    return repo.get_reconstructable_job(JOB_NAME)


def launch(store: Store, relation: str, redis: Redis, logs: Path) -> subprocess.Popen:
    """Start one run of the Celery job for one partition in a process (group) of its own."""
    log = logs / f"launch-{relation}-{time.monotonic_ns()}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.engine.launch", relation],
        cwd=REPO,
        env=store.env(redis),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log = log
    return proc


def finished(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, bool]:
    """(run id, success) of a launched run; the launcher is killed if it runs past `timeout`."""
    try:
        proc.wait(timeout)
    finally:
        stop_group(proc, grace=1)
    text = proc.log.read_text(errors="replace")
    result = next((json.loads(line) for line in text.splitlines() if line.startswith('{"run_id"')), None)
    assert result is not None, f"the run's launcher ended without a result:\n{text[-4000:]}"
    return result["run_id"], result["success"]


def run_on_celery(
    store: Store, relations: Sequence[str], redis: Redis, logs: Path, timeout: float = 600
) -> list[tuple[str, bool]]:
    """One run of the Celery job per partition, all launched at once (a backfill's runs); returns
    (run id, success) in the order given. Every launcher is stopped, also on failure."""
    procs = [launch(store, r, redis, logs) for r in relations]
    try:
        return [finished(p, timeout) for p in procs]
    finally:
        for p in procs:
            stop_group(p, grace=1)


def rows(store: Store, table: str, keys: Sequence[MultiPartitionKey] | None = None) -> pl.DataFrame:
    """A table's rows over the given partitions, sorted on every column that sorts."""
    frame = store.table(table)
    if keys is not None:
        relations = [k.keys_by_dimension["relation"] for k in keys]
        frame = frame.filter(pl.col("relation_id").is_in(relations))
    sortable = [c for c, t in frame.schema.items() if not isinstance(t, pl.List | pl.Struct)]
    return frame.sort(sortable, nulls_last=True)
