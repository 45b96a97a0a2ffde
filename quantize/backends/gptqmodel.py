"""GPTQModel backend (installed by `make setup`; `make gptq-setup` alone): a Variant -> GPTQ-format (algorithm gptq) or AWQ gemm-format
(algorithm awq) checkpoint, the formats AutoGPTQ and AutoAWQ made, which vLLM serves as gptq / awq.

gptqmodel is imported only inside warm_up() and quantize(): the registry imports this module everywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from core.recipe import Calibration, Variant

NAME = "gptqmodel"
INSTALL_HINT = "the gptqmodel backend needs GPTQModel: run `make gptq-setup` to install it into the main environment"


def gptqmodel_config(variant: Variant) -> dict[str, Any]:
    """The GPTQConfig/AWQConfig fields for a variant (plus "method"), as plain JSON values.

    - scheme W4A16 -> 4 bits, group 128, sym; W4A16_ASYM -> the same, asym (AWQ: zero_point true);
      `weights` -> num_bits, group_size (strategy channel -> -1), symmetric.
    - actorder: llmcompressor's weight/static (and its default) order columns by activation while keeping
      groups contiguous, with no runtime cost. GPTQModel's equivalent is act_group_aware with desc_act off (its
      default); "off" turns it off; desc_act on (a g_idx permutation at runtime, llmcompressor's "group") is
      never asked for.
    - ignore: lm_head listed -> left in 16-bit (GPTQModel's default, lm_head false), absent -> quantized;
      every other entry becomes a negative `dynamic` rule ("-:pattern": skip), "re:" entries keeping their
      regex (both libraries match from the start of the full module name), names matching exactly.
    """
    if variant.algorithm not in ("gptq", "awq") or (variant.scheme is None and variant.weights is None):
        raise ValueError(f"variant {variant.name}: backend gptqmodel needs algorithm gptq or awq and a W4A16 "
                         f"scheme or int `weights`")
    if variant.weights is not None:
        spec = variant.weights
        if spec.strategy == "group" and not spec.group_size:
            raise ValueError(f"variant {variant.name}: weights.strategy group needs weights.group_size")
        bits, sym = spec.num_bits, spec.symmetric
        group_size = spec.group_size if spec.strategy == "group" else -1
    else:
        bits, group_size, sym = 4, 128, variant.scheme.upper() != "W4A16_ASYM"
    config: dict[str, Any] = {"method": variant.algorithm, "bits": bits, "group_size": group_size, "sym": sym,
                              "format": "gptq" if variant.algorithm == "gptq" else "gemm",
                              "lm_head": "lm_head" not in variant.ignore}
    if variant.algorithm == "gptq":
        config |= {"desc_act": False, "act_group_aware": group_size > 0 and variant.actorder != "off"}  # needs groups
    skip = {_negative_rule(entry): {} for entry in variant.ignore if entry != "lm_head"}
    if skip:
        config["dynamic"] = skip
    return config


def _negative_rule(entry: str) -> str:
    if entry.startswith("re:"):
        return "-:" + entry[3:]
    return "-:^" + re.escape(entry) + "$"


def needs_calibration(variant: Variant) -> bool:
    return True  # GPTQ and AWQ both fit to calibration activations


def warm_up() -> None:
    """Import GPTQModel (seconds) before the quantization timer starts; say how to install it if missing."""
    # GPTQModel's default is half the cores (for hyper-threads); our CPUs have none.
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(min(12, os.cpu_count() or 1)))
    try:
        import gptqmodel  # noqa: F401
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err


@contextlib.contextmanager
def _in_scratch_dir() -> Iterator[None]:
    """Run with cwd in a throwaway directory: GPTQModel writes a ./logs/ folder wherever it runs."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="gptqmodel-cwd-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(before)


def _calibration_rows(tokenizer: Any, texts: list[str], max_seq_length: int) -> list[dict[str, list[int]]]:
    rows = []
    for text in texts:
        ids = tokenizer(text, truncation=True, max_length=max_seq_length)["input_ids"]
        rows.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
    return rows


def quantize(model_dir: Path, variant: Variant, texts: list[str] | None, calibration: Calibration,
             out_dir: Path) -> dict[str, Any]:
    """Quantize model_dir per variant with GPTQModel; save the checkpoint and tokenizer in out_dir."""
    warm_up()
    import gptqmodel
    from gptqmodel import AWQConfig, GPTQConfig, GPTQModel
    from gptqmodel.quantization.config import FORMAT
    from transformers import AutoTokenizer

    if not texts:
        raise ValueError(f"variant {variant.name}: GPTQ and AWQ need calibration texts")
    config = gptqmodel_config(variant)
    kwargs = {k: v for k, v in config.items() if k != "method"}
    kwargs["format"] = FORMAT(kwargs["format"])
    qconfig = (GPTQConfig if config["method"] == "gptq" else AWQConfig)(**kwargs)
    model_dir, out_dir = Path(model_dir).resolve(), Path(out_dir).resolve()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = _calibration_rows(tokenizer, texts, calibration.max_seq_length)
    with _in_scratch_dir():
        model = GPTQModel.load(str(model_dir), qconfig)
        start = time.perf_counter()
        # calibration_data_min_length=0: keep every text, as llmcompressor does (GPTQModel drops <= 10 tokens).
        model.quantize(rows, batch_size=1, calibration_data_min_length=0)
        seconds = time.perf_counter() - start
        model.save(str(out_dir))
    tokenizer.save_pretrained(out_dir)
    return {"backend": NAME, "backend_version": gptqmodel.__version__, "config": config,
            "oneshot_seconds": round(seconds, 3)}
