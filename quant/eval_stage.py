"""The eval stage of a sweep: each task of the recipe scored on one variant (served or in-process), cached by
content with its per-item records and lm-eval's own output files, then copied into the variant's directory."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from rich.markup import escape

from core.hashing import digest, file_digest, tree_digest, versions
from core.memo import remembered
from core.recipe import Task, Variant
from core.store import copy_file
from core.run_layout import LM_EVAL_DIR as LM_EVAL
from evals import task_facts
from evals.tokens import SCORING_VERSION
from quant.context import Checkpoint, Session, SweepContext

STAGE_EVAL = "evals"


def eval_key(ctx: SweepContext, task: Task, ckpt_key: str, backend: str, engine_args: dict | None = None) -> str:
    """Served evals depend on the engine's flags too (e.g. an FP8 KV cache changes the outputs); every eval
    on how its scorer turns text into tokens (SCORING_VERSION: a change there re-runs evals, never reuses)."""
    task_dir = task_facts.task_dir(task.name)
    task_src = tree_digest(task_dir) if task_dir.is_dir() else task.name
    options = task.lm_eval_options()
    files = options.pop("data_files", None)
    files = {"test": files} if isinstance(files, str) else files or {}
    data = {split: file_digest(Path(path)) for split, path in files.items()}
    engine = (digest(ctx.engine_key, engine_args or {}) if backend == "served"
              else digest(versions("transformers", "compressed-tensors"), ctx.inprocess_dtype))
    return digest("eval", "lm-eval-files", ckpt_key, task.name, task_src, task.limit, options, data, backend,
                  engine, versions("lm_eval"), f"scoring-{SCORING_VERSION}")


class EvalStage:
    """Every task of the recipe on one variant through one backend ("served" or "inprocess")."""
    name = "evals"

    def __init__(self, ctx: SweepContext, variant: Variant, checkpoint: Checkpoint, backend: str,
                 engine_args: dict | None = None):
        self.ctx, self.variant, self.backend = ctx, variant, backend
        self.keys = {t.key: eval_key(ctx, t, checkpoint.key, backend, engine_args) for t in ctx.recipe.tasks}
        self.todo = [t for t in ctx.recipe.tasks if not ctx.cache.has(STAGE_EVAL, self.keys[t.key])]
        self.not_measurable: dict[str, str] = {}   # task -> why this engine cannot score it

    def pending(self) -> bool:
        return bool(self.todo)

    def run(self, session: Session) -> None:
        for task in self.todo:
            key = self.keys[task.key]
            with self.ctx.cache.building(STAGE_EVAL, key, on_wait=lambda: self.ctx.reporter.log(
                    f"  eval {task.key}: another sweep on this cache is scoring it; waiting")) as needed:
                if needed:
                    self._run_one(session, task, key)

    def _run_one(self, session: Session, task: Task, key: str) -> None:
        from evals.backends.served import NotMeasurable

        try:
            run_eval(self.ctx, session.lm, task, key, self.variant.name)
        except NotMeasurable as exc:
            self.not_measurable[task.key] = str(exc)
            self.ctx.reporter.log(f"  {task.key}: not measurable on this engine ({escape(str(exc))})", style="yellow")

    def collect(self, record: dict) -> None:
        """Every task scored (a task the engine could not score, or not reached before a failure, is absent;
        the former listed under not_measurable)."""
        vdir = self.ctx.variant_dir(self.variant.name)
        for name, key in self.keys.items():
            if self.ctx.cache.has(STAGE_EVAL, key):
                collect_eval(self.ctx, key, name, record, vdir, self.backend)
        if self.not_measurable:
            record.setdefault("not_measurable", {}).setdefault("tasks", {}).update(self.not_measurable)


def run_eval(ctx: SweepContext, lm, task: Task, key: str, model_name: str) -> None:
    from evals.response_length import response_tokens   # a tokenizer and scipy: likewise
    from evals.runner import evaluate_task   # lm-eval: a cached task never imports it

    size = task_facts.size(task.name)
    total = size if task.limit is None else min(task.limit, size or task.limit)
    with ctx.reporter.bar(f"  eval {task.key}", total=total) as advance:
        if hasattr(lm, "progress"):
            lm.progress = advance
        started = time.time()
        with tempfile.TemporaryDirectory(prefix="quant-lm-eval-") as scratch:
            summary, samples = evaluate_task(lm, task, lm_eval_dir=Path(scratch), model_name=model_name)
            summary["eval_seconds"] = round(time.time() - started, 2)
            lengths = response_tokens(samples, ctx.model_dir)
            if lengths:
                summary["response_tokens"] = lengths
            lm_eval_files = {f"{LM_EVAL}/{path.name}": path for path in Path(scratch).glob("*/*")}
            ctx.cache.save_json(STAGE_EVAL, key, summary, extra={"samples.jsonl": samples}, files=lm_eval_files)
    primary = summary["primary"]
    ctx.reporter.log(f"  {task.key}: {primary} {summary[primary]['value']:.3f} "
                     f"(n={summary[primary]['n']}, {summary['eval_seconds']:.1f}s)")


def collect_eval(ctx: SweepContext, key: str, task: str, record: dict, vdir: Path, backend: str) -> None:
    summary = ctx.cache.load_json(STAGE_EVAL, key)
    primary, lengths = summary["primary"], summary.pop("response_tokens", None)
    record["accuracy"][task] = {"metric": primary, **summary[primary], "backend": backend,
                                "metrics": {m: v for m, v in summary.items() if m != "primary"}}
    samples = ctx.cache.path(STAGE_EVAL, key) / "samples.jsonl"
    if lengths:
        record["accuracy"][task]["response_tokens"] = lengths
    copy_file(samples, vdir / "evals" / f"{task}.jsonl")
    _collect_lm_eval(ctx.cache.path(STAGE_EVAL, key) / LM_EVAL, vdir)


def _collect_lm_eval(cached: Path, vdir: Path) -> None:
    """lm-eval's layout, output_path/<model_name_sanitized>/, so its tooling reads variants/<v>/lm_eval."""
    files = sorted(cached.glob("*")) if cached.is_dir() else []
    if files:
        folder = _lm_eval_folder(vdir.name)
        for src in files:
            copy_file(src, vdir / LM_EVAL / folder / src.name)


def _lm_eval_folder(model_name: str) -> str:
    """lm-eval's own name for a model's output folder, remembered per lm-eval version (lm_eval.utils takes
    seconds to import, and a cached sweep needs nothing else of it)."""
    def sanitize() -> str:
        from lm_eval.utils import sanitize_model_name
        return sanitize_model_name(model_name)

    return remembered("lm-eval-model-folder", (model_name, versions("lm_eval")), sanitize)
