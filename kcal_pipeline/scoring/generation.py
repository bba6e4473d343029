"""Open answers: a greedy answer and N sampled ones per question, with their token log-probabilities
and entropies from the same forward passes (issue 33, part 1; MACE's setting).

Each question gets N + 1 rows (row 0 greedy, rows 1 … N sampled) that share its prompt's key-value
cache: prompts run once, left-padded and masked, and several questions decode in one call (decoding
reads every weight once per step, so rows are nearly free). Each step reads the model's own
distribution (temperature 1) for the recorded log-probability and entropy of the chosen token, and
samples from the tempered, nucleus-filtered one. A response ends before a stop token (the end-of-turn
or end-of-text token, or a token that contains a line break: MACE asks for one short answer), which
is not part of its text but is part of its log-probability (the probability of the answer *and* its
end, so an answer that stops at once still has one below 1); one that reaches max_new_tokens says
so (`stop = "length"`), and a row that ends leaves the batch and its cache. Sampling is by inverse
CDF on one uniform per sampled row and step from a torch.Generator of each question, seeded by
(seed, prompt, question key), drawn whether the row still runs or not: the same settings reproduce
a question's samples on the same machine, and other questions in its call (padding) move its
log-probabilities by ~1e-5, not its draws, unless a draw lands that close to a boundary. An
instruction-tuned model gets its chat template; a model without one a completion prompt
("Question: …\nAnswer:").

A question is a string or a conversation (a list of {"role": "user" | "assistant", "content": …},
starting with a user turn) for the multi-turn prompts of scoring/prompted.py; every row carries the
name of the prompt it answers (`prompt`, "answer" for the question itself). A conversation ending in
an assistant turn is continued (a pre-filled answer), otherwise the model answers a new turn. The stop
policy is per call: "line" ends a response at a line break too (one short answer), "turn" only at
the end of the turn or text (answers that span lines, "Answer: …\nConfidence: …").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from kcal_pipeline.core.options import GenerationOptions, OptionsError

if TYPE_CHECKING:
    from kcal_pipeline.scoring.loaded_model import LoadedModel

GREEDY = 0
ANSWER_PROMPT = "answer"  # the `prompt` of the question asked as it is
SCHEMA = {
    "instance_id": pl.String,
    "prompt": pl.String,  # which prompt the row answers: "answer", or one of scoring/prompted.py's
    "sample": pl.Int64,
    "response": pl.String,
    "token_ids": pl.List(pl.Int64),
    "n_tokens": pl.Int64,
    "n_scored": pl.Int64,  # the tokens in logprob_sum: the response's, and its stop token if it stopped
    "logprob_sum": pl.Float64,
    "logprob_mean": pl.Float64,
    "entropy_mean": pl.Float64,
    "stop": pl.String,
    "stop_token": pl.Int64,
    "p_true": pl.Float64,  # the judge prompts' p(True) / (p(True) + p(False)); null for the others
}
COMPLETION_PROMPT = "Question: {question}\nAnswer:"
STOP_POLICIES = ("line", "turn")
# A question as asked: its text, or a conversation of {"role": "user" | "assistant", "content": …}.
Question = str | Sequence[Mapping[str, str]]
# Rows decoded together: decoding reads every weight once per step whatever the batch, so questions
# share calls (8 questions of N = 10 samples + greedy per call); rows that stop leave the batch, so
# a long call ends on few rows (96 rows: 0.7-0.8× the time of 48 on the verbal prompts, 2 cores).
ROWS_PER_CALL = 96


def _default(field: str):
    """A user setting's default, defined once in core/options.py (GenerationOptions)."""
    return GenerationOptions.model_fields[field].default


@dataclass(frozen=True)
class GenerationSettings:
    """How answers are drawn (defaults: the user settings', MACE's N = 10 at temperature 1, top-p
    1); the sampler's own form of GenerationOptions (`seed` is its generation_seed), validated by
    GenerationOptions, the one validation of these settings (core/options.py; the Dagster resource
    is GenerationOptions too): n_samples ≥ 1, 0 < temperature ≤ 5, 0 < top_p ≤ 1, 1 ≤
    max_new_tokens ≤ 256, seed ≥ 0. Two values only a prompt sets pass its bounds: n_samples 0 (a
    greedy-only prompt) and max_new_tokens above the user's cap (a prompt that gives an answer more
    room, scoring/prompted.py: verb_topk 3 × its length + 16)."""

    n_samples: int = _default("n_samples")
    temperature: float = _default("temperature")
    top_p: float = _default("top_p")
    max_new_tokens: int = _default("max_new_tokens")
    seed: int = _default("generation_seed")

    def __post_init__(self) -> None:
        bounds = GenerationOptions.model_fields["max_new_tokens"].metadata
        cap = next(b.le for b in bounds if hasattr(b, "le"))  # the user's cap on an answer's length
        try:
            GenerationOptions(
                n_samples=self.n_samples or 1,  # 0: a greedy-only prompt
                temperature=self.temperature,
                top_p=self.top_p,
                max_new_tokens=min(self.max_new_tokens, cap),  # a prompt may pass the user's cap
                generation_seed=self.seed,
            )
        except OptionsError as error:
            raise ValueError(
                f"{error} (a prompt may also set n_samples 0 or max_new_tokens > {cap})"
            ) from None


def as_conversation(question: Question) -> list[dict[str, str]]:
    """A question as a conversation: its text as one user turn, or the turns given (checked)."""
    if isinstance(question, str):
        return [{"role": "user", "content": question}]
    turns = [{"role": turn["role"], "content": turn["content"]} for turn in question]
    if not turns or turns[0]["role"] != "user":
        raise ValueError("a conversation starts with a user turn")
    if any(turn["role"] not in ("user", "assistant") for turn in turns):
        raise ValueError(f"conversation roles are 'user' or 'assistant', got {[t['role'] for t in turns]}")
    return turns


def completion_transcript(turns: Sequence[Mapping[str, str]]) -> str:
    """The plain text a model without a chat template is asked: "Question: <first user turn>", each
    later user turn as a plain line, every user turn followed by "\nAnswer:" and every assistant turn
    written after it ("Answer: <content>"). A single question gives COMPLETION_PROMPT."""
    text = ""
    for number, turn in enumerate(turns):
        if turn["role"] == "user":
            text += ("Question: " if number == 0 else "\n") + turn["content"] + "\nAnswer:"
        else:
            text += " " + turn["content"]
    return text


def prompt_ids(loaded: LoadedModel, question: Question) -> tuple[list[int], str]:
    """The token ids a question is asked with, and which prompt it is ("chat" or "completion"). A
    conversation ending in an assistant turn is continued from its last token (no end of turn)."""
    tokenizer, turns = loaded.tokenizer, as_conversation(question)
    prefilled = turns[-1]["role"] == "assistant"
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            turns, add_generation_prompt=not prefilled, continue_final_message=prefilled, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return list(ids), "chat"
    text = completion_transcript(turns)
    return [loaded.start_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]], "completion"


def stop_token_ids(loaded: LoadedModel, policy: str = "line") -> set[int]:
    """End-of-text / end-of-turn tokens, and for the "line" policy every token whose text holds a
    line break."""
    if policy not in STOP_POLICIES:
        raise ValueError(f"stop policy {policy!r}: one of {STOP_POLICIES}")
    tokenizer = loaded.tokenizer
    stops = {i for i in (tokenizer.eos_token_id, loaded.start_token_id) if i is not None}
    stops |= {
        i
        for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>")
        if (i := tokenizer.convert_tokens_to_ids(name)) is not None and i != tokenizer.unk_token_id
    }
    if policy == "turn":
        return stops
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    decoded = {
        i for i, token in enumerate(vocabulary) if token is not None and ("\n" in token or "Ċ" in token)
    }
    return stops | decoded


def generator_seed(seed: int, key: str, prompt: str = ANSWER_PROMPT) -> int:
    """The seed of a question's generator: (seed, key) for the answer prompt, (seed, prompt, key) for
    the others, so every prompt draws independently of the others."""
    text = f"{seed}\x00{key}" if prompt == ANSWER_PROMPT else f"{seed}\x00{prompt}\x00{key}"
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def check_keys(questions: Sequence, keys: Sequence[str]) -> None:
    """One key per question, each its own (keys seed the questions' samples)."""
    if len(questions) != len(keys):
        raise ValueError(f"questions ({len(questions)}) and keys ({len(keys)}) differ in length")
    if len(set(keys)) != len(keys):
        raise ValueError("keys: every question needs its own key (they seed its samples)")


def generate_answers(
    loaded: LoadedModel,
    questions: Sequence[Question],
    keys: Sequence[str],
    settings: GenerationSettings = GenerationSettings(),
    progress: Callable[[int, int], None] | None = None,
    *,
    prompt: str = ANSWER_PROMPT,
    stop: str = "line",
) -> pl.DataFrame:
    """One row per (question, sample): the response text, its token count, log p (sum and mean, at
    temperature 1), the mean entropy of the model's distribution over its steps, and why it ended.
    `prompt` names the prompt in its column and, unless "answer", in the samples' seeds."""
    check_keys(questions, keys)
    stops = stop_token_ids(loaded, stop)
    per_call = max(1, ROWS_PER_CALL // (settings.n_samples + 1))
    rows: list[dict] = []
    for first in range(0, len(questions), per_call):
        chosen = range(first, min(first + per_call, len(questions)))
        prompts = [prompt_ids(loaded, questions[i])[0] for i in chosen]
        rows += _question_batch(loaded, prompts, [keys[i] for i in chosen], settings, stops, prompt)
        if progress is not None:
            progress(chosen.stop, len(questions))
    return pl.DataFrame(rows, schema=SCHEMA)


def left_padded(prompts: Sequence[Sequence[int]]):
    """Token ids, attention mask and position ids of prompts left-padded to one width (positions
    counted from each prompt's first token, so padding changes no prompt's positions)."""
    import torch

    width = max(len(p) for p in prompts)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _prefill(loaded: LoadedModel, prompts: Sequence[Sequence[int]]):
    """One forward of the left-padded prompts (under inference mode): its output and the mask."""
    ids, mask, positions = left_padded(prompts)
    device = loaded.device
    output = loaded.model(
        ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), use_cache=True
    )
    return output, mask


@dataclass(frozen=True)
class NextTokenReading:
    """One prompt's next token, read once (the judge prompts): the log-probabilities of a pair of
    tokens (" True", " False"), the greedy token then the drawn ones with their log-probabilities,
    and the distribution's entropy (None where the engine cannot give it: a server)."""

    pair: tuple[float, float]
    tokens: list[int]
    logprobs: list[float]
    entropy: float | None


def next_token_readings(
    loaded: LoadedModel,
    prompts: Sequence[Sequence[int]],
    pair: tuple[int, int],
    settings: GenerationSettings,
    seeds: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[NextTokenReading]:
    """Each prompt's next-token distribution from one forward per ROWS_PER_CALL prompts: the pair's
    log-probabilities, the argmax, and (with seeds) settings.n_samples tokens drawn at the settings'
    temperature and top-p from a generator seeded with the prompt's seed."""
    import torch

    readings: list[NextTokenReading] = []
    for first in range(0, len(prompts), ROWS_PER_CALL):
        chosen = range(first, min(first + ROWS_PER_CALL, len(prompts)))
        logits = next_token_logits(loaded, [prompts[i] for i in chosen])
        log_p = torch.log_softmax(logits.double(), dim=-1)
        entropy = -(log_p.exp() * log_p).sum(dim=-1)
        for row, i in enumerate(chosen):
            tokens = [int(log_p[row].argmax())]
            if settings.n_samples and seeds is not None:
                generator = torch.Generator(device="cpu").manual_seed(seeds[i])
                drawn = sample_tokens(logits[row].expand(settings.n_samples, -1), settings, generator)
                tokens += [int(t) for t in drawn]
            readings.append(
                NextTokenReading(
                    pair=(float(log_p[row, pair[0]]), float(log_p[row, pair[1]])),
                    tokens=tokens,
                    logprobs=[float(log_p[row, t]) for t in tokens],
                    entropy=float(entropy[row]),
                )
            )
        if progress is not None:
            progress(chosen.stop, len(prompts))
    return readings


def next_token_logits(loaded: LoadedModel, prompts: Sequence[Sequence[int]]):
    """The logits (float32, on the CPU) of the token after each prompt: one forward of all of them."""
    import torch

    with torch.inference_mode():
        output, _ = _prefill(loaded, prompts)
        return output.logits[:, -1, :].float().cpu()


def _question_batch(
    loaded: LoadedModel,
    prompts: list[list[int]],
    keys: list[str],
    settings: GenerationSettings,
    stops: set[int],
    prompt: str = ANSWER_PROMPT,
) -> list[dict]:
    """The rows of several questions decoded together: prompts left-padded (masked, with positions
    counted from each prompt's first token), each prompt's cache repeated for its N + 1 rows, and
    each question's samples drawn with its own generator."""
    import torch

    model, device = loaded.model, loaded.device
    cache_argument = cache_argument_name(model)
    per_question = settings.n_samples + 1
    rows = len(prompts) * per_question
    generators = [
        torch.Generator(device="cpu").manual_seed(generator_seed(settings.seed, k, prompt)) for k in keys
    ]
    stop_mask = _stop_mask(stops, model.config.vocab_size)
    greedy_row = torch.arange(rows) % per_question == 0
    with torch.inference_mode():
        out, mask = _prefill(loaded, prompts)
        cache = cache_of(out)
        cache.batch_repeat_interleave(per_question)
        # Sampling and bookkeeping run on the CPU (the generators are CPU generators, and the
        # per-row loop reads single values): one (rows × vocabulary) copy per step on a GPU.
        logits = out.logits[:, -1, :].float().cpu().repeat_interleave(per_question, dim=0)
        mask = mask.repeat_interleave(per_question, dim=0)
        position = mask.sum(-1)  # the next token's position in each row
        decoded = _Decoded(rows)
        # The rows still decoding (row numbers): a row that stopped leaves the batch and its cache,
        # so the forward runs on live rows only (verbal answers stop at very different lengths).
        active = torch.arange(rows)
        for _ in range(settings.max_new_tokens):
            log_p = torch.log_softmax(logits.double(), dim=-1)  # the model's own distribution
            uniforms = _step_uniforms(generators, per_question)
            chosen = log_p.argmax(dim=-1)
            sampled = ~greedy_row[active]
            if sampled.any():
                chosen[sampled] = tokens_at(logits[sampled], settings, uniforms[active[sampled]])
            keep = decoded.record_step(active, chosen, log_p, stop_mask)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep)
                cache.batch_select_indices(index.to(device))
                active, chosen, mask, position = active[index], chosen[index], mask[index], position[index]
            mask = torch.cat([mask, torch.ones(len(active), 1, dtype=mask.dtype)], dim=1)
            out = model(
                chosen[:, None].to(device),
                attention_mask=mask.to(device),
                position_ids=position[:, None].to(device),
                **{cache_argument: cache},
                use_cache=True,
            )
            cache, logits = cache_of(out), out.logits[:, -1, :].float().cpu()
            position = position + 1
    return decoded.rows(loaded, keys, per_question, prompt)


def _stop_mask(stops: set[int], vocab_size: int):
    """A boolean per vocabulary entry: True for the stop tokens (those inside the vocabulary)."""
    import torch

    stop_mask = torch.zeros(vocab_size, dtype=torch.bool)
    stop_mask[[i for i in stops if i < vocab_size]] = True
    return stop_mask


def _step_uniforms(generators, per_question: int):
    """One step's uniforms, one per row: 0 for each question's greedy row (no draw), then one draw
    per sampled row from the question's generator. Every question draws for all its sampled rows,
    live or not, so a row's draws do not depend on when its siblings stopped."""
    import torch

    greedy = torch.zeros(1, dtype=torch.float64)
    return torch.cat(
        [
            torch.cat([greedy, torch.rand(per_question - 1, generator=g, dtype=torch.float64)])
            for g in generators
        ]
    )


class _Decoded:
    """Each row's decoding so far: its tokens, the sums of log p and entropy over its scored steps
    (the stop token's step too), their count, and why it ended ("length" until a stop token)."""

    def __init__(self, rows: int):
        import torch

        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.logprob = torch.zeros(rows, dtype=torch.float64)
        self.entropy = torch.zeros(rows, dtype=torch.float64)
        self.stop = ["length"] * rows
        self.stop_token: list[int | None] = [None] * rows
        self.scored = [0] * rows

    def record_step(self, active, chosen, log_p, stop_mask) -> list[int]:
        """Add each live row's chosen token (`active`: the row numbers of the batch, `log_p`: its
        log-probabilities); returns the batch positions of the rows that go on (no stop token)."""
        step_entropy = -(log_p.exp() * log_p).sum(dim=-1)
        keep = []
        for b, row in enumerate(active.tolist()):
            token = int(chosen[b])
            self.logprob[row] += log_p[b, token]  # the stop token too: p(response, then its end)
            self.entropy[row] += step_entropy[b]
            self.scored[row] += 1
            if stop_mask[token]:
                self.stop[row], self.stop_token[row] = "stop", token
                continue
            self.tokens[row].append(token)
            keep.append(b)
        return keep

    def rows(self, loaded: LoadedModel, keys: list[str], per_question: int, prompt: str) -> list[dict]:
        """One SCHEMA row per decoded row: question `keys[row // per_question]`, sample
        `row % per_question` (0: greedy)."""
        result = []
        for row, tokens in enumerate(self.tokens):
            result.append(
                {
                    "instance_id": keys[row // per_question],
                    "prompt": prompt,
                    "sample": row % per_question,
                    "response": loaded.tokenizer.decode(tokens, skip_special_tokens=True).strip(),
                    "token_ids": tokens,
                    "n_tokens": len(tokens),
                    "n_scored": self.scored[row],
                    "logprob_sum": float(self.logprob[row]),
                    "logprob_mean": float(self.logprob[row]) / self.scored[row],
                    "entropy_mean": float(self.entropy[row]) / self.scored[row],
                    "stop": self.stop[row],
                    "stop_token": self.stop_token[row],
                    "p_true": None,
                }
            )
        return result


def cache_argument_name(model) -> str:
    """The forward's name for the key-value cache: `cache` from transformers 5.2x (which warns on
    `past_key_values`), `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(output):
    """The key-value cache a forward returned (`cache`, `past_key_values` before transformers 5.2x)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def sample_tokens(logits, settings: GenerationSettings, generator):
    """One token per row from softmax(logits / T), restricted to the top-p nucleus."""
    import torch

    uniforms = torch.rand(logits.shape[0], generator=generator, dtype=torch.float64)
    return tokens_at(logits, settings, uniforms)


def tokens_at(logits, settings: GenerationSettings, uniforms):
    """The token whose cumulative probability first exceeds u · total, per row (inverse-CDF
    sampling from softmax(logits / T) within the top-p nucleus): one uniform per row, so a draw
    costs a cumulative sum, not torch.multinomial's 20 ms per call on a 49k vocabulary. A token of
    probability 0 (outside the nucleus) is never chosen: its cumulative sum equals its
    predecessor's."""
    import torch

    probs = torch.softmax(logits.double() / settings.temperature, dim=-1)
    if settings.top_p < 1.0:
        ordered, order = probs.sort(dim=-1, descending=True)
        before = ordered.cumsum(dim=-1) - ordered  # mass of the tokens ranked above each
        ordered[before >= settings.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    cumulative = probs.cumsum(dim=-1)
    targets = (uniforms.to(torch.float64) * cumulative[:, -1])[:, None]
    return torch.searchsorted(cumulative, targets, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
