"""One HTTP policy for every client (core/http_policy.py), tried against small servers on 127.0.0.1: a key goes
only where the person running the suite allowed it, a URL's user name is refused, redirects are not followed,
the same proxy rule and CA bundle for the probe, the eval client, the load generator and the metrics scrape,
an overall deadline and a body cap."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from core import http_policy
from core.recipe import RecipeError, parse_recipe
from evals.backends.served import ServedLM
from perf.engines.endpoint import EndpointProblem, probe
from perf.loadgen import make_client, run_closed_loop
from perf.server_metrics import read_counters
from tests.hostile_server import MODEL, Server, private_ca

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
              "no_proxy", "SSL_CERT_FILE", http_policy.ALLOWED_KEYS_VAR)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def servers():
    started = []

    def start(mode: str = "ok", tls=None) -> Server:
        started.append(Server(mode, tls))
        return started[-1]
    yield start
    for server in started:
        server.stop()


def every_client(base_url: str) -> dict:
    """One request from each client the suite measures with, to base_url; what each got."""
    found = {"probe": probe(base_url, MODEL)["model"]}
    lm = ServedLM(f"{base_url}/v1/completions", MODEL, max_retries=0, timeout_s=10)
    found["eval"] = lm._run_all([lm._generate("The capital of France is", {"max_gen_toks": 2})])[0]
    records = asyncio.run(run_closed_loop(f"{base_url}/v1/completions", MODEL, [[1, 2]], 2, 1))
    found["perf"] = records[0].error or records[0].output_tokens

    async def scrape():
        async with make_client(1, url=base_url) as client:
            return await read_counters(client, base_url)
    found["metrics"] = asyncio.run(scrape())
    return found


EXPECTED = {"probe": MODEL, "eval": " Paris", "perf": 2, "metrics": {"generation_tokens": 3.0}}


# -- credentials --------------------------------------------------------------------------------------------

def test_a_recipe_cannot_send_any_variable_as_a_key(servers, monkeypatch):
    server = servers()
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    with pytest.raises(EndpointProblem, match="only variables named QUANT_ENDPOINT_\\* or listed in"):
        probe(server.url, MODEL, "HF_TOKEN")
    assert server.seen == []   # nothing was sent at all
    monkeypatch.setenv(http_policy.ALLOWED_KEYS_VAR, "OTHER, HF_TOKEN")   # the user allows it: sent
    probe(server.url, MODEL, "HF_TOKEN")
    assert {h.get("Authorization") for _, _, h in server.seen} == {"Bearer hf_secret"}


def test_a_key_goes_over_https_or_to_loopback_only(monkeypatch):
    monkeypatch.setenv("QUANT_ENDPOINT_STAGING", "k")
    monkeypatch.setenv(http_policy.ALLOWED_HOSTS_VAR, "staging.example")
    assert http_policy.key_problem("http://127.0.0.1:8000", "QUANT_ENDPOINT_STAGING") is None
    assert http_policy.key_problem("http://localhost:8000", "QUANT_ENDPOINT_STAGING") is None
    assert http_policy.key_problem("https://staging.example:8000", "QUANT_ENDPOINT_STAGING") is None
    with pytest.raises(EndpointProblem, match="a key is sent only over https .* not to http://10.1.2.3:8000"):
        probe("http://10.1.2.3:8000", MODEL, "QUANT_ENDPOINT_STAGING")
    assert http_policy.bearer("http://10.1.2.3:8000", "QUANT_ENDPOINT_STAGING") == {}
    assert http_policy.bearer("http://[::1]:8000", "QUANT_ENDPOINT_STAGING") == {"Authorization": "Bearer k"}


def test_a_key_goes_only_to_the_hosts_the_user_lists(monkeypatch):
    """The recipe names both the key and the URL; the user's $QUANT_ENDPOINT_KEY_HOSTS decides where keys go."""
    monkeypatch.setenv("QUANT_ENDPOINT_STAGING", "k")
    monkeypatch.delenv(http_policy.ALLOWED_HOSTS_VAR, raising=False)
    with pytest.raises(EndpointProblem, match="only to the hosts listed in \\$QUANT_ENDPOINT_KEY_HOSTS .*"
                                              "attacker.example is not listed"):
        probe("https://attacker.example", MODEL, "QUANT_ENDPOINT_STAGING")
    assert http_policy.bearer("https://attacker.example/v1", "QUANT_ENDPOINT_STAGING") == {}
    monkeypatch.setenv(http_policy.ALLOWED_HOSTS_VAR, "api.example, *.staging.example, pinned.example:8443")
    allowed = ["https://api.example/v1", "https://API.example:8443", "https://eu.staging.example",
               "https://pinned.example:8443"]
    refused = ["https://api.example.attacker.example", "https://staging.example", "https://evilstaging.example",
               "https://pinned.example", "http://api.example"]
    assert [u for u in allowed if http_policy.bearer(u, "QUANT_ENDPOINT_STAGING")] == allowed
    assert [u for u in refused if http_policy.bearer(u, "QUANT_ENDPOINT_STAGING")] == []


def test_a_user_name_in_the_url_is_refused_before_work():
    recipe = ("name: r\nmodel: demo\nvariants:\n  - {name: bf16, baseline: true}\n  - name: d\n"
              "    endpoint: {base_url: 'http://user:pass@127.0.0.1:1', model: m}\ntasks: [demo_math]\n")
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe, "r.yaml")
    (line,) = err.value.problems
    assert "a user name or password in the URL is refused" in line and "pass@" not in line


def test_redirects_are_never_followed_with_the_key(servers, monkeypatch):
    elsewhere, redirecting = servers(), servers("redirect")
    redirecting.httpd.redirect_to = elsewhere.url
    monkeypatch.setenv("QUANT_ENDPOINT_KEY", "secret")
    with pytest.raises(EndpointProblem, match="HTTP 302 \\(redirects are never followed\\)"):
        probe(redirecting.url, MODEL, "QUANT_ENDPOINT_KEY")
    records = asyncio.run(run_closed_loop(f"{redirecting.url}/v1/completions", MODEL, [[1]], 2, 1))
    assert records[0].error.startswith("HTTP 307")
    assert elsewhere.seen == []


# -- one proxy rule, one CA bundle ------------------------------------------------------------------------

def test_the_suites_own_loopback_servers_never_go_through_a_proxy(servers, monkeypatch):
    server, sink = servers(), servers()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, sink.url)
    assert every_client(server.url) == EXPECTED
    assert sink.seen == [] and len(server.seen) >= 6


def test_another_host_goes_through_the_environments_proxy_for_every_client(servers, monkeypatch):
    sink = servers()   # answers as the endpoint would, to requests in a proxy's absolute form
    monkeypatch.setenv("HTTP_PROXY", sink.url)
    assert every_client("http://endpoint.test:8000") == EXPECTED
    paths = {path for _, path, _ in sink.seen}
    assert {"http://endpoint.test:8000/v1/models", "http://endpoint.test:8000/v1/completions",
            "http://endpoint.test:8000/metrics"} <= paths
    sink.seen.clear()
    monkeypatch.setenv("NO_PROXY", "endpoint.test")   # and not where NO_PROXY says
    with pytest.raises(EndpointProblem, match="is not reachable"):
        probe("http://endpoint.test:8000", MODEL)
    assert sink.seen == []


def test_every_client_trusts_the_same_private_ca(servers, monkeypatch, tmp_path):
    ca, tls = private_ca(tmp_path)
    server = servers(tls=tls)
    with pytest.raises(EndpointProblem, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        probe(server.url, MODEL)   # not in certifi's bundle
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    assert every_client(server.url) == EXPECTED


# -- deadlines and sizes ---------------------------------------------------------------------------------

def test_a_trickling_server_is_cut_at_the_overall_deadline(servers):
    server = servers("trickle")
    start = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        http_policy.request("GET", f"{server.url}/v1/models", deadline_s=1.0)
    assert time.monotonic() - start < 3.0


def test_a_probe_of_a_trickling_server_is_one_line_within_its_deadline(servers, monkeypatch):
    import perf.engines.endpoint as endpoint
    monkeypatch.setattr(endpoint, "TIMEOUT_S", 1.0)
    server = servers("trickle")
    start = time.monotonic()
    with pytest.raises(EndpointProblem, match="is not reachable \\(ReadTimeout"):
        probe(server.url, MODEL)
    assert time.monotonic() - start < 3.0


def test_a_huge_body_is_not_read_to_its_end(servers, monkeypatch):
    server = servers("huge")
    with pytest.raises(http_policy.PolicyError, match="larger than 1000 bytes"):
        http_policy.request("GET", f"{server.url}/v1/models", limit=1000)
    monkeypatch.setattr(http_policy, "MAX_BODY_BYTES", 1000)
    with pytest.raises(EndpointProblem, match="is not reachable \\(PolicyError: the response is larger"):
        probe(server.url, MODEL)
