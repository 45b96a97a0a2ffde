#!/usr/bin/env bash
# The GPTQModel quantization backend (`backend: gptqmodel` in a recipe) in the main environment.
# Idempotent: does nothing when the pinned versions below are installed and `import gptqmodel` works.
#
# GPTQModel 7.7.0 asks for torch>=2.14.1 and transformers>=5.20.2, which would replace the pins llmcompressor
# needs (torch 2.13.0+cpu, transformers 5.17.0). It runs on those pins, so it goes in with --no-deps and its
# small runtime dependencies are installed under a constraint file of everything already there: pip adds
# packages and changes none. optimum lets transformers load GPTQ checkpoints (in-process evaluation).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
MAIN_VENV=${QUANT_MAIN_VENV:-.venv}
PY=$MAIN_VENV/bin/python
GPTQMODEL=GPTQModel==7.7.0
DEPS=(PyPcre==0.6.4 LogBar==0.4.15 TokeNicer==0.0.14 Device-SMI==0.5.7 Defuser==0.0.28 optimum==2.3.0)
source scripts/installer.sh   # pip_install: uv where it can be had, else pip

# pip's resolver then reports gptqmodel's declared (and here deliberately unmet) requirements as an ERROR, and
# repeats a warning about local find-links folders: drop both, keep anything else.
quiet() { "$@" 2> >(grep -v -e "^WARNING: Location" -e "^gptqmodel 7.7.0 requires" \
                           -e "dependency resolver does not currently take into account" >&2); }

[[ -x $PY ]] || { echo "setup-gptqmodel: $PY not found: run \`make setup\` first" >&2; exit 1; }

installed() {  # true when every pin is installed at its version and gptqmodel imports
  "$PY" - "$GPTQMODEL" "${DEPS[@]}" <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    if md.version(name) != version:
        sys.exit(1)
import gptqmodel  # noqa: F401
EOF
}

if installed; then
  echo "setup-gptqmodel: $GPTQMODEL is installed in $MAIN_VENV"
  exit 0
fi

echo "setup-gptqmodel: installing $GPTQMODEL into $MAIN_VENV"
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
# Everything installed now, as constraints (editable/local lines are not allowed in a constraint file).
"$PY" -m pip freeze --exclude-editable | grep -v -i -e '^gptqmodel==' -e ' @ ' > "$pins"
quiet pip_install "$MAIN_VENV" -q --no-deps "$GPTQMODEL"
# PyPcre builds from source (needs a C compiler).
quiet pip_install "$MAIN_VENV" -q -c "$pins" "${DEPS[@]}"
installed || { echo "setup-gptqmodel: installed, but \`import gptqmodel\` fails in $MAIN_VENV" >&2; exit 1; }
rm -f "$MAIN_VENV/.quant-compiled"   # the new packages too (compileall skips what is compiled already)
compile_venv "$MAIN_VENV"
echo "setup-gptqmodel: $GPTQMODEL ready (its CPU kernels compile on first use, ~20 s, under ~/.cache/gptqmodel)"
