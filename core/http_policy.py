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
- Redirects are never followed; every request has an overall deadline and every body a size cap."""

from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.request
from functools import lru_cache
from urllib.parse import urlsplit

KEY_PREFIX = "QUANT_ENDPOINT_"
ALLOWED_KEYS_VAR = "QUANT_ENDPOINT_KEY_VARS"
ALLOWED_HOSTS_VAR = "QUANT_ENDPOINT_KEY_HOSTS"
MAX_BODY_BYTES = 64 * 2**20        # a response body larger than this is an error, not read to its end


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
        import json
        return json.loads(self.content)


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
        async with httpx.AsyncClient(timeout=deadline_s, **httpx_options(url)) as client:
            async with client.stream(method, url, headers=headers, json=json) as response:
                return Response(response.status_code, response.headers,
                                await read_capped_async(response.aiter_bytes(), limit))
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
