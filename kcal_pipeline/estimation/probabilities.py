"""Option distributions every estimator family shares (METHODS §2): p_t = softmax of one template's
log-likelihoods over its options, and the template marginal P(o | r, s) = mean_t p_t(o).

Kept in one place so that a temperature-scaled or recalibrated estimator reads exactly the
distribution the plain one does. Padded options have ll = −inf and so probability 0.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.estimation.cube import OptionScoreCube


def option_probabilities(ll: np.ndarray, temperature: float | np.ndarray = 1.0) -> np.ndarray:
    """Softmax of ll / temperature over the last axis; shifting by the max keeps exp() from
    overflowing. Rows with no valid option (all −inf) come out as zeros instead of NaN.
    `temperature` broadcasts against `ll[..., :1]` (one per instance, template, ...)."""
    scaled = ll / np.asarray(temperature, dtype=np.float64)
    top = scaled.max(axis=-1, keepdims=True)
    z = np.exp(scaled - np.where(np.isfinite(top), top, 0.0))
    total = z.sum(axis=-1, keepdims=True)
    return np.divide(z, total, out=np.zeros_like(z), where=total > 0)


def top_option(ll: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(argmax of ll, its probability): ties go to the lowest option index (np.argmax takes the first)."""
    predicted = ll.argmax(axis=-1)
    return predicted, np.take_along_axis(p, predicted[..., None], axis=-1)[..., 0]


def top_two_gap(p: np.ndarray) -> np.ndarray:
    """p_[1] − p_[2] over the last axis (Margin); with one option the runner-up is 0, so = p."""
    if p.shape[-1] == 1:
        return p[..., 0]
    second, first = np.moveaxis(np.partition(p, -2, axis=-1)[..., -2:], -1, 0)
    return first - second


def marginal_option_probabilities(
    cube: OptionScoreCube, reduction: str, temperature: float | np.ndarray = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(P [I, O], present [I]): P(o | r, s) = (1/T_i) Σ_t p_t(o) over the paraphrase templates an
    instance has (T_i of them; T comes from the data); `present` is False for an instance with none
    (its row of P is zeros)."""
    templates = cube.paraphrase_templates()
    present = cube.present[:, templates]  # [I, T]
    p = option_probabilities(cube.ll(reduction)[:, templates, :], temperature)  # [I, T, O]
    n_templates = present.sum(axis=1)
    total = np.where(present[..., None], p, 0.0).sum(axis=1)
    counts = n_templates[:, None]
    marginal = np.divide(total, counts, out=np.zeros_like(total), where=counts > 0)
    return marginal, n_templates > 0
