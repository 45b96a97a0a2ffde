"""A hostile or broken endpoint (tests/hostile_server.py on 127.0.0.1) is that endpoint's problem, one line:
a completion of the wrong shape, absurd token counts, server text with escape sequences, newlines and markup."""

from __future__ import annotations

import asyncio

import pytest

from evals.backends.served import MalformedAnswer, ServedLM
from perf.engines.endpoint import probe
from perf.loadgen import run_closed_loop
from tests.hostile_server import MODEL, Server


@pytest.fixture
def server(request):
    started = Server(request.param)
    yield started
    started.stop()


@pytest.mark.parametrize("server", ["wrong-shape"], indirect=True)
def test_a_completion_of_the_wrong_shape_is_a_named_problem_not_a_traceback(server):
    facts = probe(server.url, MODEL)   # before: TypeError out of the probe
    assert facts["token_prompts"] is False
    assert facts["prompt_logprobs"] == "not checked: the completion is not in the OpenAI format"
    lm = ServedLM(f"{server.url}/v1/completions", MODEL, max_retries=0, timeout_s=10)
    with pytest.raises(MalformedAnswer, match="not an OpenAI completion"):
        lm._run_all([lm._generate("x", {"max_gen_toks": 2})])


@pytest.mark.parametrize("server", ["infinite-usage"], indirect=True)
def test_an_infinite_token_count_fails_the_request_not_the_sweep(server):
    (record,) = asyncio.run(run_closed_loop(f"{server.url}/v1/completions", MODEL, [[1, 2]], 2, 1))
    assert record.error == "ValueError: the server's usage counts 'inf' tokens" and record.output_tokens == 2


@pytest.mark.parametrize("server", ["ok"], indirect=True)
def test_server_text_is_recorded_as_one_plain_line(server):
    owned_by = probe(server.url, MODEL)["owned_by"]
    assert "\x1b" not in owned_by and "\x07" not in owned_by and "\n" not in owned_by


def test_server_text_in_a_progress_line_is_neither_markup_nor_escape_sequences(capsys):
    from rich.markup import escape

    from quant.progress import Reporter

    reporter = Reporter()
    reporter.log(f"  [red]EndpointProblem[/red]: {escape('HTTP 500: [/bold] boom [link=x]')}\x1b]52;c;aGk=\x07")
    reporter.log("  a line with [/unbalanced] markup from elsewhere")   # before: rich's MarkupError
    err = capsys.readouterr().err
    assert "[/bold] boom [link=x]" in err and "[/unbalanced]" in err
    assert "\x1b" not in err and "\x07" not in err


@pytest.mark.parametrize("server", ["ok"], indirect=True)
def test_a_prompt_longer_than_the_servers_context_is_not_measurable_never_a_wrong_answer(server):
    from evals.backends.served import NotMeasurable
    from tests.helpers import DEMO_MODEL

    lm = ServedLM(f"{server.url}/v1/completions", MODEL, tokenizer_dir=DEMO_MODEL, max_retries=0, timeout_s=10)
    assert lm.max_model_len == 512
    with pytest.raises(NotMeasurable, match="tokens leaves no room for an answer within max_model_len 512"):
        lm._run_all([lm._generate("word " * 800, {"max_gen_toks": 4})])   # before: "" scored as a wrong answer
    assert lm._run_all([lm._generate("word " * 10, {"max_gen_toks": 4})]) == [" Paris"]


def test_a_record_the_results_schema_refuses_fails_its_variant_not_the_sweep():
    from core.recipe import Variant
    from quant.context import new_record
    from quant.sweep import _valid_record

    variant = Variant(name="deployed")
    good = new_record(variant)
    assert _valid_record(variant, good) is good
    bad = {**good, "perf": {"tiny": {"points": [{"output_tokens_per_s": float("inf")}]}}}
    record = _valid_record(variant, bad)
    assert record["status"] == "failed" and record["reason"].startswith("its measurements are not valid results: ")
