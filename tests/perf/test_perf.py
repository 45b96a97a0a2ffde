"""perf/: metrics, the streaming load generator (against an in-test SSE fake), the engine launcher."""

from __future__ import annotations

import asyncio
import json
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
from perf.engines.process import error_reason
from perf.loadgen import RequestRecord, run_closed_loop
from perf.metrics import reliable, samples_needed, summarize
from perf.run import _warnings, run_workload
from core.recipe_perf import Workload

# --- metrics -------------------------------------------------------------------------------------------


def _rec(ttft: float, e2e: float, out: int, itl: list[float], error: str | None = None) -> RequestRecord:
    return RequestRecord(start=0.0, ttft_s=ttft, itl_s=itl, e2e_s=e2e, prompt_tokens=10, output_tokens=out,
                         error=error)


def test_summarize_exact_percentiles():
    recs = [_rec(0.010, 0.110, 11, [0.01] * 10), _rec(0.020, 0.220, 11, [0.02] * 10),
            _rec(0.030, 0.330, 11, [0.03] * 10), _rec(0.040, 0.440, 11, [0.04] * 10),
            _rec(0.5, 9.0, 0, [], error="HTTP 500: boom")]
    s = summarize(recs, wall_s=2.0)
    assert (s["n"], s["errors"], s["first_error"]) == (5, 1, "HTTP 500: boom")
    # ttft ms = [10, 20, 30, 40]; linear: p90 at rank 2.7 -> 37, p99 at rank 2.97 -> 39.7
    # p95 at rank 2.85 -> 38.5, p99.9 at rank 2.997 -> 39.97
    # std: population (numpy's default, as vLLM's benchmark): sqrt(125) ms
    assert s["ttft_ms"] == pytest.approx({"mean": 25.0, "std": 125 ** 0.5, "p50": 25.0, "p90": 37.0, "p95": 38.5, "p99": 39.7,
                                          "p99.9": 39.97, "n": 4})
    # tpot = (e2e - ttft) / 10 = [10, 20, 30, 40] ms
    assert s["tpot_ms"]["p99"] == pytest.approx(39.7)
    # itl pooled: ten each of 10, 20, 30, 40 ms -> p90 = 40 (rank 35.1 lies in the 40s)
    assert s["itl_ms"] == pytest.approx({"mean": 25.0, "std": 125 ** 0.5, "p50": 25.0, "p90": 40.0, "p95": 40.0, "p99": 40.0,
                                         "p99.9": 40.0, "n": 40})
    assert s["e2e_ms"]["p90"] == pytest.approx(407.0) and s["e2e_ms"]["p99"] == pytest.approx(436.7)
    assert "goodput_rps" not in s
    assert s["requests_per_s"] == pytest.approx(2.0)
    # 4 requests carry a p50 but no p99: it is recorded with its n, and `reliable` says so
    assert reliable(s["ttft_ms"], "p50") and not reliable(s["ttft_ms"], "p99")
    assert reliable(s["itl_ms"], "p90") and not reliable(s["itl_ms"], "p99")
    assert (samples_needed("p99"), samples_needed("p99.9"), samples_needed("mean")) == (100, 1000, 1)
    assert s["output_tokens_per_s"] == pytest.approx(22.0)
    assert s["input_tokens_per_s"] == pytest.approx(20.0)


def test_goodput_counts_requests_within_every_named_bound():
    recs = [_rec(0.010, 0.110, 11, [0.01] * 10), _rec(0.020, 0.220, 11, [0.02] * 10),
            _rec(0.030, 0.330, 11, [0.03] * 10), _rec(0.040, 0.440, 11, [0.04] * 10),
            _rec(0.5, 9.0, 0, [], error="HTTP 500: boom")]
    s = summarize(recs, wall_s=2.0, slo={"ttft_ms": 35, "tpot_ms": 25})   # only the first two meet both
    assert s["goodput_rps"] == pytest.approx(1.0) and s["slo_attainment"] == pytest.approx(0.4)
    assert summarize(recs, 2.0, slo={"e2e_ms": 1000})["slo_attainment"] == pytest.approx(0.8)


def test_summarize_all_failed_and_single_token():
    s = summarize([_rec(0.1, 0.1, 1, [])], wall_s=1.0)
    assert s["tpot_ms"]["p50"] is None and s["ttft_ms"]["p50"] == pytest.approx(100.0)
    s = summarize([_rec(0.1, 0.2, 0, [], error="x")], wall_s=1.0)
    assert s["errors"] == 1 and s["requests_per_s"] == 0 and s["e2e_ms"]["mean"] is None


# --- a fake vLLM: streams /v1/completions SSE chunks in vLLM's format --------------------------------
# prompt[0] selects a behaviour: 500 -> HTTP 500; 501 -> an error chunk mid-stream; 502 -> the connection
# drops mid-stream; 7 -> tokens 2 and 3 arrive in one chunk. Otherwise one token per chunk.
GAP_S = 0.02


class FakeVLLM:
    def __init__(self):
        self.bodies: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.capacity: asyncio.Semaphore | None = None   # set to serve one request at a time, like a busy server
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        if head.startswith("GET"):   # e.g. /metrics: this fake has none
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            writer.close()
            return
        length = int(next(ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")))
        body = json.loads(await reader.readexactly(length))
        self.bodies.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.capacity:
                async with self.capacity:
                    await self.respond(body, writer)
            else:
                await self.respond(body, writer)
        finally:
            self.in_flight -= 1
            writer.close()

    async def respond(self, body: dict, writer: asyncio.StreamWriter) -> None:
        kind = body["prompt"][0]
        if kind == 500:
            msg = b'{"error": {"message": "kernel exploded"}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(msg), msg))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        n = body["max_tokens"]
        groups = [[0], [1, 2], *[[i] for i in range(3, n)]] if kind == 7 else [[i] for i in range(n)]
        held = []   # kind 503: the stream is held back and delivered in one burst at the end
        for i, group in enumerate(groups):
            await asyncio.sleep(GAP_S)
            if kind == 501 and i == 2:
                writer.write(b'data: {"error": {"object": "error", "message": "engine died", "code": 500}}\n\n')
                return
            if kind == 502 and i == 2:
                writer.transport.abort()
                return
            choice = {"index": 0, "text": "x" * len(group), "logprobs": None, "token_ids": [10 + t for t in group],
                      "finish_reason": "length" if i == len(groups) - 1 else None, "stop_reason": None}
            chunk = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                     "choices": [choice]}
            held.append(f"data: {json.dumps(chunk)}\n\n".encode())
            if kind != 503:
                writer.write(b"".join(held))
                held.clear()
                await writer.drain()
        writer.write(b"".join(held))
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": len(body["prompt"]) + n}
        writer.write(f"data: {json.dumps({'id': 'cmpl-1', 'choices': [], 'usage': usage})}\n\n".encode())
        writer.write(b"data: [DONE]\n\n")


@pytest.fixture
def fake():
    srv = FakeVLLM()
    yield srv
    srv.close()


def test_loadgen_streams_and_records(fake):
    prompts = [[1] * 12, [7] * 12, [500, 1], [501, 1], [502, 1], [1] * 12]
    recs = asyncio.run(run_closed_loop(fake.url + "/v1/completions", "m", prompts, output_tokens=6, concurrency=3))
    assert len(recs) == 6 and fake.max_in_flight == 3
    body = fake.bodies[0]
    assert body["ignore_eos"] is True and body["stream"] is True and body["temperature"] == 0
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 6
    for r in (recs[0], recs[1], recs[5]):
        assert r.error is None and r.prompt_tokens == 12 and r.output_tokens == 6 and len(r.itl_s) == 5
        assert 0 < r.ttft_s < r.e2e_s and sum(r.itl_s) <= r.e2e_s - r.ttft_s + 1e-9
    assert recs[0].chunks == 6 and recs[1].chunks == 5
    assert recs[1].itl_s[0] == recs[1].itl_s[1]   # one two-token chunk: its gap is shared by both tokens
    assert recs[2].error.startswith("HTTP 500") and "kernel exploded" in recs[2].error
    assert recs[3].error == "stream error: engine died"
    assert recs[4].error is not None and recs[4].output_tokens == 2


def test_a_stream_delivered_in_one_burst_is_flagged(fake):
    prompts = [[1] * 12, [503] * 12, [1] * 12, [503] * 12]
    recs = asyncio.run(run_closed_loop(fake.url + "/v1/completions", "m", prompts, output_tokens=10, concurrency=1))
    assert all(r.error is None and r.chunks == 10 for r in recs)
    assert [r.e2e_s - r.ttft_s < 0.001 for r in recs] == [False, True, False, True]
    plan = [type("Planned", (), {"prompt": p, "output_tokens": 10}) for p in prompts]
    (warning,) = _warnings("c=1", [r.__dict__ for r in recs], plan, {})
    assert warning.startswith("c=1: 2 of 4 streamed responses arrived in one burst")


def test_no_collector_pass_while_requests_are_timed():
    import gc

    from perf.loadgen import no_gc_pauses

    enabled = gc.isenabled()
    with no_gc_pauses():
        assert not gc.isenabled() and gc.get_freeze_count() > 0   # what existed is out of any later pass
    assert gc.isenabled() == enabled and gc.get_freeze_count() == 0


# --- synthetic prompts and the workload runner ---------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from quant.demo.tokenizer import train_tokenizer
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([f"item {i}: the quick brown fox {i * 7} jumps" for i in range(200)], vocab_size=300).save_pretrained(out)
    return out


def synthetic_prompts(tokenizer_dir, n: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    import numpy as np

    from perf.prompts import PromptMaker

    maker, rng = PromptMaker(tokenizer_dir), np.random.default_rng(seed)
    return [maker.make(prompt_tokens, rng) for _ in range(n)]


def test_synthetic_prompts_exact_and_deterministic(tokenizer_dir):
    a = synthetic_prompts(tokenizer_dir, 5, 40, seed=1)
    assert a == synthetic_prompts(tokenizer_dir, 5, 40, seed=1) and a != synthetic_prompts(tokenizer_dir, 5, 40, seed=2)
    assert all(len(p) == 40 and p[0] == 0 for p in a)      # BOS (id 0) counted in the 40
    assert all(t > 2 for p in a for t in p[1:])             # no <s>, </s>, <pad> in the body
    assert len({tuple(p) for p in a}) == 5


def test_run_workload_levels_warmup_progress(fake, tokenizer_dir):
    seen = []
    wl = Workload(name="tiny", prompt_tokens=16, output_tokens=4, concurrency=[1, 2], requests_per_level=3,
                  warmup_requests=2)
    res = run_workload(fake.url, "m", tokenizer_dir, wl, progress=lambda d, t: seen.append((d, t)))
    assert [p["concurrency"] for p in res["points"]] == [1, 2]
    assert all(p["n"] == 3 and p["errors"] == 0 and p["requests_per_s"] > 0 for p in res["points"])
    assert {c: len(r) for c, r in res["records"].items()} == {"c=1": 3, "c=2": 3}
    assert len(fake.bodies) == 10 and seen[-1] == (10, 10) and res["warnings"] == []
    assert res["points"][0]["tpot_ms"]["p50"] >= GAP_S * 1000 * 0.8   # the fake sleeps GAP_S per token


# --- the engine launcher, driven by stand-in "engine pythons" ------------------------------------------


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
    assert serve_command("/m/w4", "w4", {"max_model_len": 512}, cuda=True) == \
        "vllm serve /m/w4 --served-model-name w4 --max-model-len 512"
    cpu = serve_command("/m/w4", "w4", {}, cuda=False)
    assert cpu.startswith("VLLM_CPU_KVCACHE_SPACE=") and "-m vllm.entrypoints.openai.api_server --model /m/w4" in cpu


def test_server_counters_parse_and_crosscheck():
    from perf.server_metrics import crosscheck, parse_counters

    text = ('# HELP vllm:generation_tokens_total Number of generation tokens processed.\n'
            '# TYPE vllm:generation_tokens_total counter\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} 120.0\n'
            'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
            'vllm:prompt_tokens_total{engine="0",model_name="m"} 400.0\n'
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0\n'
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0\n'
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0\n'
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0\n'
            'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.05\n')
    before = parse_counters(text)
    assert before == {"generation_tokens": 120.0, "prompt_tokens": 400.0, "requests": 4.0, "ttft_count": 4.0,
                      "ttft_sum": 0.05}
    after = {"generation_tokens": 184.0, "prompt_tokens": 528.0, "requests": 5.0, "ttft_count": 6.0, "ttft_sum": 0.075}
    check = crosscheck(before, after, client_output_tokens=64, client_prompt_tokens=128)
    assert check["match"] and check["server_requests"] == 1 and check["server_prompt_tokens"] == 128
    assert check["server_ttft_ms_mean"] == pytest.approx(12.5) and "server_itl_ms_mean" not in check
    assert not crosscheck(before, after, 63, 128)["match"]
    assert crosscheck(None, after, 64, 128) is None   # a server without /metrics: no check, no failure


def test_kv_cache_accounting_is_gqa_aware():
    from perf.memory import GIB, capacity, kv_bytes_per_token, kv_element_bytes

    demo = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 256}
    assert kv_bytes_per_token(demo) == 2 * 4 * 8 * 32 * 2
    llama8b = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert kv_bytes_per_token(llama8b) == 131_072          # 128 KiB per token in bf16
    assert kv_bytes_per_token(llama8b, kv_element_bytes({"kv_cache_dtype": "fp8_e4m3"})) == 65_536
    cap = capacity(weights_bytes=16 * GIB, kv_per_token=131_072, seq_tokens=4096, accelerator_gib=80,
                   utilization=0.9)
    assert cap["max_kv_tokens"] == (int(80 * GIB * 0.9) - 16 * GIB) // 131_072
    assert cap["max_sequences"] == cap["max_kv_tokens"] // 4096
    assert capacity(100 * GIB, 131_072, 4096, 80, 0.9)["max_sequences"] == 0   # weights alone do not fit


def test_open_loop_dirty_profile_sends_what_it_planned(fake, tokenizer_dir):
    from perf.prompts import PromptMaker
    from perf.requests import plan_level

    wl = Workload(name="dirty", arrival="poisson", rates=[40], requests_per_level=20, warmup_requests=0,
                  prompt_tokens={"dist": "lognormal", "mean": 40, "sigma": 0.4, "min": 8, "max": 120},
                  output_tokens={"dist": "uniform", "min": 3, "max": 9},
                  long_prompts={"fraction": 0.05, "tokens": 300}, bursts={"fraction": 0.2, "size": 4},
                  shared_prefix={"fraction": 0.5, "tokens": 6})
    plan = plan_level(wl, "rate", 40, PromptMaker(tokenizer_dir), seed=0)
    assert len(plan) == 24 and [p.kind for p in plan].count("burst") == 4
    assert [p.kind for p in plan].count("long") == 1 and max(len(p.prompt) for p in plan) == 300
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert point["rate"] == 40 and point["n"] == 24 and point["errors"] == 0 and res["warnings"] == []
    # exactly the planned requests: prompt ids and output lengths (the seed makes the plan reproducible)
    assert sorted((b["prompt"], b["max_tokens"]) for b in fake.bodies) == sorted((p.prompt, p.output_tokens)
                                                                                 for p in plan)
    # an open loop does not wait for answers: 6 tokens x 20 ms per request vs 25 ms between arrivals
    assert fake.max_in_flight >= 4
    assert point["send_lag_ms"]["p99"] < 50                 # the client kept to the schedule
    kinds = {r["kind"] for r in res["records"]["rate=40/s"]}
    assert kinds == {"base", "long", "burst"}


def test_trace_replay_keeps_arrival_gaps_and_lengths(fake, tokenizer_dir, tmp_path):
    trace = tmp_path / "gateway.jsonl"
    trace.write_text('{"timestamp": "2026-11-30T10:00:00.000", "input_tokens": 12, "output_tokens": 3}\n'
                     '{"timestamp": "2026-11-30T10:00:00.200", "input_tokens": 30, "output_tokens": 5}\n'
                     '{"timestamp": "2026-11-30T10:00:00.400", "input_tokens": 20, "output_tokens": 4}\n')
    wl = Workload(name="replay", trace=str(trace), trace_speedup=2.0, warmup_requests=0)
    res = run_workload(fake.url, "m", tokenizer_dir, wl)
    (point,) = res["points"]
    assert point["trace"] == 2.0 and point["n"] == 3 and point["errors"] == 0
    assert point["offered_rps"] == pytest.approx(10.0)      # 0.2 s gaps replayed twice as fast
    assert sorted((len(b["prompt"]), b["max_tokens"]) for b in fake.bodies) == [(12, 3), (20, 4), (30, 5)]


def test_length_distributions_and_arrivals():
    import numpy as np

    from perf.arrivals import arrival_offsets
    from perf.lengths import sample_lengths
    from core.recipe_perf import Lengths

    rng = np.random.default_rng(0)
    logn = sample_lengths(Lengths(dist="lognormal", mean=200, sigma=0.6), 20_000, rng)
    assert abs(np.mean(logn) - 200) < 5 and min(logn) >= 1
    clipped = sample_lengths(Lengths(dist="normal", mean=50, std=40, min=10, max=80), 5000, rng)
    assert min(clipped) == 10 and max(clipped) == 80
    assert set(sample_lengths(Lengths(dist="empirical", values=[7, 9]), 100, rng)) == {7, 9}
    poisson = np.diff(arrival_offsets("poisson", 50, 20_000, rng))
    assert abs(poisson.mean() - 0.02) < 0.001 and abs(poisson.std() / poisson.mean() - 1) < 0.05
    bursty = np.diff(arrival_offsets("gamma", 50, 20_000, rng, burstiness=0.25))
    assert abs(bursty.mean() - 0.02) < 0.002 and bursty.std() / bursty.mean() > 1.8   # CV = 1/sqrt(0.25)
    assert arrival_offsets("constant", 4, 3, rng) == [0.0, 0.25, 0.5]


def test_rate_search_finds_the_knee_of_a_one_at_a_time_server(fake, tokenizer_dir):
    # Served one at a time, 2 tokens x 20 ms each: up to ~25 req/s no request waits; above it the queue grows
    # by (40 ms - 1/rate) per request, so 16 evenly spaced requests keep E2E <= 200 ms up to ~38 req/s.
    fake.capacity = asyncio.Semaphore(1)
    wl = Workload(name="knee", arrival="constant", requests_per_level=16, warmup_requests=0, prompt_tokens=8,
                  output_tokens=2, rate_search={"low": 8, "high": 128, "probes": 3, "attainment": 0.9})
    res = run_workload(fake.url, "m", tokenizer_dir, wl, slo={"e2e_ms": 200})
    rates = [p["rate"] for p in res["points"]]
    assert rates[:2] == [8, 128] and len(rates) == 5
    assert res["points"][0]["slo_attainment"] == 1.0 and res["points"][1]["slo_attainment"] < 0.9
    assert 16 <= res["max_rate_meeting_slo"] <= 45


def test_nvidia_smi_compute_apps_parse_to_bytes_per_pid():
    from perf.engines.process import parse_gpu_apps
    out = "4242, 70123\n4243, 512\n4242, 1\n[Not Supported], 3\n"
    assert parse_gpu_apps(out) == {4242: 70124 << 20, 4243: 512 << 20}
    assert parse_gpu_apps("") == {}


def test_gpu_memory_by_pid_else_by_growth(monkeypatch):
    """By PID where nvidia-smi lists the server's processes (seen on an H200: 4,614 MiB for a child holding
    4 GiB + its CUDA context); else, as in a container with its own PID namespace, the growth of used memory."""
    import os

    from perf.engines import process
    answers = {"--query-compute-apps=pid,used_memory": f"{os.getpid()}, 4614\n", "--query-gpu=memory.used": "9000\n"}
    monkeypatch.setattr(process, "_nvidia_smi", lambda query: answers[query])
    assert process.tree_gpu_bytes(os.getpid(), used_before=4 << 20) == 4614 << 20
    answers["--query-compute-apps=pid,used_memory"] = "1, 4614\n"          # PIDs that are not ours
    assert process.tree_gpu_bytes(os.getpid(), used_before=4 << 20) == (9000 << 20) - (4 << 20)
    assert process.tree_gpu_bytes(os.getpid()) is None                      # no reading from before the start
    monkeypatch.setattr(process, "_nvidia_smi", lambda query: None)        # no nvidia-smi
    assert process.tree_gpu_bytes(os.getpid(), used_before=0) is None and process.gpu_used_bytes() is None
