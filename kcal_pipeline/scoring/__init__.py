"""Scoring statements with language models: per-token log-probabilities, token roles, reductions.

engine.score_statements is the entry point (it picks the scorer by model kind); clm (plain causal
LM), prefix (prefix-packed causal LM, the fast path), mlm (pseudo-log-likelihood), stochastic
(dropout passes) and subject_mask (TemplateDiff) are its parts.
"""

from kcal_pipeline.scoring.clm import ROLE_OBJECT, ROLE_SUBJECT, ROLE_TEMPLATE, score_clm, token_roles
from kcal_pipeline.scoring.engine import ScoringOptions, score_statements
from kcal_pipeline.scoring.mlm import score_mlm
from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

__all__ = [
    "ROLE_OBJECT",
    "ROLE_SUBJECT",
    "ROLE_TEMPLATE",
    "ScoringOptions",
    "score_clm",
    "score_clm_shared_prefix",
    "score_mlm",
    "score_statements",
    "token_roles",
]
