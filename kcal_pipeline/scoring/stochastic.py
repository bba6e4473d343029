"""Monte-Carlo dropout scoring (METHODS.md §2, DropoutMean / DropoutVar of Selective-LAMA).

`dropout_scores` runs M seeded stochastic forward passes of a scorer (default `score_clm`) with
dropout switched on and returns, per statement, the M values of `ll_sum` and `ll_answer_sum`, and
which dropout probability the passes used and where it came from (`dropout_rate`,
`dropout_source`). An estimator turns the passes into DropoutMean / DropoutVar by taking, in each
pass, the softmax over the options of one template (exactly as Base does on the eval-mode scores)
and then the mean / the negated variance of p(ŷ) over the passes.

What "dropout on" means here
  A *dropout site* is either an `nn.Dropout`-family module (its probability is `p`) or a float
  attribute of a module whose name contains "dropout" (`attention_dropout` of Llama/Mistral/Qwen
  attention, `dropout_prob` of BERT's SDPA attention, `activation_dropout`, ...). transformers
  applies those attributes only when the owning module is in training mode: Llama's attention
  passes `dropout=0.0 if not self.training else self.attention_dropout` to the attention function,
  and both the eager (`nn.functional.dropout` on the attention weights) and the SDPA path
  (`dropout_p`) use it. The *owner* of an `nn.Dropout` module (its parent) is put in training mode
  too, because attention modules read their dropout module's probability under their own flag:
  BERT's self-attention passes `dropout=0.0 if not self.training else self.dropout.p`, so with
  only the `nn.Dropout` in training mode BERT's attention-probability dropout would never apply.
  Nothing else is - not the whole model - so no other train-time behaviour (MoE router jitter,
  gradient checkpointing, ...) leaks into the scores. Dropout applies under
  `torch.inference_mode()` too: it depends on the training flag only. Dropout probabilities read
  from a model's config at call time are not seen (none of the supported families does that).

Which probability (METHODS.md §2: "the model's own dropout")
  A model with dropout of its own (any site > 0, e.g. BERT: hidden_dropout_prob and
  attention_probs_dropout_prob 0.1) is run with its own probabilities, site by site (a site at 0
  stays 0), whatever `rate` says: the method is defined by the dropout the model was trained with.
  `rate` applies only to a model without dropout (every site 0: SmolLM2/Llama have
  `attention_dropout = 0.0` and no `nn.Dropout` at all); it then sets every site. Such a model
  without a rate is an error, not a default rate: M passes at a probability nobody chose would be
  a different method under the same name. Recorded per row: `dropout_rate` (the user's rate, or
  the model's own - its largest where its sites differ) and `dropout_source` ("model" / "user").

Determinism
  Pass p seeds torch's generator(s) with `seed + p` inside `torch.random.fork_rng`, so the same
  inputs, seed, rate and batch size give identical values, and the caller's global RNG state is
  unchanged afterwards. A dropout mask covers a whole padded batch, so a statement's noise depends
  on which statements share its batch (batch_size or the token budget, and the other inputs), as
  with any batched MC dropout; its distribution does not. On a GPU the automatic token budget may
  still be growing during the first passes: pin `token_budget` for bit-identical reruns there.
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
    from kcal_pipeline.scoring.loaded_model import LoadedModel

# Scorer columns kept per pass -> output column (List(Float64), one value per pass).
DROPOUT_COLUMNS = {"ll_sum": "ll_sum_dropout", "ll_answer_sum": "ll_answer_sum_dropout"}
# Provenance of the passes: the probability used and where it came from ("model" / "user").
RECORD_SCHEMA = {"dropout_rate": pl.Float64, "dropout_source": pl.String}
SCHEMA = {**{out: pl.List(pl.Float64) for out in DROPOUT_COLUMNS.values()}, **RECORD_SCHEMA}
SOURCE_MODEL, SOURCE_USER = "model", "user"


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
            f"rate must be a dropout probability with 0 < rate < 1 (or None: the model's own "
            f"only), got rate={rate!r}"
        )


@dataclass(frozen=True)
class DropoutPlan:
    """The dropout the passes use: `rate` and `source` are what statement_scores records."""

    sites: tuple[DropoutSite, ...]
    source: str  # SOURCE_MODEL: the model's own probabilities; SOURCE_USER: `rate` at every site
    rate: float  # the user's rate, or the model's own largest probability
    probabilities: tuple[float, ...]  # the distinct non-zero probabilities in use, ascending

    def describe(self) -> str:
        """One line for logs and metadata, e.g. 'model's own: 0.1 at 7 of 7 sites'."""
        active = sum(getattr(s.module, s.attribute) > 0 for s in self.sites)
        if self.source == SOURCE_USER:
            return f"user rate {self.rate} at all {len(self.sites)} sites (the model has no dropout)"
        shown = ", ".join(str(p) for p in self.probabilities)
        return f"model's own: {shown} at {active} of {len(self.sites)} sites"


def dropout_plan(model: nn.Module, rate: float | None = None) -> DropoutPlan:
    """Which dropout the passes use (see the module's "Which probability"): the model's own if it
    has any, else `rate`; a model without dropout and without a rate is a ValueError."""
    check_rate(rate)
    sites = tuple(dropout_sites(model))
    name = type(model).__name__
    if not sites:
        raise ValueError(
            f"{name} has no dropout modules or dropout-probability attributes; "
            "Monte-Carlo dropout cannot be applied to it"
        )
    own = sorted({float(getattr(s.module, s.attribute)) for s in sites} - {0.0})
    if own:
        return DropoutPlan(sites, SOURCE_MODEL, own[-1], tuple(own))
    if rate is None:
        first = f"{sites[0].name or 'model'}.{sites[0].attribute}"
        raise ValueError(
            f"{name} has no dropout of its own: all {len(sites)} dropout probabilities are 0 (e.g. "
            f"{first}), so every pass would equal the eval-mode score; give it a dropout rate "
            "(dropout_rate=0.1, --dropout-rate 0.1), which applies to models without dropout only"
        )
    return DropoutPlan(sites, SOURCE_USER, float(rate), (float(rate),))


def _owners(model: nn.Module, sites: Sequence[DropoutSite]) -> list[nn.Module]:
    """The parent of every nn.Dropout site (attention modules apply `self.dropout.p` only while
    they themselves are training)."""
    modules = dict(model.named_modules())
    return [modules[s.name.rpartition(".")[0]] for s in sites if s.attribute == "p" and s.name]


@contextmanager
def dropout_enabled(model: nn.Module, rate: float | None = None) -> Iterator[list[DropoutSite]]:
    """Dropout on inside the block only: the model's own probabilities, or - for a model without
    dropout - `rate` at every site (dropout_plan).

    Puts every dropout site and every dropout module's owner in training mode. On exit - normal or
    by an exception - every site gets back its original probability and every module its original
    training flag (so a model in eval mode is in eval mode again). Yields the sites.
    """
    plan = dropout_plan(model, rate)
    sites = list(plan.sites)
    training = {id(m): (m, m.training) for m in model.modules()}
    originals = [(s, getattr(s.module, s.attribute)) for s in sites]
    try:
        for module in [s.module for s in sites] + _owners(model, sites):
            module.training = True  # this module only; its children keep their flags
        if plan.source == SOURCE_USER:
            for site in sites:
                setattr(site.module, site.attribute, plan.rate)
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
    context_ends: Sequence[int] | None = None,
) -> pl.DataFrame:
    """M = `passes` stochastic scorings with dropout on; one row per text, in input order.

    Columns `ll_sum_dropout` and `ll_answer_sum_dropout`: List(Float64) of length `passes`, value p
    from the pass seeded with `seed + p`; `dropout_rate` and `dropout_source` (dropout_plan: the
    model's own dropout, or `rate` for a model without). `progress(done, total)` counts statements
    over all passes. The model is left as it was (eval mode, original probabilities), also on error.
    context_ends go to the scorer (only when given, so any scorer without contexts plugs in): the
    passes' sums leave the context out as the eval-mode scores do.
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an integer >= 1, got passes={passes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got seed={seed!r}")
    plan = dropout_plan(loaded.model, rate)
    texts = list(texts)
    n = len(texts)
    context = {} if context_ends is None else {"context_ends": context_ends}
    values: dict[str, list[list[float]]] = {col: [[] for _ in range(n)] for col in DROPOUT_COLUMNS}
    with dropout_enabled(loaded.model, rate):
        for p in range(passes):

            def pass_progress(done: int, total: int, p: int = p) -> None:
                if progress is not None:
                    progress(p * total + done, passes * total)

            with seeded(seed + p, loaded.device):
                frame = scorer(
                    loaded,
                    texts,
                    subject_spans,
                    object_spans,
                    batch_size=batch_size,
                    progress=pass_progress,
                    **context,
                )
            for col in DROPOUT_COLUMNS:
                for row, value in zip(values[col], frame[col].to_list(), strict=True):
                    row.append(value)
    record = {"dropout_rate": [plan.rate] * n, "dropout_source": [plan.source] * n}
    return pl.DataFrame(
        {**{out: values[col] for col, out in DROPOUT_COLUMNS.items()}, **record}, schema=SCHEMA
    )
