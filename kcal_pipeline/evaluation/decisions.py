"""Decisions at a threshold (METHODS §3, the selective prediction view of Tinner 2024 and
Yoshikawa & Okazaki 2023's Selective-LAMA): precision, recall, F1 and FPR when a confidence is
turned into accept (C ≥ τ) or reject.

Positive = correct. Over instances: precision = correct among accepted, recall = accepted among
correct, FPR = accepted among wrong. Over asserted statements (the template marginal's per-option
probabilities, `option_estimates`): a statement (instance, option) is asserted when P(o | r, s) ≥ τ
and positive when the option is gold. Each is registered at τ = 0.5 (`*_t050`) and at the τ that
`tune_f1` picks on the dev split (`*_tuned`).
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.registry import TunedThreshold, register

FIXED_THRESHOLD = 0.5
# A tuned τ that accepts, or rejects, at least this share of the dev rows is degenerate: it says
# "trust everything" or "trust nothing" rather than separating, so the default is used instead.
DEGENERATE_SHARE = 0.95


def _counts(c: np.ndarray, y: np.ndarray, tau: float) -> tuple[int, int, int, int]:
    """(TP, FP, FN, TN) with accept = C ≥ τ and positive = y."""
    accept = c >= tau
    tp = int((accept & y).sum())
    fp = int(accept.sum()) - tp
    fn = int(y.sum()) - tp
    return tp, fp, fn, y.size - tp - fp - fn


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


def precision(c: np.ndarray, y: np.ndarray, tau: float) -> float:
    """TP / (TP + FP): the share of the accepted that are correct; NaN when nothing is accepted
    (or τ is NaN: no threshold)."""
    if np.isnan(tau):
        return float("nan")
    tp, fp, _, _ = _counts(c, y, tau)
    return _ratio(tp, tp + fp)


def recall(c: np.ndarray, y: np.ndarray, tau: float) -> float:
    """TP / (TP + FN): the share of the correct that are accepted; NaN with no correct one."""
    if np.isnan(tau):
        return float("nan")
    tp, _, fn, _ = _counts(c, y, tau)
    return _ratio(tp, tp + fn)


def f1(c: np.ndarray, y: np.ndarray, tau: float) -> float:
    """2·TP / (2·TP + FP + FN): the harmonic mean of precision and recall where both exist, 0 when
    nothing correct is accepted; NaN only with no correct one and nothing accepted."""
    if np.isnan(tau):
        return float("nan")
    tp, fp, fn, _ = _counts(c, y, tau)
    return _ratio(2 * tp, 2 * tp + fp + fn)


def fpr(c: np.ndarray, y: np.ndarray, tau: float) -> float:
    """FP / (FP + TN): the share of the wrong that are accepted; NaN with no wrong one."""
    if np.isnan(tau):
        return float("nan")
    _, fp, _, tn = _counts(c, y, tau)
    return _ratio(fp, fp + tn)


def tune_f1(c: np.ndarray, y: np.ndarray, output_kind: str) -> TunedThreshold:
    """τ maximising F1 on the dev rows, among the distinct dev confidences (accept = C ≥ τ, so each
    candidate is a different accepted set). Ties: the largest τ (of equally good rules, the one that
    accepts least). Falls back to τ = 0.5 for probabilities (NaN for unbounded scores: no neutral
    point, so the tuned metrics are NaN) when there are no dev rows, no correct dev row (F1 is 0 at
    every τ), or the best τ accepts or rejects ≥ DEGENERATE_SHARE of the dev rows.
    """
    default = FIXED_THRESHOLD if output_kind == "probability" else float("nan")
    n = c.size
    if n == 0:
        return TunedThreshold(default, True, "no dev rows", 0)
    n_pos = int(y.sum())
    if n_pos == 0:
        return TunedThreshold(default, True, "no correct dev row", n)
    values, inverse = np.unique(c, return_inverse=True)  # ascending
    accepted = np.cumsum(np.bincount(inverse, minlength=values.size)[::-1])[::-1]  # C ≥ values[j]
    tp = np.cumsum(np.bincount(inverse, weights=y, minlength=values.size)[::-1])[::-1]
    scores = 2 * tp / (accepted + n_pos)  # 2TP / (2TP + FP + FN) with FP + TP = accepted, FN + TP = P
    best = int(np.flatnonzero(scores == scores.max())[-1])
    share = accepted[best] / n
    if share >= DEGENERATE_SHARE or 1 - share >= DEGENERATE_SHARE:
        reason = f"degenerate: the best τ {values[best]:.6g} accepts {share:.1%} of {n} dev rows"
        return TunedThreshold(default, True, reason, n)
    return TunedThreshold(float(values[best]), False, None, n)


_MEASURES = (
    # (name, label, function, higher is better)
    ("precision", "precision", precision, True),
    ("recall", "recall", recall, True),
    ("f1", "F1", f1, True),
    ("fpr", "FPR", fpr, False),
)
_THRESHOLDS = (
    # (suffix, label, threshold or tuning rule, needs): a fixed 0.5 only means something on a
    # probability; a tuned τ is learnt on the estimator's own scale.
    ("t050", "τ = 0.5", FIXED_THRESHOLD, "probability"),
    ("tuned", "τ tuned on dev (max F1)", tune_f1, "any"),
)
for _unit, _prefix, _input in (("instances", "", "threshold"), ("statements", "statement_", "statements")):
    for _name, _label, _fn, _higher in _MEASURES:
        for _suffix, _tau_label, _threshold, _needs in _THRESHOLDS:
            register(
                f"{_prefix}{_name}_{_suffix}",
                label=f"{_label} over {_unit} at {_tau_label}",
                family="decisions",
                # statements are always template-marginal probabilities
                needs="probability" if _input == "statements" else _needs,
                higher_is_better=_higher,
                input=_input,
                threshold=_threshold,
            )(_fn)
