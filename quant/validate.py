"""Everything knowable before work starts, checked before work starts and reported together: the recipe's
schema (every error, not the first), then, on every part that parsed, the model, the engine's interpreter,
task names and data files, scheme names and algorithm/scheme combinations, group sizes against the model's
Linear shapes, verbatim recipes and checkpoints, the calibration source, engine arguments against the engine's
own flags, and the checks across sections (quant/recipe_checks.py). One line per problem:
`file:line: field: message`. The stage modules own the checks (quantize/schemes.py, quantize/shapes.py,
quantize/calibration.py, evals/registry.py, perf/engines/flags.py); this module runs them and locates what
they find."""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from core.recipe_perf import Perf

from core.recipe import (Calibration, Engine, Execution, Gates, Recipe, RecipeError, Task, Variant, by_line, locate,
                         read_recipe_text, read_yaml, schema_problems)


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)     # any: nothing may start
    warnings: list[str] = field(default_factory=list)   # worth reading; the sweep goes on
    notes: list[str] = field(default_factory=list)      # what a policy chose (e.g. unfit_groups: keep)
    engine_flags: str | None = None   # the engine whose flags the engine arguments were checked against


@dataclass
class Parts:
    """The recipe's parts that validated on their own (all of them when the whole recipe did)."""
    model: str | None
    engine: Engine | None
    calibration: Calibration | None
    variants: list[tuple[int, Variant]]
    tasks: list[tuple[int, Task]]
    execution: Execution | None = None
    revision: str | None = None
    gates: Gates | None = None
    perf: Perf | None = None
    all_tasks: bool = True   # every task parsed: a name missing from `tasks` is missing from the recipe


def check_file(path: str | Path, engine: bool = True) -> tuple[Recipe, Findings]:
    """Parse and check a recipe file; RecipeError lists every problem, schema and beyond, at once."""
    path = Path(path)
    text, source = read_recipe_text(path), str(path)
    data = read_yaml(text, source)
    try:
        recipe, schema = Recipe.model_validate(data), []
    except ValidationError as err:
        recipe, schema = None, schema_problems(err, text, source)
    findings = _check(_parts(recipe, data), path.parent, text, source, engine)
    findings.errors = sorted(schema + [e for e in findings.errors if e not in schema], key=by_line)
    if findings.errors:
        raise RecipeError(findings.errors, source)
    return recipe, findings


def check_for_sweep(path: str | Path, allow_unisolated_code: bool = False) -> tuple[Recipe, Findings]:
    """check_file, then where generated code would run (`quant validate`: what a sweep checks before work)."""
    from evals.registry import check_code_isolation
    from evals.sandbox import IsolationRequired, permit_unisolated

    recipe, findings = check_file(path)
    with permit_unisolated(allow_unisolated_code or recipe.allow_unisolated_code):
        try:
            check_code_isolation(recipe.tasks)
        except IsolationRequired as exc:
            raise RecipeError(f"{path}: {exc}", str(path)) from None
    return recipe, findings


def summary(recipe: Recipe, findings: Findings) -> str:
    """`ok: ...`: what a valid recipe will run."""
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'s' * (n != 1)}"

    quantized = sum(v.quantized for v in recipe.variants)
    flags = (f"; engine arguments checked against {findings.engine_flags}" if findings.engine_flags else "")
    return (f"ok: {count(len(recipe.variants), 'variant')} ({quantized} quantized), "
            f"{count(len(recipe.tasks), 'task')} ({', '.join(t.key for t in recipe.tasks)}), "
            f"{count(len(recipe.perf.workloads), 'perf workload')}{flags}")


def validate(recipe: Recipe, recipe_path: Path | None = None, engine: bool = True) -> Findings:
    """The checks beyond the schema for a parsed recipe (lines located in recipe_path when given)."""
    text = read_recipe_text(recipe_path) if recipe_path and recipe_path.is_file() else ""
    source = str(recipe_path) if recipe_path else f"recipe {recipe.name}"
    return _check(_parts(recipe, None), recipe_path.parent if recipe_path else None, text, source, engine)


def raise_on_errors(findings: Findings, recipe: Recipe, recipe_path: Path | None) -> None:
    if findings.errors:
        raise RecipeError(findings.errors, str(recipe_path) if recipe_path else f"recipe {recipe.name}")


def _parts(recipe: Recipe | None, data: dict | None) -> Parts:
    if recipe is not None:
        return Parts(recipe.model, recipe.engine, recipe.calibration, list(enumerate(recipe.variants)),
                     list(enumerate(recipe.tasks)), recipe.execution, recipe.revision, recipe.gates, recipe.perf)
    tasks = data.get("tasks") if isinstance(data.get("tasks"), list) else []
    parsed = _valid_items(Task, [{"name": t} if isinstance(t, str) else t for t in tasks])
    return Parts(model=data["model"] if isinstance(data.get("model"), str) else None,
                 engine=_valid(Engine, data.get("engine", {})),
                 calibration=_valid(Calibration, data.get("calibration", {})),
                 variants=_valid_items(Variant, data.get("variants")),
                 tasks=parsed, execution=_valid(Execution, data.get("execution", {})),
                 revision=data["revision"] if isinstance(data.get("revision"), str) else None,
                 gates=_valid(Gates, data.get("gates", {})), perf=_valid(Perf, data.get("perf", {})),
                 all_tasks=len(parsed) == len(tasks))


def _valid(model: type[BaseModel], value: Any):
    try:
        return model.model_validate(value)
    except ValidationError:
        return None   # its errors are in the schema's list already


def _valid_items(model: type[BaseModel], values: Any) -> list[tuple[int, Any]]:
    items = [(i, _valid(model, v)) for i, v in enumerate(values)] if isinstance(values, list) else []
    return [(i, v) for i, v in items if v is not None]


def _check(parts: Parts, recipe_dir: Path | None, text: str, source: str, engine: bool) -> Findings:
    from evals.registry import task_problems

    found = Findings()

    def add(bucket: list[str], loc: tuple, message: str) -> None:
        bucket.append(locate(text, source, loc, message))

    model_dir = _model_dir(parts, recipe_dir, add, found) if parts.model is not None else None
    if engine and parts.engine is not None:
        _engine(parts, add, found)
    _cross(parts, add, found)
    if parts.execution and parts.execution.executor == "ray" and importlib.util.find_spec("ray") is None:
        add(found.errors, ("execution", "executor"), "the ray executor needs Ray: pip install 'quant-suite[ray]' "
            "(make setup installs it)")
    unresolved = task_problems([t for _, t in parts.tasks])
    for i, message in unresolved:
        add(found.errors, ("tasks", parts.tasks[i][0]), message)
    for place, message in _task_data_problems([t for i, t in enumerate(parts.tasks) if i not in dict(unresolved)]):
        add(found.errors, ("tasks", place), message)
    calibrating = []
    for i, variant in parts.variants:
        errors, notes, warnings, needs_data = _variant(variant, model_dir)
        for loc, message in errors:
            add(found.errors, ("variants", i) + loc, message)
        for bucket, messages in ((found.notes, notes), (found.warnings, warnings)):
            for message in messages:
                add(bucket, ("variants", i), f"{variant.name}: {message}")
        if needs_data:
            calibrating.append(variant.name)
    if parts.calibration is not None and calibrating:
        from quantize.calibration import source_problems
        for message in source_problems(parts.calibration, model_dir):
            add(found.errors, ("calibration", "source"), f"{message} (needed by {', '.join(calibrating)})")
    return found


def _engine(parts: Parts, add, found: Findings) -> None:
    """The engine's interpreter, then every engine argument against the flags its server accepts."""
    from perf.engines.flags import FlagsUnknown, engine_flags_known, flag_problems
    from perf.engines.process import EngineStartError
    from perf.engines.vllm import resolve_engine_python

    try:
        python = resolve_engine_python(parts.engine.python)
    except EngineStartError as exc:
        add(found.errors, ("engine", "python"), str(exc))
        return
    args = [(("engine", "args"), parts.engine.args)] + [(("variants", i, "engine_args"), v.engine_args)
                                                       for i, v in parts.variants]
    if not any(values for _, values in args):
        return
    try:
        facts = engine_facts_once(python, parts.engine.env)
        flags = engine_flags_known(python, facts, parts.engine.env)
    except FlagsUnknown as exc:
        add(found.warnings, ("engine", "args"), f"engine arguments not checked against the engine's flags: {exc}")
        return
    found.engine_flags = f"{facts['distribution'] or 'the engine'} {facts['version'] or ''}".strip()
    for where, values in args:
        for key, message in flag_problems(values, flags):
            add(found.errors, where + (key,), message)


def engine_facts_once(python: str, env: dict[str, str]) -> dict:
    """perf.engines.vllm.engine_facts, asked once per interpreter and environment in this process: validation
    and the sweep's start both need them, and each asking starts the engine's python."""
    return dict(_facts(python, tuple(sorted({**os.environ, **env}.items()))))


@functools.lru_cache(maxsize=8)
def _facts(python: str, environment: tuple) -> tuple:
    from perf.engines.vllm import engine_facts
    return tuple(engine_facts(python, dict(environment)).items())


def _cross(parts: Parts, add, found: Findings) -> None:
    from quant import recipe_checks

    problems, warnings = [], []
    if parts.gates is not None and parts.all_tasks:
        problems += recipe_checks.per_task_problems(parts.gates, [t for _, t in parts.tasks])
    if parts.gates is not None:
        warnings += recipe_checks.min_n_warnings(parts.gates, parts.tasks)
    if parts.gates is not None and parts.perf is not None:
        warnings += recipe_checks.perf_gate_warnings(parts.gates, parts.perf)
    if parts.perf is not None:
        problems += recipe_checks.workload_problems(parts.perf, parts.engine, parts.variants)
    problems += recipe_checks.generation_problems(parts.tasks, parts.engine, parts.variants)
    for bucket, found_here in ((found.errors, problems), (found.warnings, warnings)):
        for loc, message in found_here:
            add(bucket, loc, message)


def _model_dir(parts: Parts, recipe_dir: Path | None, add, found: Findings) -> Path | None:
    """Where the model's config.json is: of a hub model, that file alone is fetched here."""
    from quant.models import ModelNotFound, local_model, model_config_dir
    try:
        if parts.revision is not None and local_model(parts.model, recipe_dir) is not None:
            add(found.errors, ("revision",), f"a revision is for a hub model; {parts.model!r} is local")
            return None
        model_dir = model_config_dir(parts.model, recipe_dir, parts.revision)
    except ModelNotFound as exc:
        add(found.errors, ("model",), str(exc))
        return None
    if not (model_dir / "config.json").is_file():
        add(found.errors, ("model",), f"{model_dir}: not a model directory (no config.json)")
        return None
    return model_dir


def _task_data_problems(tasks: list[tuple[int, Task]]) -> list[tuple[int, str]]:
    """(index, message) for tasks whose hub dataset cannot be had: resolved as lm-eval's `datasets` call would."""
    from evals.registry import hub_dataset
    from quant.hub import dataset_problem

    found = []
    for i, task in tasks:
        source = hub_dataset(task)
        if source is not None and (problem := dataset_problem(*source)) is not None:
            found.append((i, f"{task.name}: {problem}"))
    return found


def _variant(variant: Variant, model_dir: Path | None) -> tuple[list[tuple[tuple, str]], list[str], list[str], bool]:
    """(errors, notes, warnings, whether it needs calibration data) for one variant."""
    from quantize import schemes, shapes
    from quantize.backends import get_backend
    from quantize.backends.llmcompressor import recipe_text

    if variant.checkpoint is not None:
        ok = Path(variant.checkpoint).expanduser().is_dir()
        return ([] if ok else [(("checkpoint",), f"no such directory: {variant.checkpoint}")]), [], [], False
    if variant.recipe is not None:
        try:
            recipe_text(variant)
        except FileNotFoundError as exc:
            return [(("recipe",), str(exc))], [], [], False
        return [], [], [], True
    if not variant.quantized:
        return [], [], [], False
    errors = schemes.problems(variant)
    if errors:
        return errors, [], [], False
    notes: list[str] = []
    warnings: list[str] = []
    if model_dir is not None:
        try:
            errors, notes = shapes.problems(model_dir, variant)
        except Exception as exc:  # noqa: BLE001 - an architecture we cannot build on the meta device
            warnings = [f"group sizes not checked: the model's modules could not be built from config.json "
                        f"({type(exc).__name__}: {str(exc)[:200]})"]
    needs_data = get_backend(variant.backend).needs_calibration(variant) or variant.sensitivity is not None
    return errors, notes, warnings, needs_data
