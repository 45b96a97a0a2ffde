"""A fake vLLM for the load generator's tests: streams /v1/completions SSE chunks in vLLM's format."""

from __future__ import annotations

import asyncio
import json
import threading


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
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": len(body["prompt"]) + n}
        held.append(f"data: {json.dumps({'id': 'cmpl-1', 'choices': [], 'usage': usage})}\n\n".encode())
        writer.write(b"".join(held) + b"data: [DONE]\n\n")   # one write: a burst reaches the client in one piece
