"""What the stages of one sweep share: the typed context, a variant's checkpoint, and the error a stage raises
when it fails for one variant (the sweep records it and goes on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.hashing import digest
from core.recipe import Recipe, Variant
from core.store import Cache
from perf.engines.cpu_isa import compute_dtype, host_cpu_isa
from perf.engines.dtypes import served_dtype
from perf.engines.gpu_choice import engine_gpu_count
from perf.engines.gpus import gpu_identity
from quant.progress import Reporter


class StageError(Exception):
    """A stage failed for this variant; the message is the reason recorded in results.json."""


def new_record(variant: Variant, status: str = "ok", reason: str | None = None) -> dict:
    """A variant's record before any stage has added to it (a failed one keeps its reason)."""
    record = {"name": variant.name, "baseline": variant.baseline, "status": status, "reason": reason,
              "description": variant.description, "accuracy": {}, "perf": {}, "memory": {}}
    if variant.kv_cache_dtype:
        record["kv_cache_dtype"] = variant.kv_cache_dtype
    return record


@dataclass(frozen=True)
class Checkpoint:
    """What the quantize stage hands the measuring stages."""
    path: Path
    key: str              # content key of the weights: every later stage's cache key starts from it
    manifest: dict
    size_bytes: int       # the .safetensors files


@dataclass(frozen=True)
class KlReference:
    """The baseline's answers to one task's first items and its top-k next-token log-probabilities on them."""
    key: str
    pairs: list           # [doc_id, prompt, answer]
    topk: list


@dataclass(frozen=True)
class Session:
    """What the measuring stages run through: an lm-eval LM (with topk_logprobs), and the live server if served."""
    lm: Any
    server: Any = None


@dataclass
class SweepContext:
    recipe: Recipe
    out: Path
    cache: Cache
    model_dir: Path
    model_key: str
    engine_python: str
    engine_version: str | None
    reporter: Reporter
    retry_failed: bool = False
    kl_reference: dict[str, KlReference] = field(default_factory=dict)   # task -> the baseline's, once measured
    kl_unmeasurable: dict[str, str] = field(default_factory=dict)   # task -> why the baseline has no KL reference
    endpoints: dict[str, dict] = field(default_factory=dict)   # endpoint variant -> its probe's facts
    out_remote: Any = None   # core.remote.Remote where the run directory lives at a URL (out is this node's mirror)
    model_source: dict | None = None   # what a GGUF model was before it was dequantized
    engine_facts: dict | None = None   # the engine's kind, distribution, version and device (results.json `engine`)
    device: str = "cpu"   # torch device of the sweep's own model work (sensitivity ranking, in-process fallback)
    allow_long_cpu_eval: bool = False   # score in-process on the CPU even where it is estimated to take hours
    ahead: Any = None   # quant.ahead.QuantizeAhead: checkpoints being built in the background (local executor)
    starts: Any = None   # quant.start_ahead.StartAhead: the next variant's server starting beside (local executor)
    variant_gpu: dict | None = None   # while a variant is pinned (quant/gpu_pin.py): the identity of its GPUs

    @property
    def engine_key(self) -> str:
        e = self.recipe.engine
        isa = (self.engine_facts or {}).get("cpu_isa")   # a CPU engine's kernels (and speed) depend on the host
        gpu = self.variant_gpu or self.gpu   # a GPU engine's on the GPUs, their count, the driver and the CUDA build
        return digest(e.kind, e.args, e.env, e.dtype, self.engine_version, *((isa,) if isa else ()),
                      *((gpu,) if gpu else ()))

    @property
    def gpu(self) -> dict | None:
        """What the CUDA engine's variants run on as far as the run knows before any is pinned (perf/engines/
        gpus.py gpu_identity of the visible GPUs: name, count, compute capability, driver, CUDA build); a pinned
        variant's own GPUs are `variant_gpu`; None on any other engine."""
        facts = self.engine_facts or {}
        if facts.get("device") != "cuda":
            return None
        return gpu_identity(facts.get("gpus") or [], engine_gpu_count(self.recipe.engine.args), facts.get("driver"),
                            facts.get("cuda"))

    @property
    def served_dtype(self) -> str:
        """The dtype the engine runs the variants in: the recipe's engine.dtype, `auto` decided by the engine's
        device (perf/engines/dtypes.py: as vLLM's auto on a GPU, bfloat16 or float32 on a CPU)."""
        return served_dtype(self.recipe.engine.dtype, self.engine_facts, self.model_dir)

    @property
    def inprocess_dtype(self) -> str:
        """The same for variants scored in-process, on the sweep's device, so that they pair with served ones:
        on a GPU as the engine decides it there, on this host's CPU by its instruction set."""
        if self.device.startswith("cuda"):
            facts = self.engine_facts if (self.engine_facts or {}).get("device") == "cuda" else {"device": "cuda"}
            return served_dtype(self.recipe.engine.dtype, facts, self.model_dir)
        return compute_dtype(self.recipe.engine.dtype, True, host_cpu_isa())

    def variant_dir(self, name: str) -> Path:
        return self.out / "variants" / name
