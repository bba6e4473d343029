"""bench/token_budget.py runs end to end on a tiny random model on CPU and reports the sweep and the
automatic budget's trail (no timing asserted: the bench prints those)."""

import contextlib
import io
import re

from bench import token_budget


def test_the_budget_sweep_and_the_growth_trail_are_printed():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        token_budget.main(["--config", "tiny", "--instances", "6", "--rounds", "1", "--budgets", "256,512"])
    text = out.getvalue()
    for path in ("packed", "plain"):
        assert f"{path} path: statements/s at fixed budgets (median of 1 rounds)" in text
        table = text.split(f"{path} path:")[1]
        rows = re.findall(r"^\s+(256|512)\s+([0-9.]+)\s+([0-9.]+)", table, flags=re.M)[:2]
        assert [b for b, _, _ in rows] == ["256", "512"] and all(float(r) > 0 for _, r, _ in rows)
        assert max(float(x) for _, _, x in rows) == 1.0  # the best budget is 1.00 × itself
    assert text.count("automatic: ") == 2 and "(grown from 256; measured 256 → " in text


def test_bad_paths_are_refused():
    import pytest

    with pytest.raises(SystemExit, match="--paths: packed and/or plain"):
        token_budget.main(["--config", "tiny", "--paths", "fast"])
