"""Engine "openai": a model served elsewhere (vLLM, SGLang, …) scored through its completions API.

client.py speaks HTTP (bounded concurrency, retries, Retry-After, timeouts), checks.py refuses a
server whose prompt log-probabilities cannot be trusted, scorer.py turns echoed log-probabilities
into clm.py's rows.
"""
