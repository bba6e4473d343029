"""The template marginal (Tinner 2024; METHODS §2): P(o | r, s) = (1/T_i) Σ_t p_t(o) over the
paraphrase templates instance i has. Its prediction and confidence are an estimator; its
per-option probabilities are a table of their own (`option_estimates`), which selective
precision and recall read: an option is asserted true when P(o | r, s) > τ.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl

from kcal_pipeline.estimation.aggregation import NO_PARAPHRASES
from kcal_pipeline.estimation.cube import ALL_REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import marginal_option_probabilities
from kcal_pipeline.estimation.registry import ESTIMATORS, Estimate, register

NAME = "template_marginal"
OPTION_ESTIMATES_SCHEMA = {
    "model_id": pl.String,
    "relation_id": pl.String,
    "instance_id": pl.String,
    "split": pl.String,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "option_index": pl.Int32,
    "option_id": pl.String,
    "is_gold": pl.Boolean,
    "estimator": pl.String,
    "reduction": pl.String,
    "probability": pl.Float64,
}
OPTION_SORT_KEYS = ("model_id", "relation_id", "instance_id", "option_index", "estimator", "reduction")


def _has_paraphrases(cube: OptionScoreCube, reduction: str) -> str | None:
    return None if len(cube.paraphrase_templates()) else NO_PARAPHRASES


@register(
    NAME,
    label="Template marginal",
    family="template_marginal",
    grain="instance",
    output_kind="probability",
    reductions=ALL_REDUCTIONS,
    requires=_has_paraphrases,
    paper="Tinner 2024",
    main=True,
    family_line=True,
)
def template_marginal(cube: OptionScoreCube, reduction: str) -> Estimate:
    """ŷ = argmax_o P(o | r, s) (ties to the lowest option index), C = max_o P(o | r, s)."""
    marginal, present = marginal_option_probabilities(cube, reduction)
    predicted = marginal.argmax(axis=1)
    return Estimate(predicted, marginal[np.arange(len(predicted)), predicted], rows=present)


def option_estimates(cubes: OptionScoreCube | Iterable[OptionScoreCube]) -> pl.DataFrame:
    """One row per (instance, option, reduction): P(o | r, s) of every option that a paraphrase
    template of the instance scored, under each reduction whose column the cube has. Sorted by
    model, relation, instance, option, estimator and reduction."""
    spec = ESTIMATORS[NAME]
    frames = []
    for cube in [cubes] if isinstance(cubes, OptionScoreCube) else cubes:
        scored = cube.valid[:, cube.paraphrase_templates(), :].any(axis=1)  # [I, O]
        ii, oo = np.nonzero(scored)
        for reduction in spec.reductions:
            if spec.missing_inputs(cube, reduction):
                continue
            marginal, _ = marginal_option_probabilities(cube, reduction)
            frames.append(
                pl.DataFrame(
                    {
                        "model_id": np.full(len(ii), cube.model_id, dtype=object),
                        "relation_id": np.full(len(ii), cube.relation_id, dtype=object),
                        "instance_id": cube.instance_ids[ii],
                        "split": cube.split[ii],
                        "answer_space_k": cube.answer_space_k[ii],
                        "answer_space_draw": cube.answer_space_draw[ii],
                        "option_index": oo,
                        "option_id": cube.option_ids[ii, oo],
                        "is_gold": cube.gold[ii, oo],
                        "estimator": np.full(len(ii), NAME, dtype=object),
                        "reduction": np.full(len(ii), reduction, dtype=object),
                        "probability": marginal[ii, oo],
                    },
                    schema=OPTION_ESTIMATES_SCHEMA,
                )
            )
    if not frames:
        return pl.DataFrame(schema=OPTION_ESTIMATES_SCHEMA)
    return pl.concat(frames).sort(OPTION_SORT_KEYS)
