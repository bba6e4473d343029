"""Which weights ran, in words a reader of a report or of a partition can check: the weights file
(a GGUF file, a folder, or a hub id), its quantization, dtype and revision, and the code version.

Read from the registry entry and the converted cache's manifest only: no model is loaded, so the
report can say it without the seconds a load takes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kcal_pipeline.scoring.models.gguf import _read_manifest, gguf_source
from kcal_pipeline.scoring.models.registry import GGUF_SOURCES, ModelEntry, ModelLoadError
from kcal_pipeline.scoring.served.client import host_of

# GGUF type names as llama.cpp writes them into file names (Q4_1, Q4_K_M, IQ3_XS, F16, BF16, ...)
_GGUF_TYPE = re.compile(r"(?<![A-Za-z0-9])(I?Q(\d+)(?:_[A-Z0-9]+)*|B?F(16|32))(?![A-Za-z0-9])", re.IGNORECASE)
REPOSITORY = Path(__file__).resolve().parents[3]


def gguf_quantization(file_name: str) -> tuple[str, int | None] | None:
    """(type name, bits) named in a GGUF file name, e.g. ('Q4_1', 4); None when it names none."""
    found = _GGUF_TYPE.findall(Path(file_name).name)
    if not found:
        return None
    name, quant_bits, float_bits = found[-1]
    return name.upper(), int(quant_bits or float_bits)


def quantization(entry: ModelEntry, dtype: str) -> str:
    """E.g. '4-bit Q4_1 GGUF, de-quantised to float32', or 'none (float32 weights)'."""
    if entry.source == "server":
        return "as the server runs it (not known to kcal)"
    if entry.source not in GGUF_SOURCES:
        return f"none ({dtype} weights)"
    found = gguf_quantization(entry.file or entry.path or "")
    kind = f"{found[1]}-bit {found[0]} GGUF" if found else "GGUF (type not named in its file name)"
    if entry.engine == "llama.cpp":
        return f"{kind}, run natively by llama.cpp on its quantized weights"
    return f"{kind}, de-quantised to {dtype}"


def weights_file(entry: ModelEntry) -> str:
    """The GGUF file, the local folder, or the hub id the weights come from."""
    if entry.source in GGUF_SOURCES:
        try:
            path, origin = gguf_source(entry)
        except ModelLoadError:
            return f"{entry.package}: {entry.file}" if entry.package else str(entry.path)
        return f"{path} ({origin})" if entry.source == "gguf_package" else str(path)
    if entry.source == "local":
        return str(Path(entry.path).expanduser().resolve())
    if entry.source == "server":
        return f"{entry.id} served at {host_of(entry.endpoint)} (engine openai)"
    return f"{entry.id} (Hugging Face hub)"


def revision(entry: ModelEntry, cache_dir: Path) -> str:
    """The revision scoring records as model_revision where it can be known without loading: a
    GGUF's '<origin>:<file>:<sha256 prefix>' once converted, else what the entry pins."""
    if entry.source in GGUF_SOURCES:
        manifest = _read_manifest(Path(cache_dir) / entry.key) or {}
        name = Path(entry.file or entry.path or "").name
        origin = manifest.get("source") or entry.package or f"file:{entry.path}"
        sha = manifest.get("sha256", "")
        return f"{origin}:{name}:{sha[:12]}" if sha else f"{origin}:{name} (not converted yet)"
    if entry.source == "local":
        return f"local:{Path(entry.path).expanduser().resolve()}"
    if entry.source == "server":
        return f"openai:{entry.id}@{host_of(entry.endpoint)}"
    return f"{entry.id}@{entry.revision}"


def code_version() -> str:
    """The git commit of the kcal checkout (with '+changes' when the tree differs), or 'unknown'."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPOSITORY), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(REPOSITORY), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+changes" if commit and dirty else commit or "unknown"


def weights_provenance(entry: ModelEntry, dtype: str) -> dict[str, str]:
    """The weights and quantization lines, as statement_scores' metadata shows them."""
    return {"weights": weights_file(entry), "quantization": quantization(entry, dtype)}
