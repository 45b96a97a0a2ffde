"""Eval backends: lm-eval `LM` objects that produce completions for a variant.

served     the variant behind the engine's OpenAI-compatible server (what would be deployed)
inprocess  transformers in this process, for variants the engine cannot serve
"""

from evals.backends.inprocess import inprocess_lm
from evals.backends.served import ServedLM

__all__ = ["ServedLM", "inprocess_lm"]
