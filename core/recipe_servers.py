"""The recipe's variants served by a server of their own: a running endpoint, or llama.cpp serving a GGUF file."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from core.http_policy import userinfo_problem

from core.strict import Strict


class Endpoint(Strict):
    """A server already running that the suite measures as it is (it never starts or stops it): any
    OpenAI-compatible /v1/completions. It must serve the recipe's model: its tokenizer (the recipe's `model`)
    splits the scored text and makes the perf prompts."""
    base_url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$")   # e.g. http://127.0.0.1:8000 (without /v1)
    model: str = Field(min_length=1)   # the served model name, as its /v1/models lists it
    # sent as a Bearer token, only where the person running the suite allows it (docs/security.md): a variable
    # named QUANT_ENDPOINT_* or listed in $QUANT_ENDPOINT_KEY_VARS, to a loopback address or over https to a
    # host listed in $QUANT_ENDPOINT_KEY_HOSTS
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("base_url")
    @classmethod
    def _no_userinfo(cls, url: str) -> str:
        if problem := userinfo_problem(url):
            raise ValueError(problem)
        return url


class LlamaCpp(Strict):
    """A GGUF file served as it is by llama.cpp's server (llama-cpp-python), which the suite starts and stops
    as it does vLLM, then measures as an endpoint. It must hold the recipe's model (whose tokenizer scores)."""
    gguf: str                          # a .gguf path, or package:NAME/FILE.gguf
    args: dict[str, Any] = Field(default_factory=dict)   # server settings, e.g. {n_ctx: 2048, n_threads: 2}
    python: str | None = None          # its environment's python; else $QUANT_LLAMACPP_PYTHON, else .venv-llamacpp
    startup_timeout_s: float = Field(default=300, gt=0)
