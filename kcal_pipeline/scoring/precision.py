"""Matmul precision around scoring forwards: TF32 for float32 models on GPUs that have it.

Ampere and later GPUs run float32 matrix multiplies ~8× faster in TF32 (10-bit mantissa inputs,
float32 accumulation). That moves log-probs by about 1e-3, so it is a choice the model entry makes
(`tf32`, on by default), recorded in the scoring fingerprint, and scoped to kcal's own forward
passes: torch's flags are process-global, so they are set on entry and restored on exit rather than
left switched for other code in the process. The float32 reference of the packing check runs
with TF32 off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel


def tf32_applies(loaded: LoadedModel) -> bool:
    """TF32 changes scores only for float32 weights on a CUDA device whose entry allows it."""
    return bool(getattr(loaded, "tf32", False)) and loaded.dtype == "float32" and _is_cuda(loaded.device)


def _is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def matmul_precision(loaded: LoadedModel) -> contextlib.AbstractContextManager:
    """The precision this model's entry asks for, for the duration of a forward pass."""
    return _tf32(tf32_applies(loaded))
