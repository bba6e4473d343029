"""Which language models exist (the registry) and how they are loaded (hub, local folder, GGUF conversion)."""

from kcal_pipeline.scoring.models.folders import detect_kind
from kcal_pipeline.scoring.models.loading import LoadedModel, load_model
from kcal_pipeline.scoring.models.registry import (
    DEFAULT_MODEL,
    DTYPES,
    GGUF_FILE,
    KINDS,
    SOURCES,
    ModelConfigError,
    ModelEntry,
    ModelLoadError,
    Registry,
    UnknownModelError,
)

__all__ = [
    "DEFAULT_MODEL",
    "DTYPES",
    "GGUF_FILE",
    "KINDS",
    "SOURCES",
    "LoadedModel",
    "ModelConfigError",
    "ModelEntry",
    "ModelLoadError",
    "Registry",
    "UnknownModelError",
    "detect_kind",
    "load_model",
]
