"""Benchmark: kcal's batched CLM scoring vs scoring one statement at a time, same model, same run.

Run: .venv/bin/python bench/scoring.py   (the first run converts the embedded GGUF model, ~30 s)
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
from kcal_pipeline.templates import fill  # noqa: E402

TEMPLATES = [
    "The capital of [X] is [Y].",
    "[Y] is the capital of [X].",
    "[X]'s capital city is [Y].",
    "The capital city of [X] is [Y].",
    "[X] has its capital in [Y].",
]
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Switzerland", "Bern"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
    ("Hungary", "Budapest"), ("Greece", "Athens"), ("Iceland", "Reykjavík"), ("Norway", "Oslo"),
    ("Japan", "Tokyo"), ("South Korea", "Seoul"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
    ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Côte d'Ivoire", "Yamoussoukro"),
    ("São Tomé and Príncipe", "São Tomé"), ("Bosnia and Herzegovina", "Sarajevo"),
    ("United Arab Emirates", "Abu Dhabi"), ("Paraguay", "Asunción"), ("Colombia", "Bogotá"),
    ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
    ("Turkey", "Ankara"), ("Maldives", "Malé"),
]


def statements():
    """Every template × country with the true capital and one distractor (the next country's)."""
    out = []
    for t in TEMPLATES:
        for i, (country, capital) in enumerate(CAPITALS):
            distractor = CAPITALS[(i + 1) % len(CAPITALS)][1]
            out += [fill(t, country, capital), fill(t, country, distractor)]
    return out


def one_at_a_time(loaded, texts):
    """The naive way: one plain forward per statement, [start] + tokens, no batching or padding."""
    sums, per_token = [], []
    for text in texts:
        ids = [loaded.start_token_id] + loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = loaded.model(torch.tensor([ids], device=loaded.device)).logits[0, :-1].double()
        lp = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:], device=loaded.device)[:, None])
        per_token.append(lp.squeeze(-1).cpu().numpy())
        sums.append(float(per_token[-1].sum()))
    return np.array(sums), per_token


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    cache = Path(os.environ.get("KCAL_MODEL_CACHE") or REPO / ".kcal" / "models")
    loaded, load_s = timed(lambda: load_model(DEFAULT_MODEL, cache))
    filled = statements()
    texts = [f.text for f in filled]
    n_tokens = sum(len(x) for x in loaded.tokenizer(texts, add_special_tokens=False)["input_ids"])
    print(f"model {loaded.key} ({loaded.revision}), {loaded.device}/{loaded.dtype}, "
          f"{torch.get_num_threads()} threads, loaded in {load_s:.1f} s")
    print(f"{len(texts)} statements, {n_tokens} tokens (+1 start token each), batch size {loaded.batch_size}")

    def batched():
        return score_clm(loaded, texts, [f.subject_span for f in filled], [f.object_span for f in filled])

    score_clm(loaded, texts[:8], [f.subject_span for f in filled[:8]], [f.object_span for f in filled[:8]])
    one_at_a_time(loaded, texts[:8])  # warm both paths up before timing
    frame, t_batched = timed(batched)
    (ref_sums, ref_tokens), t_ref = timed(lambda: one_at_a_time(loaded, texts))

    d_sum = np.abs(frame["ll_sum"].to_numpy() - ref_sums).max()
    d_tok = max(np.abs(np.asarray(a, dtype=np.float64) - b).max()
                for a, b in zip(frame["token_logprobs"].to_list(), ref_tokens))
    print(f"kcal score_clm (batched): {t_batched:6.2f} s  {len(texts) / t_batched:7.1f} statements/s")
    print(f"one at a time:            {t_ref:6.2f} s  {len(texts) / t_ref:7.1f} statements/s")
    print(f"speedup: {t_ref / t_batched:.2f}x")
    print(f"max |Δ ll_sum| = {d_sum:.2e}, max |Δ token log-prob| = {d_tok:.2e}")


if __name__ == "__main__":
    main()
