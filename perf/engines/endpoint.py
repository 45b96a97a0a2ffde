"""A server the suite did not start and never stops (a recipe variant's `endpoint`): probed once before any
work, then measured through the same interface as a server the suite starts (base_url, completions_url,
check_alive), with what only a started server can tell (its command, its processes' memory) left out.

The probe records what the server says it is and whether its prompt log-probabilities can be scored: a server
may return them for a prompt sent with `echo` and yet place each position's distribution one token off (the
distribution of the token after it, as llama-cpp-python's server does). They are checked against the same
server's greedy next token on a known prompt: sent the prompt followed by that token, an aligned server gives the
token, at its own position, the highest log-probability there."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import httpx

from core import http_policy
from core.foreign_text import capped, one_line
from perf.engines.process import EngineDiedError

PROBE_PROMPT = "The capital of France is"
PROBE_TOP_K = 5
ALIGNED, SHIFTED = "aligned", "shifted by one position"
TIMEOUT_S = 30.0      # the whole of one request: connecting, waiting and reading its answer
PROBE_DEADLINE_S = 60.0   # the whole probe of one endpoint


class EndpointProblem(Exception):
    """The endpoint cannot be measured: one line saying why (unreachable, model not listed, key not set)."""


@dataclass
class EndpointServer:
    """A running OpenAI-compatible server, as the measuring stages use a server the suite started."""
    base_url: str
    model: str
    api_key_env: str | None = None
    facts: dict = field(default_factory=dict)   # the probe's record
    until: float | None = None   # time.monotonic() by which the probe's requests must be done
    command = None             # not started by the suite: no command, no niceness
    engine_core_niced = None
    pid = None

    @property
    def completions_url(self) -> str:
        return f"{self.base_url.rstrip('/')}/v1/completions"

    @property
    def headers(self) -> dict[str, str]:
        return http_policy.bearer(self.base_url, self.api_key_env)

    @property
    def text_prompts(self) -> bool:
        """Whether prompts go as text: the server refused a prompt of token ids."""
        return self.facts.get("token_prompts") is False

    def rss_bytes(self) -> int:
        return 0   # its processes are not ours to see

    def gpu_bytes(self) -> int | None:
        return None

    def death(self, wait_s: float = 0.0) -> str | None:
        """Why the endpoint no longer serves the model (unreachable, or the model gone from its list), else None."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                listed = _models(self.base_url, self.headers)
                if self.model in listed:
                    return None
                problem = (f"it no longer lists model {capped(self.model)!r} "
                           f"(it lists {capped(one_line(', '.join(listed[:100]))) or 'none'}"
                           f"{f'; {len(listed):,} models in all' if len(listed) > 100 else ''})")
            except EndpointProblem as exc:
                problem = str(exc)
            if time.monotonic() >= deadline:
                return f"the endpoint {self.base_url} stopped serving: {problem}"
            time.sleep(1.0)

    def check_alive(self, wait_s: float = 0.0) -> None:
        if (why := self.death(wait_s)) is not None:
            raise EngineDiedError(why)

    def stop(self) -> None:   # never ours to stop
        pass


def probe(base_url: str, model: str, api_key_env: str | None = None) -> dict:
    """The endpoint's facts (listed models, identity and version where it says, prompt log-probabilities);
    EndpointProblem with one line where it cannot be measured at all."""
    if problem := http_policy.userinfo_problem(base_url) or http_policy.key_problem(base_url, api_key_env):
        raise EndpointProblem(problem)
    if api_key_env and not os.environ.get(api_key_env):
        raise EndpointProblem(f"the API key variable {api_key_env} is not set")
    server = EndpointServer(base_url, model, api_key_env, until=time.monotonic() + PROBE_DEADLINE_S)
    cards = _model_cards(base_url, server.headers)
    card = next((c for c in cards if c.get("id") == model), None)
    if card is None:
        listed = capped(one_line(", ".join(str(c.get("id")) for c in cards[:100])), 300) or "no model"
        raise EndpointProblem(f"{base_url} does not serve model {model!r}; it lists {listed}")
    limit = card.get("max_model_len")
    facts = {"base_url": base_url, "model": model, "owned_by": one_line(card.get("owned_by")),
             "max_model_len": limit if type(limit) is int and limit > 0 else None, "probed": round(time.time(), 3),
             **_identity(base_url, server.headers)}
    facts["token_prompts"] = server.facts["token_prompts"] = _takes_token_ids(server)
    facts.update(prompt_logprobs(server))
    return facts


def _takes_token_ids(server: EndpointServer) -> bool:
    try:
        _complete(server, {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0})
        return True
    except EndpointProblem:
        return False


def _model_cards(base_url: str, headers: dict[str, str]) -> list[dict]:
    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        response = http_policy.request("GET", url, headers=headers, deadline_s=TIMEOUT_S)
    except (httpx.HTTPError, http_policy.PolicyError) as exc:
        raise EndpointProblem(f"{base_url} is not reachable ({type(exc).__name__}: {one_line(exc)})") from None
    if response.status_code in (401, 403):
        raise EndpointProblem(f"{url} refused the API key (HTTP {response.status_code})")
    if response.status_code != 200:
        followed = " (redirects are never followed)" if 300 <= response.status_code < 400 else ""
        raise EndpointProblem(f"{url} answered HTTP {response.status_code}{followed}, not a model list")
    try:
        return [c for c in response.json()["data"] if isinstance(c, dict)]
    except (ValueError, KeyError, TypeError):
        raise EndpointProblem(f"{url} did not answer an OpenAI model list") from None


def _models(base_url: str, headers: dict[str, str]) -> list[str]:
    return [str(c.get("id")) for c in _model_cards(base_url, headers)]


def _identity(base_url: str, headers: dict[str, str]) -> dict:
    """What the server says it is: its HTTP Server header and, where it has one, /version (vLLM's)."""
    found: dict = {}
    try:
        response = http_policy.request("GET", f"{base_url.rstrip('/')}/version", headers=headers,
                                       deadline_s=TIMEOUT_S)
        found["server_header"] = one_line(response.headers.get("server"))
        if response.status_code == 200 and isinstance(version := response.json().get("version"), str):
            found["version"] = one_line(version)
    except (httpx.HTTPError, http_policy.PolicyError, ValueError, AttributeError):
        pass
    return found


def prompt_logprobs(server: EndpointServer) -> dict:
    """Whether the server's prompt log-probabilities (and top log-probabilities) are there and aligned:
    {"prompt_logprobs": "aligned" | "shifted by one position" | why they cannot be used, "top_logprobs": how
    many a position lists, "probe": the prompt and its greedy token}."""
    try:
        greedy = _complete(server, {"prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0.0}).get("text")
        if not isinstance(greedy, str):
            raise EndpointProblem("the completion is not in the OpenAI format")
        choice = _complete(server, {"prompt": PROBE_PROMPT + greedy, "max_tokens": 1, "temperature": 0.0,
                                    "echo": True, "logprobs": PROBE_TOP_K})
    except EndpointProblem as exc:
        return {"prompt_logprobs": f"not checked: {exc}", "top_logprobs": 0}
    try:
        found = _checked_logprobs(greedy, choice)
        if found["prompt_logprobs"] == ALIGNED and server.facts.get("token_prompts") is not False:
            found["prompt_logprobs"] = _echo_length(server) or ALIGNED
        return found
    except (TypeError, AttributeError, ValueError):
        return {"prompt_logprobs": "not checked: the log-probabilities are not in the OpenAI format",
                "top_logprobs": 0}


PROBE_IDS = [1, 2, 3, 4]


def _echo_length(server: EndpointServer) -> str | None:
    """Why the server's prompt log-probabilities of a token-id prompt (as the evals send it) cannot be scored
    by position: an array of another length than the ids sent (a BOS added, a token dropped); else None."""
    try:
        logprobs = _complete(server, {"prompt": PROBE_IDS, "max_tokens": 0, "echo": True, "logprobs": 1,
                                      "temperature": 0.0}).get("logprobs") or {}
    except EndpointProblem as exc:
        return f"not checked: {exc}"
    entries = logprobs.get("token_logprobs")
    if not isinstance(entries, list) or len(entries) != len(PROBE_IDS):
        found = len(entries) if isinstance(entries, list) else "no"
        return (f"the server returns {found} prompt log-probabilities for the {len(PROBE_IDS)} prompt tokens sent "
                "(it adds or drops tokens): they cannot be aligned")
    return None


def _checked_logprobs(greedy: str, choice: dict) -> dict:
    found = {"probe": {"prompt": PROBE_PROMPT, "greedy_token": greedy}}
    logprobs = choice.get("logprobs") or {}
    tokens, tops = logprobs.get("tokens") or [], logprobs.get("top_logprobs") or []
    if not tokens or len(tops) != len(tokens) or not any(tops):
        return {**found, "prompt_logprobs": "the server returns no prompt log-probabilities with echo",
                "top_logprobs": 0}
    found["top_logprobs"] = max(len(t or {}) for t in tops)
    at = _position_of(tokens, PROBE_PROMPT + greedy)
    if at is None:
        return {**found, "prompt_logprobs": "not checked: the echoed tokens do not spell the probe prompt"}
    found["prompt_logprobs"] = alignment(tokens, tops, at)
    return found


def alignment(tokens: list[str], tops: list[dict | None], at: int) -> str:
    """At `at`, the greedy token echoed after the prompt: aligned where the top log-probability there is that
    token's; shifted where it is at the position before; otherwise a line saying what was found."""
    def top_of(i: int) -> str | None:
        entry = tops[i] if 0 <= i < len(tops) else None
        return max(entry, key=entry.get) if entry else None

    if top_of(at) == tokens[at]:
        return ALIGNED
    if top_of(at - 1) == tokens[at]:
        return SHIFTED
    return (f"misaligned: the greedy token {tokens[at]!r} is not the top log-probability at its position "
            f"({top_of(at)!r}) nor the one before ({top_of(at - 1)!r})")


def _position_of(tokens: list[str], text: str) -> int | None:
    """The index of the echoed token that ends `text` (the echo may carry the generated token after it). Only
    the last characters spelled are kept, so an echo of millions of tokens costs one pass over it."""
    keep = 2 * len(text) + 64   # the text and the whitespace a token may carry around it
    spelled = ""
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            return None
        spelled = (spelled + token[-keep:])[-keep:]
        if spelled.endswith(text) or spelled.strip().endswith(text.strip()):
            return i
    return None


def _complete(server: EndpointServer, body: dict) -> dict:
    try:
        response = http_policy.request("POST", server.completions_url, json={"model": server.model, **body},
                                       headers=server.headers, deadline_s=_left(server))
    except (httpx.HTTPError, http_policy.PolicyError) as exc:
        raise EndpointProblem(one_line(f"{type(exc).__name__}: {exc}")) from None
    if response.status_code != 200:
        raise EndpointProblem(f"HTTP {response.status_code}: {one_line(capped(response.text, 200))}")
    try:
        choice = response.json()["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        choice = None
    if not isinstance(choice, dict):
        raise EndpointProblem("the completion is not in the OpenAI format")
    return choice


def _left(server: EndpointServer) -> float:
    """Seconds the next request may take: TIMEOUT_S, or less where the probe's own deadline comes sooner."""
    if server.until is None:
        return TIMEOUT_S
    left = server.until - time.monotonic()
    if left <= 0:
        raise EndpointProblem(f"the probe took longer than {PROBE_DEADLINE_S:g} s in all")
    return min(TIMEOUT_S, left)
