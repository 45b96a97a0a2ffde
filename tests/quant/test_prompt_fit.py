"""Before work, a local task's longest prompt (tokenized as the eval will send it, with the tokens it generates)
is checked against each variant's max_model_len: one line per task and variant that does not fit, exit 2,
nothing started. Counted with the model's own tokenizer, on the items the recipe evaluates."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from core.recipe import RecipeError, Task
from evals.prompt_fit import longest_request
from evals.registry import TASKS_DIR
from evals.validate import check
from quant.validate import check_file
from tests.helpers import DEMO_MODEL, REPO


def _utils(task: str):
    spec = importlib.util.spec_from_file_location(f"{task}_fit_utils", TASKS_DIR / task / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _longest_prompt(task: str, limit: int) -> int:
    """Straight from the task's own prompt function and the model's tokenizer, over the first `limit` items."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    docs = [json.loads(line) for line in (TASKS_DIR / task / "test.jsonl").open()][:limit]
    return max(len(tokenizer(_utils(task).doc_to_text(doc))["input_ids"]) for doc in docs)


def _recipe(tmp_path: Path, tasks: str, max_model_len: int, extra_variant: str = "") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nmodel: demo\nengine:\n  args: {{max_model_len: {max_model_len}}}\nvariants:\n"
                    f"  - {{name: bf16, baseline: true}}\n  - {{name: w8, scheme: W8A16}}\n{extra_variant}"
                    f"tasks: {tasks}\nperf: {{workloads: []}}\n")
    return path


def test_the_longest_prompt_and_its_budget_are_what_the_eval_sends():
    longest = longest_request(Task(name="demo_math", limit=20), DEMO_MODEL)
    assert longest == {"tokens": _longest_prompt("demo_math", 20), "budget": 96, "kind": "generate_until"}
    own_budget = longest_request(Task(name="demo_math", limit=20, gen_kwargs={"max_gen_toks": 7}), DEMO_MODEL)
    assert own_budget["budget"] == 7   # the recipe's gen_kwargs, as lm-eval applies them


def test_a_task_that_fits_exactly_passes_and_one_token_less_is_refused(tmp_path):
    needed = _longest_prompt("demo_math", 20) + 96
    fits = _recipe(tmp_path, "[{name: demo_math, limit: 20}]", needed)
    assert check_file(fits, engine=False)[1].errors == []
    with pytest.raises(RecipeError) as err:
        check_file(_recipe(tmp_path, "[{name: demo_math, limit: 20}]", needed - 1), engine=False)
    assert [p.split(": ", 2)[1:] for p in err.value.problems] == [
        ["tasks.0", f"demo_math: its longest prompt is {needed - 96} tokens + 96 to generate = {needed}, over "
         f"variant {v}'s max_model_len {needed - 1} (engine.args): raise max_model_len, or drop the task or "
         "shorten its prompts"] for v in ("bf16", "w8")]


def test_one_line_per_task_and_variant_that_does_not_fit(tmp_path):
    """niah_2048 fits no variant; demo_math fits all; a variant's own max_model_len is its limit."""
    path = _recipe(tmp_path, "[demo_math, {name: niah_2048, limit: 3}, {name: niah_256, label: short, limit: 3}]",
                   512, extra_variant="  - {name: tight, scheme: W4A16, engine_args: {max_model_len: 150}}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path, engine=False)
    problems = err.value.problems
    where = [(p.split(": ")[1], p.split(": ")[2], p.split("over variant ")[1].split("'")[0]) for p in problems]
    assert sorted(where) == [("tasks.0", "demo_math", "tight"), ("tasks.1", "niah_2048", "bf16"),
                             ("tasks.1", "niah_2048", "tight"), ("tasks.1", "niah_2048", "w8"),
                             ("tasks.2", "short", "bf16"), ("tasks.2", "short", "tight"), ("tasks.2", "short", "w8")]
    assert all(f"{path}:9: " in p for p in problems)   # the line of `tasks:`
    assert all(("max_model_len 150 (its engine_args)" if "variant tight" in p else "max_model_len 512 (engine.args)")
               in p for p in problems)


def test_the_variants_context_defaults_to_the_models_positions(tmp_path):
    """No max_model_len in the recipe: the engine serves the model's max_position_embeddings (512 here)."""
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nvariants:\n  - {name: bf16, baseline: true}\n"
                    "tasks: [{name: niah_2048, limit: 2}]\n")
    with pytest.raises(RecipeError) as err:
        check_file(path, engine=False)
    assert len(err.value.problems) == 1
    assert "over variant bf16's max_model_len 512 (the model's max_position_embeddings)" in err.value.problems[0]


def test_a_task_given_local_files_is_checked_a_hub_task_is_left_to_the_eval():
    found = check([(0, Task(name="extraction", data_files=str(TASKS_DIR / "demo_extraction/test.jsonl")))],
                  DEMO_MODEL, [("bf16", 1, "engine.args")])
    assert len(found.errors) == 1   # given as a local file: checked (nothing fits 1 token)
    hub = check([(0, Task(name="mbpp"))], DEMO_MODEL, [("bf16", 1, "engine.args")]).errors
    assert not any("longest prompt" in message for _, message in hub)   # its data is fetched at eval time


def test_the_chat_template_is_counted_and_a_changed_tokenizer_is_never_answered_from_memory(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(DEMO_MODEL, model, ignore=shutil.ignore_patterns("*.safetensors"))
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())

    def with_template(template: str) -> int:
        config_path.write_text(json.dumps(config | {"chat_template": template}))
        return longest_request(Task(name="demo_math", limit=5, apply_chat_template=True), model)["tokens"]

    plain = longest_request(Task(name="demo_math", limit=5), model)["tokens"]
    short = with_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    long = with_template("{% for m in messages %}### The user's question, in full ###\n{{ m['content'] }}"
                         "{% endfor %}### The assistant's answer ###\n")
    assert short <= plain + 1 and long > short + 10


def test_changed_data_is_never_answered_from_memory(tmp_path):
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"text": "def f():\n    return 1\n"}) + "\n")
    task = Task(name="python_docs_ppl", data_files=str(data))
    short = longest_request(task, DEMO_MODEL)
    data.write_text(json.dumps({"text": "def f():\n    return 1\n" * 20}) + "\n")
    long = longest_request(task, DEMO_MODEL)
    assert short["kind"] == long["kind"] == "loglikelihood_rolling" and long["tokens"] > 5 * short["tokens"]


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_cli_refuses_before_work_one_line_each(tmp_path, command):
    path = _recipe(tmp_path, "[demo_math, {name: niah_2048, limit: 2}]", 512)
    args = [] if command == "validate" else ["--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run([sys.executable, "-m", "quant.cli", command, str(path), *args], capture_output=True,
                          text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "QUANT_HISTORY_DB": str(tmp_path / "h.sqlite")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert lines[0] == f"{command} error: {path}: 2 problems", proc.stderr[-2000:]
    assert all(":8: tasks.1: niah_2048: its longest prompt is " in line and "max_model_len 512" in line
               for line in lines[1:])
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_a_tokenizer_that_cannot_be_read_leaves_the_count_to_the_eval(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(DEMO_MODEL, model, ignore=shutil.ignore_patterns("*.safetensors"))
    (model / "tokenizer.json").write_text("{not json")
    assert longest_request(Task(name="demo_math", limit=2), model) is None
    assert check([(0, Task(name="demo_math", limit=2))], model, [("bf16", 1, "engine.args")]).errors == []
