"""A model ready for scoring (LoadedModel), and the cache folder each one load_model returned came through.

Every scorer takes a LoadedModel; models/loading.py builds them. The class lives here, below both,
so that the scorers need not import the loader: loading imports native (the llama.cpp engine), which
imports prefix, which reads the cache folder a model was loaded through.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
    token_budget: int | None = None  # the entry's; None: sized by scoring/budget.py
    tf32: bool = True  # the entry's; applies to float32 on CUDA only (scoring/precision.py)
    # "llama.cpp": scores come from `native` (scoring/native.py) on the GGUF's own weights; `model`
    # is then the float32 reference it was checked against (engine_check), and what generates text.
    engine: str = "torch"
    native: Any = None
    engine_check: Any = None


# The cache folder each model object that load_model returned came through: checks of exactly those
# weights (prefix.py's packing check) may be recorded there for later processes. Weak, by object: a
# copy, a converted model or one built elsewhere has no entry, so nothing recorded applies to it.
_cache_dirs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def record_cache_folder(model: Any, folder: Path) -> None:
    """Note that `model` (the object load_model returns) was loaded through `folder`."""
    _cache_dirs[model] = folder


def loaded_through(loaded: LoadedModel) -> Path | None:
    """The cache folder of a model exactly as load_model returned it (None for any other model)."""
    return _cache_dirs.get(loaded.model)
