"""Write the bytecode of the modules kcal's processes import, once, at install.

Why not `uv pip install --compile-bytecode`: it compiles every file of every package (18,000 files,
most of them torch's and never imported), which was 60 s of a 70 s install on 2 cores. Importing
what kcal runs (the pipeline, the model stack, the UI's servers, the tests' tools) writes the
~5,800 files actually used in about 25 s, on two processes at once. Modules imported later by
something not listed here are compiled and written on their first import (the Makefile clears
PYTHONDONTWRITEBYTECODE), so nothing is compiled twice. netcal is compiled here as a whole: its
sources hold invalid escape sequences, whose SyntaxWarnings would otherwise surface inside tests.

Run by `make install` with the venv's python: `python scripts/warm_bytecode.py`.
"""

from __future__ import annotations

import compileall
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

# Two groups of about equal import time, one per process.
GROUPS = {
    "models": [
        "torch",
        "transformers",
        "transformers.models.llama.modeling_llama",
        "transformers.models.bert.modeling_bert",
        "safetensors.torch",
        "gguf",
        "accelerate",
        "scipy.optimize",
        "scipy.stats",
        "sklearn.isotonic",
        "netcal.metrics",
        "kcal_pipeline.scoring.clm",
        "kcal_pipeline.scoring.mlm",
    ],
    "pipeline": [
        "assets.definitions",
        "assets.cli",
        "dagster._cli",
        "dagster._daemon.daemon",
        "dagster._grpc.server",
        "dagster_webserver.webserver",
        "dagster_celery",
        "matplotlib.backends.backend_agg",
        "matplotlib.backends.backend_svg",
        "kcal_pipeline.reporting.pages",
        "kcal_pipeline.reporting.cross_model",
        "pandas",
        "pytest",
        "xdist",
        "hypothesis",
        "playwright.sync_api",
    ],
}


def warm(group: str) -> None:
    for name in GROUPS[group]:
        importlib.import_module(name)


def compile_netcal() -> None:
    spec = importlib.util.find_spec("netcal")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("netcal is not installed (make install puts it in with --no-deps)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # its own invalid escapes, not ours to fix
        ok = compileall.compile_dir(next(iter(spec.submodule_search_locations)), quiet=2)
    if not ok:
        raise SystemExit("netcal's sources did not compile")


def main() -> int:
    if len(sys.argv) == 2:
        warm(sys.argv[1])
        return 0
    script = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory(prefix="kcal-warm-") as home:  # whatever an import writes
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"KCAL_HOME": home, "DAGSTER_HOME": str(Path(home) / "dagster")}
        children = [subprocess.Popen([sys.executable, script, group], env=env) for group in GROUPS]
        compile_netcal()
        failed = [group for group, child in zip(GROUPS, children, strict=True) if child.wait() != 0]
    if failed:
        print(f"warm_bytecode: importing the {', '.join(failed)} modules failed (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
