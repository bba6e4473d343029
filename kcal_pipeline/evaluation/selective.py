"""Selective-prediction metrics (METHODS §3): how well confidence ranks correct above wrong.

They use only the order of the confidences, so they accept any real-valued score (Gap, Token, …)
as well as probabilities.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.registry import register


@register("auroc", label="AUROC", family="selective", needs="any", higher_is_better=True)
def auroc(c: np.ndarray, y: np.ndarray) -> float:
    """P(C_correct > C_wrong) + ½·P(tie) (Mann–Whitney U via average ranks); NaN with one class only."""
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(c, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum = avg_rank[inverse][y].sum()
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


@register("aurc", label="AURC", family="selective", needs="any", higher_is_better=False)
def aurc(c: np.ndarray, y: np.ndarray) -> float:
    """Area under risk–coverage: mean over k=1..N of the error rate among the k most confident.

    Stable descending sort, so ties keep input order (as for ACE).
    """
    errors = ~y[np.argsort(-c, kind="stable")]
    return (np.cumsum(errors) / np.arange(1, c.size + 1)).mean()
