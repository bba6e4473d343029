"""A small OpenAI-compatible completions server over a real LM (kcal's torch SmolLM2), for the quick
suite and for the faults no real server produces on demand.

It answers `/v1/models` and `/v1/completions` (token-id or text prompts, several per request,
`echo`, `logprobs`, `max_tokens`, `temperature`, `top_p`, `n`, `seed`, `stop`, `stop_token_ids`,
`return_tokens_as_token_ids`) the way vLLM does, computing
every log-probability with a plain float64 log-softmax over the model's logits, one prompt at a
time. The real servers are tested apart: vLLM's CPU build (`make test-serving`) gets scoring right,
llama-cpp-python's server gets prompt log-probabilities wrong (`make llama-cpp`).

Faults, set per test on `server.faults`:
- `retry_after`: the next N requests get 429 with `Retry-After: <seconds>`;
- `unavailable`: the next N get 503 without Retry-After;
- `drop`: the next N connections are closed without a reply;
- `slow_s`: the next request waits this long before answering;
- `delay_s`: every completions request waits this long (a long run, to kill midway);
- `no_prompt_logprobs`: echo returns None for every prompt token (llama.cpp's `llama-server`);
- `wrong_prompt_logprobs`: echoed prompt log-probabilities are those of the wrong position, while
  generated tokens stay right (what llama-cpp-python's server does);
- `char_tokens`: text prompts are split into characters (a server with another tokenizer);
- `ids_refused`: token-id prompts get 500 (llama-cpp-python's server takes text only);
- `processed_logprobs`: generated tokens get the sampler's log-probability (tempered, top-p
  filtered) instead of the model's (vLLM's `--logprobs-mode processed_logprobs`);
- `text_tokens`: generated tokens come back as text even when asked for ids;
- `no_tokens`: a generation returns no tokens at all;
- `fail_after`: after this many completions requests, every request gets 500;
- `api_key`: requests without `Authorization: Bearer <key>` get 401.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from kcal_pipeline.scoring.generation import cache_argument_name, cache_of


@dataclass
class Faults:
    retry_after: int = 0
    retry_after_s: float = 1.0
    unavailable: int = 0
    drop: int = 0
    slow_s: float = 0.0
    delay_s: float = 0.0
    no_prompt_logprobs: bool = False
    wrong_prompt_logprobs: bool = False
    char_tokens: bool = False
    ids_refused: bool = False
    processed_logprobs: bool = False
    text_tokens: bool = False
    no_tokens: bool = False
    fail_after: int | None = None
    api_key: str | None = None


@dataclass
class Seen:
    requests: int = 0
    completions: int = 0
    prompts: int = 0
    headers: list = field(default_factory=list)


class ReferenceServer:
    """Serves `loaded` (a kcal LoadedModel on torch) as `name` on 127.0.0.1:<free port>."""

    def __init__(self, loaded, name: str, root: str | None = None):
        self.loaded, self.name, self.root = loaded, name, root
        self.faults, self.seen = Faults(), Seen()
        self._lock = threading.Lock()  # one forward pass at a time (the model is not thread-safe)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ReferenceServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- the model ------------------------------------------------------------------------------

    def complete(self, prompt, body: dict, sample: int, prefilled: dict) -> dict:
        """One choice; `prefilled` keeps the prompt's forward for the request's other samples."""
        tok = self.loaded.tokenizer
        if isinstance(prompt, str):
            ids = (
                [ord(c) % 1000 + 100 for c in prompt] if self.faults.char_tokens else tok(prompt)["input_ids"]
            )
        else:
            ids = [int(i) for i in prompt]
        generated: list[tuple[int, float]] = []
        seed = (int(body.get("seed") or 0) * 1000 + sample) % 2**63
        generator = torch.Generator().manual_seed(seed)
        temperature = float(body.get("temperature", 1.0))
        stop_ids = {int(i) for i in body.get("stop_token_ids") or []} | {tok.eos_token_id}
        finish, stop_reason = "length", None
        with self._lock, torch.inference_mode():  # one sequence at a time, decoding with its cache
            model = self.loaded.model
            if "out" not in prefilled:
                prefilled["out"] = model(input_ids=torch.tensor([ids]), use_cache=True)
            cache = copy.deepcopy(cache_of(prefilled["out"]))  # each sample decodes on its own copy
            # the prompt's log-probabilities, and the next token's distribution
            lp = torch.log_softmax(prefilled["out"].logits[0].double(), dim=-1)
            dist = lp[-1]
            for _ in range(int(body.get("max_tokens", 16))):
                if temperature == 0.0:
                    nxt = int(dist.argmax())
                else:
                    nxt = int(torch.multinomial(_nucleus(dist, temperature, body), 1, generator=generator))
                reported = dist
                if self.faults.processed_logprobs:  # the sampler's distribution, not the model's
                    reported = torch.log(_nucleus(dist, temperature or 1.0, body).clamp(min=1e-300))
                generated.append((nxt, float(reported[nxt])))
                text = tok.decode([g for g, _ in generated])
                if any(s in text for s in body.get("stop") or []) or nxt in stop_ids:
                    finish, stop_reason = "stop", (nxt if nxt != tok.eos_token_id else None)
                    break
                out = model(input_ids=torch.tensor([[nxt]]), use_cache=True,
                            **{cache_argument_name(model): cache})  # fmt: skip
                cache = cache_of(out)
                dist = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
        if self.faults.no_tokens and not body.get("echo"):
            generated = []
        tokens, values = [], []
        if body.get("echo"):
            prompt_values = [None] + [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]
            if self.faults.wrong_prompt_logprobs:  # each token read at the wrong position
                prompt_values = [None] + [float(lp[max(i - 2, 0), ids[i]]) for i in range(1, len(ids))]
            if self.faults.no_prompt_logprobs:
                prompt_values = [None] * len(ids)
            tokens += [tok.decode([i]) for i in ids]
            values += prompt_values
        as_ids = body.get("return_tokens_as_token_ids") and not self.faults.text_tokens
        tokens += [f"token_id:{g}" if as_ids else tok.decode([g]) for g, _ in generated]
        values += [v for _, v in generated]
        text = ("".join(tokens[: len(ids)]) if body.get("echo") else "") + tok.decode(
            [g for g, _ in generated]
        )
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "tokens": tokens,
                "token_logprobs": values,
                "text_offset": offsets,
                "top_logprobs": None,
            }
        return {"text": text, "logprobs": logprobs, "finish_reason": finish, "stop_reason": stop_reason}


def _nucleus(dist: torch.Tensor, temperature: float, body: dict) -> torch.Tensor:
    """softmax(dist / T) restricted to the top-p nucleus (renormalised), as a sampler draws from."""
    probs = torch.softmax(dist / temperature, dim=-1)
    top_p = float(body.get("top_p") or 1.0)
    if top_p < 1.0:
        ordered, order = probs.sort(descending=True)
        ordered[(ordered.cumsum(-1) - ordered) >= top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    return probs / probs.sum()


def _handler(server: ReferenceServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _reply(self, status: int, payload: dict, headers: dict | None = None) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _fault(self) -> bool:
            f, seen = server.faults, server.seen
            seen.requests += 1
            seen.headers.append(dict(self.headers))
            if f.api_key and self.headers.get("Authorization") != f"Bearer {f.api_key}":
                self._reply(401, {"error": {"message": "invalid API key"}})
                return True
            if f.drop:
                f.drop -= 1
                self.close_connection = True
                self.connection.close()
                return True
            if f.retry_after:
                f.retry_after -= 1
                self._reply(429, {"error": {"message": "slow down"}}, {"Retry-After": f"{f.retry_after_s:g}"})
                return True
            if f.unavailable:
                f.unavailable -= 1
                self._reply(503, {"error": {"message": "loading"}})
                return True
            if f.slow_s:
                wait, f.slow_s = f.slow_s, 0.0
                time.sleep(wait)
            return False

        def do_GET(self):
            if self._fault():
                return
            if self.path == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": server.name, "root": server.root}]})
            else:
                self._reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self._fault():
                return
            if self.path != "/v1/completions":
                self._reply(404, {"error": {"message": f"no route {self.path}"}})
                return
            f, seen = server.faults, server.seen
            seen.completions += 1
            time.sleep(f.delay_s)
            if f.fail_after is not None and seen.completions > f.fail_after:
                self._reply(500, {"error": {"message": "internal error"}})
                return
            if body.get("model") != server.name:
                self._reply(404, {"error": {"message": f"model {body.get('model')!r} does not exist"}})
                return
            prompt = body["prompt"]
            prompts = (
                [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else prompt
            )
            if f.ids_refused and any(not isinstance(p, str) for p in prompts):
                self._reply(500, {"error": {"message": "prompt: Input should be a valid string"}})
                return
            seen.prompts += len(prompts)
            n = int(body.get("n", 1))
            choices = []
            for p in prompts:
                prefilled: dict = {}
                for s in range(n):
                    choice = server.complete(p, body, s, prefilled)
                    choices.append({"index": len(choices), **choice})
            self._reply(200, {"object": "text_completion", "model": server.name, "choices": choices})

    return Handler
