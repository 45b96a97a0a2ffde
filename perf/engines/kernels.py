"""The kernels vLLM picked for a variant's quantized layers, read from its start-up log, and whether it fell
back to a weight-only kernel: below compute capability 8.9 an FP8 checkpoint is served as weight-only FP8 through
Marlin (activations stay 16-bit), and NVFP4 below Blackwell as weight-only FP4 through Marlin. The scheme a
report names is then not what ran; `kernels` says what did."""

from __future__ import annotations

import re

# vLLM 0.32's lines: "Selected CutlassFP8ScaledMMLinearKernel for CompressedTensorsW8A8Fp8" (kernels/linear),
# "Using MarlinLinearKernel for CompressedTensorsWNA16" (compressed_tensors schemes, GPTQ/AWQ methods), "Using
# CutlassNvFp4LinearKernel for NVFP4 GEMM", "Using MacheteLinearKernel for mixed-precision linear", "Using
# MarlinExperts for MXFP4 MoE". Its other "Using X for Y" lines (the attention backend, sampling) name no kernel.
_PICKED = re.compile(r"\] (?:Selected|Using) (\w+(?:Kernel|Experts)) for ([^.]+?)\.?\s*$")
_FALLBACKS = {
    "Weight-only FP8 compression will be used leveraging the Marlin kernel": "weight-only FP8 (Marlin)",
    "Weight-only FP4 compression will be used leveraging the Marlin kernel": "weight-only FP4 (Marlin)",
}
START = "$ "   # the line the launcher writes before each start (perf/engines/vllm.py)


def last_start(log_text: str) -> str:
    """The part of an appended server log that the last start wrote."""
    at = log_text.rfind("\n" + START)
    return log_text[at + 1:] if at >= 0 else log_text


def kernels(log_text: str) -> dict | None:
    """{"picked": {layer method: kernel}, "fallback": what vLLM fell back to, or None} from one start's log;
    None where it names neither (an unquantized model, a CPU build that logs no choice)."""
    picked: dict[str, str] = {}
    fallback = None
    for line in log_text.splitlines():
        if m := _PICKED.search(line):
            picked.setdefault(m[2], m[1])
        for text, what in _FALLBACKS.items():
            if text in line:
                fallback = what
    if not picked and fallback is None:
        return None
    return {"picked": picked, "fallback": fallback}


def describe(found: dict | None) -> str | None:
    """One short label for a report, beside the scheme: the fallback where there was one, else the kernels."""
    if not found:
        return None
    if found.get("fallback"):
        return f"ran as {found['fallback']}"
    names = sorted(set(found.get("picked", {}).values()))
    return ", ".join(n.removesuffix("LinearKernel").removesuffix("Kernel") for n in names) or None
