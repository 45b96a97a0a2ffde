"""An lm-eval LM on an OpenAI-compatible /v1/completions: every request in flight at once (bounded), retries
with backoff, greedy. Generation sends text; scoring (loglikelihood, rolling loglikelihood, next-token top-k)
sends token ids with `echo` and `max_tokens: 0`, so the engine returns the prompt's own logprobs. The ids are
those lm-eval's `hf` backend scores for the same text (evals/tokens.py): the same items, the same numbers."""

from __future__ import annotations

import asyncio
import logging
import random
from functools import cached_property
from pathlib import Path

import httpx
from lm_eval.api.model import LM

from core import http_policy
from core.foreign_text import capped, clean_text

from evals.kl import TOP_K
from evals.tokens import encoder, prefix_token_id, rolling_ids, split_ids

log = logging.getLogger(__name__)
MAX_SERVER_STOPS = 4  # vLLM's OpenAI schema caps `stop` at 4 strings; the rest are applied here


def truncate_at_stops(text: str, stops: list[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


def generation_budget(gen_kwargs: dict) -> int:
    """The tokens a generation asks for: the task's max_gen_toks, else lm-eval's default."""
    return int(gen_kwargs.get("max_gen_toks", 256))


class RequestRejected(RuntimeError):
    """The server answered a request with a client error (4xx but 429): it was alive, and the request is wrong."""


class MalformedAnswer(RuntimeError):
    """The server answered 200 with something that is not a completion: the variant fails, naming it."""


class NotMeasurable(RuntimeError):
    """What a task or KL needs, the server cannot give (prompt log-probabilities it does not return, or does not
    return aligned): the task is listed as not measurable on this engine, never scored some other way."""


class ServedLM(LM):
    """`unscorable`: why the server's prompt log-probabilities cannot be used (None: they can); then every
    likelihood request and top-k request raises NotMeasurable with it. `headers`: sent with every request."""

    def __init__(self, completions_url: str, model: str, tokenizer_dir: str | Path | None = None,
                 concurrency: int = 32, max_retries: int = 4, timeout_s: float = http_policy.STALL_S,
                 progress=None,
                 headers: dict[str, str] | None = None, unscorable: str | None = None,
                 deadline_s: float = 3600.0) -> None:
        super().__init__()
        self.url, self.model, self.tokenizer_dir = completions_url, model, tokenizer_dir
        self.headers, self.unscorable = dict(headers or {}), unscorable
        self.concurrency, self.max_retries, self.timeout_s = concurrency, max_retries, timeout_s
        self.deadline_s = max(deadline_s, timeout_s)   # one request in all; timeout_s: one read
        self.progress = progress  # callable(n_done) or None
        self.cut_generations = 0   # prompts so long the context could not hold max_gen_toks more tokens

    # -- what lm-eval asks of a model ---------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return self._run_all([self._generate(context, kwargs) for context, kwargs in (r.args for r in requests)])

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Sum of the continuation's logprobs and whether greedy decoding would produce it."""
        self._need_logprobs()
        return self._run_all([self._continuation_logprob(*self._split_ids(context, continuation))
                              for context, continuation in (r.args for r in requests)])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Sum of the logprobs of every token of the text, each after the prefix token (BOS, else EOS) and the
        text before it, as lm-eval's hf backend scores it (texts must fit the context)."""
        self._need_logprobs()
        encoded = [rolling_ids(self._encode, self._prefix_id, text) for (text,) in (r.args for r in requests)]
        scored = self._run_all([self._continuation_logprob(ids[:1], ids[1:]) for ids in encoded])
        return [total for total, _ in scored]

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer_dir or self.model).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if chat_template is False or chat_template is None:
            return None
        return chat_template if isinstance(chat_template, str) else self.tokenizer.chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.tokenizer.chat_template:
            raise ValueError(f"apply_chat_template: the tokenizer in {self.tokenizer_dir} has no chat template")
        # Without a generation prompt, the last (assistant) message is a task's gen_prefix the answer continues.
        text = self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)
        bos = self.tokenizer.bos_token
        return text.removeprefix(bos) if bos else text  # the engine adds BOS when it tokenizes the prompt

    # -- next-token distributions, for KL divergence against another variant -------------------------

    def topk_logprobs(self, pairs: list[tuple[str, str]], k: int = TOP_K) -> list[list[dict[str, float]]]:
        """Per (context, continuation): for each continuation token, the top-k next-token logprobs there."""
        self._need_logprobs()
        return self._run_all([self._continuation_topk(*self._split_ids(c, x), k) for c, x in pairs])

    # -- internals ------------------------------------------------------------------------------------

    def _need_logprobs(self) -> None:
        if self.unscorable:
            raise NotMeasurable(f"prompt log-probabilities: {self.unscorable}")

    @cached_property
    def tokenizer(self):
        if self.tokenizer_dir is None:
            raise ValueError("this ServedLM has no tokenizer_dir: scoring and chat templates need the tokenizer")
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(self.tokenizer_dir)

    @cached_property
    def max_model_len(self) -> int | None:
        models_url = self.url.rsplit("/completions", 1)[0] + "/models"
        try:
            cards = http_policy.request("GET", models_url, headers=self.headers, deadline_s=30).json()["data"]
            limit = next((c.get("max_model_len") for c in cards if c.get("id") == self.model), None)
        except (httpx.HTTPError, http_policy.PolicyError, KeyError, ValueError, TypeError, AttributeError):
            return None
        return limit if type(limit) is int and limit > 0 else None

    @cached_property
    def _encode(self):
        return encoder(self.tokenizer)

    @cached_property
    def _prefix_id(self) -> int:
        return prefix_token_id(self.tokenizer)

    def _split_ids(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        return split_ids(self._encode, context, continuation, self._prefix_id)

    def _run_all(self, coroutines: list) -> list:
        async def run() -> list:
            limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
            gate = asyncio.Semaphore(self.concurrency)
            async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits,
                                         headers={**http_policy.ACCEPT_ENCODING, **self.headers},
                                         **http_policy.httpx_options(self.url)) as client:
                self._client = client

                async def one(work):
                    async with gate:
                        result = await work
                    if self.progress:
                        self.progress(1)
                    return result
                return await asyncio.gather(*(one(c) for c in coroutines))
        try:
            return asyncio.run(run())
        finally:
            for c in coroutines:   # those a Ctrl-C cancelled before they started: no "never awaited" warning
                c.close()

    async def _generate(self, context: str, gen_kwargs: dict) -> str:
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_tokens = generation_budget(gen_kwargs)
        if self.max_model_len and self.tokenizer_dir is not None:  # ask for no more than the context holds
            prompt_tokens = len(self._encode(context))
            if self.max_model_len - prompt_tokens < max_tokens:
                self._generation_cut(prompt_tokens, max_tokens)
                max_tokens = self.max_model_len - prompt_tokens
            if max_tokens < 1:   # an empty answer would be scored wrong: the task cannot be measured here
                raise NotMeasurable(f"a prompt of {prompt_tokens} tokens leaves no room for an answer within "
                                    f"max_model_len {self.max_model_len}")
        body = {"prompt": context, "max_tokens": max_tokens, "temperature": float(gen_kwargs.get("temperature", 0.0)),
                "stop": until[:MAX_SERVER_STOPS], "seed": 1234}
        return truncate_at_stops((await self._post(body))["text"], until)

    def _generation_cut(self, prompt_tokens: int, wanted: int) -> None:
        self.cut_generations += 1
        level = logging.WARNING if self.cut_generations == 1 else logging.DEBUG   # once, not per item
        log.log(level, "a prompt of %d tokens leaves %d of the %d tokens asked for within max_model_len %d: "
                "the answer is cut short%s", prompt_tokens, max(0, self.max_model_len - prompt_tokens), wanted,
                self.max_model_len, " (further cuts logged at DEBUG)" if level == logging.WARNING else "")

    async def _prompt_logprobs(self, ids: list[int], k: int) -> dict:
        """The server's log-probabilities of the prompt `ids`, one entry per id sent: scored by position, an
        array of another length (a server that adds a BOS or drops a token) would score the wrong tokens."""
        lp = (await self._post({"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": k,
                                "temperature": 0.0})).get("logprobs")
        if not isinstance(lp, dict):
            raise MalformedAnswer(f"{self.url} answered no log-probabilities for an echoed prompt")
        lengths = {len(a) if isinstance(a, list) else None for a in (lp.get("token_logprobs"), lp.get("top_logprobs"))}
        if lengths != {len(ids)}:
            found = ", ".join(sorted(str(n) for n in lengths if n is not None)) or "none"
            raise NotMeasurable(f"prompt log-probabilities: the server returned {found} entries for the "
                                f"{len(ids)} prompt tokens sent (it adds or drops tokens): they cannot be aligned")
        return lp

    async def _continuation_logprob(self, ctx: list[int], cont: list[int]) -> tuple[float, bool]:
        lp = await self._prompt_logprobs(ctx + cont, 1)
        tail = range(len(ctx), len(ctx) + len(cont))
        token = [self._logprob(lp["token_logprobs"][i]) for i in tail]
        tops = [self._top(lp["top_logprobs"][i]) for i in tail]
        greedy = all(t >= max(top.values(), default=t) - 1e-6 for t, top in zip(token, tops))
        return sum(token), greedy

    async def _continuation_topk(self, ctx: list[int], cont: list[int], k: int) -> list[dict[str, float]]:
        lp = await self._prompt_logprobs(ctx + cont, k)
        return [self._top(lp["top_logprobs"][i]) for i in range(len(ctx), len(ctx) + len(cont))]

    def _logprob(self, value) -> float:
        """A log-probability from the server: a finite number <= 0 (a rounding hair above allowed), else the
        answer is malformed."""
        if type(value) not in (int, float) or not -1e6 < value <= 1e-3:
            raise MalformedAnswer(f"{self.url} answered a log-probability of {clean_text(str(value))[:40]!r}")
        return float(value)

    def _top(self, entry) -> dict[str, float]:
        if not isinstance(entry, dict):
            raise MalformedAnswer(f"{self.url} answered top log-probabilities that are not a mapping")
        return {str(token): self._logprob(value) for token, value in entry.items()}

    async def _post(self, body: dict) -> dict:
        body = {"model": self.model, **body}
        for attempt in range(self.max_retries + 1):
            try:
                status, text = await asyncio.wait_for(self._send(body), self.deadline_s)
                if status == 200:
                    return _choice(text, self.url)
                if status < 500 and status != 429:  # our request is wrong (or a redirect, never followed): no retry
                    raise RequestRejected(f"HTTP {status} from {self.url}: {clean_text(capped(text, 300))}")
                error = f"HTTP {status}: {clean_text(capped(text, 200))}"
            except (httpx.TransportError, httpx.TimeoutException, asyncio.TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt == self.max_retries:
                raise RuntimeError(f"completion failed after {attempt + 1} attempts: {error}")
            await asyncio.sleep(min(8.0, 0.5 * 2 ** attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    async def _send(self, body: dict) -> tuple[int, str]:
        async with self._client.stream("POST", self.url, json=body) as response:
            content = await http_policy.read_body(response)
            return response.status_code, content.decode("utf-8", "replace")


def _choice(text: str, url: str) -> dict:
    """The first choice of a completion; MalformedAnswer where the server's answer is not one."""
    try:
        choice = http_policy.parse_json(text)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        choice = None
    if not isinstance(choice, dict):
        raise MalformedAnswer(f"{url} answered something that is not an OpenAI completion")
    return choice
