"""Shared test set-up: one converted copy of the embedded model for every test session."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Converting the GGUF model takes ~25 s; the safetensors cache under the repo's .kcal makes later
# sessions load it in about a second. Tests never write anything else there.
os.environ.setdefault("KCAL_MODEL_CACHE", str(REPO / ".kcal" / "models"))
