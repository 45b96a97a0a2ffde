"""What a perf level measured with: the engine's prefix caching, chunked prefill and CUDA graphs, as the engine
resolved them at start-up (vLLM 0.32 logs its whole config once: "Initializing a V1 LLM engine (v0.32.0) with
config: ... enforce_eager=True, ... enable_prefix_caching=True, enable_chunked_prefill=True, ...
'cudagraph_mode': <CUDAGraphMode.NONE: 0> ..."); the recipe's arguments alone leave the defaults unknown."""

from __future__ import annotations

import re

_FLAGS = {"prefix_caching": "enable_prefix_caching", "chunked_prefill": "enable_chunked_prefill",
          "enforce_eager": "enforce_eager"}
_CUDAGRAPH = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_CONFIG = "LLM engine ("


def engine_settings(log_text: str) -> dict | None:
    """{prefix_caching, chunked_prefill, enforce_eager: bool|None, cuda_graphs: mode name} from one start's config
    line; None where the log has none."""
    line = next((ln for ln in reversed(log_text.splitlines()) if _CONFIG in ln and "with config:" in ln), None)
    if line is None:
        return None
    found: dict = {}
    for key, name in _FLAGS.items():
        m = re.search(rf"\b{name}=(True|False|None)\b", line)
        found[key] = {"True": True, "False": False}.get(m[1]) if m else None
    m = _CUDAGRAPH.search(line)
    found["cuda_graphs"] = m[1].lower() if m else None
    return found
