"""The outcome of a data check: what a blocking asset check reports (assets/checks.py).

The checks themselves live with the stage whose table they check (dataset/checks.py,
scoring/checks.py, estimation/checks.py, evaluation/checks.py); each returns one CheckOutcome, so
a failure names what was wrong, how often, and the first offending rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

EXAMPLES = 5  # offending rows shown per failure


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    summary: str  # one line: what holds, or what does not and how often
    details: dict[str, object] = field(default_factory=dict)


def outcome(failures: dict[str, pl.DataFrame], holds: str, checked: dict[str, object]) -> CheckOutcome:
    """Passed when every frame of `failures` (problem -> offending rows) is empty; otherwise the
    summary counts each problem and the details show its first rows."""
    found = {problem: rows for problem, rows in failures.items() if rows.height}
    if not found:
        return CheckOutcome(True, holds, dict(checked))
    summary = "; ".join(f"{rows.height} {problem}" for problem, rows in found.items())
    examples = {f"first {problem}": rows.head(EXAMPLES).to_dicts() for problem, rows in found.items()}
    return CheckOutcome(False, summary, {**checked, **examples})
