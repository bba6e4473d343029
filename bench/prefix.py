"""Benchmark: plain batched score_clm vs score_clm_shared_prefix on candidate sets, same model, same run.

Statements: 60 subjects × 3 templates × 6 options (object at the end, in the middle, first).
Object-first templates have no shared prefix beyond the start token, so they take the plain path
inside score_clm_shared_prefix too; the second line times only the templates that share one.

Run: .venv/bin/python bench/prefix.py   (the first run converts the embedded GGUF model, ~30 s)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing the package

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kcal_pipeline.models import DEFAULT_MODEL, load_model  # noqa: E402
from kcal_pipeline.scoring import score_clm  # noqa: E402
from kcal_pipeline.scoring.prefix import score_clm_shared_prefix  # noqa: E402
from kcal_pipeline.templates import fill  # noqa: E402

TEMPLATES = [
    "The capital of [X] is [Y].",
    "Most people who know [X] well would agree that its capital, [Y], is worth a visit.",
    "[Y] is the capital of [X].",
]
SUBJECTS = [
    "France", "Germany", "Italy", "Spain", "Portugal", "Switzerland", "Austria", "Poland", "Hungary",
    "Greece", "Iceland", "Norway", "Sweden", "Finland", "Denmark", "Ireland", "Belgium", "Netherlands",
    "Japan", "South Korea", "Thailand", "Vietnam", "Egypt", "Kenya", "Côte d'Ivoire",
    "São Tomé and Príncipe", "Bosnia and Herzegovina", "United Arab Emirates", "Paraguay", "Colombia",
    "Canada", "Mexico", "Australia", "New Zealand", "Turkey", "Maldives", "Peru", "Chile", "Argentina",
    "Brazil", "Uruguay", "Bolivia", "Ecuador", "Venezuela", "Cuba", "Jamaica", "Morocco", "Tunisia",
    "Algeria", "Nigeria", "Ghana", "Senegal", "Ethiopia", "Tanzania", "Uganda", "India", "Pakistan",
    "Nepal", "Mongolia", "Indonesia",
]
OPTIONS = ["Paris", "New Delhi", "New York", "Zürich", "São Tomé", "Reykjavík"]


def statements():
    return [fill(t, s, o) for t in TEMPLATES for s in SUBJECTS for o in OPTIONS]


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run(loaded, filled, label: str) -> None:
    args = ([f.text for f in filled], [f.subject_span for f in filled], [f.object_span for f in filled])
    plain, t_plain = timed(lambda: score_clm(loaded, *args))
    fast, t_fast = timed(lambda: score_clm_shared_prefix(loaded, *args))
    d_sum = np.abs(plain["ll_sum"].to_numpy() - fast["ll_sum"].to_numpy()).max()
    d_tok = max(np.abs(np.asarray(a) - np.asarray(b)).max()
                for a, b in zip(plain["token_logprobs"].to_list(), fast["token_logprobs"].to_list()))
    roles = plain["token_roles"].to_list() == fast["token_roles"].to_list()
    n = len(filled)
    print(f"[{label}] {n} statements")
    print(f"  score_clm (plain):          {t_plain:6.2f} s  {n / t_plain:7.1f} statements/s")
    print(f"  score_clm_shared_prefix:    {t_fast:6.2f} s  {n / t_fast:7.1f} statements/s")
    print(f"  speedup: {t_plain / t_fast:.2f}x   max |Δ ll_sum| = {d_sum:.2e}   "
          f"max |Δ token log-prob| = {d_tok:.2e}   roles equal: {roles}")


def main() -> None:
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or REPO / ".kcal" / "models")
    loaded, load_s = timed(lambda: load_model(DEFAULT_MODEL, cache))
    print(f"model {loaded.key} ({loaded.revision}), {loaded.device}/{loaded.dtype}, "
          f"{torch.get_num_threads()} threads, loaded in {load_s:.1f} s, batch size {loaded.batch_size}")
    filled = statements()
    warm = filled[:12]
    score_clm(loaded, [f.text for f in warm], [f.subject_span for f in warm], [f.object_span for f in warm])
    score_clm_shared_prefix(loaded, [f.text for f in warm], [f.subject_span for f in warm],
                            [f.object_span for f in warm])
    run(loaded, filled, "all templates")
    shared = [f for f in filled if f.object_span[0] > 0]
    run(loaded, shared, "object not first")


if __name__ == "__main__":
    main()
