"""Calibration texts for data-driven quantization (GPTQ, AWQ, SmoothQuant, static activation scales): the recipe's
`calibration:` section -> the exact list of texts, chosen as llm-compressor chooses them (one split, shuffled with
the seed, the first num_samples rows), chat `messages` rendered with the model's chat template."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from core.recipe import Calibration
from quantize.calibration_sources import CalibrationError, choose_split, data_fingerprint, open_splits

# Offset from the recipe seed so calibration items come from a different stream than the training data.
SEED_OFFSET = 777
DEFAULT_COLUMN = "text"


def calibration_texts(calibration: Calibration, model_dir: Path | None = None) -> list[str]:
    """The num_samples texts, in order. model_dir (its tokenizer's chat template) is needed for `messages`.
    Raises CalibrationError (a ValueError) naming the source and what is wrong."""
    if calibration.source == "demo":
        from demo.calibration import calibration_texts as demo_texts   # only the demo source needs the generators
        return demo_texts(calibration.num_samples, calibration.seed + SEED_OFFSET)
    rows = _chosen_rows(calibration)
    if calibration.messages is None:
        return [_text(*row) for row in rows]
    render = _chat_renderer(model_dir, calibration.messages)
    return [render(_messages(*row), f"{row[1]} row {row[3] + 1}") for row in rows]


def source_problems(calibration: Calibration, model_dir: Path | None = None) -> list[str]:
    """What is wrong with the calibration set (at most one problem: the first that stops it), found by building
    it before any work: a missing file, an unknown split or column, too few rows, a malformed row, `messages`
    without a chat template. Without model_dir (the model did not resolve: its own error says why), `messages`
    are checked but not rendered."""
    if calibration.source == "demo":
        return []
    try:
        if calibration.messages is not None and model_dir is None:
            for row in _chosen_rows(calibration):
                _messages(*row)
        else:
            calibration_texts(calibration, model_dir)
    except CalibrationError as exc:
        return [str(exc)]
    return []


def calibration_key(calibration: Calibration) -> dict[str, Any]:
    """What a cached stage that calibrated depends on: the section's fields (those left at their defaults out,
    so keys made before they existed still match) and a digest of a local source's bytes."""
    fields = calibration.model_dump(mode="json", exclude_none=True, exclude={"shuffle"} if calibration.shuffle else set())
    fingerprint = None if calibration.source == "demo" else data_fingerprint(calibration)
    return {**fields, "data_sha256": fingerprint} if fingerprint else fields


def texts_sha256(texts: list[str]) -> str:
    """Fingerprint of the exact calibration set (order matters): sha256 of the JSON list."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode("utf-8")).hexdigest()


def _chosen_rows(calibration: Calibration) -> list[tuple[Any, str, str, int]]:
    """(value, where, column, row index) of each chosen row: its split, shuffled with the seed, the first
    num_samples."""
    where, splits = open_splits(calibration)
    name = choose_split(where, list(splits), calibration.split)
    split = splits[name]
    if calibration.split is not None or len(splits) > 1:
        where = f"{where} split {name!r}"
    column = calibration.messages or calibration.column or DEFAULT_COLUMN
    if column not in split.columns:
        raise CalibrationError(f"column {column!r} is not in {where} (columns: {', '.join(split.columns) or 'none'})")
    if split.size < calibration.num_samples:
        raise CalibrationError(f"{where} has {split.size} rows, fewer than num_samples {calibration.num_samples}")
    indices = (random.Random(calibration.seed).sample(range(split.size), calibration.num_samples)
               if calibration.shuffle else list(range(calibration.num_samples)))
    return [(row.get(column), where, column, i) for row, i in zip(split.rows(indices), indices)]


def _text(value: Any, where: str, column: str, index: int) -> str:
    if not isinstance(value, str):
        kind = "missing" if value is None else f"not text ({type(value).__name__})"
        raise CalibrationError(f"{where} row {index + 1}: column {column!r} is {kind}")
    return value


def _messages(value: Any, where: str, column: str, index: int) -> list[dict[str, Any]]:
    if isinstance(value, str):   # a JSON-encoded list, as CSV files hold it
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if not (isinstance(value, list) and value and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                      and "content" in m for m in value)):
        raise CalibrationError(f"{where} row {index + 1}: column {column!r} must be a list of chat messages "
                               f"({{role, content}})")
    return value


def _chat_renderer(model_dir: Path | None, column: str):
    if model_dir is None:
        raise CalibrationError(f"calibration.messages {column!r}: rendering chat messages needs the model's tokenizer")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not getattr(tokenizer, "chat_template", None):
        raise CalibrationError(f"calibration.messages {column!r}: the model's tokenizer has no chat template; "
                               f"give a text column with calibration.column instead")

    # The texts are tokenized again for calibration, with the special tokens the tokenizer adds: a template that
    # writes the BOS token itself (Llama 3's does) would otherwise calibrate on two.
    bos = tokenizer.bos_token
    adds_bos = bool(bos) and tokenizer("x").input_ids[:1] == [tokenizer.bos_token_id]

    def render(messages: list[dict[str, Any]], where: str) -> str:
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception as exc:   # a template's own error (jinja raises its exception types) for a bad turn
            raise CalibrationError(f"{where}: the chat template failed on its messages: {exc}") from None
        return text[len(bos):] if adds_bos and text.startswith(bos) else text

    return render
