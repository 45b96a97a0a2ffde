"""Eval backends: lm-eval `LM` objects that produce completions for a variant.

served     the variant behind the engine's OpenAI-compatible server (what would be deployed)
inprocess  transformers in this process, for variants the engine cannot serve

Each is imported on first use (lm-eval, transformers: seconds), so importing one does not import the other.
"""

from importlib import import_module

_WHERE = {"ServedLM": "evals.backends.served", "inprocess_lm": "evals.backends.inprocess"}

__all__ = ["ServedLM", "inprocess_lm"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
