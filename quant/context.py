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
    out_remote: Any = None   # core.remote.Remote where the run directory lives at a URL (out is this node's mirror)
    model_source: dict | None = None   # what a GGUF model was before it was dequantized
    engine_facts: dict | None = None   # the engine's kind, distribution, version and device (results.json `engine`)
    device: str = "cpu"   # torch device of the sweep's own model work (the sensitivity ranking)
    ahead: Any = None   # quant.ahead.QuantizeAhead: checkpoints being built in the background (local executor)
    starts: Any = None   # quant.start_ahead.StartAhead: the next variant's server starting beside (local executor)

    @property
    def engine_key(self) -> str:
        e = self.recipe.engine
        isa = (self.engine_facts or {}).get("cpu_isa")   # a CPU engine's kernels (and speed) depend on the host
        return digest(e.kind, e.args, e.env, e.dtype, self.engine_version, *((isa,) if isa else ()))

    @property
    def served_dtype(self) -> str:
        """The dtype the engine runs the variants in (the recipe's engine.dtype; `auto` decided by the device)."""
        facts = self.engine_facts or {}
        return compute_dtype(self.recipe.engine.dtype, facts.get("device") == "cpu", facts.get("cpu_isa"))

    @property
    def inprocess_dtype(self) -> str:
        """The same for variants scored in-process (on this host's CPU), so that they pair with served ones."""
        return compute_dtype(self.recipe.engine.dtype, True, host_cpu_isa())

    def variant_dir(self, name: str) -> Path:
        return self.out / "variants" / name
