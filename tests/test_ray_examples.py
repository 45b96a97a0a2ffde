"""docs/ray.md's worked examples of a real cluster (a KubeRay RayJob, a Slurm batch script) are checked for form:
no Kubernetes or Slurm runs here. The YAML is a RayJob whose head runs no variant and whose every pod gets the
bucket's settings from a Secret; the script is valid bash that starts a head and its workers with `ray start`;
both sweep commands parse with `quant sweep`'s own arguments and put the run and the cache in a bucket."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from quant.cli import build_parser
from tests.helpers import REPO

DOC = (REPO / "docs" / "ray.md").read_text()


def block(language: str, containing: str) -> str:
    found = [b for b in re.findall(rf"^```{language}\n(.*?)^```", DOC, re.S | re.M) if containing in b]
    assert len(found) == 1, f"docs/ray.md: one ```{language} block with {containing!r}"
    return found[0]


def sweep_args(command: str):
    """`quant sweep ...` (after any `.venv/bin/`) parsed as the command line would be."""
    argv = shlex.split(command.replace("\\\n", " "))
    start = next(i for i, a in enumerate(argv) if a.endswith("quant") and argv[i + 1] == "sweep")
    args = build_parser().parse_args(argv[start + 1:])
    assert args.command == "sweep" and args.out.startswith("s3://") and args.cache_dir.startswith("s3://")
    return args


def test_the_rayjob_example_runs_the_sweep_on_gpu_workers_with_the_bucket_from_a_secret():
    job = yaml.safe_load(block("yaml", "kind: RayJob"))
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert sweep_args(spec["entrypoint"]).ray_address == "auto"
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == "2.60.0"
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"   # variants run on the workers only
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        for container in pod["spec"]["containers"]:
            assert {"secretRef": {"name": "quant-s3"}} in container["envFrom"]
            assert not [e for e in container.get("env", []) if e["name"].startswith("AWS_")]
    (workers,) = cluster["workerGroupSpecs"]
    container = workers["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "QUANT_MIRROR_DIR", "value": "/mirror"} in container["env"]
    assert "secret" not in spec["entrypoint"].lower() and "AWS_" not in spec["entrypoint"]


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_the_slurm_example_is_bash_that_starts_a_head_and_workers_and_sweeps_on_them():
    script = block("bash", "#SBATCH")
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert re.search(r"ray start --head --node-ip-address=\"\$head_ip\"", script)
    assert re.search(r"ray start --address=\"\$head_ip:\$port\" --block", script)
    sweep = script[script.index(".venv/bin/quant sweep"):]
    assert sweep_args(sweep).ray_address == "$head_ip:$port"
    assert "QUANT_MIRROR_DIR" in script and "AWS_SECRET" not in script
