"""Loading a registered model for scoring: device and dtype, hub / local / GGUF sources, model kind.

Loading always goes through safetensors: a GGUF model is read from the cache folder gguf.py
builds. A model's kind ("clm" or "mlm") is detected from its config when the entry says "auto".
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from kcal_pipeline.scoring.loaded_model import LoadedModel, record_cache_folder
from kcal_pipeline.scoring.models.folders import detect_kind, fast_tokenizer, from_dir, from_pretrained
from kcal_pipeline.scoring.models.gguf import gguf_cache, gguf_source
from kcal_pipeline.scoring.models.registry import GGUF_SOURCES, ModelEntry, ModelLoadError
from kcal_pipeline.scoring.served.checks import check_server, served_model
from kcal_pipeline.scoring.served.client import Endpoint, OpenAIClient, ServerError

log = logging.getLogger(__name__)


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
        loaded = load_served(entry) if entry.source == "server" else _load_uncached(entry, cache_dir)
        _loaded[slot] = (entry, loaded)
        if loaded.model is not None:  # a served model has no weights here
            record_cache_folder(loaded.model, cache_dir)
        return loaded


def _load_uncached(entry: ModelEntry, cache_dir: Path) -> LoadedModel:
    import torch

    device = _resolve_device(entry.device)
    dtype = _resolve_dtype(entry.dtype, device)
    torch_dtype = getattr(torch, dtype)
    if entry.source in GGUF_SOURCES:
        folder, revision = gguf_cache(entry, cache_dir)
        model, tokenizer, kind = from_dir(folder, torch_dtype, trust_remote_code=False, kind="clm")
    elif entry.source == "local":
        folder = Path(entry.path).expanduser().resolve()
        if not folder.is_dir():
            raise ModelLoadError(f"model {entry.id!r}: local path {str(folder)!r} is not a directory")
        model, tokenizer, kind = from_dir(
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
    loaded = LoadedModel(
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
        token_budget=entry.token_budget,
        tf32=entry.tf32,
    )
    return _with_engine(entry, loaded) if entry.engine != "torch" else loaded


def _with_engine(entry: ModelEntry, loaded: LoadedModel) -> LoadedModel:
    """The entry's llama.cpp engine on its GGUF, checked against the float32 model just loaded."""
    import dataclasses

    import torch

    # native imports torch (and loading must not: the CLI reads the registry without it)
    from kcal_pipeline.scoring.native import NativeModel, check_engine, native_available

    problem = native_available()
    if problem:
        raise ModelLoadError(f"model {entry.id!r}: {problem}")
    gguf, _ = gguf_source(entry)
    loaded = dataclasses.replace(
        loaded, engine=entry.engine, native=NativeModel(gguf, threads=torch.get_num_threads())
    )
    return dataclasses.replace(loaded, engine_check=check_engine(loaded))


def load_served(entry: ModelEntry) -> LoadedModel:
    """A model behind an OpenAI-compatible server: kcal's tokenizer for it, a client, and the
    server's checks passed (scoring/served/checks.py) — or a ModelLoadError saying why not.
    Uncached (load_model caches it per process): every call runs the checks again."""
    client = OpenAIClient(Endpoint(entry.endpoint, entry.id, entry.api_key_env), log=log.warning)
    try:
        served = served_model(client)
        tokenizer = _served_tokenizer(entry, served)
        start_token_id = _start_token_id(entry, tokenizer)
        check = check_server(client, tokenizer, start_token_id, served)
    except ServerError as error:
        raise ModelLoadError(f"model {entry.id!r} (engine 'openai'): {error}") from None
    return LoadedModel(
        model=None,
        tokenizer=tokenizer,
        start_token_id=start_token_id,
        device="server",
        dtype="server",
        revision=f"openai:{entry.id}@{client.endpoint.host}",
        n_params=0,
        key=entry.key,
        batch_size=entry.batch_size,
        kind="clm",
        engine="openai",
        native=client,
        engine_check=check,
    )


def _served_tokenizer(entry: ModelEntry, served: dict):
    """The entry's tokenizer, else the folder the server says it loaded (vLLM's `root`) when it
    exists on this machine; a served model without either is refused, naming --tokenizer."""
    from transformers import AutoTokenizer

    where = entry.tokenizer or served.get("root")
    if not where or (not entry.tokenizer and not Path(where).is_dir()):
        raise ModelLoadError(
            f"model {entry.id!r} (engine 'openai'): kcal needs the served model's tokenizer and the "
            f"server names none it can read here (root {served.get('root')!r}): register it with "
            "--tokenizer PATH_OR_HUB_ID"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=entry.trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"model {entry.id!r}: cannot load the tokenizer {where!r}: {e}") from e
    return fast_tokenizer(tokenizer, where)


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


def _from_hub(entry: ModelEntry, torch_dtype):
    if Path(entry.id).exists():  # from_pretrained would silently read this local path instead
        raise ModelLoadError(
            f"model id {entry.id!r} names a local path; register it with "
            f"`kcal models add ID --path {entry.id}`"
        )
    opts = {"revision": entry.revision, "trust_remote_code": entry.trust_remote_code}
    try:
        model, tokenizer, kind = from_pretrained(entry.id, torch_dtype, entry.kind, entry.id, **opts)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot load {entry.id!r}@{entry.revision} (kind {entry.kind!r}) from the Hugging Face hub "
            f"(unreachable, offline, or no safetensors weights): {str(e).rstrip('.')}. Download it elsewhere "
            f"and register the directory with `kcal models add ID --path DIR`."
        ) from e
    return model, fast_tokenizer(tokenizer, entry.id), kind


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


# --- checking a source without loading its weights -------------------------------------------------


def check_loadable(entry: ModelEntry) -> str | None:
    """Check, cheaply, that an entry's source holds a model kcal can load; returns its kind.

    A local folder must hold a readable config.json, a loadable fast tokenizer (with a usable start
    or mask token) and *.safetensors weights whose headers read (the tensors are not read); its
    kind is detected from the config when the entry says 'auto'. A GGUF source must be an existing
    file that starts with the GGUF magic (kind 'clm'). A hub id is not checked (that needs the
    network): None. Raises ModelLoadError naming the model, the path and what is missing.
    """
    if entry.source == "local":
        return _check_folder(entry, Path(entry.path).expanduser().resolve())
    if entry.source == "server":  # its checks are a few small requests: refused here, not at scoring
        return load_served(entry).kind
    if entry.source in GGUF_SOURCES:
        gguf, _ = gguf_source(entry)
        with open(gguf, "rb") as handle:
            magic = handle.read(4)
        if magic != b"GGUF":
            raise ModelLoadError(
                f"model {entry.id!r}: {str(gguf)!r} is not a GGUF file (it does not start with the "
                f"bytes 'GGUF', got {magic!r})"
            )
        if entry.engine != "torch":
            from kcal_pipeline.scoring.native import native_available  # imports torch

            problem = native_available()
            if problem:
                raise ModelLoadError(f"model {entry.id!r}: {problem}")
        return "clm"
    if Path(entry.id).exists():
        raise ModelLoadError(
            f"model id {entry.id!r} names a local path; register it with "
            f"`kcal models add ID --path {entry.id}`"
        )
    return None


_FOLDER_NEEDS = "config.json, tokenizer files and *.safetensors weights, as save_pretrained writes them"


def _check_folder(entry: ModelEntry, folder: Path) -> str:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    where = f"model {entry.id!r}: {str(folder)!r}"
    if not folder.exists():
        raise ModelLoadError(f"{where} does not exist")
    if not folder.is_dir():
        hint = " (a .gguf file is registered with --gguf FILE)" if folder.suffix == ".gguf" else ""
        raise ModelLoadError(f"{where} is not a directory{hint}; a model folder holds {_FOLDER_NEEDS}")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{where} has no config.json; a model folder holds {_FOLDER_NEEDS}")
    opts = {"trust_remote_code": entry.trust_remote_code}
    try:
        config = AutoConfig.from_pretrained(folder, **opts)
    except Exception as e:  # OSError, ValueError, KeyError: transformers raises many kinds here
        raise ModelLoadError(f"{where}: config.json cannot be read: {_first_line(e)}") from e
    kind = detect_kind(config, entry.id) if entry.kind == "auto" else entry.kind
    auto = AutoModelForMaskedLM if kind == "mlm" else AutoModelForCausalLM
    if type(config) not in auto._model_mapping and not getattr(config, "auto_map", None):
        raise ModelLoadError(
            f"{where}: model type {getattr(config, 'model_type', None)!r} has no "
            f"{'masked' if kind == 'mlm' else 'causal'} LM class in transformers (kind {kind!r})"
        )
    _check_weights(where, folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **opts)
    except Exception as e:
        raise ModelLoadError(f"{where}: no loadable tokenizer: {_first_line(e)}") from e
    fast_tokenizer(tokenizer, where)
    if len(tokenizer) <= len(set(tokenizer.all_special_tokens)):
        # transformers builds an empty tokenizer for some model types when the files are missing
        raise ModelLoadError(
            f"{where}: the tokenizer has no vocabulary beyond its special tokens "
            f"({len(tokenizer)} tokens): are the tokenizer files missing? "
            f"A model folder holds {_FOLDER_NEEDS}"
        )
    if kind == "clm":
        _start_token_id(entry, tokenizer)
    else:
        _mlm_start_token_id(entry, tokenizer)
    return kind


def _check_weights(where: str, folder: Path) -> None:
    """*.safetensors present (every shard an index names, if there is an index) with readable headers."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelLoadError(f"{where}: {index.name} cannot be read: {_first_line(e)}") from e
        files = [folder / name for name in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelLoadError(f"{where}: weight shard(s) named in {index.name} are missing: {missing}")
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        other = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        hint = (
            f"; it has {other}, which kcal does not load (it never unpickles weights): save the model "
            f"with save_pretrained(..., safe_serialization=True)"
            if other
            else ""
        )
        raise ModelLoadError(f"{where} has no *.safetensors weights{hint}")
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as weights:
                weights.keys()
        except Exception as e:  # SafetensorError for a truncated or corrupted header
            raise ModelLoadError(
                f"{where}: weights file {file.name!r} cannot be read: {_first_line(e)}"
            ) from e


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
