"""The endpoint variants' probe, before any work: every endpoint the sweep will measure is asked once what it
serves and whether its prompt log-probabilities can be scored (perf/engines/endpoint.py). An endpoint that cannot
be measured at all (its key variable unset, unreachable, the model not listed) is one line each, all of them
together, as a recipe's problems are."""

from __future__ import annotations

from pathlib import Path

from core.recipe import Recipe, RecipeError
from perf.engines.endpoint import EndpointProblem, probe


def probe_endpoints(recipe: Recipe, recipe_path: Path | None, only: list[str] | None = None) -> dict[str, dict]:
    """Each endpoint variant's facts (by variant name); RecipeError naming every endpoint that cannot be used."""
    source = str(recipe_path) if recipe_path else f"recipe {recipe.name}"
    facts, problems = {}, []
    for variant in recipe.variants:
        if variant.endpoint is None or (only and variant.name not in only):
            continue
        spec = variant.endpoint
        try:
            facts[variant.name] = probe(spec.base_url, spec.model, spec.api_key_env)
        except EndpointProblem as exc:
            problems.append(f"{source}: variant {variant.name}: endpoint: {exc}")
    if problems:
        raise RecipeError(problems, source)
    return facts
