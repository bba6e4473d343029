"""Real OpenAI-compatible servers started by the project's own scripts (scripts/serving/), each in a
process group of its own, stopped (SIGINT, then SIGKILL) by a finalizer also when a test fails.
Only collected with --real-servers (`make test-serving`, which builds their venvs first): a missing
venv there is a failure naming the target, never a skip."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcal_pipeline.scoring.models import DEFAULT_MODEL
from kcal_pipeline.scoring.models.gguf import gguf_cache, gguf_source
from tests.conftest import REPO

NAME = "smol"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or REPO / ".kcal" / "models")


@contextlib.contextmanager
def served(script: str, venv: str, target: str, model: str, log: Path, up_within_s: float) -> Iterator[str]:
    """Start scripts/serving/<script> PORT NAME MODEL; yield its base URL once /v1/models answers."""
    if not (REPO / venv / "bin" / "python").exists():
        pytest.fail(f"{venv} is missing: run `make {target}` (make test-serving does)")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "serving" / script), str(port), NAME, model],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        started = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"{script} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
                )
            if NAME in _served_names(url):
                break
            if time.monotonic() - started > up_within_s:
                pytest.fail(
                    f"{script} not up within {up_within_s:.0f} s:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(1)
        print(f"{script}: up after {time.monotonic() - started:.0f} s")
        yield url
    finally:
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait)
                break


def _served_names(url: str) -> set[str]:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
            return {m["id"] for m in json.load(reply)["data"]}
    except (OSError, ValueError, KeyError):
        return set()


@pytest.fixture(scope="session")
def model_folder() -> str:
    return str(gguf_cache(DEFAULT_MODEL, model_cache())[0])


@pytest.fixture(scope="session")
def gguf_file() -> str:
    return str(gguf_source(DEFAULT_MODEL)[0])


@pytest.fixture(scope="session")
def vllm(tmp_path_factory, model_folder) -> Iterator[str]:
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with served("vllm-serve.sh", ".venv-vllm", "serving-vllm", model_folder, log, up_within_s=600) as url:
        yield url


@pytest.fixture(scope="session")
def llama_cpp_python(tmp_path_factory, gguf_file) -> Iterator[str]:
    log = tmp_path_factory.mktemp("llama-cpp") / "llama-cpp-server.log"
    with served("llama-cpp-serve.sh", ".venv-llama-server", "serving-llama-cpp", gguf_file, log, 120) as url:
        yield url
