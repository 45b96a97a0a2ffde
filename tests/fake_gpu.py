"""A fake `nvidia-smi` on PATH, for the tests that show what the suite decides on a GPU host (no GPU here).

It answers the queries the suite makes (`-L` with MIG instances, `--query-gpu=...` including driver_version and
utilization.gpu, `--query-compute-apps=...`) from the GPUs and processes a test gives it, in nvidia-smi's CSV
form (no header, no units: memory in MiB)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

H100 = ("NVIDIA H100 80GB HBM3", 81559, 9.0)
A100 = ("NVIDIA A100-SXM4-80GB", 81920, 8.0)
V100 = ("Tesla V100-SXM2-32GB", 32768, 7.0)
DRIVER = "580.65.06"

SCRIPT = r'''
import json, sys
facts = json.load(open(sys.argv[1]))
args = sys.argv[2:]
if facts.get("broken"):
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", file=sys.stderr)
    sys.exit(9)
if "-L" in args:
    for i, gpu in enumerate(facts["gpus"]):
        print(f"GPU {i}: {gpu['name']} (UUID: {gpu['uuid']})")
        for j, mig in enumerate(gpu.get("migs", [])):
            print(f"  MIG {mig['profile']:<13} Device  {j}: (UUID: {mig['uuid']})")
    sys.exit(0)
query = next((a.split("=", 1) for a in args if a.startswith("--query-")), None)
if query is None:
    print("fake nvidia-smi: a --query-gpu or --query-compute-apps call only"); sys.exit(0)
kind, fields = query[0], query[1].split(",")
rows = facts["gpus"] if kind == "--query-gpu" else facts["apps"]
for i, row in enumerate(rows):
    print(", ".join(str(row.get(f.replace(".", "_"), i if f == "index" else "[N/A]")) for f in fields))
'''


@dataclass
class FakeGpus:
    facts: Path

    def set(self, gpus: list[dict], apps: list[dict] | None = None, broken: bool = False) -> None:
        self.facts.write_text(json.dumps({"gpus": gpus, "apps": apps or [], "broken": broken}))


def gpu(index: int, model: tuple = H100, free_mib: int | None = None, utilization: int = 0,
        driver: str = DRIVER, migs: list[str] = ()) -> dict:
    """One GPU as nvidia-smi describes it; migs: MIG profiles (e.g. "3g.40gb") it is divided into."""
    name, total, cap = model
    return {"index": index, "uuid": f"GPU-{index:08d}-fake", "name": name, "memory_total": total,
            "memory_free": total - 512 if free_mib is None else free_mib, "compute_cap": cap,
            "utilization_gpu": utilization, "driver_version": driver,
            "migs": [{"profile": m, "uuid": f"MIG-{index:04d}{j:04d}-fake"} for j, m in enumerate(migs)]}


def install(tmp_path: Path, monkeypatch, gpus: list[dict], apps: list[dict] | None = None) -> FakeGpus:
    """nvidia-smi on PATH answering for `gpus`; returns a handle to change what it says."""
    bin_dir = tmp_path / "fake-gpu-bin"
    bin_dir.mkdir(exist_ok=True)
    fake = FakeGpus(tmp_path / "fake-gpus.json")
    fake.set(gpus, apps)
    (bin_dir / "fake_nvidia_smi.py").write_text(SCRIPT)
    script = bin_dir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / "fake_nvidia_smi.py"}" "{fake.facts}" "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def cuda_engine_python(tmp_path: Path, version: str = "0.32.0", cuda: str = "13.0") -> Path:
    """An engine python whose probe says: vLLM on CUDA, its torch built for `cuda` (what
    perf/engines/vllm.engine_facts asks it)."""
    python = tmp_path / "cuda-engine-python"
    python.write_text("#!/bin/sh\necho '" + json.dumps({"distribution": "vllm", "version": version,
                                                          "device": "cuda", "cuda": cuda}) + "'\n")
    python.chmod(0o755)
    return python
