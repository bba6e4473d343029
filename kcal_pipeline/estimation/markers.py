"""Epistemic-marker estimators (METHODS §2): Base on a template with a stated confidence in it.

A verbal marker ("certainly", "possibly") or a numeric one ("I'm 50% confident that …") is put into
a template as a variant of it (dataset/instances/variants.py). If the model's likelihood is
grounded in the marker's meaning, "certainly" should sharpen the option distribution and
"possibly" flatten it. Each marker estimator is Base on the marked variant, written on the row of
the variant's *parent* template, so that Δaccuracy and ΔACE against `base` are one join on
(instance_id, template_id, reduction). A row exists where both the variant and its parent were
scored for the instance. One estimator per variant name, generated from the names variants.py
uses, so a new marker or level there is a new estimator here.
"""

from __future__ import annotations

import numpy as np

from kcal_pipeline.dataset.templates import NUMERIC_LEVELS, VERBAL_MARKERS, numeric_variant
from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import option_probabilities, top_option
from kcal_pipeline.estimation.registry import Estimate, EstimatorFn, Requirement, register

PAPER = "epistemic markers (METHODS §2)"


# variant name → (template kind, label)
MARKER_VARIANTS: dict[str, tuple[str, str]] = {
    **{m: ("marker_verbal", f"Marker '{m}'") for m in VERBAL_MARKERS},
    **{numeric_variant(p): ("marker_numeric", f"Marker {p}%") for p in NUMERIC_LEVELS},
}


def estimator_name(variant: str) -> str:
    """'certainly' → marker_certainly, 'numeric-50' → marker_numeric_50."""
    return f"marker_{variant.replace('-', '_')}"


def marked_templates(cube: OptionScoreCube, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """(variant indices, their parents' indices) on the cube's template axis, for the templates
    of this variant name whose parent template is in the cube too (a loop over templates only)."""
    if cube.template_variants is None or cube.template_parents is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    position = {t: k for k, t in enumerate(cube.template_ids.tolist())}
    marked = [
        k
        for k, (name, parent) in enumerate(zip(cube.template_variants, cube.template_parents, strict=True))
        if name == variant and parent in position
    ]
    parents = [position[cube.template_parents[k]] for k in marked]
    return np.array(marked, dtype=np.int64), np.array(parents, dtype=np.int64)


def _requirement(variant: str) -> Requirement:
    def requires(cube: OptionScoreCube, reduction: str) -> str | None:
        if cube.template_variants is None or variant not in set(cube.template_variants.tolist()):
            return f"no {variant!r} marker templates"
        if not marked_templates(cube, variant)[0].size:
            return f"no {variant!r} marker templates whose parent template was scored"
        return None

    return requires


def _estimator(variant: str) -> EstimatorFn:
    def marker(cube: OptionScoreCube, reduction: str) -> Estimate:
        marked, parents = marked_templates(cube, variant)
        ll = cube.ll(reduction)[:, marked, :]
        predicted_marked, confidence_marked = top_option(ll, option_probabilities(ll))
        predicted = np.zeros(cube.shape[:2], dtype=np.int64)
        confidence = np.zeros(cube.shape[:2])
        rows = np.zeros(cube.shape[:2], dtype=bool)
        predicted[:, parents] = predicted_marked
        confidence[:, parents] = confidence_marked
        rows[:, parents] = cube.present[:, marked]
        return Estimate(predicted, confidence, rows=rows)

    marker.__doc__ = f"Base (max_o p_t(o)) on the {variant!r} variant of each template, on its parent's row."
    return marker


for _variant, (_kind, _label) in MARKER_VARIANTS.items():
    register(
        estimator_name(_variant),
        label=_label,
        family="markers",
        reductions=ALL_REDUCTIONS,
        template_kinds=(_kind,),
        requires=_requirement(_variant),
        paper=PAPER,
    )(_estimator(_variant))
