"""Token budgets: how many token positions (rows × padded width) one causal-LM forward call holds.

A forward call's time and memory follow the positions it computes, not the number of statements in
it, so both CLM scorers fill calls up to a budget of positions: the plain path with statements
(longest first, each padded to the longest), the packed path with prefix-tree rows. Fixed batches
of 32 statements left a GPU idle (on an H100, 256 were 2–3× faster); a budget sized for the
hardware keeps its matrix multiplies large.

How a model's budget is chosen (`budget_for`), in this order:

* the entry's `token_budget`, if set: fixed;
* on a GPU: start at `GPU_START_POSITIONS`, double while a doubling raises throughput by at least
  `GROWTH_GAIN`, never beyond a ceiling sized from the free device memory (`ceiling_from_memory`)
  and lowered by any out-of-memory back-off. The choice is made once per loaded model and process
  and kept for every later call;
* on CPU: the entry's `batch_size` × `POSITIONS_PER_STATEMENT` (1,024 for the default 32), fixed:
  CPU throughput is flat beyond it, and a fixed budget keeps CPU scores bit-reproducible.

Scores do not depend on the budget beyond float rounding (GEMM shapes): tests check it on fp32.
Where bit-identical reruns matter on a GPU, pin `token_budget`. Every partition records the budget
it ran with and how it was chosen.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

POSITIONS_PER_STATEMENT = 32  # a CPU budget is batch_size × this (32 → 1,024 positions)
GPU_START_POSITIONS = 4096
GROWTH_GAIN = 0.05  # a doubled budget is kept only if throughput rose by at least 5 %
MEASURED_CALLS = 2  # full calls timed at a budget before deciding whether to double it
MEMORY_SHARE = 0.5  # of the free memory, what an automatic ceiling may plan to use
UNBOUNDED = 1 << 24  # the ceiling where free memory cannot be read


def bytes_per_position(config, dtype_bytes: int, row_width: int) -> int:
    """A generous estimate of the peak memory one token position costs in a scoring forward pass.

    The logits dominate for large vocabularies: the forward's own (vocabulary × dtype) and the
    copy the scorers gather for the log-normaliser (another one). Per layer the MLP's gate, up and
    activation (3 × intermediate), about 8 hidden-size tensors (residual, norms, q/k/v/o), attention
    weights where the kernel materialises them (heads × row width, twice for the softmax), and the
    additive and boolean masks (row width each). Layers run one after another, so one layer counts.
    """
    vocab, hidden = int(config.vocab_size), int(config.hidden_size)
    inter = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    return dtype_bytes * (2 * vocab + 3 * inter + 8 * hidden + 2 * heads * row_width) + row_width * (
        dtype_bytes + 1
    )


def ceiling_from_memory(free_bytes: int, config, dtype_bytes: int, row_width: int) -> int:
    """The most positions per call that MEMORY_SHARE of free_bytes holds (at least one row)."""
    per = bytes_per_position(config, dtype_bytes, row_width)
    return max(row_width, int(free_bytes * MEMORY_SHARE) // per)


def free_memory(device: str) -> int | None:
    """Free bytes where the forward runs: the CUDA device's, or the machine's available RAM."""
    import torch

    if str(device).startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass
class TokenBudget:
    """Positions per forward call, and the record of how that number was reached.

    grow: still searching (doubling while throughput rises). levels: (budget, work per second)
    measured at each budget tried. ceiling: never exceeded; an out-of-memory back-off lowers it.
    """

    tokens: int
    ceiling: int
    grow: bool
    origin: str
    levels: list[tuple[int, float]] = field(default_factory=list)
    out_of_memory: int = 0
    _warm: bool = False
    _work: float = 0.0
    _seconds: float = 0.0
    _calls: int = 0

    @classmethod
    def fixed(cls, tokens: int, origin: str) -> TokenBudget:
        return cls(tokens=tokens, ceiling=tokens, grow=False, origin=origin)

    def after_call(self, positions: int, work: int, seconds: float) -> None:
        """Account one successful call of `positions` positions that did `work` useful tokens."""
        if not self.grow:
            return
        if not self._warm:  # the first call pays for kernel selection and allocator growth
            self._warm = True
            return
        if 2 * positions < self.tokens:  # a short tail call says nothing about this budget
            return
        self._work, self._seconds, self._calls = self._work + work, self._seconds + seconds, self._calls + 1
        if self._calls < MEASURED_CALLS:
            return
        rate = self._work / max(self._seconds, 1e-9)
        best_before = max((r for _, r in self.levels), default=None)
        self.levels.append((self.tokens, rate))
        self._work, self._seconds, self._calls = 0.0, 0.0, 0
        if best_before is None or rate >= best_before * (1 + GROWTH_GAIN):
            if 2 * self.tokens <= self.ceiling:
                self.tokens *= 2
                return
        else:  # not worth it: back to the best budget before this one
            self.tokens = max(self.levels[:-1], key=lambda level: level[1])[0]
        self.grow = False

    def after_oom(self, positions: int, floor: int) -> None:
        """A call of `positions` positions ran out of memory: halve, and never go back above that."""
        self.out_of_memory += 1
        self.ceiling = max(floor, positions // 2)
        self.tokens = min(self.tokens, self.ceiling)
        self.grow = False

    def describe(self) -> str:
        parts = [f"{self.tokens} positions per call ({self.origin}"]
        if self.levels:
            parts.append("; measured " + ", ".join(f"{b} → {r:,.0f} tokens/s" for b, r in self.levels))
        if self.grow:
            parts.append("; still growing")
        if self.out_of_memory:
            parts.append(f"; {self.out_of_memory} out-of-memory back-off(s), ceiling {self.ceiling}")
        return "".join(parts) + ")"


# model → {path: budget}, weakly keyed by the model object (an id() could be reused by a new model)
_budgets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def budget_for(loaded: LoadedModel, path: str, row_width: int) -> TokenBudget:
    """This model's budget for one scorer path ('packed' or 'plain'), chosen once per process.

    row_width is the widest row the path builds (its attention cost per position).
    """
    with _lock:
        paths = _budgets.setdefault(loaded.model, {})
        if path not in paths:
            paths[path] = initial_budget(loaded, row_width, free_memory(loaded.device))
        return paths[path]


def recorded_budget(loaded: LoadedModel, path: str) -> TokenBudget | None:
    """The budget a path has used in this process, if it has run (for the partition's metadata)."""
    with _lock:
        return _budgets.get(loaded.model, {}).get(path)


def initial_budget(loaded: LoadedModel, row_width: int, free: int | None) -> TokenBudget:
    """The starting budget (the rules in the module docstring); free: bytes free where it runs."""
    if loaded.token_budget is not None:
        return TokenBudget.fixed(loaded.token_budget, "the model entry's token_budget")
    import torch

    dtype_bytes = torch.empty(0, dtype=getattr(torch, loaded.dtype)).element_size()
    config = getattr(loaded.model, "config", None)
    if free is None or config is None or not hasattr(config, "vocab_size"):
        ceiling, memory = UNBOUNDED, "free memory unknown"
    else:
        ceiling = ceiling_from_memory(free, config, dtype_bytes, row_width)
        memory = f"ceiling {ceiling} from {free / 2**30:.1f} GiB free"
    if str(loaded.device).startswith("cuda"):
        start = min(GPU_START_POSITIONS, ceiling)
        return TokenBudget(
            tokens=start,
            ceiling=ceiling,
            grow=True,
            origin=f"automatic: from {start}, doubled while throughput rose ≥ {GROWTH_GAIN:.0%}; {memory}",
        )
    tokens = min(loaded.batch_size * POSITIONS_PER_STATEMENT, ceiling)
    return TokenBudget.fixed(
        tokens, f"CPU: batch size {loaded.batch_size} × {POSITIONS_PER_STATEMENT}; {memory}"
    )
