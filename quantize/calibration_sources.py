"""Where calibration rows come from: a shipped set, a JSONL/Parquet/CSV file, a directory written by `datasets`
(save_to_disk) or laid out as a dataset repo, or a hub dataset id. Each source opens as its splits; a split is
read row by row only for the rows chosen (a hub split of 200k rows is never turned into Python objects)."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.hashing import file_digest, tree_digest
from core.recipe import Calibration

SHIPPED_DIR = Path(__file__).with_name("calibration_sets")
# Real text that needs no hub: the interpreter's own standard library (PSF licence; calibration_sets/README.md).
SHIPPED = {"stdlib-code": SHIPPED_DIR / "stdlib_code.jsonl", "stdlib-prose": SHIPPED_DIR / "stdlib_prose.jsonl"}
FILE_SUFFIXES = (".jsonl", ".parquet", ".csv")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
SINGLE = "train"   # what `datasets` names the one split of a data file


class CalibrationError(ValueError):
    """A calibration source that cannot give the set the recipe asks for; the message says why."""


@dataclass
class Split:
    name: str
    size: int
    columns: list[str]
    rows: Callable[[list[int]], list[dict[str, Any]]]   # the rows at these indices, in that order


def open_splits(calibration: Calibration) -> tuple[str, dict[str, Split]]:
    """(how the source is named in messages, its splits by name). Raises CalibrationError."""
    source = calibration.source
    if source in SHIPPED:
        return source, {SINGLE: _jsonl(SHIPPED[source])}
    path = Path(source).expanduser()
    if path.is_file():
        return source, {SINGLE: _read_file(path)}
    if path.is_dir():
        if _saved_by_datasets(path):
            return source, _saved(path)
        return source, _dataset_repo(source, calibration, f"dataset directory {source!r} could not be read")
    if path.suffix in FILE_SUFFIXES or source.startswith(("/", ".", "~")) or not HUB_ID.match(source):
        raise CalibrationError(f"calibration source {source!r}: no such file or directory")
    return f"hub dataset {source!r}", _dataset_repo(source, calibration, f"calibration source {source!r} is not a "
                                                    f"local file or directory, and loading it as a hub dataset failed")


def data_fingerprint(calibration: Calibration) -> str | None:
    """A digest of a local source's bytes, so an edited file is a new calibration set; None for a hub id (its
    `revision` pins it) and for the demo generators (the code is the data)."""
    source = calibration.source
    path = SHIPPED.get(source) or Path(source).expanduser()
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        return tree_digest(path)
    return None


def _read_file(path: Path) -> Split:
    readers = {".jsonl": _jsonl, ".parquet": _parquet, ".csv": _csv}
    if path.suffix not in readers:
        raise CalibrationError(f"calibration source {str(path)!r}: a data file ends in "
                               f"{', '.join(FILE_SUFFIXES)}")
    return readers[path.suffix](path)


def _from_records(records: list[dict[str, Any]]) -> Split:
    columns = list(dict.fromkeys(key for record in records for key in record))
    return Split(SINGLE, len(records), columns, lambda indices: [records[i] for i in indices])


def _jsonl(path: Path) -> Split:
    records = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CalibrationError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise CalibrationError(f"{path}:{lineno}: each line must be a JSON object")
            records.append(record)
    return _from_records(records)


def _parquet(path: Path) -> Split:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:   # pyarrow's errors for a damaged or foreign file are of several types
        raise CalibrationError(f"{path}: not a readable Parquet file: {exc}") from None
    return Split(SINGLE, table.num_rows, table.column_names, lambda indices: table.take(indices).to_pylist())


def _csv(path: Path) -> Split:
    with path.open(encoding="utf-8", newline="") as fh:
        try:
            return _from_records(list(csv.DictReader(fh)))
        except csv.Error as exc:
            raise CalibrationError(f"{path}: not a readable CSV file: {exc}") from None


def _saved_by_datasets(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def _saved(path: Path) -> dict[str, Split]:
    from datasets import Dataset, load_from_disk

    try:
        saved = load_from_disk(str(path))
    except Exception as exc:   # datasets raises several types for a damaged directory
        raise CalibrationError(f"{path}: not a readable dataset directory: {exc}") from None
    if isinstance(saved, Dataset):
        return {saved.split or SINGLE: _dataset_split(saved.split or SINGLE, saved)}
    return {name: _dataset_split(name, dataset) for name, dataset in saved.items()}


def _dataset_repo(source: str, calibration: Calibration, failed: str) -> dict[str, Split]:
    """A hub dataset id, or a local directory laid out as a dataset repo: `datasets` reads both the same way.
    Only the chosen split is loaded; the others are listed by name."""
    from datasets import get_dataset_split_names, load_dataset

    try:
        names = get_dataset_split_names(source, calibration.subset, revision=calibration.revision)
    except Exception as exc:   # not found, gated, offline, unknown subset: datasets raises a type for each
        raise CalibrationError(f"{failed}: {_first_line(exc)}") from None
    chosen = choose_split(f"dataset {source!r}", names, calibration.split)
    try:
        dataset = load_dataset(source, calibration.subset, split=chosen, revision=calibration.revision)
    except Exception as exc:
        raise CalibrationError(f"dataset {source!r} split {chosen!r} could not be loaded: {_first_line(exc)}") \
            from None
    return {chosen: _dataset_split(chosen, dataset)}


def _dataset_split(name: str, dataset) -> Split:
    return Split(name, len(dataset), list(dataset.column_names), lambda indices: dataset.select(indices).to_list())


def choose_split(where: str, names: list[str], wanted: str | None) -> str:
    if wanted is not None:
        if wanted not in names:
            raise CalibrationError(f"split {wanted!r} is not in {where} (splits: {', '.join(names)})")
        return wanted
    if len(names) == 1:
        return names[0]
    if SINGLE in names:
        return SINGLE
    raise CalibrationError(f"{where} has splits {', '.join(names)}: choose one with calibration.split")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
