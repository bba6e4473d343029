"""Where does a causal-LM scoring call spend its time? (issue 31, step 1: measure before tuning)

Scores two real statement sets with the embedded model, each through kcal's packed path
(score_clm_shared_prefix) and its plain path (score_clm), and splits the wall time of each call into
tokenisation, the Python work around the forward (packing, trie, masks, padding), the model's
modules (embedding, attention, MLP, RMS norms, LM head — timed by forward hooks; CPU ops run
synchronously, so a hook pair brackets the module's work), the float64 log-normaliser, and the rest
(gathering targets, building the frame). Nothing is changed in kcal: the normaliser is timed through
a wrapper around the function the scorers call.

Sets (BEAR with Kissling et al.'s templates, ../shared/data): "subject-first" — P36 (with its first
answer-last paraphrase: every option shares the subject's prefix) and "object-first" — P36 with its
first paraphrase that opens with the option ("[Y] serves as the capital of [X].": no shared
prefix, MACE's case); 60 options per instance in both.

    .venv/bin/python bench/profile_scoring.py [--instances 20] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
KISSLING = SHARED / "kissling-templates" / "metadata_relations.json"
BEAR = SHARED / "bear"

MODULE_GROUPS = {  # transformers' Llama module class → the group its time counts in
    "LlamaAttention": "attention",
    "LlamaMLP": "MLP",
    "LlamaRMSNorm": "RMS norms",
    "Embedding": "embedding",
}


def statements(relation: str, object_first: bool, instances: int) -> tuple[list[str], list, list]:
    """Every option of the first `instances` BEAR facts of `relation` under its first Kissling
    paraphrase that opens (object_first) or does not open with the object: texts, subject spans,
    object spans (character offsets), as kcal's statements table holds them."""
    meta = json.loads(KISSLING.read_text())[relation]
    template = next(t for t in meta["templates"][:5] if t.strip().startswith("[Y]") == object_first)
    options = meta["answer_space_labels"]
    facts = [
        json.loads(line) for line in (BEAR / f"{relation}.jsonl").read_text().splitlines() if line.strip()
    ]
    texts, subjects, objects = [], [], []
    for fact in facts[:instances]:
        subject = fact["sub_label"]
        for option in options:
            text, subject_span, object_span = "", None, None
            for piece in _pieces(template):
                if piece == "[X]":
                    subject_span = (len(text), len(text) + len(subject))
                    text += subject
                elif piece == "[Y]":
                    object_span = (len(text), len(text) + len(option))
                    text += option
                else:
                    text += piece
            texts.append(text)
            subjects.append(subject_span)
            objects.append(object_span)
    return texts, subjects, objects


def _pieces(template: str) -> list[str]:
    out, rest = [], template
    while rest:
        cut = min((rest.find(s) for s in ("[X]", "[Y]") if s in rest), default=-1)
        if cut == -1:
            out.append(rest)
            break
        if cut:
            out.append(rest[:cut])
        out.append(rest[cut : cut + 3])
        rest = rest[cut + 3 :]
    return out


class Timer:
    """Seconds per named part, accumulated; `hooks` brackets every module of MODULE_GROUPS and the
    LM head with forward pre/post hooks (nested modules are not double counted: none nest here)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def part(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def hooks(self, model) -> list:
        handles, starts = [], {}

        def pre(module, _args):
            starts[id(module)] = time.perf_counter()

        def post(group):
            def done(module, _args, _out):
                self.seconds[group] += time.perf_counter() - starts.pop(id(module))

            return done

        for name, module in model.named_modules():
            group = MODULE_GROUPS.get(type(module).__name__) or (
                "LM head" if name.endswith("lm_head") else None
            )
            if group:
                handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post(group))]
        handles += [
            model.register_forward_pre_hook(
                lambda m, a, k: starts.__setitem__("model", time.perf_counter()), with_kwargs=True
            ),
            model.register_forward_hook(
                lambda m, a, k, o: self.seconds.__setitem__(
                    "model forward", self.seconds["model forward"] + time.perf_counter() - starts.pop("model")
                ),
                with_kwargs=True,
            ),
        ]
        return handles


def profile(loaded, scorer, texts, subjects, objects, batch_size: int) -> tuple[dict[str, float], int]:
    """One call of `scorer` on the set, its time split into parts; returns (seconds per part, rows)."""
    from kcal_pipeline.scoring import clm, prefix

    timer = Timer()
    handles = timer.hooks(loaded.model)
    original_norm = clm.log_normaliser

    def timed_norm(logits):
        with timer.part("log-normaliser"):
            return original_norm(logits)

    original_encode = clm.encode_inputs

    def timed_encode(*args, **kwargs):
        with timer.part("tokenisation"):
            return original_encode(*args, **kwargs)

    clm.log_normaliser = prefix.log_normaliser = timed_norm
    clm.encode_inputs = prefix.encode_inputs = timed_encode
    try:
        with timer.part("total"):
            frame = scorer(loaded, texts, subjects, objects, batch_size=batch_size)
    finally:
        clm.log_normaliser = prefix.log_normaliser = original_norm
        clm.encode_inputs = prefix.encode_inputs = original_encode
        for h in handles:
            h.remove()
    s = dict(timer.seconds)
    modules = sum(s.get(g, 0.0) for g in ("attention", "MLP", "RMS norms", "embedding", "LM head"))
    s["other in forward"] = s.get("model forward", 0.0) - modules  # residual adds, rotary, mask prep
    s["around the forward"] = (
        s["total"] - s.get("model forward", 0.0) - s.get("log-normaliser", 0.0) - s.get("tokenisation", 0.0)
    )  # packing, trie, masks, padding, gathers, the frame
    return s, frame.height


PARTS = (
    "tokenisation",
    "around the forward",
    "embedding",
    "attention",
    "MLP",
    "RMS norms",
    "LM head",
    "other in forward",
    "log-normaliser",
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=20, help="BEAR facts per set (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--batch-size", type=int, default=32, help="kcal's batch size (default %(default)s)")
    args = p.parse_args()
    if not KISSLING.is_file():
        raise SystemExit(f"{KISSLING}: not found (../shared/data beside the repository is needed)")
    if args.threads:
        torch.set_num_threads(args.threads)
    from kcal_pipeline.core.paths import kcal_home, model_cache_dir
    from kcal_pipeline.scoring.clm import score_clm
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

    loaded = load_model(DEFAULT_MODEL, model_cache_dir(kcal_home(os.environ.get("KCAL_HOME"))))
    print(
        f"bench/profile_scoring.py — torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{loaded.key} {loaded.device}/{loaded.dtype}, batch size {args.batch_size}, "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    sets = {
        "subject-first (BEAR P36, answer last)": statements("P36", False, args.instances),
        "object-first (BEAR P36, option first)": statements("P36", True, args.instances),
    }
    paths = {"packed": score_clm_shared_prefix, "plain": score_clm}
    for title, (texts, subjects, objects) in sets.items():
        score_clm(loaded, texts[:8], subjects[:8], objects[:8], batch_size=8)  # warm-up
        print(f"\n{title}: {len(texts)} statements, e.g. {texts[0]!r}")
        results = {
            name: profile(loaded, fn, texts, subjects, objects, args.batch_size) for name, fn in paths.items()
        }
        header = f"{'part':<20}" + "".join(f"{name + ' s':>12}{'%':>7}" for name in results)
        print(header)
        print("-" * len(header))
        for part in (*PARTS, "total"):
            cells = ""
            for s, _ in results.values():
                v = s.get(part, 0.0)
                cells += f"{v:>12.2f}{100 * v / s['total']:>7.1f}"
            print(f"{part:<20}{cells}")
        print(
            f"{'statements/s':<20}"
            + "".join(f"{rows / s['total']:>12.1f}{'':>7}" for s, rows in results.values())
        )


if __name__ == "__main__":
    main()
