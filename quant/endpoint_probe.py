"""The endpoint variants' probe, before any work: every endpoint the sweep will measure is asked once what it
serves and whether its prompt log-probabilities can be scored (perf/engines/endpoint.py). An endpoint that cannot
be measured at all (its key variable unset, unreachable, the model not listed) is one line each, all of them
together, as a recipe's problems are."""

from __future__ import annotations

from pathlib import Path

from core.recipe import Recipe, RecipeError
from core.recipe_servers import LlamaCpp
from perf.engines.endpoint import EndpointProblem, probe
from perf.engines.llamacpp import resolve_llamacpp_python
from quant.models import ModelNotFound, find_gguf


def probe_endpoints(recipe: Recipe, recipe_path: Path | None, only: list[str] | None = None) -> dict[str, dict]:
    """Each endpoint variant's facts (by variant name); RecipeError naming every endpoint that cannot be used."""
    source = str(recipe_path) if recipe_path else f"recipe {recipe.name}"
    facts, problems = {}, []
    for variant in recipe.variants:
        if only and variant.name not in only:
            continue
        try:
            if variant.endpoint is not None:
                spec = variant.endpoint
                facts[variant.name] = probe(spec.base_url, spec.model, spec.api_key_env)
            elif variant.llamacpp is not None:
                facts[variant.name] = llamacpp_files(variant.llamacpp, recipe_path)
        except EndpointProblem as exc:
            kind = "endpoint" if variant.endpoint else "llamacpp"
            problems.append(f"{source}: variant {variant.name}: {kind}: {exc}")
    if problems:
        raise RecipeError(problems, source)
    return facts


def llamacpp_files(spec: LlamaCpp, recipe_path: Path | None) -> dict:
    """The GGUF file and the server's python a llamacpp variant names (its server starts in the variant's turn)."""
    python = resolve_llamacpp_python(spec.python)
    if not Path(python).is_file():
        raise EndpointProblem(f"no llama.cpp environment at {python}: run `make setup-llamacpp` (or set "
                              "QUANT_LLAMACPP_PYTHON)")
    try:
        gguf = find_gguf(spec.gguf, recipe_path.parent if recipe_path else None)
    except ModelNotFound as exc:
        raise EndpointProblem(str(exc)) from None
    if gguf is None:
        raise EndpointProblem(f"gguf {spec.gguf!r}: not a .gguf file")
    return {"gguf": str(gguf), "python": python}
