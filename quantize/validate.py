"""The quantize stage's own check of its part of a recipe, before work: each variant's schemes and algorithm
(quantize/schemes.py), its module entries (`ignore`, groups' `targets`) against the model's modules
(quantize/modules.py), group sizes against the Linears' shapes (quantize/shapes.py), its sensitivity rule
against the units the model has (quantize/sensitivity.py), a verbatim llmcompressor recipe against the
installed llmcompressor (quantize/verbatim.py), a checkpoint's directory; and the calibration source where a
variant calibrates. The model is read from its config.json alone."""

from __future__ import annotations

from pathlib import Path

from core.checks import Found, Problem
from core.recipe import Calibration, Variant


def check(variants: list[tuple[int, Variant]], calibration: Calibration | None, model_dir: Path | None) -> Found:
    """Everything wrong with the variants (their index in the recipe) and, where one calibrates, with the
    calibration source; model_dir None: the model is unknown (its own problem), so nothing is checked against
    it."""
    from quantize.calibration import source_problems

    found, calibrating = Found(), []
    for i, variant in variants:
        errors, notes, warnings, needs_data = _variant(variant, model_dir)
        found.errors += [(("variants", i) + loc, message) for loc, message in errors]
        found.notes += [(("variants", i), f"{variant.name}: {message}") for message in notes]
        found.warnings += [(("variants", i), f"{variant.name}: {message}") for message in warnings]
        if needs_data:
            calibrating.append(variant.name)
    if calibration is not None and calibrating:
        found.errors += [(("calibration", "source"), f"{message} (needed by {', '.join(calibrating)})")
                         for message in source_problems(calibration, model_dir)]
    return found


def _variant(variant: Variant, model_dir: Path | None) -> tuple[list[Problem], list[str], list[str], bool]:
    """(errors, notes, warnings, whether it needs calibration data) for one variant."""
    from quantize import schemes
    from quantize.backends import get_backend

    if variant.checkpoint is not None:
        ok = Path(variant.checkpoint).expanduser().is_dir()
        return ([] if ok else [(("checkpoint",), f"no such directory: {variant.checkpoint}")]), [], [], False
    if variant.recipe is not None:
        errors, warnings = _verbatim(variant)
        return errors, [], warnings, True
    if not variant.quantized:
        return [], [], [], False
    errors = schemes.problems(variant)
    if errors:
        return errors, [], [], False
    needs_data = get_backend(variant.backend).needs_calibration(variant) or variant.sensitivity is not None
    if model_dir is None:
        return [], [], [], needs_data
    try:
        modules, errors, notes = _against_model(variant, model_dir)
    except Exception as exc:  # noqa: BLE001 - an architecture we cannot build on the meta device
        return [], [], [f"module names, group sizes and sensitivity rules not checked: the model's modules could "
                        f"not be built from config.json ({type(exc).__name__}: {str(exc)[:200]})"], needs_data
    if not errors and variant.sensitivity is not None:
        errors = _sensitivity_problems(variant, modules)
    return errors, notes, [], needs_data


def _against_model(variant: Variant, model_dir: Path) -> tuple[object, list[Problem], list[str]]:
    """(the model's modules, errors, notes): module entries first (a typo there makes every later answer
    about the wrong Linears), then group sizes."""
    from quantize import shapes
    from quantize.modules import model_modules

    modules = model_modules(model_dir)
    errors = _entry_problems(variant, modules)
    if errors:
        return modules, errors, []
    errors, notes = shapes.problems(model_dir, variant)
    return modules, errors, notes


def _sensitivity_problems(variant: Variant, modules) -> list[Problem]:
    from quantize import schemes
    from quantize.sensitivity import rule_problems

    weights = schemes.weight_facts(variant.scheme, variant.weights)
    if weights is None:
        return []
    return [(("sensitivity",), message) for message in rule_problems(
        variant.sensitivity, modules.linears, list(variant.ignore), weights, keep_unfit=variant.unfit_groups == "keep")]


def _entry_problems(variant: Variant, modules) -> list[Problem]:
    from quantize.modules import entry_problem

    default = "" if "ignore" in variant.model_fields_set else " (ignore is lm_head unless the variant sets it)"
    problems = [(("ignore", j), message + default) for j, entry in enumerate(variant.ignore)
                if (message := entry_problem(modules, entry, "ignore"))]
    for g, group in enumerate(variant.groups or []):
        problems += [(("groups", g, "targets", j), message) for j, entry in enumerate(group.targets)
                     if (message := entry_problem(modules, entry, "targets"))]
    return problems


def _verbatim(variant: Variant) -> tuple[list[Problem], list[str]]:
    from quantize.backends.llmcompressor import recipe_text
    from quantize.verbatim import ModifiersUnknown, modifier_index, recipe_problems

    try:
        text = recipe_text(variant)
    except FileNotFoundError as exc:
        return [(("recipe",), str(exc))], []
    try:
        index = modifier_index()
    except ModifiersUnknown as exc:
        return [], [f"verbatim recipe not checked against llmcompressor: {exc}"]
    return [(("recipe",), f"llmcompressor recipe: {message}") for message in recipe_problems(text, index)], []
