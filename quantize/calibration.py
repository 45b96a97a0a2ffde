"""Calibration texts for data-driven quantization (GPTQ, AWQ, SmoothQuant, static activation scales)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.recipe import Calibration

# Offset from the recipe seed so calibration items come from a different stream than the training data.
SEED_OFFSET = 777


def calibration_texts(calibration: Calibration) -> list[str]:
    """num_samples texts: the demo task generators ("demo") or the "text" field of a JSONL file."""
    if calibration.source == "demo":
        from demo.calibration import calibration_texts as demo_texts   # only the demo source needs the generators
        return demo_texts(calibration.num_samples, calibration.seed + SEED_OFFSET)
    return _jsonl_texts(Path(calibration.source), calibration.num_samples)


def source_problems(calibration: Calibration) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the calibration source, read before any work: a missing or malformed file is
    an error; fewer texts than num_samples a warning (quantization then calibrates on what there is)."""
    if calibration.source == "demo":
        return [], []
    try:
        texts = _jsonl_texts(Path(calibration.source), calibration.num_samples)
    except (OSError, ValueError) as exc:
        return [str(exc)], []
    if len(texts) < calibration.num_samples:
        return [], [f"{calibration.source} has {len(texts)} texts, fewer than num_samples {calibration.num_samples}: "
                    f"calibrating on {len(texts)}"]
    return [], []


def texts_sha256(texts: list[str]) -> str:
    """Fingerprint of the exact calibration set (order matters): sha256 of the JSON list."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode("utf-8")).hexdigest()


def _jsonl_texts(path: Path, n: int) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(
            f"calibration source {str(path)!r} is neither \"demo\" nor an existing JSONL file")
    texts: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"{path}:{lineno}: each line needs a string field \"text\"")
            texts.append(record["text"])
            if len(texts) == n:
                break
    if not texts:
        raise ValueError(f"{path}: no calibration texts")
    return texts
