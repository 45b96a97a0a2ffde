"""A fake `nvidia-smi` on PATH, for the tests that show what the suite decides on a GPU host (no GPU here).

It answers the queries the suite makes (`-L` with MIG instances, `--query-gpu=...` including driver_version and
utilization.gpu, `--query-compute-apps=...`) from the GPUs and processes a test gives it, in nvidia-smi's CSV
form (no header, no units: memory in MiB), and prints what real drivers print where they cannot answer: [N/A]
for a field it has no value of, "No devices were found", the driver failure message, a query field an older
driver rejects, bytes that are not UTF-8; or hangs."""

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
import json, sys, time
facts = json.load(open(sys.argv[1]))
args = sys.argv[2:]
with open(sys.argv[1] + ".calls", "a") as calls:
    calls.write(" ".join(args) + "\n")
if facts.get("hang"):
    time.sleep(facts["hang"])
if facts.get("broken"):
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
          "NVIDIA driver is installed and running.\n")
    sys.exit(9)
if not facts["gpus"]:
    print("No devices were found")
    sys.exit(6)
out = sys.stdout.buffer
def say(text):
    out.write(text.encode("utf-8", "surrogateescape") + b"\n")
if "-L" in args:
    for i, gpu in enumerate(facts["gpus"]):
        say(f"GPU {i}: {gpu['name']} (UUID: {gpu['uuid']})")
        for j, mig in enumerate(gpu.get("migs", [])):
            say(f"  MIG {mig['profile']:<13} Device  {j}: (UUID: {mig['uuid']})")
    sys.exit(0)
query = next((a.split("=", 1) for a in args if a.startswith("--query-")), None)
if query is None:
    print("fake nvidia-smi: a --query-gpu or --query-compute-apps call only"); sys.exit(0)
kind, fields = query[0], query[1].split(",")
for field in fields:
    if field in facts.get("unknown_fields", []):   # an older driver (470 has no compute_cap)
        print(f'Field "{field}" is not a valid field to query.\n')
        sys.exit(2)
rows = facts["gpus"] if kind == "--query-gpu" else facts["apps"]
for i, row in enumerate(rows):
    say(", ".join(str(row.get(f.replace(".", "_"), i if f == "index" else "[N/A]")) for f in fields))
'''


@dataclass
class FakeGpus:
    facts: Path

    def set(self, gpus: list[dict], apps: list[dict] | None = None, broken: bool = False, hang: float = 0,
            unknown_fields: list[str] = ()) -> None:
        """What nvidia-smi says next: broken, the driver failure message (status 9); hang, seconds it sleeps
        first; unknown_fields, query fields this driver rejects (driver 470: compute_cap); no gpus: "No devices
        were found" (status 6)."""
        self.facts.write_text(json.dumps({"gpus": gpus, "apps": apps or [], "broken": broken, "hang": hang,
                                          "unknown_fields": list(unknown_fields)}))


    def calls(self) -> list[str]:
        """The arguments of each call nvidia-smi was asked so far."""
        path = self.facts.with_name(self.facts.name + ".calls")
        return path.read_text().splitlines() if path.exists() else []


def gpu(index: int, model: tuple = H100, free_mib: int | None = None, utilization: int = 0,
        driver: str = DRIVER, migs: list[str] = (), **fields) -> dict:
    """One GPU as nvidia-smi describes it; migs: MIG profiles (e.g. "3g.40gb", "1g.10gb+me") it is divided
    into; fields: any other query field as nvidia-smi prints it, dots as underscores (memory_free="[N/A]",
    compute_mode="Prohibited", ecc_errors_uncorrected_volatile_total=2, name with bytes that are not UTF-8 as
    surrogate escapes: "NVIDIA \udcff")."""
    name, total, cap = model
    free = total - 512 if free_mib is None else free_mib
    return {"index": index, "uuid": f"GPU-{index:08d}-fake", "name": name, "memory_total": total,
            "memory_free": free, "memory_used": total - free, "compute_cap": cap,
            "utilization_gpu": utilization, "driver_version": driver, "compute_mode": "Default",
            "ecc_errors_uncorrected_volatile_total": 0, "mig_mode_current": "Enabled" if migs else "Disabled",
            "migs": [{"profile": m, "uuid": f"MIG-{index:04d}{j:04d}-fake"} for j, m in enumerate(migs)], **fields}


def install(tmp_path: Path, monkeypatch, gpus: list[dict], apps: list[dict] | None = None) -> FakeGpus:
    """nvidia-smi on PATH answering for `gpus`; returns a handle to change what it says."""
    bin_dir = tmp_path / "fake-gpu-bin"
    bin_dir.mkdir(exist_ok=True)
    fake = FakeGpus(tmp_path / "fake-gpus.json")
    fake.set(gpus, apps)
    monkeypatch.setenv("QUANT_NVIDIA_SMI_TIMEOUT", "2")   # a hang costs the tests 2 s, not 5
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
