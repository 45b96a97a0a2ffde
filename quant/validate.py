"""Everything knowable before work starts, checked before work starts and reported together: the recipe's
schema (every error, not the first), then, on every part that parsed, each stage's own check of its part
(quantize/validate.py: schemes, module names, group sizes, sensitivity rules, verbatim recipes, checkpoints,
the calibration source; evals/validate.py: task names, the hub data they load and whether a task's longest
prompt fits each variant's max_model_len; perf/validate.py: the engine's interpreter and its arguments, names
and values, as the engine's own parser takes them, and the perf workloads), the model they stand on, the
executor, and the checks across sections (quant/recipe_checks.py). One line per problem: `file:line: field:
message`. This module collects what the stages find and locates it in the recipe file; of a stage it imports
only its validate module (tests/test_architecture.py)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from core.checks import Found
from core.recipe import (Calibration, Engine, Execution, Gates, Recipe, RecipeError, Task, Variant, by_line, locate,
                         read_recipe_text, read_yaml, schema_problems)
from core.recipe_perf import Perf
from perf.validate import engine_facts_once  # noqa: F401 - the sweep's start asks the engine once, as validation did


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


@dataclass(frozen=True)
class Trust:
    """What the user allows a check of the recipe to do: run what the recipe names for its engine (its python,
    its environment: `--trust-recipe`; a sweep runs them anyway), and load a model with trust_remote_code."""
    run_recipe: bool = False
    remote_code: bool = False


def check_file(path: str | Path, engine: bool = True, trust: Trust = Trust()) -> tuple[Recipe, Findings]:
    """Parse and check a recipe file; RecipeError lists every problem, schema and beyond, at once."""
    path = Path(path)
    text, source = read_recipe_text(path), str(path)
    data = read_yaml(text, source)
    try:
        recipe, schema = Recipe.model_validate(data), []
    except ValidationError as err:
        recipe, schema = None, schema_problems(err, text, source)
    findings = _check(_parts(recipe, data), path.parent, text, source, engine, trust)
    findings.errors = sorted(schema + [e for e in findings.errors if e not in schema], key=by_line)
    if findings.errors:
        raise RecipeError(findings.errors, source)
    return recipe, findings


def check_for_sweep(path: str | Path, allow_unisolated_code: bool = False,
                    trust: Trust = Trust()) -> tuple[Recipe, Findings]:
    """check_file, then where generated code would run (`quant validate`: what a sweep checks before work)."""
    import evals.validate

    recipe, findings = check_file(path, trust=trust)
    problem = evals.validate.isolation_problem(recipe.tasks, allow_unisolated_code or recipe.allow_unisolated_code)
    if problem is not None:
        raise RecipeError(f"{path}: {problem}", str(path))
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


def validate(recipe: Recipe, recipe_path: Path | None = None, engine: bool = True,
             trust: Trust = Trust()) -> Findings:
    """The checks beyond the schema for a parsed recipe (lines located in recipe_path when given)."""
    text = read_recipe_text(recipe_path) if recipe_path and recipe_path.is_file() else ""
    source = str(recipe_path) if recipe_path else f"recipe {recipe.name}"
    return _check(_parts(recipe, None), recipe_path.parent if recipe_path else None, text, source, engine, trust)


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


def _check(parts: Parts, recipe_dir: Path | None, text: str, source: str, engine: bool, trust: Trust) -> Findings:
    """Each stage's own check of its part (quantize/validate.py, evals/validate.py, perf/validate.py), the model
    they stand on, and the checks across sections; every finding located in the recipe file."""
    import evals.validate
    import perf.validate
    import quantize.validate

    found = Findings()

    def add(bucket: list[str], loc: tuple, message: str) -> None:
        bucket.append(locate(text, source, loc, message))

    def collect(stage: Found) -> None:
        for bucket, problems in ((found.errors, stage.errors), (found.warnings, stage.warnings),
                                 (found.notes, stage.notes)):
            for loc, message in problems:
                add(bucket, loc, message)

    model_dir = _model_dir(parts, recipe_dir, add, found) if parts.model is not None else None
    if engine and parts.engine is not None:
        stage, found.engine_flags = perf.validate.check(parts.engine, parts.variants, trust.run_recipe,
                                                        trust.remote_code)
        collect(stage)
        collect(perf.validate.check_seeded_sampling(parts.engine, parts.variants, parts.tasks, trust.run_recipe))
    _cross(parts, add, found)
    from quant.recipe_checks import position_problems, served_contexts
    for loc, message in position_problems(model_dir, parts.engine, parts.variants):
        add(found.errors, loc, message)
    if parts.execution and parts.execution.executor == "ray" and importlib.util.find_spec("ray") is None:
        add(found.errors, ("execution", "executor"), "the ray executor needs Ray: pip install 'quant-suite[ray]' "
            "(make setup installs it)")
    collect(evals.validate.check(parts.tasks, model_dir, served_contexts(model_dir, parts.engine, parts.variants)))
    if parts.perf is not None:
        collect(perf.validate.check_workloads(parts.perf, parts.engine, parts.variants))
    if engine:
        _llamacpp_files(parts, recipe_dir, add, found)
        collect(perf.validate.check_llamacpp(parts.variants, trust.run_recipe))
    collect(quantize.validate.check(parts.variants, parts.calibration, model_dir))
    return found


def _cross(parts: Parts, add, found: Findings) -> None:
    from quant import recipe_checks

    problems, warnings = [], []
    if parts.gates is not None and parts.all_tasks:
        problems += recipe_checks.per_task_problems(parts.gates, [t for _, t in parts.tasks])
    if parts.gates is not None:
        warnings += recipe_checks.min_n_warnings(parts.gates, parts.tasks)
    if parts.gates is not None and parts.perf is not None:
        warnings += recipe_checks.perf_gate_warnings(parts.gates, parts.perf)
    problems += recipe_checks.generation_problems(parts.tasks, parts.engine, parts.variants)
    for bucket, found_here in ((found.errors, problems), (found.warnings, warnings)):
        for loc, message in found_here:
            add(bucket, loc, message)


def _llamacpp_files(parts: Parts, recipe_dir: Path | None, add, found: Findings) -> None:
    """Each llama.cpp variant's GGUF file: there, and a GGUF file llama.cpp can load by its header."""
    from perf.validate import gguf_problem
    from quant.models import ModelNotFound, find_gguf

    for i, variant in parts.variants:
        if variant.llamacpp is None:
            continue
        where = ("variants", i, "llamacpp", "gguf")
        try:
            gguf = find_gguf(variant.llamacpp.gguf, recipe_dir)
        except ModelNotFound as exc:
            add(found.errors, where, str(exc))
            continue
        problem = f"{variant.llamacpp.gguf!r}: not a .gguf file" if gguf is None else gguf_problem(gguf)
        if problem:
            add(found.errors, where, problem)


def _model_dir(parts: Parts, recipe_dir: Path | None, add, found: Findings) -> Path | None:
    """Where the model's config.json is: of a hub model, that file alone is fetched here."""
    from quant.models import ModelNotFound, local_model, model_config_dir

    def progress(line: str) -> None:   # a GGUF file's first conversion: stdout is for the findings
        print(line, file=sys.stderr, flush=True)
    try:
        if parts.revision is not None and local_model(parts.model, recipe_dir, progress) is not None:
            add(found.errors, ("revision",), f"a revision is for a hub model; {parts.model!r} is local")
            return None
        model_dir = model_config_dir(parts.model, recipe_dir, parts.revision, progress)
    except ModelNotFound as exc:
        add(found.errors, ("model",), str(exc))
        return None
    if not (model_dir / "config.json").is_file():
        add(found.errors, ("model",), f"{model_dir}: not a model directory (no config.json)")
        return None
    return model_dir

