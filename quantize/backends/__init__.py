"""Quantization backends by name. Each is a module with:

    NAME: str
    needs_calibration(variant: Variant) -> bool
    warm_up() -> None                 # import heavy libraries before the quantization timer starts
    quantize(model_dir: Path, variant: Variant, texts: list[str] | None, calibration: Calibration,
             out_dir: Path) -> dict   # writes model + tokenizer into out_dir; returns backend facts
"""

from __future__ import annotations

from types import ModuleType

from quantize.backends import gptqmodel, llmcompressor  # each imports its library lazily

BACKENDS: dict[str, ModuleType] = {llmcompressor.NAME: llmcompressor, gptqmodel.NAME: gptqmodel}
DEFAULT_BACKEND = llmcompressor.NAME


def get_backend(name: str = DEFAULT_BACKEND) -> ModuleType:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown quantization backend {name!r}; have {sorted(BACKENDS)}") from None
