"""The checks that need a CUDA GPU, in one short run (the workplace lends an H200 for minutes at a time).

    python benchmarks/gpu_check.py --out DIR [--skip-big] [--device cuda]

0. host: what nvidia-smi lists and what the suite reads of it (the GPUs a variant may be given, the driver,
   the processes on them); machine: torch, transformers and whether torch sees CUDA.
1. memory: a server-shaped process tree (a parent whose child holds device memory, like vLLM's API
   server and engine core) measured by perf/engines/process.py: by PID from nvidia-smi, and by the growth
   of used memory (the fallback where PIDs are not visible), against what the child itself allocated.
2. quantize: every scheme of recipes/schemes.yaml's kind on the demo model through `python -m quantize`
   with CUDA present (llmcompressor runs calibration on the GPU): time, size, bits per weight.
3. sensitivity: the demo model's ranking on the GPU and on the CPU of the same machine: same order?
4. big (unless --skip-big): a randomly initialised 1B Llama (TinyLlama's shape, the demo tokenizer):
   RTN and GPTQ W4A16 time and size, KV-cache accounting, and the sensitivity analysis' time per unit.
Each step writes DIR/<step>.json as soon as it ends, so a run cut short keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DEMO_MODEL = REPO / "demo" / "model"

SCHEMES = [  # (name, Variant fields)
    ("w4a16-rtn", {"scheme": "W4A16"}),
    ("w4a16-gptq", {"scheme": "W4A16", "algorithm": "gptq"}),
    ("w4a16-asym-awq", {"scheme": "W4A16_ASYM", "algorithm": "awq"}),
    ("w8a8-sq-gptq", {"scheme": "W8A8", "algorithm": "gptq", "smoothquant": 0.8}),
    ("fp8-dynamic", {"scheme": "FP8_DYNAMIC"}),
    ("fp8-static", {"scheme": "FP8"}),
    ("fp8-block", {"scheme": "FP8_BLOCK"}),
    ("nvfp4", {"scheme": "NVFP4"}),
]


def step(out: Path, name: str, fn) -> dict:
    start = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - report and go on to the next step
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    result["step_seconds"] = round(time.perf_counter() - start, 2)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"== {name}: {json.dumps(result)[:1500]}", flush=True)
    return result


def host() -> dict:
    """The host as nvidia-smi lists it, and as the suite reads it (perf/engines/gpus.py): what a variant's GPU
    choice and its recorded identity are built from."""
    from perf.engines import nvidia_smi
    from perf.engines.gpus import driver_version, gpu_processes, visible_gpus
    return {"gpu": nvidia_smi.listing().strip(), "suite_sees": [g.as_fact() for g in visible_gpus()],
            "driver": driver_version(), "processes": [vars(p) for p in gpu_processes() or []],
            "nvidia_smi_problem": nvidia_smi.problem()}


def machine() -> dict:
    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.cuda.is_available(), "python": sys.version.split()[0]}


def memory(gib: float = 4.0) -> dict:
    from perf.engines.gpus import nvidia_smi
    from perf.engines.process import gpu_used_bytes, process_tree, spawn, stop_group, tree_gpu_bytes

    nbytes = int(gib * (1 << 30))
    child = ("import sys, time, torch\n"
             "x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
             "free, total = torch.cuda.mem_get_info()\n"
             "print('READY', torch.cuda.memory_reserved(), total - free, flush=True); time.sleep(300)\n")
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}, '{nbytes}'])"
    before = gpu_used_bytes()
    log = Path(tempfile.mkdtemp()) / "tree.log"
    proc = spawn([sys.executable, "-c", parent], dict(os.environ), log)
    try:
        deadline = time.monotonic() + 120
        while "READY" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if "READY" not in log.read_text():
            raise RuntimeError(f"the child never held device memory: {log.read_text()[-500:]}")
        ready = log.read_text().split("READY", 1)[1].split()
        reserved, device_used_by_child_view = int(ready[0]), int(ready[1])
        tree_pids = [p.pid for p in process_tree(proc.pid)]
        apps = nvidia_smi("--query-compute-apps=pid,used_memory")
        by_pid = tree_gpu_bytes(proc.pid)
        after = gpu_used_bytes()
        with_fallback = tree_gpu_bytes(proc.pid, before)
    finally:
        stop_group(proc, grace_s=2)
    return {"allocated_bytes": nbytes, "torch_reserved_bytes": reserved,
            "device_used_seen_by_child": device_used_by_child_view, "used_before": before, "used_after": after,
            "growth_bytes": None if before is None or after is None else after - before,
            "tree_pids": tree_pids, "nvidia_smi_compute_apps": apps, "tree_gpu_bytes": by_pid,
            "tree_gpu_bytes_with_fallback": with_fallback}


def quantize_all(model_dir: Path, work: Path, schemes=SCHEMES, timeout: float = 240, samples: int = 128) -> dict:
    from core.recipe import Calibration, Variant
    from quantize import QuantizeError, quantize_in_subprocess

    work.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name, fields in schemes:
        variant = Variant(name=name, **fields)
        start = time.perf_counter()
        try:
            m = quantize_in_subprocess(model_dir, variant, Calibration(num_samples=samples), work / name,
                                       log_path=work / f"{name}.log", timeout=timeout)
            rows[name] = {k: m.get(k) for k in ("quantization_seconds", "oneshot_seconds", "size_bytes",
                                                 "weights_bytes", "bits_per_weight_quantized", "format",
                                                 "scheme_description")}
        except QuantizeError as exc:
            rows[name] = {"error": str(exc)}
        rows[name]["wall_seconds_with_process"] = round(time.perf_counter() - start, 2)
    return rows


def sensitivity(model_dir: Path, devices: list[str], by: str = "module", samples: int = 32) -> dict:
    from core.recipe import Calibration, Variant
    from quantize.calibration import calibration_texts
    from quantize.sensitivity import analyse

    variant = Variant(name="w2a16-rtn", weights={"num_bits": 2, "strategy": "channel", "group_size": None})
    texts = calibration_texts(Calibration(num_samples=samples))
    results = {}
    for device in devices:
        start = time.perf_counter()
        r = analyse(model_dir, variant, texts, {}, by=by, device=device)
        results[device] = {"seconds": round(time.perf_counter() - start, 2), "units": len(r["units"]),
                           "order": [u["unit"] for u in r["units"]], "kl": [u["kl"] for u in r["units"]]}
    if len(devices) == 2:
        a, b = (results[d] for d in devices)
        kl_b = dict(zip(b["order"], b["kl"]))
        results["same_order"] = a["order"] == b["order"]
        results["top4_same"] = set(a["order"][:4]) == set(b["order"][:4])
        results["max_relative_kl_difference"] = max(abs(k - kl_b[u]) / max(kl_b[u], 1e-12)
                                                    for u, k in zip(a["order"], a["kl"]))
    return results


TINYLLAMA_SHAPE = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                   "num_attention_heads": 32, "num_key_value_heads": 4}


def build_big(path: Path, device: str = "cuda", shape: dict = TINYLLAMA_SHAPE) -> dict:
    import shutil

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(DEMO_MODEL)
    config = LlamaConfig(vocab_size=len(tok), **shape, max_position_embeddings=2048,
                         tie_word_embeddings=False, torch_dtype="bfloat16",
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    for f in DEMO_MODEL.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")) or f.name == "chat_template.jinja":
            shutil.copy2(f, path / f.name)
    params = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"params": params, "config": {k: getattr(config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "vocab_size")}}


def big(work: Path, device: str = "cuda", shape: dict = TINYLLAMA_SHAPE) -> dict:
    from perf.memory import account
    from quantize.manifest import size_on_disk

    path = work / "big-bf16"
    result = {"build": build_big(path, device, shape)}
    result["quantize"] = quantize_all(path, work, [("big-w4a16-rtn", {"scheme": "W4A16"}),
                                                   ("big-w4a16-gptq", {"scheme": "W4A16", "algorithm": "gptq"})],
                                      timeout=200, samples=64)
    memory_rows = {}
    for name, ckpt in (("bf16", path), ("w4a16-gptq", work / "big-w4a16-gptq")):
        if (ckpt / "config.json").is_file():
            memory_rows[name] = account(ckpt, size_on_disk(ckpt)[1], {}, seq_tokens=192, accelerator_gib=141.0,
                                     utilization=0.9)
    result["memory"] = memory_rows
    result["sensitivity_by_layer"] = sensitivity(path, [device], by="layer", samples=16)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--only", nargs="*", default=None,
                    help="steps to run (host machine memory quantize sensitivity big)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    wanted = lambda s: args.only is None or s in args.only  # noqa: E731
    if wanted("host"):
        step(args.out, "host", host)
    if wanted("machine"):
        step(args.out, "machine", machine)
    if wanted("memory") and args.device == "cuda":
        step(args.out, "memory", memory)
    if wanted("quantize"):
        step(args.out, "quantize", lambda: quantize_all(DEMO_MODEL, work))
    if wanted("sensitivity"):
        devices = [args.device, "cpu"] if args.device != "cpu" else ["cpu"]
        step(args.out, "sensitivity", lambda: sensitivity(DEMO_MODEL, devices))
    if wanted("big") and not args.skip_big:
        step(args.out, "big", lambda: big(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
