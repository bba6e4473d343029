"""GGUF models: finding the file (in an installed package or on disk) and converting it once.

A GGUF model is de-quantised once into a safetensors cache folder, so later runs skip the slow
conversion and never unpickle anything. The folder holds the converted weights, the tokenizer,
the GGUF model's own logits on a probe text (the conversion must reproduce them) and a manifest
written last, whose presence marks a complete build.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from filelock import FileLock

from kcal_pipeline.scoring.models.folders import from_dir
from kcal_pipeline.scoring.models.registry import GGUF_SOURCES, ModelEntry, ModelLoadError

log = logging.getLogger(__name__)

MANIFEST = "kcal-model.json"  # written last: its presence marks a complete GGUF conversion
PROBE_LOGITS = "gguf-probe-logits.safetensors"
PROBE_TEXT = "The capital of Côte d'Ivoire is Yamoussoukro, and Zürich is in Switzerland."
PROBE_ATOL = 1e-5


def gguf_source(entry: ModelEntry) -> tuple[Path, str]:
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
    gguf = Path(next(iter(spec.submodule_search_locations))) / entry.file
    if not gguf.is_file():
        raise ModelLoadError(f"model {entry.id!r}: package {entry.package!r} has no file {entry.file!r}")
    dists = importlib.metadata.packages_distributions().get(entry.package.split(".")[0], [])
    dist = f"{dists[0]}=={importlib.metadata.version(dists[0])}" if dists else entry.package
    return gguf, dist


def _expected_manifest(entry: ModelEntry) -> tuple[Path, dict]:
    """The GGUF file and what a cache converted from it records (its hash aside)."""
    gguf, dist = gguf_source(entry)
    stat = gguf.stat()
    expected = {"source": dist, "file": gguf.name, "size": stat.st_size}
    if entry.source == "gguf_file":  # a file can be replaced in place; a package version cannot
        expected["mtime_ns"] = stat.st_mtime_ns
    return gguf, expected


def gguf_cache(entry: ModelEntry, cache_dir: Path) -> tuple[Path, str]:
    """The safetensors folder for a GGUF entry (building it if missing or stale) and its revision."""
    gguf, expected = _expected_manifest(entry)
    dist = expected["source"]
    target = cache_dir / entry.key
    manifest = _read_manifest(target)
    if _stale(manifest, expected):
        # One converter per cache folder: processes that start together (test workers, Celery
        # workers, a demo beside the UI) wait for the first conversion instead of each doing it.
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(target.parent / f".{target.name}.lock"):
            manifest = _read_manifest(target)
            if _stale(manifest, expected):
                manifest = _build_gguf_cache(gguf, target, expected)
    return target, f"{dist}:{gguf.name}:{manifest['sha256'][:12]}"


def needs_conversion(entry: ModelEntry, cache_dir: Path) -> bool:
    """A GGUF entry whose cache is missing or stale (no hashing: cheap). An entry that cannot be
    found says False: its load reports why."""
    if entry.source not in GGUF_SOURCES:
        return False
    try:
        _, expected = _expected_manifest(entry)
    except ModelLoadError:
        return False
    return _stale(_read_manifest(Path(cache_dir) / entry.key), expected)


def convert_in_background(entries: list[ModelEntry], cache_dir: Path):
    """Start converting the stale GGUF caches of `entries` in a child process and return it (None
    when none is stale). A run's dataset stages (Python and a local SPARQL server: about one core)
    then overlap the ~15 s de-quantisation instead of the first scoring step waiting for it. The
    cache's lock makes a load that comes early wait for the child rather than convert twice; a
    failure in the child is left for that load to report, with its model's name."""
    import multiprocessing

    stale = [e for e in entries if needs_conversion(e, cache_dir)]
    if not stale:
        return None
    # spawn: the parent may hold threads (Dagster's, torch's) that a fork would copy mid-lock.
    child = multiprocessing.get_context("spawn").Process(
        target=_convert_all, args=(stale, Path(cache_dir)), name="kcal-gguf-conversion", daemon=True
    )
    child.start()
    return child


def _convert_all(entries: list[ModelEntry], cache_dir: Path) -> None:
    import signal
    import sys

    # terminate() (a run that failed early) unwinds like Ctrl-C: the half-built temp folder is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    for entry in entries:
        with contextlib.suppress(Exception):
            gguf_cache(entry, cache_dir)


def _stale(manifest: dict | None, expected: dict) -> bool:
    """No finished cache, or one converted from another GGUF file (source, name, size, mtime)."""
    return manifest is None or any(manifest.get(k) != v for k, v in expected.items())


def _read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _build_gguf_cache(gguf: Path, target: Path, expected: dict) -> dict:
    """De-quantise once into a temp dir, verify, then rename into place so no reader sees half a cache."""
    log.info("converting %s to a safetensors cache in %s (once; takes ~15 s)", gguf.name, target)
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


_PARSING = threading.Lock()  # one conversion at a time swaps gguf's names (two would restore crosswise)


@contextlib.contextmanager
def _parsed_once():
    """While converting, transformers parses the file's header (SmolLM2: 49,152 vocabulary strings,
    read through numpy slices) once each for the tokenizer, the config and the weights, and builds
    gguf's tensor-name table once per module of the model (397 times, each a table of every
    architecture's names): ~55 % of the conversion's CPU. Inside this block each file is parsed
    once (a GGUFReader only reads its memory map) and each (architecture, blocks) table is built
    once; the conversion's own check (_verify_conversion) still requires the GGUF model's logits."""
    import functools

    import gguf as gguf_lib

    readers: dict[tuple, object] = {}

    def reader(path, *args, **kwargs):
        key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = make_reader(path, *args, **kwargs)
        return readers[key]

    with _PARSING:
        make_reader, name_map = gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map
        gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map = reader, functools.cache(name_map)
        try:
            yield
        finally:
            gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map = make_reader, name_map


def _convert_gguf(gguf: Path, out: Path) -> None:
    """save_pretrained refuses GGUF-quantised models, so copy the weights into a plain model first."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _parsed_once():
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

    model, tokenizer, _ = from_dir(out, torch.float32, trust_remote_code=False, kind="clm")
    diff = (_probe_logits(model, tokenizer) - reference).abs().max().item()
    if diff > PROBE_ATOL:
        raise ModelLoadError(f"GGUF conversion in {out} is not faithful: max |Δlogit| = {diff:.3g}")


def _replace_dir(tmp: Path, target: Path) -> None:
    """Swap a finished build into place; a concurrent builder that wins the race is kept."""
    if target.exists():
        stale = target.with_name(f".{target.name}.stale-{os.getpid()}-{threading.get_ident()}")
        with contextlib.suppress(FileNotFoundError):
            os.replace(target, stale)
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
