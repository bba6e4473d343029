"""Token budgets: sizing from a memory figure, growth while throughput improves, the out-of-memory
back-off (faults injected: no GPU here), and scores that do not depend on the budget."""

import dataclasses
import weakref
from types import SimpleNamespace

import pytest
import torch

from kcal_pipeline.scoring import budget as budget_mod
from kcal_pipeline.scoring import clm as clm_mod
from kcal_pipeline.scoring import prefix as prefix_mod
from kcal_pipeline.scoring.batching import map_budgeted
from kcal_pipeline.scoring.budget import (
    TokenBudget,
    budget_for,
    bytes_per_position,
    ceiling_from_memory,
    initial_budget,
)
from kcal_pipeline.scoring.clm import PLAIN, score_clm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.prefix import PACKED, score_clm_shared_prefix
from tests.faults.injection import oom_above
from tests.scoring.test_clm_scoring import model_cache
from tests.scoring.test_prefix_scoring import CASES, args, assert_same

CONFIG = SimpleNamespace(vocab_size=1000, hidden_size=10, intermediate_size=40, num_attention_heads=2)
LLAMA_8B = SimpleNamespace(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32
)


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


@pytest.fixture(autouse=True)
def fresh_budgets(monkeypatch):
    monkeypatch.setattr(budget_mod, "_budgets", weakref.WeakKeyDictionary())


def test_memory_per_position_and_the_ceiling_by_hand():
    # 2 bytes × (2 × 1000 logits + 3 × 40 MLP + 8 × 10 hidden + 2 × 2 heads × 256) + 256 × (2 + 1) masks
    assert bytes_per_position(CONFIG, 2, 256) == 2 * (2000 + 120 + 80 + 1024) + 768 == 7216
    assert ceiling_from_memory(2**30, CONFIG, 2, 256) == (2**29) // 7216 == 74400  # half of 1 GiB
    assert ceiling_from_memory(2**20, CONFIG, 2, 256) == 256  # never less than one row
    # the 8B Llama shape in bfloat16: 0.67 MiB per position; 60 GiB free → 46,141 positions
    assert bytes_per_position(LLAMA_8B, 2, 256) == 698112
    assert ceiling_from_memory(60 * 2**30, LLAMA_8B, 2, 256) == 46141


def test_the_starting_budget(loaded):
    cpu = initial_budget(loaded, 256, free=8 * 2**30)
    assert (cpu.tokens, cpu.grow) == (1024, False)  # batch size 32 × 32, fixed
    assert cpu.origin.startswith("CPU: batch size 32 × 32")
    pinned = initial_budget(dataclasses.replace(loaded, token_budget=500), 256, free=8 * 2**30)
    assert (pinned.tokens, pinned.ceiling, pinned.grow) == (500, 500, False)
    gpu = dataclasses.replace(loaded, device="cuda")
    per = bytes_per_position(loaded.model.config, 4, 256)  # SmolLM2: vocabulary 49152, float32
    auto = initial_budget(gpu, 256, free=8 * 2**30)
    assert (auto.tokens, auto.ceiling, auto.grow) == (4096, 2**32 // per, True)
    assert "8.0 GiB free" in auto.origin
    small = initial_budget(gpu, 256, free=2**28)  # 256 MiB free: the ceiling caps the start
    assert small.tokens == small.ceiling == 2**27 // per < 4096
    unknown = initial_budget(gpu, 256, free=None)
    assert unknown.tokens == 4096 and "free memory unknown" in unknown.origin


def feed(budget: TokenBudget, positions: int, work: int, seconds: float, calls: int = 2) -> None:
    for _ in range(calls):
        budget.after_call(positions, work, seconds)


def test_growth_doubles_while_throughput_rises_five_percent_then_keeps_the_best():
    b = TokenBudget(tokens=1000, ceiling=10_000, grow=True, origin="test")
    b.after_call(1000, 1000, 9.0)  # warm-up call: not measured
    feed(b, 1000, 1000, 1.0)  # 1,000 tokens/s
    assert (b.tokens, b.grow) == (2000, True)
    b.after_call(600, 600, 99.0)  # a short tail call (< half the budget): ignored
    feed(b, 2000, 2000, 1.5)  # 1,333 tokens/s: +33 %
    assert b.tokens == 4000
    feed(b, 4000, 4000, 3.9)  # 1,026 tokens/s: worse
    assert (b.tokens, b.grow) == (2000, False)
    assert b.levels == [(1000, 1000.0), (2000, 2000 / 1.5), (4000, 4000 / 3.9)]
    assert b.describe() == (
        "2000 positions per call (test; measured 1000 → 1,000 tokens/s, 2000 → 1,333 tokens/s, "
        "4000 → 1,026 tokens/s)"
    )
    feed(b, 2000, 2000, 0.1)  # settled: nothing changes any more
    assert b.tokens == 2000 and len(b.levels) == 3


def test_growth_stops_below_five_percent_and_at_the_ceiling():
    b = TokenBudget(tokens=1000, ceiling=10_000, grow=True, origin="t", _warm=True)
    feed(b, 1000, 1000, 1.0)
    feed(b, 2000, 2080, 2.0)  # 1,040 tokens/s: +4 % is not enough
    assert (b.tokens, b.grow) == (1000, False)
    c = TokenBudget(tokens=2000, ceiling=6000, grow=True, origin="t", _warm=True)
    feed(c, 2000, 2000, 1.0)
    feed(c, 4000, 4000, 1.0)  # much faster, but 8000 would pass the ceiling
    assert (c.tokens, c.grow) == (4000, False)


def test_out_of_memory_halves_and_caps_the_budget():
    b = TokenBudget(tokens=4000, ceiling=10_000, grow=True, origin="t")
    b.after_oom(4000, floor=100)
    assert (b.tokens, b.ceiling, b.grow, b.out_of_memory) == (2000, 2000, False, 1)
    b.after_oom(150, floor=100)
    assert (b.tokens, b.ceiling) == (100, 100)  # never below one item's width
    assert b.describe().endswith("; 2 out-of-memory back-off(s), ceiling 100)")


def test_map_budgeted_fills_calls_by_count_times_the_first_width():
    widths, calls = [50, 40, 40, 30, 10, 10, 10], []

    def run(batch):
        calls.append(batch)
        return [w * 2 for w in batch]

    b = TokenBudget.fixed(100, "t")
    assert map_budgeted(widths, lambda w: w, lambda w: w, b, run) == [w * 2 for w in widths]
    assert calls == [[50, 40], [40, 30], [10, 10, 10]]


def test_map_budgeted_backs_off_on_out_of_memory_and_keeps_the_lower_budget():
    calls = []

    def run(batch):
        calls.append(list(batch))
        if len(batch) * batch[0] > 60:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return batch

    b = TokenBudget.fixed(100, "t")
    widths = [50, 40, 40, 30, 10, 10, 10]
    assert map_budgeted(widths, lambda w: w, lambda w: w, b, run) == widths
    assert calls == [[50, 40], [50], [40], [40], [30], [10, 10, 10]]
    assert (b.tokens, b.ceiling, b.out_of_memory) == (50, 50, 1)
    with pytest.raises(torch.OutOfMemoryError):  # one item that does not fit: nothing smaller exists
        map_budgeted([70], lambda w: w, lambda w: w, TokenBudget.fixed(100, "t"), run)


@pytest.mark.parametrize("path", [PACKED, PLAIN])
def test_scores_do_not_depend_on_the_budget_and_growth_runs_on_a_real_model(loaded, path):
    """A growing budget planted for the model (as on a GPU) gives the fixed budget's scores (fp32,
    ≤ 1e-4), and its trail is recorded. 40 of the 71 cases: batches enough for the budget to be
    measured and grow (all 71 took the plain path ~18 s, at batch size 2 for the fixed scores)."""
    filled = CASES[:40]
    score = score_clm_shared_prefix if path == PACKED else score_clm
    kw = {"row_tokens": 40} if path == PACKED else {}
    fixed = score(loaded, *args(filled), batch_size=2, **kw)
    growing = TokenBudget(tokens=48, ceiling=4096, grow=True, origin="planted")
    budget_mod._budgets.setdefault(loaded.model, {})[path] = growing
    assert budget_for(loaded, path, 40) is growing
    assert_same(fixed, score(loaded, *args(filled), **kw), [f.text for f in filled])
    assert growing.levels and growing.levels[0][0] == 48 and growing.levels[0][1] > 0


def test_an_out_of_memory_budget_stays_lowered_for_later_calls(loaded, monkeypatch):
    """Fault injection on the plain path: batches of more than 4 statements run out of memory."""
    filled = CASES[:24]
    expected = score_clm(loaded, *args(filled), batch_size=4)
    sizes = []
    monkeypatch.setattr(clm_mod, "_score_batch", oom_above(clm_mod._score_batch, 4, sizes))
    budget_mod._budgets.setdefault(loaded.model, {})[PLAIN] = TokenBudget.fixed(4096, "planted")
    assert_same(expected, score_clm(loaded, *args(filled)), [f.text for f in filled])
    assert max(sizes) > 4 and sizes[-1] <= 4
    lowered = budget_for(loaded, PLAIN, 40)
    assert lowered.out_of_memory >= 1 and lowered.tokens < 4096
    sizes.clear()
    score_clm(loaded, *args(filled))  # a later call (another chunk) starts from the lowered budget
    assert max(sizes) <= 4


def test_the_packed_path_backs_off_through_the_same_budget(loaded, monkeypatch):
    seen = []
    monkeypatch.setattr(prefix_mod, "_forward_rows", oom_above(prefix_mod._forward_rows, 1, seen))
    budget_mod._budgets.setdefault(loaded.model, {})[PACKED] = TokenBudget.fixed(400, "planted")
    filled = CASES[:30]
    expected = score_clm(loaded, *args(filled))
    assert_same(
        expected, score_clm_shared_prefix(loaded, *args(filled), row_tokens=40), [f.text for f in filled]
    )
    assert max(seen) > 1 and seen[-1] == 1
    assert budget_for(loaded, PACKED, 40).out_of_memory >= 1
