"""What is knowable before work, beyond each field on its own: names one section uses for another's entries,
requests that cannot fit the served context, engine arguments against the installed engine's own parser,
a recipe file that is not UTF-8; and `quant validate`, `quant --version`."""

from __future__ import annotations

import importlib.metadata
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.recipe import RecipeError, load_recipe
from perf.engines.flags import FlagsUnknown, engine_flags_known, flag_problems
from perf.engines.vllm import engine_facts, resolve_engine_python
from quant import cli
from quant.validate import check_file
from tests.helpers import REPO

LINE = re.compile(r"^\S+:\d+: [\w.]+: \S")   # file:line: field: message


@pytest.fixture(scope="module")
def engine_flags() -> tuple[dict, dict]:
    """The installed serving engine's flags, as validation reads them (its cache, probed where missing):
    (flags, engine facts)."""
    python = resolve_engine_python(None)
    facts = engine_facts(python)
    return engine_flags_known(python, facts), facts


def test_engine_flags_come_from_the_engine_and_are_cached_per_version(engine_flags, tmp_path, monkeypatch):
    monkeypatch.setenv("QUANT_ENGINE_FLAGS_DIR", str(tmp_path))
    facts = engine_flags[1]
    flags = engine_flags_known(resolve_engine_python(None), facts)   # a fresh cache: the engine's parser is read
    assert flags == engine_flags[0]
    assert flags["--max-model-len"]["takes_value"] and not flags["--enforce-eager"]["takes_value"]
    assert "--no-enforce-eager" in flags and "bfloat16" in flags["--dtype"]["choices"]
    assert json.loads((tmp_path / f"{facts['distribution']}-{facts['version']}.json").read_text()) == flags
    # the same version again: read from the cache, the engine not asked (this python could not answer)
    assert engine_flags_known("/bin/false", facts) == flags
    with pytest.raises(FlagsUnknown, match="did not report its server's flags"):
        engine_flags_known("/bin/false", {**facts, "version": "0.0.1-other"})


@pytest.mark.parametrize("args, message", [
    ({"no_such_flag_xyz": 3}, "the engine has no flag --no-such-flag-xyz"),
    ({"gpu_memory_utilisation": 0.5}, "no flag --gpu-memory-utilisation; did you mean gpu_memory_utilization"),
    ({"port": 8000}, "the sweep picks a free port"),
    ({"dtype": "half"}, "set `engine.dtype` instead"),
    ({"enforce_eager": 3}, "--enforce-eager is a switch: give true or false, not 3"),
    ({"max_model_len": True}, "--max-model-len takes a value, not true"),
    ({"kv_cache_dtype": "fp9"}, "'fp9' is not one of --kv-cache-dtype's choices: auto,"),
    ({"tensor_parallel_size": "two"}, "--tensor-parallel-size takes an integer, not 'two'"),
    ({"gpu_memory_utilization": "most"}, "--gpu-memory-utilization takes a number, not 'most'"),
])
def test_engine_argument_problems(engine_flags, args, message):
    ((key, found),) = flag_problems(args, engine_flags[0])
    assert key == next(iter(args)) and message in found


def test_engine_arguments_the_engine_takes(engine_flags):
    args = {"max_model_len": 512, "enforce_eager": True, "enable_prefix_caching": False, "kv_cache_dtype": "auto",
            "tensor_parallel_size": 1, "gpu_memory_utilization": 0.9, "max_num_seqs": "16"}
    assert flag_problems(args, engine_flags[0]) == []


def test_every_cross_section_problem_before_work(tmp_path, engine_flags):
    """Each of these ran to the end of a sweep (or until the gate refused it) before it was checked here."""
    (tmp_path / "lengths.txt").write_text("100\nten\n")
    path = tmp_path / "r.yaml"
    path.write_text(
        "name: r\nmodel: demo\n"
        "engine: {args: {max_model_len: 512, no_such_flag_xyz: 3, gpu_memory_utilisation: 0.5}}\n"
        "variants:\n"
        "  - {name: bf16, baseline: true}\n"
        "  - {name: short, engine_args: {max_model_len: 256}}\n"
        "tasks: [demo_math, {name: demo_code, label: code, gen_kwargs: {max_gen_toks: 300}}]\n"
        "perf:\n  workloads:\n"
        "    - {name: long, prompt_tokens: 4096, output_tokens: 64, concurrency: [1]}\n"
        "    - {name: mid, prompt_tokens: 300, output_tokens: 64, concurrency: [1]}\n"
        "    - {name: mid, prompt_tokens: 16, output_tokens: 16, concurrency: [1]}\n"
        "    - {name: traced, trace: nowhere.jsonl}\n"
        f"    - {{name: empirical, prompt_tokens: {{dist: empirical, file: {tmp_path / 'lengths.txt'}}}}}\n"
        "gates: {per_task: {demo_maths: 0.02, code: 0.03, demo_code: 0.03}}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    problems = err.value.problems
    assert all(LINE.match(p) for p in problems), problems
    assert [p.split(": ", 1)[1] for p in problems] == [
        "engine.args.gpu_memory_utilisation: the engine has no flag --gpu-memory-utilisation; did you mean "
        "gpu_memory_utilization, device_memory_utilization?",
        "engine.args.no_such_flag_xyz: the engine has no flag --no-such-flag-xyz",
        "tasks.1.gen_kwargs.max_gen_toks: code: 300 tokens to generate leave no room for a prompt within "
        "max_model_len 256 (engine_args of short)",
        "perf.workloads.0: long: its longest request is 4160 tokens (prompt + output), over max_model_len 256 "
        "(engine_args of short) and 512 (engine.args): the engine refuses such a request or cuts its output short; "
        "shorten the workload or raise max_model_len",
        "perf.workloads.1: mid: its longest request is 364 tokens (prompt + output), over max_model_len 256 "
        "(engine_args of short): the engine refuses such a request or cuts its output short; shorten the workload "
        "or raise max_model_len",
        "perf.workloads.2.name: workload 'mid' named twice: results are kept per workload name",
        "perf.workloads.3: traced: cannot read nowhere.jsonl (No such file or directory)",
        f"perf.workloads.4: empirical: {tmp_path / 'lengths.txt'}:2: not an integer: 'ten'",
        "gates.per_task.demo_code: no task 'demo_code' in the recipe's tasks; did you mean code?",
        "gates.per_task.demo_maths: no task 'demo_maths' in the recipe's tasks; did you mean demo_math?",
    ]


def test_a_recipe_that_is_not_utf8_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: r\nmodel: demo\n# caf\xe9\nvariants: []\n".encode("latin-1"))
    want = f"{path}:3: not UTF-8 text (byte 0xe9 at offset 25): save the recipe as UTF-8"
    for check in (check_file, load_recipe):
        with pytest.raises(RecipeError) as err:
            check(path)
        assert err.value.problems == [want]
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "sweep", "sensitivity"):
        assert quant([command, str(path)]) == 2
        assert capsys.readouterr() == ("", f"{command} error: {want}\n")
    assert list(tmp_path.iterdir()) == [path]


def test_quant_validate_ok_with_warnings_and_no_work(tmp_path, engine_flags, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine: {args: {max_model_len: 512, enforce_eager: true}}\n"
                    "variants: [{name: bf16, baseline: true}, {name: w8, scheme: W8A8}]\n"
                    "tasks: [{name: demo_math, label: math}, {name: demo_code, limit: 10}]\n"
                    "perf: {workloads: [{name: w, prompt_tokens: 400, output_tokens: 100}]}\n"
                    "gates: {per_task: {math: 0.02}}\n")
    assert quant(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == ("ok: 2 variants (1 quantized), 2 tasks (math, demo_code), 1 perf workload; "
                                    "engine arguments checked against " + _engine_name())
    assert re.fullmatch(r"warning: \S+:5: tasks\.1\.limit: demo_code: limit 10 is below gates\.min_n 30: the "
                        r"recipe's gate can never decide on this task \(every check inconclusive\)\n", err), err
    assert list(tmp_path.iterdir()) == [path]


def test_perf_gates_without_perf_are_a_warning(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"
                    "perf: {workloads: []}\ngates: {perf: {max_throughput_drop: 0.1, ttft_p99_ms: 500}}\n")
    _, findings = check_file(path, engine=False)
    assert findings.warnings == [f"{path}:6: gates.perf: max_throughput_drop, ttft_p99_ms set, but perf.workloads "
                                 "is empty: no perf is measured, so these gates never apply"]


def test_quant_validate_lists_the_problems_exit_2(tmp_path, engine_flags, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine: {args: {gpu_memory_utilisation: 0.5}}\n"
                    "variants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n"
                    "gates: {per_task: {demo_maths: 0.02}}\n")
    assert quant(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"validate error: {path}: 2 problems",
        f"  {path}:3: engine.args.gpu_memory_utilisation: the engine has no flag --gpu-memory-utilisation; did you "
        "mean gpu_memory_utilization, device_memory_utilization?",
        f"  {path}:6: gates.per_task.demo_maths: no task 'demo_maths' in the recipe's tasks; did you mean demo_math?"]


def test_engine_arguments_unchecked_where_the_engine_cannot_say(tmp_path, standin_engine, monkeypatch):
    """An engine python that answers no flags (here the stand-in engine) is a warning, not a guess."""
    monkeypatch.setenv("QUANT_ENGINE_FLAGS_DIR", str(tmp_path / "flags"))
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine: {args: {max_model_len: 512}}\n"
                    "variants: [{name: bf16, baseline: true}]\ntasks: [demo_math]\n")
    _, findings = check_file(path)
    (warning,) = findings.warnings
    assert "engine.args: engine arguments not checked against the engine's flags:" in warning
    assert findings.engine_flags is None and not (tmp_path / "flags").exists()


def test_sweep_only_names_a_variant_of_the_recipe(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nvariants: [{name: bf16, baseline: true}, {name: w8, scheme: W8A8}]\n"
                    "tasks: [demo_math]\n")
    assert quant(["sweep", str(path), "--only", "w8", "bf17", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (f"sweep error: --only: no variant 'bf17' in {path}; its variants: bf16, w8\n")
    assert not (tmp_path / "run").exists()


def test_version_is_the_package_version():
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "--version"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, f"quant-suite {importlib.metadata.version('quant-suite')}\n")


def test_license_is_the_apache_2_text_pyproject_names():
    text = (REPO / "LICENSE").read_text()
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and len(re.findall(r"(?m)^   \d\. ", text)) == 9


def quant(argv: list[str]) -> int:
    """`quant ARGV` in this process, leaving its SIGTERM handler behind it as it found it."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        return cli.main(argv)
    finally:
        signal.signal(signal.SIGTERM, handler)


def _engine_name() -> str:
    facts = engine_facts(resolve_engine_python(None))
    return f"{facts['distribution']} {facts['version']}"
