"""Stage 4, confidence estimation: the option-score cube and the estimator registry (one family per module)."""
