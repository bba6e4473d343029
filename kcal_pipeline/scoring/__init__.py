"""The scoring stage: statements scored by language models (per-token log-probabilities, token
roles, reductions).

engine.score_statements is the entry point (it picks the scorer by model kind); clm (plain causal
LM), prefix (prefix-packed causal LM, the fast path), mlm (pseudo-log-likelihood), stochastic
(dropout passes) and subject_mask (TemplateDiff) are its parts.

The names below are imported on first use: they import torch (~3 s), and the model registry
(kcal_pipeline.scoring.models), which `kcal sql` and `kcal models list` read, must not pay for it.
"""

import importlib

_EXPORTS = {
    "ROLE_CONTEXT": "kcal_pipeline.scoring.clm",
    "ROLE_OBJECT": "kcal_pipeline.scoring.clm",
    "ROLE_SUBJECT": "kcal_pipeline.scoring.clm",
    "ROLE_TEMPLATE": "kcal_pipeline.scoring.clm",
    "score_clm": "kcal_pipeline.scoring.clm",
    "token_roles": "kcal_pipeline.scoring.clm",
    "ScoringOptions": "kcal_pipeline.scoring.engine",
    "score_statements": "kcal_pipeline.scoring.engine",
    "score_mlm": "kcal_pipeline.scoring.mlm",
    "score_clm_shared_prefix": "kcal_pipeline.scoring.prefix",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
