"""The llama.cpp engine: a GGUF model's own quantized weights, run natively on CPU (issue 31).

The embedded model ships as a Q4_1 GGUF; the torch engine dequantizes it to float32 (exact scores,
the reference). This engine runs the 4-bit weights through llama.cpp's CPU kernels instead, with
scores off by what its 8-bit activation blocks change (measured at load against the float32
reference, printed, and part of the scoring fingerprint). Measured on this project's AVX-512 VM it
is slower than the torch engine (llama.cpp has no tiled GEMM for Q4_1 on x86; bench/README.md), so
it is for GGUF models and CPUs where llama.cpp's kernels win, never the default. It is chosen
per model in models.toml (`engine = "llama.cpp"`), never silently, and needs the optional package
`llama-cpp-python` (`make llama-cpp`: built from the registry's source package; see docs/scoring.md).

Prefix sharing is the packed path's trie (prefix.py), expressed in llama.cpp's own terms: every
distinct token sequence of a call is one llama.cpp *sequence id*, and a trie node's token carries
the ids of all sequences that pass through it. llama.cpp lets a token attend to the cache cells of
its first sequence id at earlier positions — exactly the node's ancestors — so one decode call
computes every shared prefix once, with position = depth as in the packed rows. Logits are requested
only at parent nodes (the positions some score reads), and the normaliser is clm.log_normaliser, so
tokenisation (the model's Hugging Face tokenizer), token roles and reductions are those of the torch
paths.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch

from kcal_pipeline.scoring.clm import (
    Span,
    _token_logprobs,
    log_normaliser,
)
from kcal_pipeline.scoring.prefix import _PROBE, pack_rows, score_distinct

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

log = logging.getLogger(__name__)

ENGINE = "llama.cpp"
PACKAGE = "llama-cpp-python"
MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: distinct statements in one decode call
# Trie nodes per decode call: every node attends over all the call's KV cells (masked), so longer
# calls cost more attention per node. Measured on the bench's P36 rows (2 cores, flash attention on):
# 35 / 49 / 50 statements/s at 256 / 512 / 1,024 nodes (without flash attention 37 / 38 / 27).
CALL_TOKENS = 512
FLASH_ATTENTION = 1  # llama.cpp's LLAMA_FLASH_ATTN_TYPE_ENABLED


def native_available() -> str | None:
    """None when llama.cpp's Python binding can be imported; else why not, with the remedy."""
    if importlib.util.find_spec("llama_cpp") is None:
        return (
            f"engine {ENGINE!r} needs the optional package {PACKAGE} (not installed): run "
            "`make llama-cpp` (builds it from the registry's source package, ~8 min on 2 cores), "
            "or set engine = 'torch'"
        )
    return None


@dataclass(frozen=True)
class EngineCheck:
    """How far the engine's log-probs are from the float32 reference (torch, same weights
    dequantized) on the probe statements: per token, mean and max |Δ|, over n_tokens tokens."""

    engine: str
    version: str
    weights: str
    mean_abs: float
    max_abs: float
    n_tokens: int

    def describe(self) -> str:
        return (
            f"engine {self.engine} {self.version} on the GGUF's own weights ({self.weights}), not float32: "
            f"|Δ log-prob| per token against the float32 reference: mean {self.mean_abs:.3g}, "
            f"max {self.max_abs:.3g} ({self.n_tokens} probe tokens)"
        )

    def fingerprint_values(self) -> dict:
        return {
            "engine": self.engine,
            "version": self.version,
            "weights": self.weights,
            "probe_mean_abs": round(self.mean_abs, 6),
            "probe_max_abs": round(self.max_abs, 6),
        }


class NativeModel:
    """A llama.cpp model and context for scoring: one decode call per packed row of trie nodes.

    Not thread-safe by nature (one context, one KV cache), so calls are serialised by a lock.
    """

    def __init__(self, gguf: Path, threads: int, call_tokens: int = CALL_TOKENS):
        problem = native_available()
        if problem:
            raise RuntimeError(problem)
        import llama_cpp

        self._lib = llama_cpp
        self.version = getattr(llama_cpp, "__version__", "?")
        self.gguf = Path(gguf)
        self.threads = max(1, int(threads))
        self.call_tokens = int(call_tokens)
        self._lock = threading.Lock()
        self.positions = 0  # trie nodes decoded so far (the bench's positions count)
        llama_cpp.llama_backend_init()
        self._quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)  # keep a reference
        llama_cpp.llama_log_set(self._quiet, ctypes.c_void_p(0))
        params = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(self.gguf).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {str(self.gguf)!r}")
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._ctx = None
        self._batch = None
        self._capacity = 0
        self._open(self.call_tokens)

    def _open(self, tokens: int) -> None:
        """A context (and batch) for calls of up to `tokens` nodes: the KV cache holds one call."""
        lib = self._lib
        self._close_context()
        params = lib.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = tokens
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # one cache for all sequences: shared cells are stored once
        params.flash_attn_type = FLASH_ATTENTION  # fixed, not "auto": the kernel moves the scores
        params.n_threads = params.n_threads_batch = self.threads
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {tokens} tokens")
        self._batch = lib.llama_batch_init(tokens, 0, MAX_SEQUENCES)
        self._capacity = tokens

    def _close_context(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def close(self) -> None:
        self._close_context()
        if getattr(self, "_model", None):
            self._lib.llama_model_free(self._model)
            self._model = None

    def __del__(self):  # pragma: no cover - interpreter shutdown order varies
        with contextlib.suppress(Exception):
            self.close()

    def sequence_logprobs(
        self,
        seqs: list[tuple[int, ...]],
        start_token: int,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[np.ndarray]:
        """log P(x_t | start, x_<t) of every sequence, in order: packed into rows (one decode call
        each, at most MAX_SEQUENCES sequences); progress(done, total) counts sequences."""
        out: list[np.ndarray] = [None] * len(seqs)  # type: ignore[list-item]
        done = 0
        for row in pack_rows(seqs, start_token, self.call_tokens, max_members=MAX_SEQUENCES):
            for (u, _), lp in zip(row.members, self.row_logprobs(row), strict=True):
                out[u] = lp
            done += len(row.members)
            if progress is not None:
                progress(done, len(seqs))
        return out

    def row_logprobs(self, row) -> list[np.ndarray]:
        """log P(x_t | start, x_<t) of every member of one packed row (prefix._Row), as float64."""
        n = len(row.tokens)
        members = row.members
        if len(members) > MAX_SEQUENCES:
            raise ValueError(f"a row holds {len(members)} sequences; llama.cpp takes {MAX_SEQUENCES}")
        through: list[list[int]] = [[] for _ in range(n)]
        is_parent = np.zeros(n, dtype=bool)
        for k, (_, path) in enumerate(members):
            through[0].append(k)
            for node in path:
                through[node].append(k)
            is_parent[[0, *path[:-1]]] = True
        with self._lock:
            if n > self._capacity:
                self._open(max(n, self.call_tokens))
            batch = self._batch
            batch.n_tokens = n
            for i in range(n):
                batch.token[i] = row.tokens[i]
                batch.pos[i] = row.depths[i]
                ids = through[i]
                batch.n_seq_id[i] = len(ids)
                seq = batch.seq_id[i]
                for j, k in enumerate(ids):
                    seq[j] = k
                batch.logits[i] = int(is_parent[i])
            lib = self._lib
            lib.llama_memory_clear(lib.llama_get_memory(self._ctx), True)
            status = lib.llama_decode(self._ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama.cpp decode failed (status {status}) on a row of {n} tokens")
            self.positions += n
            outputs = int(is_parent.sum())
            logits = np.ctypeslib.as_array(lib.llama_get_logits(self._ctx), shape=(outputs, self.n_vocab))
            logits = torch.from_numpy(logits.copy())
        norm = log_normaliser(logits).numpy()
        logits = logits.numpy()
        slot = np.cumsum(is_parent) - 1  # node → its row among the returned logits
        out = []
        for _, path in members:
            parents = slot[[0, *path[:-1]]]
            targets = [row.tokens[node] for node in path]
            out.append(logits[parents, targets].astype(np.float64) - norm[parents])
        return out


def score_clm_native(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Same contract, schema and row order as score_clm, scored by the model's llama.cpp engine.

    batch_size: ignored beyond validation (a call holds up to CALL_TOKENS trie nodes and
    MAX_SEQUENCES distinct statements); progress(done, total) counts distinct token sequences.
    """
    native = _native(loaded)

    def score(useqs: list[tuple[int, ...]], _batch_size: int | None) -> list[np.ndarray]:
        return native.sequence_logprobs(useqs, loaded.start_token_id, progress)

    return score_distinct(loaded, texts, subject_spans, object_spans, batch_size, context_ends, score)


def _native(loaded: LoadedModel) -> NativeModel:
    native = getattr(loaded, "native", None)
    if native is None:
        raise ValueError(f"model {loaded.key!r} has no {ENGINE} engine (its entry's engine is 'torch')")
    return native


def check_engine(loaded: LoadedModel) -> EngineCheck:
    """The engine's per-token deviation from the float32 reference on the probe statements (the
    packing check's), scored by both; logged as a warning, since these are not float32 scores."""
    native = _native(loaded)
    ids = [loaded.tokenizer(t, add_special_tokens=False)["input_ids"] for t in _PROBE]
    reference = _token_logprobs(loaded, ids, len(ids), None)
    got = native.sequence_logprobs([tuple(s) for s in ids], loaded.start_token_id)
    diff = np.concatenate([np.abs(a - b) for a, b in zip(got, reference, strict=True)])
    check = EngineCheck(
        engine=ENGINE,
        version=native.version,
        weights=f"{native.gguf.name}",
        mean_abs=float(diff.mean()),
        max_abs=float(diff.max()),
        n_tokens=int(diff.size),
    )
    log.warning("%s: %s", loaded.key, check.describe())
    return check
