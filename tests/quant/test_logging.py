"""Logging like the anchors: --verbosity / -v, library warnings on stderr at the default level, engine warnings."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from quant.cli import build_parser
from quant.logs import level_of
from tests.helpers import REPO



@pytest.mark.parametrize("argv, level", [
    ([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG), (["-vvv"], logging.DEBUG),
    (["--verbosity", "debug"], logging.DEBUG), (["--verbosity", "ERROR"], logging.ERROR),
    (["--verbosity", "ERROR", "-vv"], logging.ERROR),
])
def test_verbosity_and_v_pick_the_level(argv, level):
    for command in (["sweep", "r.yaml"], ["gate", "--baseline", "a", "--candidate", "b"], ["report", "run"]):
        args = build_parser().parse_args(command + argv)
        assert level_of(args.verbosity, args.verbose) == level


def test_an_unknown_verbosity_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["sweep", "r.yaml", "--verbosity", "LOUD"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


LIBRARIES_SPEAK = """
import logging, sys, warnings
from quant import logs
logs.configure(logs.level_of(*sys.argv[1:2] or [None]))
from transformers.utils import logging as hf
hf.get_logger("transformers.tokenization_utils_base").warning("hf-warning")
hf.get_logger("transformers.generation").info("hf-chatter")
warnings.warn("python-warning")
logging.getLogger("lm_eval.models.huggingface").warning("lm-eval-warning")
logging.getLogger("lm_eval.evaluator").debug("lm-eval-debug")
logging.getLogger("lm_eval.api.task").warning("demo_math: Custom kwargs can be passed to `--metadata` in console")
logging.getLogger("httpx").info("HTTP Request: POST /v1/completions 200")
logging.getLogger("evals.backends.served").debug("our-debug")
"""


def _stderr(*argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRANSFORMERS_VERBOSITY", None)
    proc = subprocess.run([sys.executable, "-c", LIBRARIES_SPEAK, *argv], capture_output=True, text=True, env=env,
                          check=True)
    return proc.stderr


def test_library_warnings_reach_stderr_at_the_default_level_and_chatter_does_not():
    err = _stderr()
    for shown in ("hf-warning", "python-warning", "lm-eval-warning"):
        assert shown in err
    for hidden in ("hf-chatter", "lm-eval-debug", "HTTP Request", "our-debug", "Custom kwargs"):
        assert hidden not in err


def test_debug_shows_everything_and_error_hides_the_warnings():
    err = _stderr("DEBUG")
    for shown in ("hf-warning", "hf-chatter", "python-warning", "lm-eval-debug", "HTTP Request", "our-debug",
                  "DEBUG [lm_eval.api.task] demo_math: Custom kwargs"):
        assert shown in err
    assert not any(w in _stderr("ERROR") for w in ("hf-warning", "python-warning", "lm-eval-warning", "HTTP"))


def test_an_eval_leaves_lm_eval_warnings_on_and_silences_only_the_expected_task_override():
    from evals.backends import inprocess_lm
    from evals.runner import evaluate_task
    from core.recipe import Task

    evaluate_task(inprocess_lm(REPO / "demo/model"), Task(name="demo_math", limit=1))
    assert logging.getLogger("lm_eval").propagate   # to our handler, not lm-eval's own
    assert logging.getLogger("lm_eval").getEffectiveLevel() <= logging.WARNING
    assert logging.getLogger("lm_eval.models.huggingface").getEffectiveLevel() <= logging.WARNING
    assert logging.getLogger("lm_eval.tasks._index").getEffectiveLevel() == logging.ERROR


def test_engine_warnings_are_read_from_the_server_log_once_each(tmp_path):
    from perf.engines.process import engine_warnings, log_since

    log = tmp_path / "server.log"
    log.write_text("WARNING 11-30 09:00:00 [a.py:1] from an earlier run\n")
    seen = log.stat().st_size
    with open(log, "a") as f:
        f.write("INFO 12-01 12:00:00 [api_server.py:1] Starting vLLM API server\n"
                "WARNING 12-01 12:00:01 [config.py:12] max_num_batched_tokens is below max_model_len\n"
                "(EngineCore_DP0 pid=77) WARNING 12-01 12:00:02 [cpu.py:3] Pin memory is not supported\n"
                "WARNING 12-01 12:00:03 [config.py:12] max_num_batched_tokens is below max_model_len\n"
                "(EngineCore_DP0 pid=77) ERROR 12-01 12:00:04 [core.py:9] EngineCore failed\n")
    assert engine_warnings(log_since(log, seen)) == [
        "WARNING max_num_batched_tokens is below max_model_len", "WARNING Pin memory is not supported",
        "ERROR EngineCore failed"]
    assert log_since(tmp_path / "none.log", 0) == ""


def test_a_cut_generation_is_a_warning_once_then_debug(caplog):
    from evals.backends.served import ServedLM

    lm = ServedLM("http://127.0.0.1:9/v1/completions", "m")
    lm.max_model_len = 128
    with caplog.at_level(logging.DEBUG, logger="evals.backends.served"):
        lm._generation_cut(100, 256)
        lm._generation_cut(120, 256)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG]
    assert "a prompt of 100 tokens leaves 28 of the 256 tokens asked for within max_model_len 128" in caplog.text


def test_start_up_warnings_are_one_line_unless_they_change_what_is_measured(tmp_path, caplog):
    from perf.engines.warning_kinds import split_warnings
    from quant.engine_notes import report_engine_warnings

    warnings = ["WARNING libtcmalloc is not found, which may cause performance degradation",
                "WARNING Pin memory is not supported on CPU.",
                "WARNING Default sampling parameters have been overridden by the model's generation config.",
                "WARNING The chat template looks like another product's messages; set --chat-template to override",
                "WARNING CUDA graph is not supported on CPU, fallback to the eager mode.",
                "WARNING Prefix caching is disabled for this model",
                "WARNING Using a slow reference kernel for W8A8 on this CPU"]
    kept, routine = split_warnings(warnings)
    assert kept == warnings[4:] and routine == warnings[:4]
    with caplog.at_level(logging.WARNING, logger="quant.engine_notes"):
        reported = report_engine_warnings("w8", warnings, tmp_path / "server.log")
    lines = [r.getMessage() for r in caplog.records]
    assert reported == kept and len(lines) == 4
    assert "4 other warning(s), none that changes what is measured" in lines[-1] and "server.log" in lines[-1]


def test_an_item_that_broke_its_scorer_is_a_warning_and_its_traceback_goes_to_the_variants_log(tmp_path, capsys):
    from evals import item_errors
    from quant.logs import configure, kept_in

    configure(logging.WARNING)
    try:
        def scores(doc, results):
            return {"exact_match": float(results[0].encode() == b"4")}
        process = item_errors.guarded(scores, ("exact_match",))
        with kept_in(tmp_path / "errors.log", "evals.item_errors"):
            assert process({"q": 1}, ["4"]) == {"exact_match": 1.0}
            assert process({"q": 2}, ["4 \udcff"]) == {"exact_match": 0.0}
        process({"q": 3}, ["\udcff"])   # after the block: not in this variant's log
        log = (tmp_path / "errors.log").read_text()
        assert log.count("an item failed in scoring (scored 0): UnicodeEncodeError") == 1
        assert "Traceback (most recent call last)" in log and "in scores" in log
        err = capsys.readouterr().err
        assert err.count("an item failed in scoring") == 2 and "Traceback" not in err   # the console: one line each
        failed = item_errors.take()   # by doc_hash: what evals/runner.py puts in each item's record
        assert len(failed) == 2 and all(r.startswith("UnicodeEncodeError: ") for r in failed.values())
    finally:
        configure(logging.WARNING)
        item_errors.take()
