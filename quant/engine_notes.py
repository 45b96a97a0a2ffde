"""What an engine's start-up said about the variant it served: its warnings that change what is measured (a
fallback kernel, a disabled feature) and the kernels it picked. Read off the start in this run's server.log, and
kept in the stage cache beside the measurements it belongs to, so that a re-run that reuses every stage (and
starts no engine) records the same."""

from __future__ import annotations

import logging
from pathlib import Path

from core.hashing import digest
from core.recipe import Variant
from perf.engines.kernels import kernels, last_start
from perf.engines.process import engine_warnings, log_since
from perf.engines.warning_kinds import split_warnings
from quant.context import Checkpoint, SweepContext

log = logging.getLogger(__name__)
STAGE_ENGINE_NOTES = "engine-notes"


def record_engine_notes(ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, server_log: Path, seen: int,
                        record: dict) -> None:
    """Into record: `engine_warnings` and `kernels` of the engine start since byte `seen` of server_log, else
    those cached from the start that measured this variant's stages."""
    started = log_since(server_log, seen)
    key = digest("engine-notes", checkpoint.key, ctx.engine_key, variant.served_args)
    if started.strip():   # an engine started in this run (or beside the previous variant's evals)
        kept = report_engine_warnings(variant.name, engine_warnings(started, limit=500), server_log)
        notes = {"engine_warnings": kept, "kernels": kernels(last_start(started))}
        try:
            ctx.cache.save_json(STAGE_ENGINE_NOTES, key, notes)
        except OSError as exc:   # a convenience for re-runs: a full disk fails the stages that need it, not this
            log.warning("%s: engine notes not cached (%s); this run's record has them", variant.name, exc)
    elif ctx.cache.has(STAGE_ENGINE_NOTES, key):
        notes = ctx.cache.load_json(STAGE_ENGINE_NOTES, key)
    else:
        return
    record.update({k: v for k, v in notes.items() if v})


def report_engine_warnings(name: str, warnings: list[str], server_log: Path) -> list[str]:
    """The engine's warnings while it served this variant: those that change what is measured one line each
    (returned, for results.json's `engine_warnings`); the rest as one line pointing at server.log."""
    kept, routine = split_warnings(warnings)
    for line in kept:
        log.warning("%s engine: %s (%s)", name, line, server_log)
    if routine:
        log.warning("%s engine: %d other warning(s), none that changes what is measured (the first: %s); all in %s",
                    name, len(routine), routine[0][:100], server_log)
    return kept
