"""An OpenAI-compatible completions endpoint (vLLM, SGLang, llama.cpp's servers), as kcal talks to it.

Plain HTTP from the standard library: one JSON POST per request, a bounded pool of requests in
flight, a timeout per request, and retries with exponential backoff on the answers that mean "later"
(429, 502, 503, 504) and on dropped connections, honouring the server's Retry-After. Anything else
(a 400 saying what the server refuses, a 401, a 404) is raised at once with the server's message,
since retrying cannot change it. The API key is read from the environment when a request is made
and sent as a bearer token; it is never stored, logged or put in an error message.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np

ENGINE = "openai"
RETRIED_STATUS = (429, 502, 503, 504)
MAX_RETRY_AFTER_S = 300.0  # a server asking for longer is waited for this long, then asked again


class ServerError(RuntimeError):
    """The endpoint failed a request for good (after the retries, or at once for a final status);
    the message names the endpoint's host, never the key."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask: the base URL (…/v1), the served model's name, the environment variable
    that holds the API key (None: no key), and the request limits."""

    url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 6
    concurrency: int = 4
    backoff_s: float = 0.5

    @property
    def host(self) -> str:
        return host_of(self.url)


def host_of(url: str | None) -> str:
    """scheme://host[:port] of an endpoint: what metadata and reports show (never a path, a query
    or a key)."""
    parts = urllib.parse.urlsplit(url or "")
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110 §10.2.3); None when
    absent or unreadable. Capped at MAX_RETRY_AFTER_S, never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class OpenAIClient:
    """Requests to one endpoint. `sleep` and `log` are injectable (tests count the waits)."""

    def __init__(
        self,
        endpoint: Endpoint,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = lambda message: None,
    ):
        self.endpoint = endpoint
        self._sleep, self._log = sleep, log
        self.requests = 0  # every HTTP request sent, retries included (the bench's count)
        self.retries = 0

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        var = self.endpoint.api_key_env
        if var:
            key = os.environ.get(var)
            if not key:
                raise ServerError(
                    f"{self.endpoint.host}: api_key_env = {var!r}, but the environment variable {var} "
                    "is not set (kcal reads the key from it at every request and never stores it)"
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def get(self, path: str) -> dict:
        return self._request("GET", path, None)

    def post(self, path: str, body: dict) -> dict:
        return self._request("POST", path, body)

    def _request(self, method: str, path: str, body: dict | None) -> dict:
        url = self.endpoint.url.rstrip("/") + path
        data = None if body is None else json.dumps(body).encode()
        where = f"{self.endpoint.host} {method} {path}"
        for attempt in range(self.endpoint.max_retries + 1):
            self.requests += 1
            request = urllib.request.Request(url, data=data, method=method, headers=self._headers())
            wait, why = None, ""
            try:
                with urllib.request.urlopen(request, timeout=self.endpoint.timeout_s) as response:
                    return _json(response.read(), where)
            except urllib.error.HTTPError as error:
                message = _error_text(error)
                if error.code not in RETRIED_STATUS:
                    raise ServerError(f"{where}: HTTP {error.code}: {message}") from None
                wait = retry_after_s(error.headers.get("Retry-After"))
                why = f"HTTP {error.code}" + (f" (Retry-After {wait:g} s)" if wait is not None else "")
            except (TimeoutError, urllib.error.URLError, http.client.HTTPException, ConnectionError) as error:
                reason = getattr(error, "reason", None) or error
                why = f"{type(reason).__name__}: {reason}".rstrip(": ")
            if attempt == self.endpoint.max_retries:
                raise ServerError(f"{where}: gave up after {attempt + 1} attempts; last: {why}")
            if wait is None:
                wait = min(self.endpoint.backoff_s * 2**attempt, 60.0)
            self.retries += 1
            self._log(f"{where}: {why}; retrying in {wait:.1f} s (attempt {attempt + 2})")
            self._sleep(wait)
        raise AssertionError("unreachable")

    def models(self) -> list[dict]:
        """The served models (/models): each with its `id` (and vLLM's `root`, `max_model_len`)."""
        return list(self.get("/models").get("data") or [])

    def completions(self, prompts: Sequence[list[int] | str], **params) -> list[dict]:
        """One completions request for several prompts; the choices in prompt order."""
        body = {"model": self.endpoint.model, "prompt": list(prompts), **params}
        reply = self.post("/completions", body)
        choices = reply.get("choices")
        where = f"{self.endpoint.host} POST /completions"
        if not isinstance(choices, list) or len(choices) != len(prompts) * int(params.get("n", 1)):
            got = len(choices) if isinstance(choices, list) else choices
            raise ServerError(f"{where}: {got!r} choices for {len(prompts)} prompts")
        return sorted(choices, key=lambda c: c.get("index", 0))

    def map(
        self, requests: Sequence, run: Callable, progress: Callable[[int, int], None] | None = None
    ) -> list:
        """run(request) for every request, at most endpoint.concurrency in flight; results in order."""
        done = 0
        out = [None] * len(requests)
        with ThreadPoolExecutor(max_workers=max(1, self.endpoint.concurrency)) as pool:
            futures = {pool.submit(run, r): i for i, r in enumerate(requests)}
            for future in as_completed(futures):
                out[futures[future]] = future.result()
                done += 1
                if progress is not None:
                    progress(done, len(requests))
        return out


def index_chunks(n: int, width: int) -> list[list[int]]:
    """0 … n-1 in consecutive runs of at most `width`: which items go in one request."""
    return [list(range(i, min(i + width, n))) for i in range(0, n, width)]


def _json(raw: bytes, where: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        raise ServerError(f"{where}: the reply is not JSON: {raw[:120]!r}") from None
    if not isinstance(value, dict):
        raise ServerError(f"{where}: the reply is not a JSON object: {raw[:120]!r}")
    return value


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        raw = error.read()[:2000].decode(errors="replace")
    except OSError:
        return error.reason or ""
    try:
        detail = json.loads(raw)
        message = detail.get("error", detail) if isinstance(detail, dict) else detail
        if isinstance(message, dict):
            message = message.get("message", message)
        return str(message)[:500]
    except ValueError:
        return raw.strip()[:500]


def echo_params() -> dict:
    """What a scoring request asks besides the prompts: the prompt echoed with each token's
    log-probability, one greedy token (dropped), nothing sampled."""
    return {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0.0}


TOKEN_IDS, TEXT = "token ids", "text"


@dataclass(frozen=True)
class PromptForm:
    """How kcal sends a statement: as token ids (kcal's tokenization, exactly: the default), or, to
    a server that takes only text (llama-cpp-python's), as the start token's text followed by the
    statement, which the server tokenizes. checks.py picks the form; in the text form every reply's
    echoed pieces are compared with kcal's tokens, so a statement the server splits otherwise fails
    by name instead of shifting its scores."""

    form: str
    start_text: str

    def prompt(self, start_token_id: int, ids: Sequence[int], text: str) -> list[int] | str:
        return [start_token_id, *ids] if self.form == TOKEN_IDS else self.start_text + text

    def expected_pieces(self, tokenizer, ids: Sequence[int]) -> list[str] | None:
        """What a reply must echo for `ids` (prompt_logprobs' `pieces`): kcal's text of each token
        in the text form; None for token ids, which are kcal's tokens by construction."""
        return None if self.form == TOKEN_IDS else token_pieces(tokenizer, ids)


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token's text, as a server's echoed `tokens` spell them."""
    return [tokenizer.decode([i]) for i in ids]


def prompt_logprobs(
    choice: dict, n_prompt: int, where: str, pieces: Sequence[str] | None = None
) -> np.ndarray:
    """The log-probabilities of prompt tokens 2..n_prompt (the first has none) from one choice of
    an echo request, as float64; refuses anything else. With `pieces` (kcal's text of tokens
    2..n_prompt), the echoed tokens must be exactly those."""
    logprobs = choice.get("logprobs") or {}
    if pieces is not None:
        echoed = list(logprobs.get("tokens") or [])[1:n_prompt]
        if echoed != list(pieces):
            raise ServerError(
                f"{where}: the server split the prompt into {echoed} where kcal's tokenizer gives "
                f"{list(pieces)}: its tokens would not be the statement's"
            )
    values = logprobs.get("token_logprobs")
    if not isinstance(values, list) or len(values) < n_prompt:
        got = "none" if not isinstance(values, list) else f"{len(values)}"
        raise ServerError(
            f"{where}: the server returned {got} log-probabilities for a prompt of {n_prompt} tokens "
            "(it must echo one per prompt token: `echo` with `logprobs`)"
        )
    scored = values[1:n_prompt]
    bad = [i for i, v in enumerate(scored) if not _finite_logprob(v)]
    if bad:
        raise ServerError(
            f"{where}: prompt token {bad[0] + 2} of {n_prompt} has log-probability {scored[bad[0]]!r} "
            "(expected a finite number <= 0)"
        )
    return np.asarray(scored, dtype=np.float64)


def _finite_logprob(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value <= 0
    )
