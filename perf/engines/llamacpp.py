"""llama.cpp's OpenAI-compatible server (llama-cpp-python, in its own environment `.venv-llamacpp`: `make
setup-llamacpp`) serving a GGUF file as it is. Started and stopped as the suite starts vLLM: in its own process
group behind a lifeline (no orphan if this process dies, however it dies), a death named from the lifeline's
note and the server log. Once ready it is measured as an endpoint is (quant/measure_endpoint.py): its probe
decides what its prompt log-probabilities can score."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perf.engines.vllm import HOST, REPO, VLLMServer

ENTRYPOINT = "llama_cpp.server"
DEFAULT_PYTHON = REPO / ".venv-llamacpp" / "bin" / "python"
# logits_all: without it the server returns no prompt log-probabilities with `echo`. interrupt_requests: by
# default a new request cuts the one in flight short (after one token), so concurrent requests would be measured
# as one-token answers; off, they queue (the server runs one at a time).
DEFAULT_ARGS: dict[str, Any] = {"n_ctx": 2048, "logits_all": True, "interrupt_requests": False}


def resolve_llamacpp_python(configured: str | None) -> str:
    """The recipe's python; else $QUANT_LLAMACPP_PYTHON; else .venv-llamacpp's."""
    return configured or os.environ.get("QUANT_LLAMACPP_PYTHON") or str(DEFAULT_PYTHON)


def llamacpp_flags(args: dict[str, Any]) -> list[str]:
    """llama-cpp-python's server takes its settings' names as flags (`--n_ctx 2048`, `--logits_all true`)."""
    flags = []
    for name, value in args.items():
        flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


class LlamaCppServer(VLLMServer):
    """`with LlamaCppServer(gguf, python=..., served_name=..., args=..., log_path=...) as srv:` a ready server at
    srv.base_url, on its own random port on 127.0.0.1; stopped (its whole tree) on leaving the block."""

    text_prompts = True   # its completions take text prompts, not token ids
    health_path = None    # no /health: ready once it lists its model
    headers: dict[str, str] = {}

    def __init__(self, gguf: Path, *, python: str, served_name: str, args: dict[str, Any], log_path: Path,
                 startup_timeout_s: float = 300.0, env: dict[str, str] | None = None):
        super().__init__(Path(gguf), python=python, served_name=served_name, args={}, env=env or {},
                         startup_timeout_s=startup_timeout_s, log_path=log_path)
        self.args = {**DEFAULT_ARGS, **args}
        self.defaults = {}

    @property
    def model(self) -> str:
        return self.served_name

    @property
    def deploy_command(self) -> list[str]:
        return [self.python, "-m", ENTRYPOINT, "--model", str(self.model_path), "--model_alias", self.served_name,
                *llamacpp_flags(self.args)]

    @property
    def command(self) -> list[str]:
        return [*self.deploy_command, "--host", HOST, "--port", str(self.port)]
