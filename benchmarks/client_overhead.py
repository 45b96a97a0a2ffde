"""How fast our load generator can go, and what it adds per request, against a server that answers at once.

The server (a separate process, so client and server each get a core) streams a vLLM-shaped SSE answer of
`--tokens` one-token chunks with no delay. Reported: per concurrency, the sustained requests/s and output
tokens/s of our closed-loop client, and the E2E latency per request: at concurrency 1 that is the whole
round trip (client + loopback + this minimal server), an upper bound on what the client adds to every
measured request.

Usage: python benchmarks/client_overhead.py [--requests 2000] [--tokens 16] [--concurrency 1 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time

import numpy as np

from perf.loadgen import run_closed_loop
from perf.metrics import summarize


def _serve(port_queue, tokens: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:   # keep-alive: many requests per connection, as httpx sends them
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                length = next(int(ln.split(":")[1]) for ln in head.split("\r\n")
                              if ln.lower().startswith("content-length"))
                body = json.loads(await reader.readexactly(length))
                parts = []
                for i in range(tokens):
                    choice = {"index": 0, "text": "x", "token_ids": [10 + i],
                              "finish_reason": "length" if i == tokens - 1 else None}
                    parts.append(f"data: {json.dumps({'choices': [choice]})}\n\n")
                usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": tokens}
                parts.append(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n")
                payload = "".join(parts).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, StopIteration):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = ap.parse_args()
    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports, args.tokens), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=30)}/v1/completions"
    prompts = [list(range(3, 35))] * args.requests
    print(f"instant server, {args.tokens} output tokens per request, {args.requests} requests per level")
    print(f"{'concurrency':>11} {'req/s':>9} {'out tok/s':>10} {'E2E p50 ms':>11} {'E2E p99 ms':>11} {'errors':>7}")
    try:
        for c in args.concurrency:
            asyncio.run(run_closed_loop(url, "m", prompts[:50], args.tokens, c))   # warm-up
            t0 = time.perf_counter()
            recs = asyncio.run(run_closed_loop(url, "m", prompts, args.tokens, c))
            s = summarize(recs, time.perf_counter() - t0)
            print(f"{c:>11} {s['requests_per_s']:>9.0f} {s['output_tokens_per_s']:>10.0f} "
                  f"{s['e2e_ms']['p50']:>11.2f} {s['e2e_ms']['p99']:>11.2f} {s['errors']:>7}")
            if s["errors"]:
                print(f"  first error: {s['first_error']}")
        one = asyncio.run(run_closed_loop(url, "m", prompts[:500], args.tokens, 1))
        e2e = np.array([r.e2e_s for r in one]) * 1e3
        print(f"per-request round trip at concurrency 1: mean {e2e.mean():.2f} ms (client + loopback + server)")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
