"""Decisions at a threshold (METHODS §3, the selective prediction view of Tinner 2024 and
Yoshikawa & Okazaki 2023's Selective-LAMA): precision, recall, F1 and FPR when a confidence is
turned into accept or reject.

Positive = correct. Over instances an answer is accepted when C ≥ τ (the accuracy–rejection curve
rejects C < τ): precision = correct among accepted, recall = accepted among correct, FPR = accepted
among wrong. Over asserted statements (the template marginal's per-option probabilities,
`option_estimates`) a statement (instance, option) is asserted when P(o | r, s) > τ — strictly, as
METHODS §2 defines it — and positive when the option is gold. Each is registered at τ = 0.5
(`*_t050`) and at the τ that `tune_f1` (instances) or `tune_f1_strict` (statements) picks on the dev
split (`*_tuned`).
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.evaluation.registry import TunedThreshold, register
from kcal_pipeline.evaluation.segments import Segments

FIXED_THRESHOLD = 0.5
# A tuned τ that accepts, or rejects, at least this share of the dev rows is degenerate: it says
# "trust everything" or "trust nothing" rather than separating, so the default is used instead.
DEGENERATE_SHARE = 0.95


def _accepted(c: np.ndarray, tau, strict: bool) -> np.ndarray:
    return c > tau if strict else c >= tau


def _counts(c: np.ndarray, y: np.ndarray, tau: float, strict: bool = False) -> tuple[int, int, int, int]:
    """(TP, FP, FN, TN) with accept = C ≥ τ (C > τ if strict) and positive = y."""
    accept = _accepted(c, tau, strict)
    tp = int((accept & y).sum())
    fp = int(accept.sum()) - tp
    fn = int(y.sum()) - tp
    return tp, fp, fn, y.size - tp - fp - fn


def _ratio(num, den):
    """num / den, NaN where den is 0 (scalars or arrays)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


# Each measure from the counts (TP, FP, FN, TN), scalars or per-sample arrays alike.
def _precision(tp, fp, fn, tn):
    return _ratio(tp, tp + fp)


def _recall(tp, fp, fn, tn):
    return _ratio(tp, tp + fn)


def _f1(tp, fp, fn, tn):
    return _ratio(2 * tp, 2 * tp + fp + fn)


def _fpr(tp, fp, fn, tn):
    return _ratio(fp, fp + tn)


def _measure(from_counts, strict: bool, doc: str):
    def fn(c: np.ndarray, y: np.ndarray, tau: float) -> float:
        if np.isnan(tau):
            return float("nan")
        return float(from_counts(*_counts(c, y, tau, strict)))

    fn.__doc__ = doc
    return fn


def _measure_batched(from_counts, strict: bool):
    """The measure of every sample at its own τ (NaN τ → NaN), from per-sample counts."""

    def fn(seg: Segments, tau: np.ndarray) -> np.ndarray:
        accept = _accepted(seg.c, tau[seg.segment], strict)
        tp = seg.sum(accept & seg.y)
        accepted, positives = seg.sum(accept), seg.sum(seg.y)
        fp, fn_ = accepted - tp, positives - tp
        value = from_counts(tp, fp, fn_, seg.sizes - tp - fp - fn_)
        return np.where(np.isnan(tau), np.nan, value)

    return fn


precision = _measure(
    _precision, False, "TP / (TP + FP): the share of the accepted that are correct; NaN when nothing "
    "is accepted (or τ is NaN: no threshold)."
)  # fmt: skip
recall = _measure(
    _recall, False, "TP / (TP + FN): the share of the correct that are accepted; NaN with no correct one."
)
f1 = _measure(
    _f1, False, "2·TP / (2·TP + FP + FN): the harmonic mean of precision and recall where both exist, 0 "
    "when nothing correct is accepted; NaN only with no correct one and nothing accepted."
)  # fmt: skip
fpr = _measure(
    _fpr, False, "FP / (FP + TN): the share of the wrong that are accepted; NaN with no wrong one."
)


def _tune_f1(c: np.ndarray, y: np.ndarray, output_kind: str, strict: bool) -> TunedThreshold:
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
    if strict:  # C > values[j] is C ≥ values[j + 1]; nothing is above the largest value
        accepted, tp = np.append(accepted[1:], 0), np.append(tp[1:], 0.0)
    scores = 2 * tp / (accepted + n_pos)  # 2TP / (2TP + FP + FN) with FP + TP = accepted, FN + TP = P
    best = int(np.flatnonzero(scores == scores.max())[-1])
    share = accepted[best] / n
    if share >= DEGENERATE_SHARE or 1 - share >= DEGENERATE_SHARE:
        reason = f"degenerate: the best τ {values[best]:.6g} accepts {share:.1%} of {n} dev rows"
        return TunedThreshold(default, True, reason, n)
    return TunedThreshold(float(values[best]), False, None, n)


def tune_f1(c: np.ndarray, y: np.ndarray, output_kind: str) -> TunedThreshold:
    """τ maximising F1 on the dev rows, among the distinct dev confidences (accept = C ≥ τ, so each
    candidate is a different accepted set). Ties: the largest τ (of equally good rules, the one that
    accepts least). Falls back to τ = 0.5 for probabilities (NaN for unbounded scores: no neutral
    point, so the tuned metrics are NaN) when there are no dev rows, no correct dev row (F1 is 0 at
    every τ), or the best τ accepts or rejects ≥ DEGENERATE_SHARE of the dev rows.
    """
    return _tune_f1(c, y, output_kind, strict=False)


def tune_f1_strict(c: np.ndarray, y: np.ndarray, output_kind: str) -> TunedThreshold:
    """tune_f1 for statements, asserted when P > τ: the candidates are again the distinct dev
    values, each now accepting what lies strictly above it (the same ties and fallbacks)."""
    return _tune_f1(c, y, output_kind, strict=True)


_MEASURES = (
    # (name, label, counts → value, higher is better)
    ("precision", "precision", _precision, True),
    ("recall", "recall", _recall, True),
    ("f1", "F1", _f1, True),
    ("fpr", "FPR", _fpr, False),
)
_DOCS = {"precision": precision.__doc__, "recall": recall.__doc__, "f1": f1.__doc__, "fpr": fpr.__doc__}
for _unit, _prefix, _input, _strict, _rule in (
    ("instances", "", "threshold", False, tune_f1),
    ("statements", "statement_", "statements", True, tune_f1_strict),
):
    _accept = "P > τ" if _strict else "C ≥ τ"
    for _name, _label, _from_counts, _higher in _MEASURES:
        # (suffix, label, threshold or tuning rule, needs): a fixed 0.5 only means something on a
        # probability; a tuned τ is learnt on the estimator's own scale.
        for _suffix, _tau_label, _threshold, _needs in (
            ("t050", "τ = 0.5", FIXED_THRESHOLD, "probability"),
            ("tuned", "τ tuned on dev (max F1)", _rule, "any"),
        ):
            register(
                f"{_prefix}{_name}_{_suffix}",
                label=f"{_label} over {_unit} at {_tau_label}",
                family="decisions",
                # statements are always template-marginal probabilities
                needs="probability" if _input == "statements" else _needs,
                higher_is_better=_higher,
                input=_input,
                threshold=_threshold,
                batched=_measure_batched(_from_counts, _strict),
            )(_measure(_from_counts, _strict, f"{_DOCS[_name]} Accept = {_accept}."))
