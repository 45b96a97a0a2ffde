"""The quantizer's progress lines: printed on stdout by `python -m quantize`, parsed by the sweep from the
stream to draw its bar. One line each: `QUANTIZE-PROGRESS: <done>/<total> <unit>[ <detail>]`, e.g.
`QUANTIZE-PROGRESS: 3/25 layers calibrating batch 5/64`."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

PREFIX = "QUANTIZE-PROGRESS: "
_LINE = re.compile(r"^QUANTIZE-PROGRESS: (\d+)/(\d+) (\S+)(?: (.*))?$")
# llmcompressor's sequential pipeline names its batch loops "(k/N): Calibrating" / "(k/N): Propagating".
_SUBGRAPH = re.compile(r"\((\d+)/(\d+)\): (\w+)")


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    unit: str
    detail: str = ""

    def describe(self) -> str:
        return f"{self.unit} {self.detail}".rstrip()


def emit(done: int, total: int, unit: str, detail: str = "") -> None:
    print(f"{PREFIX}{done}/{total} {unit}{' ' + detail if detail else ''}", flush=True)


def parse(line: str) -> Progress | None:
    m = _LINE.match(line.rstrip("\r\n"))
    return Progress(int(m[1]), int(m[2]), m[3], m[4] or "") if m else None


def _pipeline_batches(iterable: Iterable, total: int | None = None, desc: str = "", **_) -> Iterator:
    """Stands in for tqdm in llmcompressor's sequential pipeline: a progress line per calibration batch."""
    m = _SUBGRAPH.match(desc or "")
    if not m:
        yield from iterable
        return
    k, n, phase = int(m[1]), int(m[2]), m[3].lower()
    done = k - 1 if phase == "calibrating" else k   # propagating follows the layer's calibration
    for b, item in enumerate(iterable):
        emit(done, n, "layers", f"{phase} batch {b + 1}/{total or '?'}")
        yield item
    if phase == "calibrating":
        emit(k, n, "layers", "calibrated")


def report_pipeline_progress() -> None:
    """Make llmcompressor's sequential pipeline (layer by layer, `subgraphs`) print progress lines; a
    version without that loop is left as it is (its progress then shows as steps only)."""
    try:
        from llmcompressor.pipelines.sequential import pipeline
    except ImportError:
        return
    if hasattr(pipeline, "tqdm"):
        pipeline.tqdm = _pipeline_batches
    else:
        logging.getLogger(__name__).warning("llmcompressor's sequential pipeline has no tqdm loop: no per-layer progress")
