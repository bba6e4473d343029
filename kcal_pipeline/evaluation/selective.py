"""Selective-prediction metrics (METHODS §3): how well confidence ranks correct above wrong.

They use only the order of the confidences, so they accept any real-valued score (Gap, Token, …)
as well as probabilities.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.registry import register
from kcal_pipeline.evaluation.segments import Segments


def _auroc_batched(seg: Segments) -> np.ndarray:
    """auroc per sample from the runs of equal confidence (ascending): each correct answer counts the
    wrong ones below its value and half those tied with it: the U statistic, exactly."""
    _, sample, size, positives = seg.runs
    negatives = size - positives
    below = np.cumsum(negatives) - negatives
    first_run = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
    below -= np.repeat(below[first_run], np.diff(np.append(first_run, sample.size)))
    u_stat = np.bincount(sample, weights=positives * (below + 0.5 * negatives), minlength=seg.count)
    n_pos = np.bincount(sample, weights=positives, minlength=seg.count)
    n_neg = seg.sizes - n_pos
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((n_pos == 0) | (n_neg == 0), np.nan, u_stat / (n_pos * n_neg))


def _aurc_batched(seg: Segments) -> np.ndarray:
    wrong_so_far = seg.position + 1 - seg.correct_so_far
    return seg.mean(wrong_so_far / seg.k)


def _aupc_batched(seg: Segments) -> np.ndarray:
    return seg.mean(seg.correct_so_far / seg.k)


def _prr_batched(seg: Segments) -> np.ndarray:
    n_pos = seg.sum(seg.y.astype(np.float64))
    oracle = seg.mean(np.minimum(seg.k, n_pos[seg.segment]) / seg.k)
    random = n_pos / seg.sizes
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (_aupc_batched(seg) - random) / (oracle - random)
    return np.where((n_pos == 0) | (n_pos == seg.sizes), np.nan, value)


@register(
    "auroc",
    label="AUROC",
    family="selective",
    needs="any",
    higher_is_better=True,
    batched=_auroc_batched,
    role="ranking",
    headline=True,
)
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


@register(
    "aurc",
    label="AURC",
    family="selective",
    needs="any",
    higher_is_better=False,
    batched=_aurc_batched,
    role="risk_coverage",
    headline=True,
)
def aurc(c: np.ndarray, y: np.ndarray) -> float:
    """Area under risk–coverage: mean over k=1..N of the error rate among the k most confident.

    Stable descending sort, so ties keep input order (as for ACE).
    """
    errors = ~y[np.argsort(-c, kind="stable")]
    return (np.cumsum(errors) / np.arange(1, c.size + 1)).mean()


# Risk–coverage read at fixed points (METHODS §3): coverages and risks in percent, so that k =
# ⌈c·N⌉ and "risk ≤ r" are integer arithmetic, never a float that lands just above an integer.
SELECTIVE_COVERAGES = (50, 80, 90)
RISK_LEVELS = (5, 10, 20)


def _correct_by_confidence(c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Correctness ordered most confident first; a stable sort, so ties keep input order (as AURC)."""
    return y[np.argsort(-c, kind="stable")]


def top_k(n: int, percent: int) -> int:
    """k = ⌈percent·n/100⌉: how many of n predictions a coverage of `percent` % keeps."""
    return (percent * n + 99) // 100


def _register_selective_accuracy() -> None:
    def at(percent: int):
        def fn(c: np.ndarray, y: np.ndarray) -> float:
            return _correct_by_confidence(c, y)[: top_k(c.size, percent)].mean()

        fn.__doc__ = (
            f"Selective accuracy at coverage {percent} % (METHODS §3): accuracy among the "
            f"⌈{percent / 100:g}·N⌉ most confident (stable sort: ties keep input order)."
        )
        return fn

    def batched_at(percent: int):
        def fn(seg: Segments) -> np.ndarray:
            k = top_k(seg.sizes, percent)
            return seg.correct_so_far[seg.starts + k - 1] / k

        return fn

    for percent in SELECTIVE_COVERAGES:
        register(
            f"selective_accuracy_c{percent}", label=f"selective accuracy @ {percent} % coverage",
            family="selective", needs="any", higher_is_better=True, batched=batched_at(percent),
        )(at(percent))  # fmt: skip


def _register_coverage_at_risk() -> None:
    def at(percent: int):
        def fn(c: np.ndarray, y: np.ndarray) -> float:
            errors = np.cumsum(~_correct_by_confidence(c, y))
            k = np.arange(1, c.size + 1)
            ok = np.flatnonzero(100 * errors <= percent * k)  # error rate E_k/k ≤ r, exactly
            return 0.0 if ok.size == 0 else (ok[-1] + 1) / c.size

        fn.__doc__ = (
            f"Coverage at risk {percent} % (METHODS §3): the largest k/N whose k most confident have an "
            f"error rate ≤ {percent / 100:g} (the risk need not fall monotonically, so not the first k "
            "above it); 0 if even the single most confident is wrong."
        )
        return fn

    def batched_at(percent: int):
        def fn(seg: Segments) -> np.ndarray:
            k = seg.position + 1
            errors = k - seg.correct_so_far
            return np.maximum.reduceat(np.where(100 * errors <= percent * k, k, 0), seg.starts) / seg.sizes

        return fn

    for percent in RISK_LEVELS:
        register(
            f"coverage_at_risk_r{percent:02d}", label=f"coverage @ {percent} % risk", family="selective",
            needs="any", higher_is_better=True, batched=batched_at(percent),
        )(at(percent))  # fmt: skip


_register_selective_accuracy()
_register_coverage_at_risk()


@register(
    "prr",
    label="PRR",
    family="selective",
    needs="any",
    higher_is_better=True,
    batched=_prr_batched,
    value_range=(-np.inf, 1.0),  # below 0: worse than chance, without bound
)
def prr(c: np.ndarray, y: np.ndarray) -> float:
    """Prediction rejection ratio as LM-Polygraph reports it (Fadeeva et al. 2023; Malinin et al. 2017;
    lm_polygraph/ue_metrics/pred_rej_area.py, normalised in utils/manager.py), quality = 1[correct]:
    (PRA − PRA_random) / (PRA_oracle − PRA_random), where PRA = mean over k of the accuracy of the k
    most confident (= AUPC), PRA_oracle = the same with every correct ranked first = mean_k min(k, P)/k
    (P correct), and PRA_random = P/N, the exact mean over random orders (LM-Polygraph estimates it
    from 1,000 seeded shuffles). 1 = oracle order, 0 = no better than chance, < 0 = worse; NaN with one
    class only. Ties keep input order (stable sort, as AURC).
    """
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        return float("nan")
    k = np.arange(1, y.size + 1)
    pra = (np.cumsum(_correct_by_confidence(c, y)) / k).mean()
    oracle = (np.minimum(k, n_pos) / k).mean()
    random = n_pos / y.size
    return (pra - random) / (oracle - random)


@register("aupc", label="AUPC", family="selective", needs="any", higher_is_better=True, batched=_aupc_batched)
def aupc(c: np.ndarray, y: np.ndarray) -> float:
    """Area under precision vs coverage (Tinner; METHODS §3): mean over k = 1..N of the accuracy of
    the k most confident, i.e. 1 − AURC (Selective-LAMA's RC-AUC, lower better) and LM-Polygraph's
    unnormalised PRA. Ties keep input order (stable sort, as AURC)."""
    return (np.cumsum(_correct_by_confidence(c, y)) / np.arange(1, c.size + 1)).mean()
