"""The multi-user instance of deploy/postgres/dagster.yaml against a real PostgreSQL server that the
test starts (initdb into a temporary folder, a free port on 127.0.0.1, its socket in that folder):
kcal's runner materializes two small assets and syncs the model partitions on it, the runs and
materializations are rows in PostgreSQL, and a second user (another process, its own DAGSTER_HOME
with the same file) sees them."""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcal_pipeline.scoring.models import DEFAULT_MODEL
from tests.conftest import REPO
from tests.engine.conftest import free_port

pytestmark = pytest.mark.integration
INSTALL_POSTGRES = "apt-get install -y postgresql (scripts/system-deps.sh does it for `make test`)"
SERVER_USER = "kcal"


def server_binary(name: str) -> str:
    """initdb or pg_ctl: on PATH, or where Debian keeps them (/usr/lib/postgresql/<version>/bin)."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[::-1]), None
    )
    if found is None:
        pytest.skip(
            f"SKIPPED LOUDLY: the PostgreSQL binary `{name}` is not installed; "
            f"install it with: {INSTALL_POSTGRES}"
        )
    return found


def unprivileged() -> tuple[list[str], str | None]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` account (Debian's
    package creates it) or else `nobody`, through runuser; otherwise as ourselves."""
    if os.geteuid() != 0:
        return [], None
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--"], user
    pytest.skip("SKIPPED LOUDLY: running as root and neither a `postgres` nor a `nobody` account exists")


@pytest.fixture
def postgres() -> Iterator[dict[str, str]]:
    """A PostgreSQL server of our own; yields the KCAL_PG_* environment of deploy/postgres/dagster.yaml."""
    initdb, pg_ctl = server_binary("initdb"), server_binary("pg_ctl")
    prefix, user = unprivileged()
    # Under /tmp (not pytest's root-only tmp folder), owned by the server's account.
    root = Path(tempfile.mkdtemp(prefix="kcal-pg-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, port = root / "data", free_port()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120, cwd=root)

    try:
        out = run(initdb, "-D", str(data), "-U", SERVER_USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        assert out.returncode == 0, out.stdout + out.stderr
        options = f"-p {port} -h 127.0.0.1 -k {root} -c fsync=off"
        out = run(pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w", "start")
        assert out.returncode == 0, out.stdout + out.stderr + (root / "server.log").read_text()
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user=SERVER_USER, dbname="postgres")
        con.autocommit = True  # CREATE DATABASE runs outside a transaction
        con.cursor().execute("CREATE DATABASE kcal_dagster")
        con.close()
        yield {
            "KCAL_PG_HOST": "127.0.0.1",
            "KCAL_PG_PORT": str(port),
            "KCAL_PG_USER": SERVER_USER,
            "KCAL_PG_PASSWORD": "trust-auth-ignores-it",
            "KCAL_PG_DB": "kcal_dagster",
        }
    finally:
        if (data / "postmaster.pid").exists():
            run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def user_instance_dir(parent: Path) -> Path:
    """A DAGSTER_HOME holding the shipped deploy/postgres/dagster.yaml, unchanged."""
    home = parent / "dagster"
    home.mkdir(parents=True)
    shutil.copy(REPO / "deploy" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    return home


SECOND_USER = """
import json
from dagster import AssetKey, DagsterInstance
with DagsterInstance.get() as instance:
    runs = instance.get_runs()
    record = instance.get_latest_materialization_event(AssetKey("templates"))
    print(json.dumps({
        "storage": type(instance.run_storage).__name__,
        "runs": sorted(r.run_id for r in runs),
        "succeeded": sum(r.is_success for r in runs),
        "templates_run": record.run_id if record else None,
        "models": instance.get_dynamic_partitions("model"),
    }))
"""


def test_the_postgres_instance_holds_kcal_runs_for_every_user(postgres, tmp_path, monkeypatch):
    from assets.runner import materialize_unpartitioned, sync_model_partitions

    for name, value in postgres.items():
        monkeypatch.setenv(name, value)
    first = user_instance_dir(tmp_path / "alice")
    monkeypatch.setenv("DAGSTER_HOME", str(first))
    home = tmp_path / "kcal"
    # Two small assets through kcal's runner, and the model partitions of the registry.
    for asset in ("relations", "templates"):
        materialize_unpartitioned(home, asset)
    assert sync_model_partitions(home) == [DEFAULT_MODEL.key]
    assert (first / "dagster.yaml").read_text() == (REPO / "deploy/postgres/dagster.yaml").read_text()
    assert not list(first.rglob("*.db"))  # no SQLite storage beside the shared one

    import psycopg2

    connect = dict(host="127.0.0.1", port=int(postgres["KCAL_PG_PORT"]), user=SERVER_USER)
    with psycopg2.connect(dbname=postgres["KCAL_PG_DB"], **connect) as con, con.cursor() as cur:
        cur.execute("SELECT run_id, status FROM runs")
        runs = dict(cur.fetchall())
        cur.execute(
            "SELECT DISTINCT asset_key FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"
        )
        materialized = {json.loads(key)[-1] for (key,) in cur.fetchall()}  # keys are JSON lists
    assert runs and set(runs.values()) == {"SUCCESS"}
    assert len(runs) == 2 and materialized == {"relations", "templates"}

    # Another user: a process of its own, a DAGSTER_HOME of its own with the same file.
    second = user_instance_dir(tmp_path / "bob")
    env = {**os.environ, "DAGSTER_HOME": str(second)}
    out = subprocess.run(
        [sys.executable, "-c", SECOND_USER], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["storage"] == "PostgresRunStorage"
    assert seen["runs"] == sorted(runs) and seen["succeeded"] == len(runs)
    assert seen["templates_run"] in runs
    assert seen["models"] == [DEFAULT_MODEL.key]  # the partitions the registry synced are shared too
