"""Which of the engine's start-up warnings change what a sweep measures.

Most of what vLLM logs at WARNING while starting is about the host or about other products (a missing
libtcmalloc, pinned memory, a chat-template note, a generation config overriding sampling defaults): worth
keeping in server.log, not worth a console line each. A warning that says the engine falls back to another
kernel or path, runs without a feature that sets its speed (CUDA graphs, prefix caching, chunked prefill,
compilation), or serves the model another way than asked changes what perf measures: those are kept, shown
and recorded with the variant's results.
"""

from __future__ import annotations

import re

_FEATURES = (r"cuda ?graphs?|prefix[ -]cach\w*|chunked[ -]prefill|torch\.compile|compil\w+|flash[ -]?attention|"
             r"fused|kernels?|backend|async output|speculative|quantization|kv[ -]cache dtype|marlin|machete|"
             r"eager")
MEASURE_AFFECTING = [re.compile(p, re.IGNORECASE) for p in (
    r"\bfall(?:ing|s)?[ -]?back\b",
    rf"\b(?:not (?:be )?(?:supported|available|enabled)|unsupported|disabl\w*|turn\w* off)\b.*\b(?:{_FEATURES})\b",
    rf"\b(?:{_FEATURES})\b.*\b(?:not (?:be )?(?:supported|available|enabled)|unsupported|disabl\w*|turn\w* off)\b",
    r"\b(?:slow|naive|reference|unoptimi[sz]ed|suboptimal)\b.*\b(?:kernel|path|implementation|performance)\b",
    r"\bno (?:optimi[sz]ed |suitable )?kernel\b",
    r"\benforce[_ -]eager\b",
)]


def affects_measurement(warning: str) -> bool:
    return any(p.search(warning) for p in MEASURE_AFFECTING)


def split_warnings(warnings: list[str]) -> tuple[list[str], list[str]]:
    """(those that change what is measured, the rest), each in the order the engine logged them."""
    kept = [w for w in warnings if affects_measurement(w)]
    return kept, [w for w in warnings if not affects_measurement(w)]
