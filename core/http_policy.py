"""One HTTP policy for every client the suite runs (the endpoint probe, the eval client, the load generator, the
metrics scrape, the hub push): which requests may carry a key, which go through a proxy, which CA bundle
verifies TLS, how long a request may take in all and how much of a body is read.

- A key (`api_key_env`) is sent only where the person running the suite allowed it: the variable's name starts
  with QUANT_ENDPOINT_ or is listed in $QUANT_ENDPOINT_KEY_VARS (comma-separated), and the URL is a loopback
  address or https to a host listed in $QUANT_ENDPOINT_KEY_HOSTS (comma-separated: `host` on any port,
  `host:port` for one port, `*.example.com` for its subdomains): a recipe picks where a key goes only among
  the hosts the user allows. A URL carrying a user name or password is refused.
- Loopback addresses (the suite's own servers, a local endpoint) never go through a proxy; any other host goes
  through the proxy the environment names (HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, NO_PROXY honoured).
- TLS is verified against $SSL_CERT_FILE where set, else certifi's bundle.
- Redirects are never followed; every request has an overall deadline, a server silent for STALL_S fails it,
  and every body a size cap that holds while it is decompressed (gzip or deflate, at most MAX_ENCODINGS layers,
  each layer's output capped) and while it is parsed (`parse_json`: nesting depth, lone surrogates)."""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
import urllib.request
from functools import lru_cache
from urllib.parse import urlsplit

KEY_PREFIX = "QUANT_ENDPOINT_"
ALLOWED_KEYS_VAR = "QUANT_ENDPOINT_KEY_VARS"
ALLOWED_HOSTS_VAR = "QUANT_ENDPOINT_KEY_HOSTS"
MAX_BODY_BYTES = 64 * 2**20        # a response body larger than this is an error, not read to its end
STALL_S = 300.0                    # a server that sends nothing for this long has stalled: the request fails
MAX_ENCODINGS = 2                  # Content-Encoding layers decoded at most (gzip, deflate)
ACCEPT_ENCODING = {"Accept-Encoding": "gzip, deflate"}


class PolicyError(Exception):
    """A request the policy refuses, or a response it stops reading: one line saying why."""


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def userinfo_problem(url: str) -> str | None:
    """Why a URL cannot be used as an endpoint address (credentials in it), else None."""
    if "@" in (urlsplit(url).netloc or ""):
        return "a user name or password in the URL is refused: give the key through api_key_env"
    return None


def key_allowed(name: str) -> bool:
    listed = {n.strip() for n in os.environ.get(ALLOWED_KEYS_VAR, "").split(",") if n.strip()}
    return name.startswith(KEY_PREFIX) or name in listed


def key_problem(url: str, api_key_env: str | None) -> str | None:
    """Why the key named by api_key_env may not be sent to url, else None."""
    if not api_key_env:
        return None
    if not key_allowed(api_key_env):
        return (f"api_key_env {api_key_env}: only variables named {KEY_PREFIX}* or listed in ${ALLOWED_KEYS_VAR} "
                "may be sent to an endpoint")
    if is_loopback(url):
        return None
    if urlsplit(url).scheme != "https":
        return f"api_key_env {api_key_env}: a key is sent only over https (or to a loopback address), not to {url}"
    if not host_allowed(url):
        return (f"api_key_env {api_key_env}: a key is sent only to the hosts listed in ${ALLOWED_HOSTS_VAR} "
                f"(or to a loopback address); {urlsplit(url).netloc} is not listed there")
    return None


def host_allowed(url: str) -> bool:
    """Whether $QUANT_ENDPOINT_KEY_HOSTS lists url's host: `host`, `host:port`, or `*.domain` for its subdomains."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or 443
    except ValueError:
        return False
    for entry in (e.strip().lower() for e in os.environ.get(ALLOWED_HOSTS_VAR, "").split(",")):
        name, _, wanted = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if not name or wanted and (not wanted.isdigit() or int(wanted) != port):
            continue
        if name == host or (name.startswith("*.") and host.endswith(name[1:])):
            return True
    return False


def bearer(url: str, api_key_env: str | None) -> dict[str, str]:
    """The Authorization header for url, where the policy allows the key and it is set; else none."""
    if not api_key_env or key_problem(url, api_key_env):
        return {}
    key = os.environ.get(api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


def proxy_for(url: str) -> str | None:
    """The proxy a request to url goes through: none for loopback, else the environment's (NO_PROXY honoured)."""
    if is_loopback(url):
        return None
    parts = urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all")


def ca_bundle() -> str:
    import certifi
    return os.environ.get("SSL_CERT_FILE") or certifi.where()


@lru_cache(maxsize=4)
def _ssl_context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


def ssl_context() -> ssl.SSLContext:
    return _ssl_context(ca_bundle())


def httpx_options(url: str) -> dict:
    """Keyword arguments for an httpx.Client / AsyncClient that talks to url under this policy."""
    return {"proxy": proxy_for(url), "verify": ssl_context(), "trust_env": False, "follow_redirects": False}


def aiohttp_options(url: str) -> dict:
    """Keyword arguments for an aiohttp.ClientSession that talks to url under this policy (the connector's
    TLS context is ssl_context())."""
    return {"proxy": proxy_for(url), "trust_env": False}


def read_capped(chunks, limit: int | None = None) -> bytes:
    """Join a body's chunks; PolicyError past limit bytes (MAX_BODY_BYTES unless told)."""
    limit = limit or MAX_BODY_BYTES
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise PolicyError(f"the response is larger than {limit} bytes")
    return bytes(body)



class Response:
    def __init__(self, status: int, headers, body: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return parse_json(self.content)


def request(method: str, url: str, *, headers: dict[str, str] | None = None, json=None, deadline_s: float = 30.0,
            limit: int | None = None) -> Response:
    """One request under the policy, done within deadline_s in all (a server trickling its headers or body does
    not hold it longer) with its body read up to limit bytes. httpx.HTTPError where the server cannot be reached
    or the deadline passes; PolicyError for a body too large."""
    import asyncio

    coroutine = _request(method, url, headers, json, deadline_s, limit)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:    # called from inside an event loop: run it on a loop of its own
        return pool.submit(asyncio.run, coroutine).result()


async def _request(method, url, headers, json, deadline_s, limit) -> Response:
    import asyncio

    import httpx

    async def send() -> Response:
        async with httpx.AsyncClient(timeout=min(deadline_s, STALL_S), **httpx_options(url)) as client:
            sent = {**ACCEPT_ENCODING, **(headers or {})}
            async with client.stream(method, url, headers=sent, json=json) as response:
                return Response(response.status_code, response.headers, await read_body(response, limit))
    try:
        return await asyncio.wait_for(send(), deadline_s)
    except asyncio.TimeoutError:
        raise httpx.ReadTimeout(f"no full answer within {deadline_s:g} s") from None


async def read_capped_async(chunks, limit: int | None = None) -> bytes:
    """read_capped for an async iterator of chunks."""
    limit = limit or MAX_BODY_BYTES
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise PolicyError(f"the response is larger than {limit} bytes")
    return bytes(body)


def _decoder(encoding: str):
    import zlib
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise PolicyError(f"the response is encoded {encoding[:40]!r}: only gzip and deflate are read")


def content_encodings(headers) -> list[str]:
    """The Content-Encoding layers of a response, in the order they were applied ("identity" left out);
    PolicyError past MAX_ENCODINGS."""
    if hasattr(headers, "get_list"):      # httpx
        values = headers.get_list("content-encoding")
    elif hasattr(headers, "getall"):      # aiohttp
        values = headers.getall("content-encoding", [])
    else:
        values = [headers.get("content-encoding", "")]
    layers = [e.strip().lower() for value in values for e in value.split(",")]
    layers = [e for e in layers if e and e != "identity"]
    if len(layers) > MAX_ENCODINGS:
        raise PolicyError(f"the response is encoded {len(layers)} times over: at most {MAX_ENCODINGS} layers are read")
    return layers


INFLATE_PIECE = 2**20   # a decoder hands on at most this much at a time, so a body costs the cap and a piece


async def decoded_chunks(raw_chunks, encodings: list[str], limit: int | None = None):
    """A body's raw chunks, each Content-Encoding layer undone in turn, in pieces of at most INFLATE_PIECE bytes,
    no layer's output ever past limit bytes (MAX_BODY_BYTES unless told): a few kilobytes that inflate to
    gigabytes cost at most the cap."""
    import zlib

    limit = limit or MAX_BODY_BYTES
    layers = list(reversed(encodings))   # the last layer applied is undone first
    decoders = [_decoder(e) for e in layers]
    produced = [0] * len(decoders)

    def undo(i: int, data: bytes):
        if i == len(decoders):
            yield data
            return
        while data:
            try:
                out = decoders[i].decompress(data, INFLATE_PIECE)
            except zlib.error as exc:
                raise PolicyError(f"the response is not valid {layers[i]} ({exc})") from None
            data = decoders[i].unconsumed_tail
            produced[i] += len(out)
            if produced[i] > limit:
                raise PolicyError(f"the response inflates to more than {limit} bytes")
            if out:
                yield from undo(i + 1, out)

    async for chunk in raw_chunks:
        for piece in undo(0, chunk):
            yield piece


async def read_body(response, limit: int | None = None) -> bytes:
    """An httpx streamed response's body: its raw bytes decoded here, under the cap (httpx's own decoders
    have no output limit)."""
    return await read_capped_async(decoded_chunks(response.aiter_raw(), content_encodings(response.headers), limit),
                                   limit)


def parse_json(content: bytes | str):
    """JSON from outside: ValueError (never RecursionError) for nesting deeper than the interpreter takes, and
    strings holding a lone surrogate (which no UTF-8 writer takes) with it replaced by U+FFFD."""
    import json
    if isinstance(content, bytes):   # decoded here: json.loads would let encoded surrogates through
        content = content.decode("utf-8", "replace")
    try:
        data = json.loads(content)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    if _SURROGATE_ESCAPE.search(content):   # the only way a lone surrogate gets into decoded text
        data = _without_lone_surrogates(data)
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _mend(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _without_lone_surrogates(data):
    """data with every str (keys too) mended, walked without recursion (its depth is foreign)."""
    def mend(value):
        return _mend(value) if isinstance(value, str) else value

    root = [mend(data)]
    stack = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        value = holder[key]
        if isinstance(value, list):
            for i, item in enumerate(value):
                value[i] = mend(item)
                if isinstance(item, (list, dict)):
                    stack.append((value, i))
        elif isinstance(value, dict):
            mended = {mend(k): mend(v) for k, v in value.items()}
            value.clear()
            value.update(mended)
            stack.extend((value, k) for k, v in value.items() if isinstance(v, (list, dict)))
    return root[0]
