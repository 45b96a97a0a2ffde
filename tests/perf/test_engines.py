"""perf/engines: the launcher, driven by stand-in engine pythons; flags and serve commands."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from perf.engines import EngineStartError, VLLMServer, engine_flags, resolve_engine_python, serve_command
from perf.engines.cpu_isa import compute_dtype, host_cpu_isa, isa_from_cpuinfo
from perf.engines.vllm import engine_facts
from perf.engines.process import error_reason


def _engine(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake_python"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return str(script)


def _server(tmp_path: Path, python: str, timeout: float = 20) -> VLLMServer:
    return VLLMServer(tmp_path / "model", python=python, served_name="probe", args={"max_model_len": 256},
                      env={}, startup_timeout_s=timeout, log_path=tmp_path / "logs" / "server.log")


def test_engine_start_error_carries_engine_reason(tmp_path):
    python = _engine(tmp_path, """
        import sys
        print("INFO starting")
        w = "(Worker pid=7) ERROR 11-30 13:49:35 [multiproc_executor.py:953] "
        print(w + "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: ")
        print(w + " CPUWNA16LinearKernel cannot implement due to: Quant type (uint8b128) not supported")
        print("(EngineCore pid=6) INFO 11-30 13:49:35 [multiproc_executor.py:479] [shutdown] Executor: waiting")
        print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        sys.exit(1)
    """)
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as err:
        with _server(tmp_path, python):
            pass
    assert err.value.reason == ("ValueError: Failed to find a kernel that can implement the WNA16 linear layer. "
                                "Reasons: CPUWNA16LinearKernel cannot implement due to: Quant type (uint8b128) "
                                "not supported")
    assert time.monotonic() - t0 < 10 and (tmp_path / "logs" / "server.log").is_file()


def _our_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "fake_python" in " ".join(p.cmdline())]


def test_engine_timeout_stops_the_process(tmp_path):
    python = _engine(tmp_path, "import time\ntime.sleep(300)\n")
    srv = _server(tmp_path, python, timeout=1.5)
    with pytest.raises(EngineStartError, match="not ready within"):
        srv.__enter__()
    assert srv.pid is None and _our_children() == []


def test_engine_ctrl_c_during_startup_stops_the_process(tmp_path):
    python = _engine(tmp_path, "import time\ntime.sleep(300)\n")
    # Libraries imported by earlier tests may replace the SIGINT handler; Ctrl-C's default is what we test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # a real SIGINT, as Ctrl-C sends: unlike _thread.interrupt_main it also wakes blocking calls
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            with _server(tmp_path, python, timeout=60):
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _our_children() == []


def test_engine_ready_then_group_stopped(tmp_path):
    python = _engine(tmp_path, """
        import json, subprocess, sys
        from http.server import BaseHTTPRequestHandler, HTTPServer
        argv = sys.argv
        port = int(argv[argv.index("--port") + 1])
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # an engine-core stand-in
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"data": [{"id": "probe"}]}).encode() if self.path == "/v1/models" else b""
                self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
                self.wfile.write(body)
            def log_message(self, *a): pass
        HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)
    with _server(tmp_path, python) as srv:
        tree = [srv.pid, *(p.pid for p in psutil.Process(srv.pid).children(recursive=True))]
        assert len(tree) == 2 and srv.rss_bytes() > 0
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.completions_url.endswith("/v1/completions")
        assert srv.command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert ["--max-model-len", "256"] == srv.command[srv.command.index("--max-model-len"):][:2]
    time.sleep(0.2)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in tree)


@pytest.mark.parametrize("with_workers", [True, False])
def test_engine_core_reniced_where_workers_run_the_model(tmp_path, with_workers):
    child = ("import ctypes, sys, threading, time\n"
             "ctypes.CDLL(None).prctl(15, sys.argv[1].encode())\n"   # PR_SET_NAME, as vLLM's setproctitle
             "threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
             "time.sleep(300)\n")
    titles = ["VLLM::EngineCore", "VLLM::Worker"] if with_workers else ["VLLM::EngineCore"]
    python = _engine(tmp_path, f"""
        import json, subprocess, sys, time
        from http.server import BaseHTTPRequestHandler, HTTPServer
        port = int(sys.argv[sys.argv.index("--port") + 1])
        for title in {titles!r}:
            subprocess.Popen([sys.executable, "-c", {child!r}, title])
        time.sleep(0.5)
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({{"data": [{{"id": "probe"}}]}}).encode() if self.path == "/v1/models" else b""
                self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
                self.wfile.write(body)
            def log_message(self, *a): pass
        HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)
    srv = VLLMServer(tmp_path / "model", python=python, served_name="probe", args={}, env={}, startup_timeout_s=20,
                     log_path=tmp_path / "server.log", engine_core_nice=10)
    with srv:
        procs = {p.name(): p for p in psutil.Process(srv.pid).children(recursive=True)}
        core_threads = [os.getpriority(os.PRIO_PROCESS, t.id) for t in procs["VLLM::EngineCor"].threads()]
        assert len(core_threads) == 2
        ours = psutil.Process().nice()   # children inherit it; a test run may itself be niced
        if with_workers:
            assert srv.engine_core_niced == max(10, ours) and core_threads == [max(10, ours)] * 2
            assert procs["VLLM::Worker"].nice() == ours and psutil.Process(srv.pid).nice() == ours
        else:   # vLLM on one GPU: the engine core runs the model itself and keeps its priority
            assert srv.engine_core_niced is None and core_threads == [ours] * 2


def test_error_reason_fallbacks():
    assert error_reason("INFO ok\nsomething bad: error: no space left\nbye") == "something bad: error: no space left"
    assert error_reason("INFO all good") is None


def test_resolve_engine_python(tmp_path, monkeypatch):
    monkeypatch.delenv("QUANT_ENGINE_PYTHON", raising=False)
    with pytest.raises(EngineStartError, match="make setup"):
        resolve_engine_python(str(tmp_path / "nope" / "python"))
    monkeypatch.setenv("QUANT_ENGINE_PYTHON", sys.executable)
    assert resolve_engine_python(None) == sys.executable
    assert resolve_engine_python(sys.executable) == sys.executable


def test_flags_and_serve_command():
    assert engine_flags({"max_model_len": 512, "enforce_eager": True, "enable_prefix_caching": False,
                         "skip": None}) == ["--max-model-len", "512", "--enforce-eager", "--no-enable-prefix-caching"]
    assert serve_command("/m/w4", "w4", {"max_model_len": 512}, "cuda", {"VLLM_CPU_KVCACHE_SPACE": "1"},
                         "bfloat16") == "vllm serve /m/w4 --served-model-name w4 --dtype bfloat16 --max-model-len 512"
    cpu = serve_command("/m/w4", "w4", {}, "cpu")
    assert cpu == "VLLM_CPU_KVCACHE_SPACE=1 python -m vllm.entrypoints.openai.api_server --model /m/w4 " \
                  "--served-model-name w4"
    assert serve_command("/m/w4", "w4", {}, "cpu", {"VLLM_CPU_KVCACHE_SPACE": "2"}).startswith(
        "VLLM_CPU_KVCACHE_SPACE=2 python -m")
    assert serve_command("/m/w4", "w4", {}, None) == \
        "python -m vllm.entrypoints.openai.api_server --model /m/w4 --served-model-name w4"   # engine not recorded


def fake_engine_env(tmp_path, distribution: str, version: str, torch_cuda: str | None, hip: str | None = None):
    """An engine python whose environment has only the package metadata and torch/version.py the probe reads."""
    site = tmp_path / "site"
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
    (site / "torch" / "version.py").write_text(
        f"from typing import Optional\n__version__ = '2.9.0'\ncuda: Optional[str] = {torch_cuda!r}\n"
        f"hip: Optional[str] = {hip!r}\n")
    python = tmp_path / "engine-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    return str(python)


@pytest.mark.parametrize("distribution, version, cuda, hip, env, device", [
    ("vllm", "0.11.0", "12.8", None, {}, "cuda"),
    ("vllm", "0.11.0", None, "6.4", {}, "rocm"),
    ("vllm-cpu", "0.32.0", None, None, {}, "cpu"),
    ("vllm", "0.11.0+cpu", None, None, {}, "cpu"),                      # a CPU build of vllm itself
    ("vllm", "0.11.0", "12.8", None, {"VLLM_TARGET_DEVICE": "cpu"}, "cpu"),
])
def test_engine_facts_say_what_the_engine_serves_on(tmp_path, monkeypatch, distribution, version, cuda, hip,
                                                    env, device):
    python = fake_engine_env(tmp_path, distribution, version, cuda, hip)
    cpu_isa = {"cpu_isa": host_cpu_isa()} if device == "cpu" else {}   # a CPU engine's kernels depend on the host
    # a CUDA engine's GPUs and driver (nvidia-smi: none here), and its torch's CUDA build
    gpus = {"gpus": [], "driver": None, "cuda": cuda} if device == "cuda" else {}
    monkeypatch.setenv("PATH", str(tmp_path))   # no nvidia-smi, whatever this machine has
    assert engine_facts(python, env) == {"distribution": distribution, "version": version, "device": device,
                                         **cpu_isa, **gpus}


def test_the_host_isa_is_read_as_vllm_cpu_reads_it():
    """vllm-cpu loads its AVX-512 kernel library where torch sees AVX-512F, else the AVX2 one."""
    assert isa_from_cpuinfo("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n") == "avx512"
    assert isa_from_cpuinfo("processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n") == "avx2"
    assert isa_from_cpuinfo("processor : 0\nFeatures : fp asimd\n") is None       # not x86
    import torch
    if host_cpu_isa() is not None:
        assert (host_cpu_isa() == "avx512") == torch.cpu._is_avx512_supported()


def test_auto_dtype_is_float32_only_on_a_cpu_without_avx512():
    assert compute_dtype("auto", on_cpu=True, isa="avx2") == "float32"   # no vectorized bf16 matmul there
    assert compute_dtype("auto", on_cpu=True, isa="avx512") == "bfloat16"
    assert compute_dtype("auto", on_cpu=True, isa=None) == "bfloat16"    # not x86: nothing known to differ
    assert compute_dtype("auto", on_cpu=False, isa="avx2") == "bfloat16"  # a GPU engine on such a host
    assert compute_dtype("bfloat16", on_cpu=True, isa="avx2") == "bfloat16"   # asked for: kept


def test_engine_facts_of_an_environment_without_vllm_are_unknown(tmp_path):
    python = fake_engine_env(tmp_path, "notvllm", "1.0", "12.8")
    assert engine_facts(python) == {"distribution": None, "version": None, "device": None}
    assert engine_facts(str(tmp_path / "missing")) == {"distribution": None, "version": None, "device": None}

def test_engine_facts_are_asked_once_per_interpreter_and_environment(tmp_path):
    """Validation and the sweep both need the facts: one probe per process, asked again when the interpreter
    file or the environment differs."""
    asked = tmp_path / "asked"
    python = _engine(tmp_path, f"""
        import json, os
        with open({str(asked)!r}, "a") as f:
            f.write("x")
        print(json.dumps({{"distribution": "vllm-cpu", "version": os.environ.get("FAKE_VERSION", "1"), "device": "cpu"}}))
    """)
    assert engine_facts(python)["version"] == engine_facts(python)["version"] == "1"
    assert asked.read_text() == "x"
    assert engine_facts(python, {"FAKE_VERSION": "2"})["version"] == "2" and asked.read_text() == "xx"
    stat = os.stat(python)
    os.utime(python, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))   # the interpreter replaced
    assert engine_facts(python)["version"] == "1" and asked.read_text() == "xxx"


@pytest.mark.parametrize("device, aot", [("cpu", "0"), ("cuda", "unset"), (None, "unset")])
def test_a_cpu_engine_starts_without_aot_compilation(tmp_path, monkeypatch, device, aot):
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    python = _engine(tmp_path, """
        import os, sys
        print("RuntimeError: AOT " + os.environ.get("VLLM_USE_AOT_COMPILE", "unset"))
        sys.exit(1)
    """)
    server = VLLMServer(tmp_path / "model", python=python, served_name="probe", args={}, env={}, device=device,
                        startup_timeout_s=20, log_path=tmp_path / "server.log")
    with pytest.raises(EngineStartError) as err:
        server.start()
    assert err.value.reason == f"RuntimeError: AOT {aot}"
