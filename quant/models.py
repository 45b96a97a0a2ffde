"""Resolve a recipe's `model` to a local directory: `demo`, a local path, or a hub id already cached."""

from __future__ import annotations

from pathlib import Path

from quant.demo import DEMO_MODEL_DIR


class ModelNotFound(Exception):
    pass


def resolve_model(ref: str, recipe_dir: Path | None = None) -> Path:
    if ref == "demo":
        if not (DEMO_MODEL_DIR / "model.safetensors").exists():
            raise ModelNotFound(f"the demo model is missing from {DEMO_MODEL_DIR}; rebuild it with "
                                "`quant demo build-model`")
        return DEMO_MODEL_DIR
    for candidate in ([Path(ref)] + ([recipe_dir / ref] if recipe_dir else [])):
        if candidate.expanduser().is_dir():
            return candidate.expanduser().resolve()
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download
            return Path(snapshot_download(ref))  # honours HF_HUB_OFFLINE: cache only when offline
        except Exception as exc:  # noqa: BLE001 - the hub client raises many kinds
            raise ModelNotFound(f"model {ref!r}: not a local directory and not fetchable from the hub "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from None
    raise ModelNotFound(f"model {ref!r}: no such directory")
