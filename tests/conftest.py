"""Shared test set-up: one converted copy of the embedded model for every test session."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Converting the GGUF model takes ~25 s; the safetensors cache under the repo's .kcal makes later
# sessions load it in about a second. Tests never write anything else there.
os.environ.setdefault("KCAL_MODEL_CACHE", str(REPO / ".kcal" / "models"))


def run_kcal(home: Path, *args: str, timeout: int = 900):
    """The installed `kcal` command on `home`, with its own DAGSTER_HOME beside it."""
    import subprocess
    import sys

    env = {**os.environ, "DAGSTER_HOME": str(home / "dagster")}
    env.pop("KCAL_HOME", None)
    return subprocess.run(
        [str(Path(sys.executable).with_name("kcal")), "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
