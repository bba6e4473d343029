"""The packing check is dtype-aware: half-precision models keep the fast path when packing is no
worse than the plain path against a float32 reference, and a model that ignores the tree mask or
the position ids still falls back, in every dtype. bfloat16 runs on CPU here (slowly, tiny probe)."""

import copy
import dataclasses
import weakref
from pathlib import Path

import pytest
import torch

from kcal_pipeline.core.options import ScoringOptions
from kcal_pipeline.scoring import prefix as prefix_mod
from kcal_pipeline.scoring.clm import _token_logprobs, score_clm
from kcal_pipeline.scoring.engine import fingerprint, scoring_choices
from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
from kcal_pipeline.scoring.precision import matmul_precision, tf32_applies
from kcal_pipeline.scoring.prefix import (
    PACKING_FACTOR,
    PROBE_ATOL,
    _in_float32,
    accept_packing,
    packing_decision,
    score_clm_shared_prefix,
)
from tests.scoring.test_clm_scoring import model_cache
from tests.scoring.test_prefix_scoring import CASES, args, assert_same, tiny_llama, wrapped


@pytest.fixture(scope="module")
def loaded():
    return load_model(DEFAULT_MODEL, model_cache())


@pytest.fixture(autouse=True)
def fresh_decisions(monkeypatch):
    monkeypatch.setattr(prefix_mod, "_decisions", weakref.WeakKeyDictionary())


def in_dtype(loaded, dtype: torch.dtype, key: str):
    model = copy.deepcopy(loaded.model).to(dtype).eval()
    return dataclasses.replace(loaded, model=model, dtype=str(dtype).removeprefix("torch."), key=key)


@pytest.fixture(scope="module")
def tiny(loaded):
    return tiny_llama(loaded)


def test_the_rule_by_hand():
    # float32: the plain path is the reference (0 error); packing must be within PROBE_ATOL
    assert accept_packing((5e-5, 1e-5), (0.0, 0.0)) == (True, "")
    ok, why = accept_packing((2e-4, 1e-5), (0.0, 0.0))
    assert not ok and "packed max |Δ| 0.0002 > 0.0001" in why
    # half precision: within PACKING_FACTOR (1.5) of the plain path's error, max and mean
    assert PACKING_FACTOR == 1.5
    assert accept_packing((0.06, 0.015), (0.04, 0.01))[0]  # exactly 1.5×: accepted
    ok, why = accept_packing((0.061, 0.01), (0.04, 0.01))
    assert not ok and "max" in why and "0.06" in why
    ok, why = accept_packing((0.04, 0.02), (0.04, 0.01))  # same max, mean twice the plain path's
    assert not ok and "mean |Δ| 0.02 > 0.015" in why
    assert not accept_packing((float("nan"), 0.0), (0.1, 0.1))[0]  # NaN is never accepted


def test_smollm2_in_bfloat16_keeps_the_fast_path(loaded):
    """The real model in bfloat16: packed and plain differ by far more than the float32 rule's
    1e-4, yet packing is no worse than plain against float32, so it is used."""
    bf16 = in_dtype(loaded, torch.bfloat16, "smollm2-bf16")
    decision = packing_decision(bf16)
    assert decision.used, decision.describe()
    assert (
        decision.dtype == "bfloat16" and decision.reference == "the same weights in float32 (from bfloat16)"
    )
    assert decision.plain_max > 100 * PROBE_ATOL  # bfloat16 noise: the old check would have refused
    assert decision.packed_mean <= PACKING_FACTOR * decision.plain_mean
    text = decision.describe()
    assert text.startswith("prefix packing on (bfloat16, |Δ| per token against the same weights in float32")
    assert f"plain max {decision.plain_max:.2g}" in text
    # and the scorer takes the packed rows
    assert prefix_mod.packing_supported(bf16) is True


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_an_honest_half_precision_model_passes_and_its_weights_come_back_bit_for_bit(tiny, dtype):
    half = in_dtype(tiny, dtype, f"tiny-{dtype}")
    half.model.model.rotary_emb.inv_freq = half.model.model.rotary_emb.inv_freq.float()  # a float32 buffer
    before = {k: v.clone() for k, v in half.model.state_dict().items()}
    buffers = {k: v.dtype for k, v in half.model.named_buffers()}
    decision = packing_decision(half)
    assert decision.used, decision.describe()
    assert decision.packed_max > 0 and decision.plain_max > 0
    after = half.model.state_dict()
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert after[k].dtype == v.dtype and torch.equal(after[k], v), k
    assert {k: v.dtype for k, v in half.model.named_buffers()} == buffers  # float32 buffer stayed float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "drop", [{"drop_mask": True, "drop_positions": False}, {"drop_mask": False, "drop_positions": True}],
    ids=["ignores-mask", "ignores-positions"],
)  # fmt: skip
def test_a_model_that_ignores_mask_or_positions_falls_back_in_every_dtype(tiny, dtype, drop):
    bad = wrapped(in_dtype(tiny, dtype, f"tiny-{dtype}"), **drop)
    decision = packing_decision(bad)
    assert not decision.used
    assert "packed" in decision.reason and decision.packed_mean > 3 * decision.plain_mean
    assert decision.describe().startswith("plain path (prefix packing off)")


def test_the_decision_is_cached_and_a_failing_packed_pass_falls_back(tiny, monkeypatch):
    half = in_dtype(tiny, torch.bfloat16, "tiny-bf16-cached")
    first = packing_decision(half)
    monkeypatch.setattr(prefix_mod, "_check_packing", lambda *a: pytest.fail("checked twice"))
    assert packing_decision(half) is first
    monkeypatch.undo()
    monkeypatch.setattr(prefix_mod, "_decisions", weakref.WeakKeyDictionary())

    def broken(loaded_, rows):
        raise RuntimeError("custom masks unsupported")

    monkeypatch.setattr(prefix_mod, "_forward_rows", broken)
    decision = packing_decision(half)
    assert not decision.used and "custom masks unsupported" in decision.reason
    filled = CASES[:4]  # and scoring still works, on the plain path
    assert_same(score_clm(half, *args(filled)), score_clm_shared_prefix(half, *args(filled)), filled)


def test_no_float32_reference_means_the_plain_path(tiny, monkeypatch):
    """A model too large for a float32 copy (injected: the upcast runs out of memory)."""
    half = in_dtype(tiny, torch.bfloat16, "tiny-bf16-big")

    def no_room(model):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(prefix_mod, "_in_float32", no_room)
    decision = packing_decision(half)
    assert not decision.used and "no float32 reference" in decision.reason


def test_in_float32_restores_even_when_the_block_fails(tiny):
    half = in_dtype(tiny, torch.bfloat16, "tiny-bf16-fail")
    with pytest.raises(ZeroDivisionError), _in_float32(half.model) as upcast:
        assert upcast == "from bfloat16"
        assert next(half.model.parameters()).dtype == torch.float32
        _token_logprobs(half, [[5, 6, 7]], 1, None)
        raise ZeroDivisionError
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}


def test_partition_metadata_names_the_decision_and_the_budget(loaded):
    choices = scoring_choices(loaded, ScoringOptions())
    assert choices["packing"].startswith("prefix packing on (float32, |Δ| per token against the float32")
    assert scoring_choices(loaded, ScoringOptions(fast_path=False))["packing"] == "off (fast_path)"


def test_tf32_is_scoped_to_float32_on_cuda_and_recorded_in_the_fingerprint(loaded):
    """No GPU here: the flags are plain process-wide switches, so their scoping is checked directly."""
    cuda = dataclasses.replace(loaded, device="cuda")
    assert tf32_applies(cuda) and not tf32_applies(loaded)
    assert not tf32_applies(dataclasses.replace(cuda, tf32=False))
    assert not tf32_applies(dataclasses.replace(cuda, dtype="bfloat16"))
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with matmul_precision(cuda):
            assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 is False  # restored
        with matmul_precision(loaded):
            assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    import polars as pl

    statements = pl.DataFrame(
        {"statement_id": ["s"], "text": ["Paris is in France."], "subject_start": [0], "subject_end": [5],
         "object_start": [12], "object_end": [18]}
    )  # fmt: skip
    assert fingerprint(cuda, statements, ScoringOptions()) != fingerprint(
        dataclasses.replace(cuda, tf32=False), statements, ScoringOptions()
    )
    # on CPU the flag changes nothing, so stores scored before it existed stay up to date
    assert fingerprint(loaded, statements, ScoringOptions()) == fingerprint(
        dataclasses.replace(loaded, tf32=False), statements, ScoringOptions()
    )


def test_a_freed_model_takes_its_decision_and_budgets_with_it(tiny):
    """Caches hold models weakly: a new model at a freed one's address gets no stale decision."""
    import gc

    from kcal_pipeline.scoring import budget as budget_mod

    half = in_dtype(tiny, torch.bfloat16, "tiny-bf16-freed")
    packing_decision(half)
    score_clm_shared_prefix(half, *args(CASES[:2]))
    assert half.model in prefix_mod._decisions and half.model in budget_mod._budgets
    before = len(budget_mod._budgets)
    del half
    gc.collect()
    assert len(prefix_mod._decisions) == 0 and len(budget_mod._budgets) == before - 1


def test_a_later_process_reads_the_recorded_decision_and_any_change_checks_again(
    loaded, tiny, tmp_path, monkeypatch, caplog
):
    """The decision about a model exactly as load_model returned it is recorded in its cache folder:
    a new process (here: the in-process decisions cleared) reads it instead of checking, and a
    change in what the outcome depends on (here torch's version), an unreadable record or another
    model object checks again."""
    from kcal_pipeline.scoring import loaded_model

    monkeypatch.setitem(loaded_model._cache_dirs, loaded.model, tmp_path)
    checks = []
    real_check = prefix_mod._check_packing
    monkeypatch.setattr(prefix_mod, "_check_packing", lambda *a: checks.append(a) or real_check(*a))

    def records():
        return sorted((tmp_path / "packing-checks").glob("*.json"))

    def new_process():
        monkeypatch.setattr(prefix_mod, "_decisions", weakref.WeakKeyDictionary())

    first = packing_decision(loaded)
    (record,) = records()
    assert len(checks) == 1 and first.used and not first.recorded
    assert (
        record.name.startswith(f"{loaded.key}-") and f'"torch": "{torch.__version__}"' in record.read_text()
    )

    new_process()
    again = packing_decision(loaded)
    assert len(checks) == 1 and again.recorded == str(record)
    assert dataclasses.replace(again, recorded="") == first
    assert again.describe() == f"{first.describe()} [checked earlier: {record.name}]"

    new_process()
    with monkeypatch.context() as other_torch:
        other_torch.setattr(torch, "__version__", "0.0.0+other")
        assert packing_decision(loaded) == first
    assert len(checks) == 2 and len(records()) == 2

    new_process()
    record.write_text("{not json")
    with caplog.at_level("WARNING", logger=prefix_mod.__name__):
        assert packing_decision(loaded) == first
    assert len(checks) == 3 and "unusable" in caplog.text and str(record) in caplog.text
    new_process()
    assert packing_decision(loaded).recorded == str(record) and len(checks) == 3  # rewritten whole

    # a model load_model did not return (a copy in another dtype) is checked, and nothing recorded
    new_process()
    before = records()
    packing_decision(in_dtype(tiny, torch.bfloat16, "tiny-bf16-unrecorded"))
    assert len(checks) == 4 and records() == before


def test_a_recorded_fallback_without_evidence_reads_back_the_same(tiny, tmp_path, monkeypatch):
    """A decision with no numbers (the packed pass failed: NaN evidence) survives the record."""
    from kcal_pipeline.scoring import loaded_model

    def no_masks(*args):
        raise RuntimeError("no masks")

    half = in_dtype(tiny, torch.bfloat16, "tiny-bf16-recorded")
    monkeypatch.setitem(loaded_model._cache_dirs, half.model, tmp_path)
    monkeypatch.setattr(prefix_mod, "_forward_rows", no_masks)
    first = packing_decision(half)
    assert not first.used and "no masks" in first.reason
    monkeypatch.setattr(prefix_mod, "_decisions", weakref.WeakKeyDictionary())
    monkeypatch.setattr(prefix_mod, "_check_packing", lambda *a: pytest.fail("checked again"))
    again = packing_decision(half)
    assert again.describe() == f"{first.describe()} [checked earlier: {Path(again.recorded).name}]"
