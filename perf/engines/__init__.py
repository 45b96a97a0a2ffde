"""Inference engines the perf stage can start. Each is a context manager exposing base_url/completions_url."""

from perf.engines.process import EngineDiedError, EngineStartError
from perf.engines.vllm import VLLMServer, engine_flags, resolve_engine_python, serve_command

ENGINES = {"vllm": VLLMServer}

__all__ = ["ENGINES", "EngineDiedError", "EngineStartError", "VLLMServer", "engine_flags", "resolve_engine_python", "serve_command"]
