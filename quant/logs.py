"""Diagnostics through Python `logging`, at the level `--verbosity` (lm-eval's convention) or `-v` picks.

The console output of a command (the Reporter's stage lines, tables, results) is not logging and is
shown at every level. Library warnings (Python warnings, transformers, lm-eval, datasets) reach stderr
at the default level, WARNING; routine chatter (per-request HTTP lines, file locks) only at DEBUG."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT = "WARNING"
# Loggers that talk at INFO about every request or file: shown only with --verbosity DEBUG.
ROUTINE = ("httpx", "httpcore", "urllib3", "filelock", "fsspec", "asyncio")
FORMAT = "%(levelname)s [%(name)s] %(message)s"
# Library warnings that every run of ours triggers by design (we hand lm-eval a loaded model, our tasks take
# no --metadata): shown at DEBUG, so that a WARNING at the default level is worth reading.
ROUTINE_WARNINGS = ("`pretrained` model kwarg is not of type `str`",
                    "Passed an already-initialized model through `pretrained`",
                    "Custom kwargs can be passed to `--metadata`")


class _Threshold(logging.Filter):
    """The handler's level, applied after routine warnings are demoted to DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and any(m in record.getMessage() for m in ROUTINE_WARNINGS):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return record.levelno >= self.level


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbosity", type=str.upper, choices=LEVELS, default=None,
                        help=f"log level of diagnostics and library warnings (default {DEFAULT}; -v: INFO, -vv: DEBUG)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more diagnostics (repeatable); --verbosity wins when both are given")


def level_of(verbosity: str | None, verbose: int = 0) -> int:
    if verbosity:
        return logging.getLevelName(verbosity.upper())
    return max(logging.DEBUG, logging.getLevelName(DEFAULT) - 10 * verbose)


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (a redirected or captured stderr too)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(level: int) -> None:
    """Root handler on stderr at `level`; Python warnings and the libraries' own loggers follow it."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_Threshold(level))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)   # warnings.warn(...) -> the "py.warnings" logger, at WARNING
    for name in ROUTINE:
        logging.getLogger(name).setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))
    _transformers_follows(level)
    # lm-eval propagates to our handler as long as its setup_logging is not called (evals/runner.py does not).
    logging.getLogger("lm_eval").setLevel(level)


def _transformers_follows(level: int) -> None:
    """transformers keeps its own stderr handler (not propagating to the root): set its level, and say it
    through the environment too so a library subprocess (the quantizer) follows."""
    os.environ["TRANSFORMERS_VERBOSITY"] = logging.getLevelName(level).lower()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity(level)


@contextlib.contextmanager
def kept_in(path: Path, *names: str):
    """While the block runs, every record of these loggers, DEBUG and tracebacks included, is also appended to
    `path` (created at the first record); the console keeps its own level."""
    handler = logging.FileHandler(path, encoding="utf-8", errors="backslashreplace", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s " + FORMAT))
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)
        handler.close()


def append_traceback(path: Path, heading: str, exc: BaseException) -> None:
    """`heading`, then the exception's full traceback, appended to `path`."""
    import traceback

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
        f.write(f"{heading}\n{''.join(traceback.format_exception(exc))}\n")
