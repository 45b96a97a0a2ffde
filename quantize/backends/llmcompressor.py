"""llmcompressor backend: a Variant -> llmcompressor modifiers (or a verbatim recipe) -> oneshot -> save."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator

from core.hashing import versions
from core.memo import remembered, source_digest
from core.recipe import Calibration, Variant
from quantize import schemes
from quantize.schemes import weight_args

NAME = "llmcompressor"
TARGETS = ["Linear"]


def recipe_text(variant: Variant) -> str | None:
    """The verbatim recipe of a `recipe:` variant: the file's text if it names a file, else the string."""
    if variant.recipe is None:
        return None
    source = variant.recipe.strip()
    if "\n" in source:
        return variant.recipe
    if Path(source).is_file():
        return Path(source).read_text()
    if source.endswith((".yaml", ".yml")) or ":" not in source:
        raise FileNotFoundError(f"variant {variant.name}: recipe file {source!r} not found")
    return variant.recipe  # one-line inline YAML, e.g. a flow mapping


def config_groups(variant: Variant) -> dict[str, dict[str, Any]]:
    """compressed-tensors config groups for a `groups` variant: one per group, in the recipe's order."""
    from compressed_tensors.quantization import preset_name_to_scheme

    out = {}
    for i, group in enumerate(variant.groups):
        if group.scheme is not None:
            scheme = preset_name_to_scheme(group.scheme.upper(), group.targets)
            out[f"group_{i}"] = scheme.model_dump(mode="json", exclude_none=True)
        else:
            out[f"group_{i}"] = {"targets": group.targets, "weights": weight_args(group.weights)}
    return out


def _scheme_kwargs(variant: Variant) -> dict[str, Any]:
    """What a quantizing modifier is told: a preset scheme name or config groups (custom weights, or a
    scheme per module group)."""
    kwargs: dict[str, Any] = {"ignore": list(variant.ignore)}
    if variant.scheme is not None:
        kwargs.update(targets=TARGETS, scheme=variant.scheme.upper())
    elif variant.groups is not None:
        kwargs["config_groups"] = config_groups(variant)
    else:
        kwargs.update(targets=TARGETS,
                      config_groups={"group_0": {"targets": TARGETS, "weights": weight_args(variant.weights)}})
    return kwargs


def build_modifiers(variant: Variant) -> list:
    """The modifier list for a scheme/weights variant (not for `recipe:` variants, passed verbatim)."""
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier, SmoothQuantModifier

    if variant.scheme is None and variant.weights is None and variant.groups is None:
        raise ValueError(f"variant {variant.name}: no scheme, weights or groups to build modifiers from")
    schemes.check(variant)
    kwargs = _scheme_kwargs(variant)
    modifiers: list = []
    if variant.smoothquant is not None:
        modifiers.append(SmoothQuantModifier(smoothing_strength=variant.smoothquant))
    if variant.algorithm == "gptq":
        if variant.actorder:
            kwargs["actorder"] = None if variant.actorder == "off" else variant.actorder
        modifiers.append(GPTQModifier(**kwargs))
    elif variant.algorithm == "awq":
        # llmcompressor >= 0.10: AWQ only rescales; a QuantizationModifier after it quantizes.
        modifiers += [AWQModifier(), QuantizationModifier(**kwargs)]
    else:
        modifiers.append(QuantizationModifier(**kwargs))
    return modifiers


def check_assignment(model, variant: Variant) -> None:
    """Refuse, before any work, groups that overlap or split a layer vLLM fuses (quantize/assignment.py)."""
    from quantize.assignment import check

    kwargs = _scheme_kwargs(variant)
    groups = ({name: g["targets"] for name, g in kwargs["config_groups"].items()} if "config_groups" in kwargs
              else {"quantized": kwargs["targets"]})
    check(model, groups, kwargs["ignore"])


def _check_preset(name: str) -> None:
    if problem := schemes.preset_problem(name):
        raise ValueError(problem)


def needs_calibration(variant: Variant) -> bool:
    """False when oneshot can run without data: round-to-nearest weights with no static activation scales."""
    if variant.recipe is not None:
        return True  # a verbatim recipe may hold anything; calibrating costs time, never correctness
    if variant.algorithm in ("gptq", "awq") or variant.smoothquant is not None:
        return True
    presets = [variant.scheme] if variant.scheme else [g.scheme for g in variant.groups or [] if g.scheme]
    return any(_preset_observes_activations(p) for p in presets)


def _preset_observes_activations(name: str) -> bool:
    """Static input scales (FP8) are observed from data, and so are NVFP4's global scales (dynamic "local").
    Remembered per preset and compressed-tensors version: a cached sweep does not import it."""
    key = (name.upper(), versions("compressed-tensors"), source_digest(__file__))
    return remembered("observes-activations", key, lambda: _observes_activations(name))


def _observes_activations(name: str) -> bool:
    from compressed_tensors.quantization import preset_name_to_scheme

    _check_preset(name)
    acts = preset_name_to_scheme(name.upper(), TARGETS).input_activations
    return acts is not None and acts.dynamic is not True


def _uses_awq(variant: Variant) -> bool:
    return variant.algorithm == "awq" or "AWQModifier" in (recipe_text(variant) or "")


@contextlib.contextmanager
def _cpu_safe_pin_memory() -> Iterator[None]:
    """Make IntermediatesCache.pin_memory a no-op when CUDA is absent, for the duration of an AWQ run.

    AWQ pins its cached activations to speed up host-to-GPU copies. On a CPU-only torch,
    Tensor.pin_memory() raises "Cannot access accelerator device when none is available"
    (llmcompressor 0.14.0.1). Pinning only matters for GPU transfers, so skipping it changes nothing else.
    """
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    if torch.cuda.is_available():
        yield
        return
    original = IntermediatesCache.pin_memory
    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original


def warm_up() -> None:
    """Import the heavy libraries (seconds) so the caller's timer measures quantization only."""
    import llmcompressor  # noqa: F401
    import transformers  # noqa: F401


def quantize(model_dir: Path, variant: Variant, texts: list[str] | None, calibration: Calibration,
             out_dir: Path) -> dict[str, Any]:
    """Quantize model_dir per variant and save a compressed-tensors checkpoint (with tokenizer) in out_dir."""
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from quantize.progress import report_pipeline_progress

    recipe = recipe_text(variant)
    if recipe is None:
        recipe = build_modifiers(variant)
    described = recipe if isinstance(recipe, str) else [_modifier_record(m) for m in recipe]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not isinstance(recipe, str):
        check_assignment(model, variant)
    data: dict[str, Any] = {}
    if texts:
        data = {"dataset": Dataset.from_dict({"text": texts}), "num_calibration_samples": len(texts),
                "max_seq_length": calibration.max_seq_length, "shuffle_calibration_samples": False}
    guard = _cpu_safe_pin_memory() if _uses_awq(variant) else contextlib.nullcontext()
    report_pipeline_progress()
    start = time.perf_counter()
    with guard:
        oneshot(model=model, tokenizer=tokenizer, recipe=recipe, **data)
    oneshot_seconds = time.perf_counter() - start
    model.save_pretrained(out_dir, save_compressed=True)
    tokenizer.save_pretrained(out_dir)
    return {"backend": NAME, "recipe": described, "oneshot_seconds": round(oneshot_seconds, 3)}


def _modifier_record(modifier: Any) -> dict[str, Any]:
    """A modifier as {type: its explicitly set fields}: the manifest's record of what ran."""
    fields = modifier.model_dump(exclude_unset=True, mode="json")
    return {type(modifier).__name__: {k: v for k, v in fields.items() if not k.endswith("_")}}
