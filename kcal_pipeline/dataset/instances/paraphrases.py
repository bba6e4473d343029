"""Generated paraphrases: more templates per relation from an instruct LM, filtered by form.

More templates make the multi-template estimators (METHODS §2) less dependent on a few hand-written
sentences. A small model proposes many bad sentences, so every candidate passes a form filter and
each rejection is counted by reason; the filter cannot judge meaning, which is why generated
templates stay distinguishable (kind "generated") and a run chooses which set it uses.
Each kept template records its generator (model id @ revision) and the exact prompt.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

import polars as pl

from kcal_pipeline.dataset.templates import OBJECT_SLOT, SUBJECT_SLOT

MIN_CHARS = 10  # "[X] in [Y]." is about the shortest sentence that can state a relation
MAX_CHARS = 120  # longer lines are chatter, not a template
REASONS = (
    "newline",
    "slots",
    "too_short",
    "too_long",
    "not_a_sentence",
    "chatter",
    "duplicate_of_curated",
    "duplicate",
)
TEMPLATE_SETS = ("curated", "generated", "both")
_LIST_MARK = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CHATTER = (":", '"', "“", "”")
_SLOTS = (SUBJECT_SLOT, OBJECT_SLOT)


@dataclass(frozen=True)
class Candidate:
    relation_id: str
    text: str
    model_id: str
    generator: str  # model id @ revision: the exact weights that wrote it
    prompt: str


def build_prompt(relation_label: str, examples: list[str], n: int, tokenizer=None) -> str:
    """The instruction, wrapped in the tokenizer's chat template when it has one (instruct models
    follow instructions only in the format they were tuned on). A bulleted list invites the model
    to continue it, which gave SmolLM2-135M more usable lines than asking for a rewrite."""
    listing = "\n".join(f"- {e}" for e in examples)
    instruction = (
        f"List {n} different ways to say that [Y] is the {relation_label} of [X], one per line. "
        f"Use [X] and [Y] as placeholders.\n{listing}"
    )
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return instruction
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": instruction}], tokenize=False, add_generation_prompt=True
    )


def _lines(output: str) -> list[str]:
    """Candidate sentences from one completion: one per sentence, list marks and quotes removed."""
    pieces = (p for line in output.splitlines() for p in _SENTENCE_END.split(_LIST_MARK.sub("", line)))
    cleaned = (p.strip().strip('"“”').strip() for p in pieces)
    return [p for p in cleaned if p]


def generate_paraphrases(
    loaded,
    relation_id: str,
    relation_label: str,
    curated: list[str],
    *,
    model_id: str,
    n: int = 8,
    seed: int = 0,
    max_new_tokens: int = 48,
    samples: int = 8,
) -> list[Candidate]:
    """Unfiltered candidates from `samples` seeded completions of one prompt.

    Sampling (not greedy) because greedy decoding of a small model mostly repeats the examples;
    the seed is applied inside a forked RNG, so it is deterministic and leaves global state alone.
    """
    import torch

    tok = loaded.tokenizer
    prompt = build_prompt(relation_label, curated, n, tok)
    inputs = tok(prompt, return_tensors="pt", add_special_tokens=False).to(loaded.device)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = loaded.model.generate(
            **inputs,
            do_sample=True,
            temperature=0.9,
            top_p=0.95,
            pad_token_id=pad,
            num_return_sequences=samples,
            max_new_tokens=max_new_tokens,
        )
    generator = f"{model_id}@{loaded.revision}"
    texts = tok.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    return [
        Candidate(relation_id, line, model_id, generator, prompt) for text in texts for line in _lines(text)
    ]


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def _form_problem(text: str) -> str | None:
    """The first failed check, in REASONS order, so each rejection is counted exactly once."""
    if "\n" in text or "\r" in text:
        return "newline"
    rest = text.replace(SUBJECT_SLOT, "", 1).replace(OBJECT_SLOT, "", 1)
    if text.count(SUBJECT_SLOT) != 1 or text.count(OBJECT_SLOT) != 1 or "[" in rest or "]" in rest:
        return "slots"  # stray brackets ([Z], [X1]) would be scored as literal text
    text = text.strip()
    if len(text) < MIN_CHARS:
        return "too_short"
    if len(text) > MAX_CHARS:
        return "too_long"
    if not text.endswith((".", "!", "?")) or not (text[0].isupper() or text.startswith(_SLOTS)):
        return "not_a_sentence"
    if any(mark in text for mark in _CHATTER):
        return "chatter"  # quoting or introducing the examples ("Here is one: ...")
    return None


def filter_candidates(
    candidates: list[Candidate], curated: list[str]
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """(kept, [(rejected, reason)]): well-formed, sane length, new to curated and to each other.

    Kept texts are stripped of surrounding whitespace; the first of several duplicates is kept.
    """
    seen_curated = {_normal(t) for t in curated}
    seen: set[str] = set()
    kept, rejected = [], []
    for cand in candidates:
        key = _normal(cand.text)
        reason = (
            _form_problem(cand.text)
            or ("duplicate_of_curated" if key in seen_curated else None)
            or ("duplicate" if key in seen else None)
        )
        if reason:
            rejected.append((cand, reason))
            continue
        seen.add(key)
        kept.append(replace(cand, text=cand.text.strip()))
    return kept, rejected


def reason_counts(rejected: list[tuple[Candidate, str]]) -> dict[str, int]:
    """Rejections per reason, every reason listed (zeros too) so reports line up across relations."""
    counts = Counter(reason for _, reason in rejected)
    return {reason: counts[reason] for reason in REASONS}


def paraphrase_rows(kept: list[Candidate]) -> pl.DataFrame:
    """Templates-table rows (plus generator and prompt) for kept candidates, ids `<rel>:g<i>`."""
    rows, per_relation = [], Counter()
    for cand in kept:
        rank = per_relation[cand.relation_id]
        per_relation[cand.relation_id] += 1
        rows.append(
            {
                "relation_id": cand.relation_id,
                "template_id": f"{cand.relation_id}:g{rank}",
                "text": cand.text,
                "kind": "generated",
                "source": f"generated:{cand.model_id}",
                "rank": rank,
                "generator": cand.generator,
                "prompt": cand.prompt,
            }
        )
    schema = dict.fromkeys(("relation_id", "template_id", "text", "kind", "source"), pl.Utf8)
    return pl.DataFrame(rows, schema=schema | {"rank": pl.Int32, "generator": pl.Utf8, "prompt": pl.Utf8})


def choose_templates(curated: pl.DataFrame, generated: pl.DataFrame, which: str) -> pl.DataFrame:
    """The template set a run uses: "curated", "generated" or "both" (curated first).

    Ranks are renumbered within each relation so rank 0 is still the headline template. With
    "generated", a relation the model gave no valid paraphrase is an error, not a silent gap.
    """
    if which not in TEMPLATE_SETS:
        raise ValueError(f"template set must be one of {TEMPLATE_SETS}, got {which!r}")
    parts = {"curated": [curated], "generated": [generated], "both": [curated, generated]}[which]
    chosen = pl.concat(parts, how="diagonal_relaxed")
    missing = sorted(set(curated["relation_id"]) - set(chosen["relation_id"]))
    if missing:
        raise ValueError(f"no {which} templates for relation(s) {', '.join(missing)}")
    order = pl.when(pl.col("kind") == "curated").then(0).otherwise(1)
    return chosen.sort("relation_id", order, "rank").with_columns(
        rank=pl.int_range(pl.len(), dtype=pl.Int32).over("relation_id")
    )
