"""Shared test set-up: one converted copy of the embedded model for every test session, a home of
its own for each pytest-xdist worker, and the grouping that keeps tests on one worker where they
share an expensive module- or session-scoped fixture."""

import functools
import inspect
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Converting the GGUF model takes ~25 s; the safetensors cache under the repo's .kcal makes later
# sessions load it in about a second (the conversion holds a file lock, so parallel workers convert
# it once). Tests never write anything else there.
os.environ.setdefault("KCAL_MODEL_CACHE", str(REPO / ".kcal" / "models"))


# tests/real_servers/ start servers from venvs of their own (vLLM's CPU build, llama-cpp-python's
# server) that `make test` does not build: `make test-serving` builds them and runs these tests with
# --real-servers (CI runs both targets). Without the flag they are not collected, never skipped.
def pytest_addoption(parser):
    parser.addoption("--real-servers", action="store_true", help="run tests/real_servers (make test-serving)")


def pytest_ignore_collect(collection_path, config):
    if "real_servers" in collection_path.parts and not config.getoption("--real-servers"):
        return True
    return None


def pytest_configure(config):
    """KCAL_HOME and DAGSTER_HOME of this process: a temporary folder per worker, so no test writes
    the developer's store (`make` exports the repository's .kcal) and parallel workers never share
    a Dagster instance's SQLite files."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        # torch and its subprocesses (kcal commands, Dagster runs) would each start one thread per
        # core in every worker: split the cores between the workers instead of oversubscribing them.
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, threads)
    # read here, not at import: pytest-xdist sets it after this conftest is imported
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    root = Path(tempfile.mkdtemp(prefix=f"kcal-test-{worker}-"))
    config._kcal_test_root = root
    os.environ["KCAL_HOME"] = str(root / "kcal")
    os.environ["DAGSTER_HOME"] = str(root / "dagster")
    (root / "dagster").mkdir()
    config.pluginmanager.register(GroupsHonoured(), "kcal-groups-honoured")


def pytest_unconfigure(config):
    root = getattr(config, "_kcal_test_root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


# Session fixtures that the workers share through the file system (built once under a file lock):
# they are no reason to put their users on one worker.
SHARED_ACROSS_WORKERS = {"facts_store"}


def _shared_fixtures(item) -> list[str]:
    """The module- or session-scoped fixtures of tests/ that `item` uses (the expensive ones:
    stores, servers, models), as 'path::name'; those in SHARED_ACROSS_WORKERS are left out."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    shared = []
    for name in info.names_closure:
        if name in SHARED_ACROSS_WORKERS:
            continue
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope in ("module", "package", "session") and fixturedef.baseid.startswith("tests"):
                shared.append(f"{fixturedef.baseid}::{fixturedef.argname}")
    return shared


# Folders whose tests run pipelines, servers, subprocesses or benchmarks (seconds to minutes each,
# against milliseconds for most of the rest).
SLOW_FOLDERS = (
    "tests/ui/",
    "tests/engine/",
    "tests/assets/",
    "tests/bench/",
    "tests/faults/",
    "tests/reporting/",
)


def _slow(item) -> bool:
    return item.nodeid.startswith(SLOW_FOLDERS) or item.get_closest_marker("integration") is not None


# The `slow` mark: `make test-quick` runs `-m "not slow"` (the library's own tests in a few
# minutes), `make test` runs everything. It is given here, from what a test does, never in a test
# file. A test is slow when
# - it lies in a folder of SLOW_MARK_FOLDERS: browsers, servers (`dagster dev`, a daemon, Redis,
#   Celery, Postgres), Dagster runs and kcal commands over stores, benchmarks;
# - its own code, or that of a fixture of tests/ it uses (directly or through other fixtures), calls
#   one of SLOW_CALLS: the pipeline's stores, a Dagster run, an oxigraph server or store, the
#   embedded SmolLM2 (a pattern over their source, so a new test of that kind is marked unasked);
# - it is marked integration; or
# - it is one of SLOW_TESTS: a test whose runs (all its parameters) took over 10 s, where none of the
#   above says so (measured on 2 cores busy with other work, 2026-12-07).
SLOW_MARK_FOLDERS = ("tests/ui/", "tests/engine/", "tests/assets/", "tests/bench/", "tests/faults/")
SLOW_CALLS = re.compile(
    r"\b(facts_store|report_store)\b"  # stores the pipeline built (tests/conftest.py, tests/reporting)
    r"|\b(run_missing|run_stage|materialize|execute_in_process|run_kcal)\("  # Dagster, kcal commands
    r"|\b(LocalEndpoint|ensure_store)\("  # an oxigraph server; loading the snapshot into a store
    r"|\bload_model\(\s*(DEFAULT_MODEL|NATIVE)\b"  # the embedded SmolLM2 (torch or llama.cpp)
)
SLOW_TESTS = frozenset(
    {
        # converts the embedded GGUF in a child process (25 s)
        "tests/scoring/test_models.py::test_a_stale_gguf_cache_is_converted_in_a_child_process_and_then_loads_without_converting",
        "tests/estimation/test_fitting.py::test_temperature_is_the_global_minimum",  # a grid search (22 s)
        # two fresh interpreters importing the code location and the CLI (12 s)
        "tests/test_architecture.py::test_the_code_location_and_the_cli_import_without_torch",
        "tests/scoring/test_mlm_scoring.py::test_scores_match_the_slow_reference",  # a slow reference (11 s)
    }
)


@functools.cache
def _calls_slow(func) -> bool:
    try:
        return SLOW_CALLS.search(inspect.getsource(func)) is not None
    except (OSError, TypeError):  # no source: a built-in, a generated function
        return False


def _marked_slow(item) -> bool:
    if item.nodeid.startswith(SLOW_MARK_FOLDERS) or item.nodeid.split("[")[0] in SLOW_TESTS:
        return True
    if item.get_closest_marker("integration") is not None:
        return True
    func = getattr(item, "function", None)
    if func is not None and _calls_slow(func):
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        _calls_slow(fixturedef.func)
        for name in info.names_closure
        for fixturedef in info.name2fixturedefs.get(name, ())
        if fixturedef.baseid.startswith("tests")
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, tests that share an expensive fixture form one group (one worker
    builds it once); every other test is scheduled on its own. Groups that share a fixture are
    merged (union-find), so a session fixture used by several modules is still built once. Slow
    tests come first (a stable sort), so the run ends on short ones that even out the workers
    instead of one long test keeping a worker busy while the other idles. Among them, one user of
    the shared facts store comes first and the slow tests that do not need it next: one worker
    builds the store (~35 s) while the other works, where two users first left one waiting at
    its lock. First of all each slow test gets the `slow` mark (before `-m` deselects)."""
    for item in items:
        if _marked_slow(item):
            item.add_marker(pytest.mark.slow)

    def uses_facts(item) -> bool:
        info = getattr(item, "_fixtureinfo", None)
        return info is not None and "facts_store" in info.names_closure

    first_user = next((i for i in items if _slow(i) and uses_facts(i)), None)
    items.sort(key=lambda i: (not _slow(i), i is not first_user, uses_facts(i)))
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    uses = {}
    for item in items:
        shared = _shared_fixtures(item)
        uses[item.nodeid] = shared
        for other in shared[1:]:
            parent[find(other)] = find(shared[0])
    for item in items:
        shared = uses[item.nodeid]
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(find(shared[0]).replace("/", ".")))


class GroupsHonoured:
    """After pytest-xdist has read the xdist_group marks (it appends '@group' to each marked test's
    id): a marked test without one means the groups are ignored (pytest-xdist 3.8 under pytest 9.2
    did that silently), so every worker would build every shared store and share servers."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        ignored = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if ignored:
            raise pytest.UsageError(
                f"--dist loadgroup ignored the xdist_group of {len(ignored)} test(s), e.g. {ignored[0]}: "
                "this pytest-xdist does not support this pytest (see the pin in pyproject.toml)"
            )


def run_kcal(home: Path, *args: str, timeout: int = 900, process: bool = False):
    """`kcal --home HOME ARGS` with its own DAGSTER_HOME beside it, as a CompletedProcess (exit code,
    stdout, stderr). By default in this process: assets.cli.main with its output captured, the
    environment restored after and the relation catalog's cache cleared around it (a command such
    as `dataset import-bear` changes the catalog), which saves each call a Python start and the
    imports (~1-8 s on two busy cores). process=True runs the installed command in a subprocess,
    for what only a process shows (its entry point, signals, the interpreter's exit); tests of
    signals and child processes start their own."""
    import subprocess
    import sys

    env = {**os.environ, "DAGSTER_HOME": str(home / "dagster")}
    env.pop("KCAL_HOME", None)
    argv = ["--home", str(home), *args]
    if process:
        return subprocess.run(
            [str(Path(sys.executable).with_name("kcal")), *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    return _kcal_in_process(argv, env)


def _kcal_in_process(argv: list[str], env: dict[str, str]):
    import contextlib
    import io
    import subprocess
    import sys
    import traceback

    from assets.cli import main
    from kcal_pipeline.dataset.relations import load_catalog

    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    load_catalog.cache_clear()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, as the interpreter reports them
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if not isinstance(exc.code, int | None):
                    print(exc.code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        load_catalog.cache_clear()
    return subprocess.CompletedProcess(["kcal", *argv], code, out.getvalue(), err.getvalue())


# The dataset stages every store starts with: the catalog, every relation's facts from the local
# oxigraph endpoint, the object pools. They depend on no setting a test varies, and a store can be
# copied (its data versions hold no paths), so they are built once per session (~40 s) and copied.
FACTS_STAGES = 3  # assets.runner.STAGES[:3]: relations and templates, facts, object pools


def _build_facts_store(home: Path, dagster_home: Path) -> None:
    import assets.runner as runner

    assert [kind for kind, _ in runner.STAGES[:FACTS_STAGES]] == ["none", "all_relations", "none"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "STAGES", runner.STAGES[:FACTS_STAGES])
        mp.setenv("DAGSTER_HOME", str(dagster_home))
        summary = runner.run_missing(home, relations=["P36"], log=lambda m: None)
    assert not summary.failed, summary.failed
    (home / ".facts-complete").touch()


@pytest.fixture(scope="session")
def facts_store(tmp_path_factory) -> Path:
    """A KCAL_HOME with the facts stages done and nothing else (no models.toml: the default
    model). Shared by the xdist workers of one session (built by the first, under a file lock);
    never write it: start a store with copy_facts_store."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    home = shared / "kcal-facts-store"
    with FileLock(str(shared / "kcal-facts-store.lock")):
        if not (home / ".facts-complete").exists():
            shutil.rmtree(home, ignore_errors=True)
            instance = shared / "kcal-facts-dagster"  # in the basetemp, removed with it
            shutil.rmtree(instance, ignore_errors=True)
            instance.mkdir()
            _build_facts_store(home, instance)
    return home


def copy_facts_store(facts: Path, home: Path) -> Path:
    """`home` (new, or holding files the facts store has not) as a copy of the facts store (a few MB):
    the next run there starts at the probe."""
    shutil.copytree(facts, home, ignore=shutil.ignore_patterns(".facts-complete"), dirs_exist_ok=True)
    return home
