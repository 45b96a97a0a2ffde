#!/usr/bin/env bash
# The CUDA serving environment resolved on a machine without a GPU, without installing it (`make check-cuda`):
# in a clean venv, `pip install --dry-run` of requirements/serve-cuda.txt under its lock, with the torch release
# set-up installs first, from the indexes pip is configured with. torch is asked for as `===` that release, so a
# local CPU build of it (a `+cpu` wheel in find-links) cannot stand in for the CUDA build a GPU machine gets.
# pip reads each wheel's metadata, downloading the wheel where an index offers no separate metadata (the CUDA
# libraries are several GB the first time; pip's cache keeps them). Prints what a GPU machine would install;
# exits 1 if it does not resolve or if vllm would lack what it imports (torch with CUDA, torchvision).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
TORCH_VERSION=$(sed -n -E 's/^TORCH_VERSION=([0-9.]+).*/\1/p' scripts/setup.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
echo "check-cuda: resolving requirements/serve-cuda.txt under requirements/serve-cuda.lock with torch===$TORCH_VERSION"
"$work/venv/bin/pip" install -q --dry-run --ignore-installed --only-binary=:all: --report "$work/report.json" \
  -c requirements/serve-cuda.lock -r requirements/serve-cuda.txt "torch===$TORCH_VERSION" \
  2> >(grep -v "^WARNING: Location" >&2)
"$PYTHON" - "$work/report.json" requirements/serve-cuda.txt <<'PY'
import json, re, sys
report = json.load(open(sys.argv[1]))
found = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
wanted = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", open(sys.argv[2]).read(), re.M))
problems = [f"{name} {version} not in the resolution" for name, version in wanted.items()
            if found.get(name.lower()) != version]
torch = found.get("torch", "")
problems += ["torch is missing" if not torch else f"torch {torch} is a CPU build" if "+cpu" in torch else ""]
problems += ["" if "torchvision" in found else "torchvision is missing (vllm imports it)"]
cuda = sorted(n for n in found if n.startswith(("nvidia-", "cuda-")))
print(f"check-cuda: {len(found)} packages, among them " + ", ".join(
    f"{n} {found[n]}" for n in ("vllm", "torch", "torchvision", "torchaudio", "triton", "flashinfer-python")
    if n in found) + f"; {len(cuda)} CUDA libraries ({', '.join(cuda[:4])}, ...)")
problems = [p for p in problems if p]
for p in problems:
    print(f"check-cuda: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
