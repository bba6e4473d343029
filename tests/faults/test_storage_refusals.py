"""A store the file system refuses — read-only, not writable by this user, full — ends a command with
one line naming the path, what failed and what to do; exit 2, no traceback, nothing half-written.

The real refusals need mounts (a read-only bind mount, a small tmpfs): those tests run where this
machine lets the test mount (root with CAP_SYS_ADMIN, as here and in CI) and skip elsewhere; the
injected ones run everywhere (and stand in for "no permission", which root cannot be refused).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import tomllib
from pathlib import Path

import polars as pl
import pytest

from bench._data import build_tiny_mlm
from kcal_pipeline.core.filesystem_errors import FULL, NO_PERMISSION, READ_ONLY, describe, storage_failure
from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
from tests.conftest import run_kcal

DAGSTER_WELCOME_ENDS = "(https://bit.ly/39dvSsF)."
BEAR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bear"


# --- finding the refusal -----------------------------------------------------------------------


def _raised(make_error):
    try:
        make_error()
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def _wrapped(inner: BaseException, outer: type[BaseException] = RuntimeError):
    """`inner` as its cause, the way Dagster's step and resource errors carry the user's error."""

    def make():
        try:
            raise inner
        except BaseException as exc:
            raise outer("step failed") from exc

    return _raised(make)


def _sqlalchemy(message: str) -> BaseException:
    from sqlalchemy.exc import OperationalError

    return OperationalError("CREATE TABLE runs", {}, sqlite3.OperationalError(message))


@pytest.mark.parametrize(
    ("error", "kind", "path", "sqlite"),
    [
        (OSError(errno.EROFS, "Read-only file system", "/s/.lock"), READ_ONLY, "/s/.lock", False),
        (
            PermissionError(errno.EACCES, "Permission denied", "/s/x.parquet"),
            NO_PERMISSION,
            "/s/x.parquet",
            False,
        ),
        (OSError(errno.EPERM, "Operation not permitted", "/s/a"), NO_PERMISSION, "/s/a", False),
        (OSError(errno.ENOSPC, "No space left on device"), FULL, "/s", False),  # no file named: the store
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/s/b"), FULL, "/s/b", False),
        (OSError("Couldn't write: No space left on device"), FULL, "/s", False),  # pyarrow: text only
        (sqlite3.OperationalError("database or disk is full"), FULL, "/s/dagster", True),
        (sqlite3.OperationalError("attempt to write a readonly database"), READ_ONLY, "/s/dagster", True),
        (_sqlalchemy("database or disk is full"), FULL, "/s/dagster", True),
        (
            _wrapped(OSError(errno.ENOSPC, "No space left on device", "/s/t.parquet")),
            FULL,
            "/s/t.parquet",
            False,
        ),
        (_wrapped(_wrapped(_sqlalchemy("database or disk is full"))), FULL, "/s/dagster", True),
        # an atomic write's temporary file is named as the file it was making
        (OSError(errno.EROFS, "Read-only file system", "/s/.f.md.k3j_9x.tmp"), READ_ONLY, "/s/f.md", False),
    ],
)
def test_each_refusal_is_found_however_it_is_wrapped(error, kind, path, sqlite, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    found = storage_failure(error, Path("/s"))
    assert (found.kind, found.path, found.sqlite) == (kind, Path(path), sqlite)


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/s/x"),
        ValueError("label 'No space left on device' is not a relation"),  # words in a non-I/O error
        sqlite3.OperationalError("no such table: runs"),
        KeyError("P36"),
    ],
)
def test_other_errors_are_not_taken_for_refusals(error):
    assert storage_failure(error, Path("/s")) is None


def test_sqlites_unable_to_open_is_judged_by_the_folder(tmp_path, monkeypatch):
    """SQLite says only "unable to open database file": the folder tells read-only or no permission
    from a cause kcal cannot name (then the error is left as it is)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    unable = sqlite3.OperationalError("unable to open database file")
    assert storage_failure(unable, tmp_path) is None  # a writable folder: not a refusal
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert storage_failure(unable, tmp_path).kind == NO_PERMISSION


def test_the_line_names_path_cause_and_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    home = tmp_path
    line = describe(storage_failure(OSError(errno.EROFS, "x", str(home / ".lock")), home), home)
    assert line == (
        f"{home / '.lock'}: read-only file system: the store {home} cannot be written; give another "
        "--home (or KCAL_HOME); kcal sql still reads it"
    )
    line = describe(storage_failure(PermissionError(errno.EACCES, "x", "/elsewhere/f.md"), home), home)
    assert line == (
        f"/elsewhere/f.md: permission denied: that path is not writable by this user (uid {os.getuid()}); "
        "make it writable (chown/chmod) or give another path"
    )
    line = describe(storage_failure(sqlite3.OperationalError("database or disk is full"), home), home)
    free = shutil.disk_usage(tmp_path).free
    room = f"{free / 2**30:.1f} GiB" if free >= 2**30 else f"{free / 2**20:.1f} MiB"
    assert line == (
        f"{home / 'dagster'}: Dagster's instance database: no space left on the device ({room} free "
        "there): free some space and run the same command again; it resumes where it stopped (writes "
        "are atomic: nothing half-written was kept)"
    )


# --- real mounts ---------------------------------------------------------------------------------


def _mount(*args: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting needs root (the injected tests below cover this machine)")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"this machine does not let the test mount: {done.stderr.strip()}")


@pytest.fixture
def mounts():
    """mount(args...) for the test; every mount made is taken down after it, last first."""
    made: list[Path] = []

    def mount(*args: str) -> None:
        _mount(*args)
        made.append(Path(args[-1]))

    yield mount
    for point in reversed(made):
        subprocess.run(["umount", "-l", str(point)], check=False)


def _one_line_error(out) -> str:
    """The command's one line of error (after Dagster's welcome, printed once for a new instance)."""
    lines = out.stderr.split(DAGSTER_WELCOME_ENDS)[-1].strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("kcal: error: ") and "Traceback" not in out.stdout + out.stderr
    return lines[0]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_a_read_only_store_refuses_writers_in_one_line_and_still_answers_sql(tmp_path, mounts):
    store, mounted = tmp_path / "store", tmp_path / "read-only"
    assert run_kcal(store, "dataset", "import-bear", str(BEAR)).returncode == 0
    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": ["capital"]}), partition_path(store, "relations")
    )
    mounted.mkdir()
    mounts("--bind", str(store), str(mounted))
    mounts("-o", "remount,ro,bind", str(mounted))
    before = _files(mounted)
    for command in (
        ["demo", "--relation", "bear-P36"],
        ["models", "add", "lab/x", "--path", str(tmp_path)],
        ["dataset", "import-bear", str(BEAR)],
    ):
        line = _one_line_error(run_kcal(mounted, *command))
        assert f"{mounted / '.lock'}: read-only file system: the store {mounted}" in line, line
        assert "kcal sql still reads it" in line
    assert _files(mounted) == before
    # kcal sql reads it: its views were made for the store's other path, so they are made in memory
    out = run_kcal(mounted, "sql", "select label from relations")
    assert out.returncode == 0 and "capital" in out.stdout, out.stderr
    assert _files(mounted) == before


def test_a_full_disk_is_named_with_its_free_space_and_the_rerun_is_exact(tmp_path, mounts):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounts("-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk))
    store = disk / "store"
    model = build_tiny_mlm(tmp_path / "tiny model")
    # Dagster's instance database does not fit: SQLite's "database or disk is full", before
    # models.toml is touched
    line = _one_line_error(run_kcal(store, "models", "add", "lab/tiny", "--path", str(model)))
    assert line.startswith(f"kcal: error: {store / 'dagster'}: Dagster's instance database: no space left")
    assert "KiB free there" in line and not (store / "models.toml").exists()
    # the facts of BEAR's 60 relations (684 KiB) do not fit either: no temporary file is left, and
    # no catalog points at facts that were not written
    subprocess.run(["mount", "-o", "remount,size=400k", str(disk)], check=True)
    shutil.rmtree(store / "dagster")
    line = _one_line_error(run_kcal(store, "dataset", "import-bear", str(BEAR)))
    assert "no space left on the device" in line and str(store) in line
    assert not list(store.rglob("*.tmp")) and not (store / "datasets" / "bear" / "catalog.toml").exists()
    # room again: the same commands run to the end, and the import equals one on an ample disk
    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
    assert run_kcal(store, "models", "add", "lab/tiny", "--path", str(model)).returncode == 0
    registered = tomllib.loads((store / "models.toml").read_text("utf-8"))
    assert [m["id"] for m in registered["model"]].count("lab/tiny") == 1
    assert run_kcal(store, "dataset", "import-bear", str(BEAR)).returncode == 0
    reference = tmp_path / "reference"
    assert run_kcal(reference, "dataset", "import-bear", str(BEAR)).returncode == 0
    ours, theirs = (h / "datasets" / "bear" for h in (store, reference))
    assert (ours / "catalog.toml").read_text() == (theirs / "catalog.toml").read_text().replace(
        str(reference), str(store)
    )
    for facts in sorted((theirs / "facts").glob("*.parquet")):
        assert pl.read_parquet(ours / "facts" / facts.name).equals(pl.read_parquet(facts)), facts.name


# --- injected: where the machine cannot refuse (root and permissions) or mount ------------------


def test_a_store_without_permission_is_named(tmp_path, monkeypatch):
    """Root may write anywhere: the lock file's refusal is injected for root, real for others."""
    store = tmp_path / "store"
    store.mkdir()
    if os.geteuid() == 0:
        import filelock

        def refuse(self, *args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(store / ".lock"))

        monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    else:
        store.chmod(0o555)
    try:
        line = _one_line_error(run_kcal(store, "dataset", "import-bear", str(BEAR)))
    finally:
        store.chmod(0o755)
    assert line == (
        f"kcal: error: {store / '.lock'}: permission denied: the store {store} is not writable by this "
        f"user (uid {os.getuid()}); make it writable (chown/chmod) or give another --home (or KCAL_HOME)"
    )
    assert not (store / "datasets").exists()


def test_a_full_disk_inside_a_dagster_step_is_one_line(tmp_path, monkeypatch):
    """ENOSPC raised in an asset's write comes out of Dagster's step error (and its console report,
    with a stack trace, is not printed); the store keeps no temporary file."""
    real_write = pl.DataFrame.write_parquet

    def full(self, file, *args, **kwargs):
        if Path(file).name.endswith(".tmp"):
            Path(file).write_bytes(b"PAR1")  # a partial file, as a real full disk leaves
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    store = tmp_path / "store"
    line = _one_line_error(run_kcal(store, "demo", "--relation", "P36"))
    assert line.startswith(f"kcal: error: {store}: no space left on the device (") and "free there" in line
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]
    assert not list(store.rglob("*.parquet"))
