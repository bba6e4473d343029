"""Stage 5, evaluation: the metric registry (one family per module) and reliability curves."""
