"""What a hostile or broken server sends costs bounded memory and time and is checked before it is used: bodies
are inflated under the cap while they are decompressed, parsing is bounded, counts and log-probabilities are
checked against what was sent and received, foreign text is stored within a length cap, a stalled server fails
its request (tests/hostile_server.py on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import resource

import pytest

from core import http_policy
from evals.backends.served import MalformedAnswer, NotMeasurable, ServedLM
from perf.engines.endpoint import EndpointServer, _position_of, probe
from perf.loadgen import make_client, run_closed_loop
from tests.hostile_server import INFLATED_BYTES, MODEL, Server


@pytest.fixture
def server(request):
    started = Server(request.param)
    yield started
    started.stop()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def served(server: Server, **kw) -> ServedLM:
    return ServedLM(f"{server.url}/v1/completions", MODEL, max_retries=0, timeout_s=10, **kw)


@pytest.mark.parametrize("server", ["gzip-bomb"], indirect=True)
def test_a_body_gzipped_twice_is_refused_while_it_inflates_never_held_whole(server):
    before = peak_rss_bytes()
    with pytest.raises(http_policy.PolicyError, match="inflates to more than"):
        http_policy.request("GET", f"{server.url}/v1/models", limit=2**20)
    assert peak_rss_bytes() - before < INFLATED_BYTES // 2   # before: httpx inflated the whole read first
    lm = served(server)
    with pytest.raises(http_policy.PolicyError, match="inflates to more than"):   # the eval client's reads too
        lm._run_all([lm._generate("x", {"max_gen_toks": 2})])


@pytest.mark.parametrize("server", ["gzip-bomb"], indirect=True)
def test_the_load_generator_refuses_an_encoded_stream(server):
    (record,) = asyncio.run(run_closed_loop(f"{server.url}/v1/completions", MODEL, [[1, 2]], 2, 1))
    assert record.error == "PolicyError: the stream is encoded gzip,gzip: only an unencoded stream is read"


def test_decoding_takes_at_most_two_layers_and_only_gzip_or_deflate():
    with pytest.raises(http_policy.PolicyError, match="at most 2 layers"):
        http_policy.content_encodings({"content-encoding": "gzip, gzip, gzip"})
    with pytest.raises(http_policy.PolicyError, match="only gzip and deflate"):
        http_policy._decoder("br")
    assert http_policy.content_encodings({"content-encoding": "identity"}) == []


@pytest.mark.parametrize("server", ["deep-json"], indirect=True)
def test_json_nested_100000_deep_is_a_malformed_answer_not_a_recursion_error(server):
    lm = served(server)
    with pytest.raises(MalformedAnswer, match="not an OpenAI completion"):   # before: RecursionError
        lm._run_all([lm._generate("x", {"max_gen_toks": 2})])
    assert probe(server.url, MODEL)["prompt_logprobs"].startswith("not checked")


@pytest.mark.parametrize("server", ["lone-surrogate"], indirect=True)
def test_a_lone_surrogate_in_an_answer_is_replaced_so_it_can_be_sent_and_written(server):
    lm = served(server)
    (answer,) = lm._run_all([lm._generate("x", {"max_gen_toks": 2})])
    assert answer == " Par\ufffdis"
    answer.encode("utf-8")   # before: UnicodeEncodeError when written or sent back
    facts = probe(server.url, MODEL)   # the probe sends its greedy token back: before, a traceback
    assert facts["probe"]["greedy_token"] == " Par\ufffdis"


@pytest.mark.parametrize("server", ["usage-lies"], indirect=True)
def test_a_usage_count_above_what_the_stream_carried_fails_the_request(server):
    (record,) = asyncio.run(run_closed_loop(f"{server.url}/v1/completions", MODEL, [[1, 2]], 2, 1))
    assert record.error == "usage claims 999,999,999 output tokens, the stream carried 2"
    assert record.output_tokens == 2   # before: 999,999,999 tokens, 43 billion tok/s


def test_usage_without_token_ids_lies_between_the_chunks_received_and_the_tokens_asked():
    from perf.loadgen import usage_problem

    assert usage_problem(5, 3, exact=False, asked=8) is None   # a text chunk may carry several tokens
    assert "for 8 tokens asked" in usage_problem(9, 3, exact=False, asked=8)
    assert usage_problem(2, 3, exact=False, asked=8) is not None
    assert usage_problem(3, 3, exact=True, asked=8) is None


@pytest.mark.parametrize("server", ["adds-bos"], indirect=True)
def test_prompt_logprobs_one_entry_longer_than_the_ids_sent_are_not_scored_by_position(server):
    lm = served(server)
    with pytest.raises(NotMeasurable, match="returned 4 entries for the 3 prompt tokens sent"):
        lm._run_all([lm._continuation_logprob([1], [2, 3])])   # before: scored the wrong positions
    assert "returns 5 prompt log-probabilities for the 4 prompt tokens sent" in _echo_check(server)


@pytest.mark.parametrize("server", ["ok"], indirect=True)
def test_prompt_logprobs_of_the_right_length_are_scored(server):
    lm = served(server)
    assert lm._run_all([lm._continuation_logprob([1], [2, 3])]) == [(-1.0, True)]
    assert _echo_check(server) is None


def _echo_check(server: Server) -> str | None:
    from perf.engines.endpoint import _echo_length
    return _echo_length(EndpointServer(server.url, MODEL))


def test_a_log_probability_that_is_no_number_is_a_malformed_answer():
    lm = ServedLM("http://127.0.0.1:9/v1/completions", MODEL)
    for value in (float("nan"), float("inf"), 3.0, "x", None):
        with pytest.raises(MalformedAnswer):
            lm._logprob(value)


def test_server_counters_past_any_real_value_are_not_used():
    from perf.server_metrics import crosscheck, parse_counters, server_latency_means

    with pytest.raises(ValueError):
        parse_counters("vllm:time_to_first_token_seconds_sum 1.7e308\n")
    assert server_latency_means({"ttft_sum": 1.7e15, "ttft_count": 1e-300}) == {}   # before: Infinity
    before = parse_counters("vllm:generation_tokens_total 0\nvllm:time_to_first_token_seconds_count 0\n")
    after = parse_counters("vllm:generation_tokens_total 2\nvllm:time_to_first_token_seconds_sum 1e15\n"
                           "vllm:time_to_first_token_seconds_count 0.5\n")
    assert "server_ttft_ms_mean" not in crosscheck(before, after, 2, 2)


@pytest.mark.timeout(60)
def test_finding_the_probe_prompt_in_a_huge_echo_is_one_pass():
    tokens = [" x"] * 1_000_000 + [" The", " capital", " of", " France", " is"]
    assert _position_of(tokens, "The capital of France is") == len(tokens) - 1   # before: quadratic, hours
    assert _position_of(["The capital", " of France is", " Paris"], "The capital of France is") == 1


@pytest.mark.parametrize("server", ["many-models"], indirect=True)
def test_a_list_of_100000_models_makes_a_reason_of_bounded_length(server):
    from perf.engines.endpoint import EndpointProblem

    with pytest.raises(EndpointProblem) as refused:
        probe(server.url, MODEL)
    assert len(str(refused.value)) < 1000 and "more" in str(refused.value)
    reason = EndpointServer(server.url, MODEL).death()
    assert len(reason) < 1000 and "100,000 models in all" in reason   # before: 10 MB, stored twice


@pytest.mark.parametrize("server", ["stall"], indirect=True)
def test_a_server_that_sends_nothing_fails_its_request_after_the_stall_bound(server):
    assert http_policy.STALL_S == 300.0
    url = f"{server.url}/v1/completions"

    async def one():
        async with make_client(1, timeout_s=0.5, url=url) as client:
            return await run_closed_loop(url, MODEL, [[1, 2]], 2, 1, client=client)
    (record,) = asyncio.run(one())
    assert record.error is not None and "Timeout" in record.error
    with pytest.raises(RuntimeError, match="ReadTimeout"):
        lm = ServedLM(url, MODEL, max_retries=0, timeout_s=0.5)
        lm._run_all([lm._generate("x", {"max_gen_toks": 2})])


def test_a_failure_reason_of_megabytes_is_stored_within_a_length_cap():
    from core.recipe import Variant
    from quant.context import new_record
    from quant.sweep import REASON_LIMIT, _valid_record

    variant = Variant(name="deployed")
    record = _valid_record(variant, new_record(variant, "failed", "it lists " + "model-000001, " * 700_000))
    assert len(record["reason"]) < REASON_LIMIT + 40 and record["reason"].endswith(" more")


def test_parsed_json_holds_no_lone_surrogate_escaped_or_encoded():
    parsed = http_policy.parse_json(b'{"a": ["x\\ud800y", {"\\udc00": 1}], "b": "\\ud83d\\ude00", "c": "\xed\xa0\x80"}')
    assert parsed == {"a": ["x\ufffdy", {"\ufffd": 1}], "b": "\U0001F600", "c": "\ufffd" * 3}
    with pytest.raises(ValueError, match="nested too deeply"):
        http_policy.parse_json(b"[" * 100_000 + b"]" * 100_000)


def test_a_body_that_is_not_what_its_encoding_says_is_a_policy_error():
    import gzip

    async def decode(parts, encodings, limit=None):
        async def chunks():
            for part in parts:
                yield part
        return b"".join([c async for c in http_policy.decoded_chunks(chunks(), encodings, limit)])

    twice = gzip.compress(gzip.compress(b"hello " * 1000))
    assert asyncio.run(decode([twice[:7], twice[7:]], ["gzip", "gzip"])) == b"hello " * 1000
    with pytest.raises(http_policy.PolicyError, match="not valid gzip"):   # before: zlib.error out of the probe
        asyncio.run(decode([b"plain text"], ["gzip"]))
