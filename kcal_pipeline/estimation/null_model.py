"""The answer-prior null model: Base computed with the subject masked.

With the subject replaced (mask tokens for a masked LM, a neutral placeholder for a causal LM;
scoring/subject_mask.py) the model can only prefer an option for the template and the option
itself. How often that still picks the gold, and how confidently, shows how much of a model's
apparent knowledge is its prior over answers: an estimator that does little better than this one
is not reading the subject.
"""

from __future__ import annotations

from kcal_pipeline.estimation.cube import REDUCTIONS, OptionScoreCube
from kcal_pipeline.estimation.probabilities import option_probabilities, top_option
from kcal_pipeline.estimation.registry import Estimate, register


@register(
    "answer_prior",
    label="Answer prior",
    family="null_model",
    reductions=("sum", "answer_sum"),
    needs=("{ll}_masked",),
    paper="kcal (null model; subject masking as in Yoshikawa & Okazaki 2023)",
)
def answer_prior(cube: OptionScoreCube, reduction: str) -> Estimate:
    """ŷ = argmax_o ℓ_t^masked(o), C = max_o softmax(ℓ_t^masked)(o): Base on the subject-masked scores."""
    ll = cube.scores[f"{REDUCTIONS[reduction]}_masked"]
    return Estimate(*top_option(ll, option_probabilities(ll)))
