"""Where a variant the engine cannot serve is scored in-process, and whether it is scored at all.

The in-process fallback (transformers) runs on the sweep's device: `--device auto` (the default) is CUDA where
nvidia-smi shows a GPU the sweep may use (CUDA_VISIBLE_DEVICES), else the CPU; torch confirms it when the model
is loaded. On the CPU, a large model over thousands of generated tokens takes days: the time is estimated first
(parameters x tokens x items at an assumed CPU rate), printed, and above CPU_LIMIT_S the variant is recorded
unsupported and not scored, unless the user opted in (`--allow-long-cpu-eval`)."""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from core.recipe import Task
from evals import task_facts
from perf.engines.gpus import visible_gpus
from quant.context import StageError

# The estimate's assumptions (docs/gpu.md): a decoder spends ~2 FLOPs per parameter per token; transformers'
# generate on a CPU in bfloat16 at batch 32 reaches about CPU_FLOPS_PER_CORE per core; every item generates its
# task's max_gen_toks (an upper bound: most stop earlier) after PROMPT_TOKENS of prompt.
CPU_FLOPS_PER_CORE = 20e9
PROMPT_TOKENS = 512
DEFAULT_GEN_TOKENS = 256   # lm-eval's default max_gen_toks
DEFAULT_ITEMS = 1000       # a task whose size is not known here
CPU_LIMIT_S = 2 * 3600     # longer than this on the CPU: not scored unless opted in
# Test split sizes of lm-eval tasks recipes name (ours are counted from their shipped data).
KNOWN_ITEMS = {"humaneval": 164, "humaneval_instruct": 164, "mbpp": 500, "mbpp_instruct": 500, "gsm8k": 1319,
               "gsm8k_cot_llama": 1319, "swde": 1111, "mmlu": 14042, "arc_challenge": 1172, "hellaswag": 10042}


def sweep_device(requested: str) -> str:
    """`auto`: cuda where nvidia-smi lists a GPU this process may use, else cpu; any other value as given."""
    if requested != "auto":
        return requested
    return "cuda" if visible_gpus() else "cpu"


def inprocess_device(device: str) -> str:
    """The sweep's device, confirmed by torch where it is a GPU: StageError where torch cannot use it (a CPU
    build of torch beside a GPU: `quant doctor` says so), rather than scoring on the CPU unannounced."""
    if not device.startswith("cuda"):
        return device
    import torch

    if not torch.cuda.is_available():
        raise StageError(f"the sweep's device is {device} but torch {torch.__version__} in this environment cannot "
                         "use CUDA (a CPU build?); run `quant doctor`, or give --device cpu")
    return device


def parameter_count(model_dir: Path) -> int:
    """Parameters in a checkpoint's safetensors files, from their headers (no tensor is read)."""
    total = 0
    for path in Path(model_dir).glob("*.safetensors"):
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return total


def task_items(task: Task) -> int:
    size = task_facts.size(task.name) or KNOWN_ITEMS.get(task.name, DEFAULT_ITEMS)
    return min(task.limit, size) if task.limit else size


def task_gen_tokens(task: Task) -> int:
    if task.gen_kwargs and "max_gen_toks" in task.gen_kwargs:
        return int(task.gen_kwargs["max_gen_toks"])
    config = task_facts.task_dir(task.name) / f"{task.name}.yaml"
    if config.exists():
        for line in config.read_text().splitlines():
            key, _, value = line.strip().partition(":")
            if key == "max_gen_toks" and value.split("#")[0].strip().isdigit():
                return int(value.split("#")[0])
    return DEFAULT_GEN_TOKENS


@dataclass(frozen=True)
class CpuEstimate:
    parameters: int
    items: int
    tokens: int          # prompt and generated, over every item
    cores: int
    seconds: float

    def describe(self) -> str:
        return (f"about {hours(self.seconds)} on {self.cores} CPU cores (estimate: {self.parameters / 1e9:.2f}B "
                f"parameters x {self.tokens:,} tokens over {self.items:,} items x 2 FLOPs at "
                f"{CPU_FLOPS_PER_CORE / 1e9:g} GFLOP/s per core)")

    def as_record(self) -> dict:
        return {"parameters": self.parameters, "items": self.items, "tokens": self.tokens, "cores": self.cores,
                "seconds": round(self.seconds), "limit_s": CPU_LIMIT_S, "flops_per_core": CPU_FLOPS_PER_CORE}


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def cpu_estimate(model_dir: Path, tasks: list[Task], cores: int | None = None) -> CpuEstimate:
    """How long scoring every task in-process on this host's CPU would take (see the assumptions above)."""
    cores = cores or os.cpu_count() or 1
    items = sum(task_items(t) for t in tasks)
    tokens = sum(task_items(t) * (PROMPT_TOKENS + task_gen_tokens(t)) for t in tasks)
    parameters = parameter_count(model_dir)
    return CpuEstimate(parameters, items, tokens, cores, 2 * parameters * tokens / (CPU_FLOPS_PER_CORE * cores))
