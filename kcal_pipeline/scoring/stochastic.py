"""Monte-Carlo dropout scoring (METHODS.md §2, DropoutMean / DropoutVar of Selective-LAMA).

`dropout_scores` runs M seeded stochastic forward passes of a scorer (default `score_clm`) with
dropout switched on and returns, per statement, the M values of `ll_sum` and `ll_answer_sum`. An
estimator turns them into DropoutMean / DropoutVar by taking, in each pass, the softmax over the
options of one template (exactly as Base does on the eval-mode scores) and then the mean / the
negated variance of p(ŷ) over the passes.

What "dropout on" means here
  A *dropout site* is either an `nn.Dropout`-family module (its probability is `p`) or a float
  attribute of a module whose name contains "dropout" (`attention_dropout` of Llama/Mistral/Qwen
  attention, `dropout_prob` of BERT's SDPA attention, `activation_dropout`, ...). transformers
  applies those attributes only when the owning module is in training mode: Llama's attention
  passes `dropout=0.0 if not self.training else self.attention_dropout` to the attention function,
  and both the eager (`nn.functional.dropout` on the attention weights) and the SDPA path
  (`dropout_p`) use it. Only the sites are put in training mode - not the whole model - so no other
  train-time behaviour (MoE router jitter, gradient checkpointing, ...) leaks into the scores.
  Dropout applies under `torch.inference_mode()` too: it depends on the training flag only.
  Dropout probabilities read from a model's config at call time are not seen (none of the
  supported families does that).

`rate`
  None keeps the model's own probabilities. Many decoder LMs are trained without dropout
  (SmolLM2/Llama: `attention_dropout = 0.0` and no `nn.Dropout` at all), so every pass would equal
  the eval-mode score; that is an error asking for a rate rather than M identical numbers. A rate
  overrides the probability of every site.

Determinism
  Pass p seeds torch's generator(s) with `seed + p` inside `torch.random.fork_rng`, so the same
  inputs, seed, rate and batch size give identical values, and the caller's global RNG state is
  unchanged afterwards. A dropout mask covers a whole padded batch, so a statement's noise depends
  on which statements share its batch (batch_size and the other inputs), as with any batched MC
  dropout; its distribution does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl
import torch
from torch import nn

from kcal_pipeline.scoring.clm import Span, score_clm

if TYPE_CHECKING:
    from kcal_pipeline.scoring.models.loading import LoadedModel

# Scorer columns kept per pass -> output column (List(Float64), one value per pass).
DROPOUT_COLUMNS = {"ll_sum": "ll_sum_dropout", "ll_answer_sum": "ll_answer_sum_dropout"}
SCHEMA = {out: pl.List(pl.Float64) for out in DROPOUT_COLUMNS.values()}


@dataclass(frozen=True)
class DropoutSite:
    """One place where dropout happens: `module.<attribute>` is its probability."""

    name: str  # the module's qualified name in the model ("" = the model itself)
    module: nn.Module
    attribute: str  # "p" for nn.Dropout modules


def dropout_sites(model: nn.Module) -> list[DropoutSite]:
    """Every dropout module and every float dropout-probability attribute of the model's modules."""
    sites = []
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            sites.append(DropoutSite(name, module, "p"))
            continue
        for attr, value in vars(module).items():
            if (
                not attr.startswith("_")
                and "dropout" in attr.lower()
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and 0 <= value <= 1
            ):
                sites.append(DropoutSite(name, module, attr))
    return sites


def check_rate(rate: float | None) -> None:
    if rate is None:
        return
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < 1:
        raise ValueError(
            f"rate must be a dropout probability with 0 < rate < 1 (or None for the model's "
            f"own), got rate={rate!r}"
        )


@contextmanager
def dropout_enabled(model: nn.Module, rate: float | None = None) -> Iterator[list[DropoutSite]]:
    """Dropout on (at `rate`, or the model's own probabilities) inside the block only.

    Puts every dropout site in training mode and, with a rate, sets its probability. On exit -
    normal or by an exception - every site gets back its original probability and every module
    its original training flag (so a model in eval mode is in eval mode again). Yields the sites.
    """
    check_rate(rate)
    sites = dropout_sites(model)
    if not sites:
        raise ValueError(
            f"{type(model).__name__} has no dropout modules or dropout-probability "
            "attributes; Monte-Carlo dropout cannot be applied to it"
        )
    if rate is None and not any(getattr(s.module, s.attribute) > 0 for s in sites):
        raise ValueError(
            f"{type(model).__name__} has no active dropout: all {len(sites)} dropout probabilities are 0 "
            f"(e.g. {sites[0].name or 'model'}.{sites[0].attribute}), so every pass would equal the "
            "eval-mode score; set a dropout rate (rate=0.1, say)"
        )
    training = {id(m): (m, m.training) for m in model.modules()}
    originals = [(s, getattr(s.module, s.attribute)) for s in sites]
    try:
        for site in sites:
            site.module.training = True  # this module only; its children keep their flags
            if rate is not None:
                setattr(site.module, site.attribute, float(rate))
        yield sites
    finally:
        for site, value in originals:
            setattr(site.module, site.attribute, value)
        for module, flag in training.values():
            module.training = flag


@contextmanager
def seeded(seed: int, device: Any = "cpu") -> Iterator[None]:
    """torch.manual_seed(seed) for the block; the global RNG state (CPU, and the model's
    accelerator if any) is restored afterwards."""
    device = torch.device(device)
    if device.type == "cpu":
        fork = torch.random.fork_rng(devices=[])
    else:
        index = device.index if device.index is not None else 0
        fork = torch.random.fork_rng(devices=[index], device_type=device.type)
    with fork:
        torch.manual_seed(seed)
        yield


def dropout_scores(
    loaded: LoadedModel,
    texts: Sequence[str],
    subject_spans: Sequence[Span],
    object_spans: Sequence[Span],
    passes: int,
    seed: int,
    rate: float | None = None,
    scorer: Callable[..., pl.DataFrame] = score_clm,
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """M = `passes` stochastic scorings with dropout on; one row per text, in input order.

    Columns `ll_sum_dropout` and `ll_answer_sum_dropout`: List(Float64) of length `passes`, value p
    from the pass seeded with `seed + p`. `progress(done, total)` counts statements over all passes.
    The model is left as it was (eval mode, original dropout probabilities), also on error.
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an integer >= 1, got passes={passes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got seed={seed!r}")
    check_rate(rate)
    texts = list(texts)
    n = len(texts)
    values: dict[str, list[list[float]]] = {col: [[] for _ in range(n)] for col in DROPOUT_COLUMNS}
    with dropout_enabled(loaded.model, rate):
        for p in range(passes):

            def pass_progress(done: int, total: int, p: int = p) -> None:
                if progress is not None:
                    progress(p * total + done, passes * total)

            with seeded(seed + p, loaded.device):
                frame = scorer(
                    loaded, texts, subject_spans, object_spans, batch_size=batch_size, progress=pass_progress
                )
            for col in DROPOUT_COLUMNS:
                for row, value in zip(values[col], frame[col].to_list(), strict=True):
                    row.append(value)
    return pl.DataFrame({out: values[col] for col, out in DROPOUT_COLUMNS.items()}, schema=SCHEMA)
