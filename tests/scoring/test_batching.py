"""Batches with out-of-memory recovery (faults injected: this machine has no GPU to run out of)."""

import pytest
import torch

from kcal_pipeline.scoring import clm as clm_mod
from kcal_pipeline.scoring.batching import is_oom, map_batches
from tests.faults.injection import oom_above


def squares_failing_above(limit: int, sizes: list):
    def run(batch):
        sizes.append(len(batch))
        if len(batch) > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
        return [x * x for x in batch]

    return run


def test_batches_in_order_with_progress():
    seen, sizes = [], []
    assert map_batches(
        list(range(7)), 3, squares_failing_above(99, sizes), lambda d, t: seen.append((d, t))
    ) == [0, 1, 4, 9, 16, 25, 36]
    assert sizes == [3, 3, 1] and seen == [(3, 7), (6, 7), (7, 7)]


def test_out_of_memory_halves_the_batch_and_keeps_the_smaller_size():
    sizes = []
    assert map_batches(list(range(10)), 8, squares_failing_above(3, sizes)) == [x * x for x in range(10)]
    assert sizes == [8, 4, 2, 2, 2, 2, 2]  # 8 fails, 4 fails, then 2 for the rest


def test_a_single_item_that_runs_out_of_memory_and_other_errors_are_raised():
    with pytest.raises(torch.OutOfMemoryError):
        map_batches([1, 2], 2, squares_failing_above(0, []))
    with pytest.raises(ZeroDivisionError):
        map_batches([1], 1, lambda b: [1 / 0])
    with pytest.raises(RuntimeError, match="returned 1 results for 2 items"):
        map_batches([1, 2], 2, lambda b: [0])


def test_oom_detection():
    assert is_oom(torch.OutOfMemoryError("x"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("out of memory"))


def test_the_plain_clm_path_recovers_from_out_of_memory(monkeypatch):
    """score_clm's batches go through map_batches: an injected OOM on big batches changes nothing."""
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
    from tests.scoring.test_clm_scoring import FILLED, model_cache

    loaded = load_model(DEFAULT_MODEL, model_cache())
    texts = [f.text for f in FILLED[:12]]
    subj, obj = [f.subject_span for f in FILLED[:12]], [f.object_span for f in FILLED[:12]]
    expected = clm_mod.score_clm(loaded, texts, subj, obj, batch_size=4)
    sizes = []
    monkeypatch.setattr(clm_mod, "_score_batch", oom_above(clm_mod._score_batch, 4, sizes))
    got = clm_mod.score_clm(loaded, texts, subj, obj, batch_size=12)
    assert sizes[:2] == [12, 6] and max(sizes[2:]) <= 3
    assert got["ll_sum"].to_list() == pytest.approx(expected["ll_sum"].to_list(), abs=1e-4)
