"""Scoring statements with language models: per-token log-probabilities, token roles, reductions."""
from kcal_pipeline.scoring.clm import ROLE_OBJECT, ROLE_SUBJECT, ROLE_TEMPLATE, score_clm, token_roles

__all__ = ["ROLE_OBJECT", "ROLE_SUBJECT", "ROLE_TEMPLATE", "score_clm", "token_roles"]
